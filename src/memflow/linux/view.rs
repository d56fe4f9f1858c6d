//! memflow's `MemoryView` over an engine address space: a memflow batch
//! (`read_raw_iter`) is one engine batch, so any number of cold reads
//! cost one device call per page-table level and one for the data; each
//! entry comes back in part where part of it fails.

use memflow::cglue::tuple::{CTup2, CTup3};
use memflow::error::Result;
use memflow::mem::mem_data::opt_call;
use memflow::mem::{MemOps, MemoryView, MemoryViewMetadata, ReadRawMemOps, WriteRawMemOps};
use memflow::types::{umem, Address};

use crate::engine::PartialError;
use crate::{join_all, AddressSpace};

/// A virtual address space as a memflow memory view.
#[derive(Clone, Debug)]
pub struct SpaceView {
    space: AddressSpace,
    arch_bits: u8,
}

impl SpaceView {
    /// The view of `space`, whose pointers are `arch_bits` wide (32 for a
    /// 32-bit process, as memflow reads its pointers).
    pub fn new(space: AddressSpace, arch_bits: u8) -> SpaceView {
        SpaceView { space, arch_bits }
    }

    /// The address space underneath.
    pub fn space(&self) -> &AddressSpace {
        &self.space
    }
}

/// The failed byte runs (start, end) of a request of `len` bytes.
fn failed_runs(result: &std::result::Result<(), PartialError>) -> Vec<(usize, usize)> {
    match result {
        Ok(()) => Vec::new(),
        Err(e) => e
            .failed
            .iter()
            .map(|f| (f.offset, f.offset + f.len))
            .collect(),
    }
}

impl MemoryView for SpaceView {
    fn read_raw_iter(
        &mut self,
        MemOps {
            inp,
            mut out,
            mut out_fail,
        }: ReadRawMemOps,
    ) -> Result<()> {
        let mut items: Vec<_> = inp.collect();
        let space = &self.space;
        let results = space.memory().block_on(join_all(
            items
                .iter_mut()
                .map(|CTup3(va, _, buf)| space.read(va.to_umem(), buf)),
        ));
        for (CTup3(_, meta, buf), result) in items.into_iter().zip(results) {
            let failed = failed_runs(&result);
            let ptr = buf.as_ptr().cast_mut();
            let part = |a: usize, b: usize| {
                // SAFETY: the runs are disjoint parts of the buffer memflow
                // lent for this call, each handed out once.
                unsafe { std::slice::from_raw_parts_mut(ptr.add(a), b - a) }.into()
            };
            super::super::report(
                &failed,
                buf.len(),
                |a, b| {
                    opt_call(out.as_deref_mut(), CTup2(meta + a as umem, part(a, b)));
                },
                |a, b| {
                    opt_call(out_fail.as_deref_mut(), CTup2(meta + a as umem, part(a, b)));
                },
            );
        }
        Ok(())
    }

    fn write_raw_iter(
        &mut self,
        MemOps {
            inp,
            mut out,
            mut out_fail,
        }: WriteRawMemOps,
    ) -> Result<()> {
        let items: Vec<_> = inp.collect();
        let space = &self.space;
        let results = space.memory().block_on(join_all(
            items
                .iter()
                .map(|CTup3(va, _, data)| space.write(va.to_umem(), data)),
        ));
        for (CTup3(_, meta, data), result) in items.into_iter().zip(results) {
            let failed = failed_runs(&result);
            let data: &[u8] = data.into();
            super::super::report(
                &failed,
                data.len(),
                |a, b| {
                    opt_call(
                        out.as_deref_mut(),
                        CTup2(meta + a as umem, data[a..b].into()),
                    );
                },
                |a, b| {
                    opt_call(
                        out_fail.as_deref_mut(),
                        CTup2(meta + a as umem, data[a..b].into()),
                    );
                },
            );
        }
        Ok(())
    }

    fn metadata(&self) -> MemoryViewMetadata {
        let backend = self.space.memory().backend();
        MemoryViewMetadata {
            max_address: Address::invalid(),
            real_size: backend.max_address(),
            readonly: backend.read_only(),
            little_endian: true,
            arch_bits: self.arch_bits,
        }
    }
}
