//! The offsets the kernel log is read by: the lockless ring buffer of
//! 5.10 on (`struct printk_ringbuffer`, its descriptors and their
//! `struct printk_info`), or the one buffer of records before it
//! (`struct printk_log`).

use crate::linux::find::btf::{Btf, BtfError};

/// An integer member: its byte offset and width (1, 2, 4 or 8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Int {
    pub(crate) at: u64,
    pub(crate) width: u64,
}

impl Int {
    fn from_btf(btf: &Btf, ty: &str, path: &str) -> Result<Int, BtfError> {
        let width = btf.member_size(ty, path)?;
        if ![1, 2, 4, 8].contains(&width) {
            return Err(BtfError::Parse(format!(
                "BTF gives {ty}.{path} {width} bytes, not an integer's 1, 2, 4 or 8"
            )));
        }
        Ok(Int {
            at: btf.member_offset(ty, path)?,
            width,
        })
    }

    /// Its value in `bytes` (little endian), when they hold it.
    pub(crate) fn read(&self, bytes: &[u8]) -> Option<u64> {
        let start = usize::try_from(self.at).ok()?;
        let field = bytes.get(start..start.checked_add(self.width as usize)?)?;
        let mut word = [0u8; 8];
        word[..field.len()].copy_from_slice(field);
        Some(u64::from_le_bytes(word))
    }
}

/// A bit field of at most 8 bits: the byte it lies in, and where in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bits {
    pub(crate) byte: u64,
    pub(crate) shift: u32,
    pub(crate) width: u32,
}

impl Bits {
    fn from_btf(btf: &Btf, ty: &str, path: &str) -> Result<Bits, BtfError> {
        let (offset, width) = btf.member_bits(ty, path)?;
        // x86-64 lays bit fields from the low bits up.
        let shift = (offset % 8) as u32;
        if width == 0 || u64::from(shift) + width > 8 {
            return Err(BtfError::Parse(format!(
                "BTF gives {ty}.{path} {width} bits at bit {offset}: not within a byte"
            )));
        }
        Ok(Bits {
            byte: offset / 8,
            shift,
            width: width as u32,
        })
    }

    /// Its value in `bytes`.
    pub(crate) fn read(&self, bytes: &[u8]) -> Option<u8> {
        let byte = *bytes.get(usize::try_from(self.byte).ok()?)?;
        Some((byte >> self.shift) & ((1u16 << self.width) - 1) as u8)
    }
}

/// `enum desc_state`: a descriptor's state, the top 2 bits of its
/// `state_var`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DescStates {
    pub(crate) reserved: u64,
    pub(crate) committed: u64,
    pub(crate) finalized: u64,
    pub(crate) reusable: u64,
}

impl DescStates {
    /// From BTF where it has the enum; else the values the ring's format
    /// fixes (a 2-bit state, unchanged since 5.10), since BTF need not
    /// keep an enum that no type names.
    fn from_btf(btf: &Btf) -> DescStates {
        let value = |name: &str, default: u64| {
            btf.enum_value(name)
                .and_then(|v| u64::try_from(v).ok())
                .filter(|&v| v < 4)
                .unwrap_or(default)
        };
        DescStates {
            reserved: value("desc_reserved", 0),
            committed: value("desc_committed", 1),
            finalized: value("desc_finalized", 2),
            reusable: value("desc_reusable", 3),
        }
    }
}

/// The lockless ring buffer's offsets (5.10 on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingLayout {
    /// `sizeof(struct printk_ringbuffer)`.
    pub(crate) size: u64,
    /// `desc_ring.count_bits`, `descs`, `infos`, `head_id`, `tail_id`.
    pub(crate) count_bits: Int,
    pub(crate) descs: Int,
    pub(crate) infos: Int,
    pub(crate) head_id: Int,
    pub(crate) tail_id: Int,
    /// `text_data_ring.size_bits`, `data`.
    pub(crate) size_bits: Int,
    pub(crate) data: Int,
    /// `sizeof(struct prb_desc)`, its `state_var` and
    /// `text_blk_lpos.begin`, `.next`.
    pub(crate) desc_size: u64,
    pub(crate) state_var: Int,
    pub(crate) begin: Int,
    pub(crate) next: Int,
    /// `sizeof(struct printk_info)` and the members read.
    pub(crate) info_size: u64,
    pub(crate) info: RecordLayout,
    pub(crate) states: DescStates,
}

/// A record's header: `struct printk_info` (5.10 on) or `struct
/// printk_log` (before), each offset from its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordLayout {
    /// `seq`: only `printk_info` keeps it.
    pub(crate) seq: Option<Int>,
    pub(crate) ts_nsec: Int,
    pub(crate) text_len: Int,
    pub(crate) facility: Int,
    pub(crate) level: Bits,
    /// `caller_id`: in `printk_log` only with `CONFIG_PRINTK_CALLER`.
    pub(crate) caller_id: Option<Int>,
    /// `printk_log.len`, the record's whole length (0: the buffer wraps).
    pub(crate) len: Option<Int>,
}

impl RecordLayout {
    fn from_btf(btf: &Btf, ty: &str) -> Result<RecordLayout, BtfError> {
        let int = |m: &str| Int::from_btf(btf, ty, m);
        Ok(RecordLayout {
            seq: int("seq").ok(),
            ts_nsec: int("ts_nsec")?,
            text_len: int("text_len")?,
            facility: int("facility")?,
            level: Bits::from_btf(btf, ty, "level")?,
            caller_id: int("caller_id").ok(),
            len: int("len").ok(),
        })
    }
}

/// The old buffer's offsets (before 5.10): one `char` array of records,
/// each a `struct printk_log` followed by its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LegacyLayout {
    /// `sizeof(struct printk_log)`: where the text starts.
    pub(crate) header: u64,
    pub(crate) record: RecordLayout,
}

/// How this kernel keeps its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogLayout {
    /// The lockless ring buffer (5.10 on).
    Ring(Box<RingLayout>),
    /// The buffer of `struct printk_log` records (before 5.10).
    Legacy(LegacyLayout),
}

impl LogLayout {
    /// The layout `btf` describes: the ring's when it has `struct
    /// printk_ringbuffer`, else the old buffer's.
    pub fn from_btf(btf: &Btf) -> Result<LogLayout, BtfError> {
        if btf.size_of("printk_ringbuffer").is_ok() {
            return RingLayout::from_btf(btf).map(|ring| LogLayout::Ring(Box::new(ring)));
        }
        match btf.size_of("printk_log") {
            Ok(header) => {
                let record = RecordLayout::from_btf(btf, "printk_log")?;
                if record.len.is_none() {
                    return Err(BtfError::NoMember {
                        ty: "printk_log".into(),
                        path: "len".into(),
                        reason: "no member len".into(),
                    });
                }
                Ok(LogLayout::Legacy(LegacyLayout { header, record }))
            }
            Err(_) => Err(BtfError::NoType(
                "printk_ringbuffer (5.10 on) or printk_log (before)".into(),
            )),
        }
    }
}

impl RingLayout {
    fn from_btf(btf: &Btf) -> Result<RingLayout, BtfError> {
        let rb = |m: &str| Int::from_btf(btf, "printk_ringbuffer", m);
        let desc = |m: &str| Int::from_btf(btf, "prb_desc", m);
        let info = RecordLayout::from_btf(btf, "printk_info")?;
        if info.seq.is_none() {
            return Err(BtfError::NoMember {
                ty: "printk_info".into(),
                path: "seq".into(),
                reason: "no member seq".into(),
            });
        }
        Ok(RingLayout {
            size: btf.size_of("printk_ringbuffer")?,
            count_bits: rb("desc_ring.count_bits")?,
            descs: rb("desc_ring.descs")?,
            infos: rb("desc_ring.infos")?,
            head_id: rb("desc_ring.head_id.counter")?,
            tail_id: rb("desc_ring.tail_id.counter")?,
            size_bits: rb("text_data_ring.size_bits")?,
            data: rb("text_data_ring.data")?,
            desc_size: btf.size_of("prb_desc")?,
            state_var: desc("state_var.counter")?,
            begin: desc("text_blk_lpos.begin")?,
            next: desc("text_blk_lpos.next")?,
            info_size: btf.size_of("printk_info")?,
            info,
            states: DescStates::from_btf(btf),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test guest's BTF cut down to what the walks ask about.
    const GUEST_BTF: &[u8] = include_bytes!("../../../fuzz/seeds/btf/debian12-6.1-walks.btf");

    #[test]
    fn a_6_1_kernel_keeps_its_log_in_the_lockless_ring() {
        let btf = Btf::parse(GUEST_BTF).unwrap();
        let LogLayout::Ring(ring) = LogLayout::from_btf(&btf).unwrap() else {
            panic!("not the ring");
        };
        // `u8 flags:5, level:3` after `facility`, in the byte at 19.
        assert_eq!(
            ring.info.level,
            Bits {
                byte: 19,
                shift: 5,
                width: 3
            }
        );
        assert_eq!(ring.info.text_len, Int { at: 16, width: 2 });
        assert_eq!((ring.desc_size, ring.info_size), (24, 88));
        assert_eq!(ring.tail_id, Int { at: 32, width: 8 });
        assert_eq!(ring.data, Int { at: 56, width: 8 });
        assert_eq!(
            ring.states,
            DescStates {
                reserved: 0,
                committed: 1,
                finalized: 2,
                reusable: 3
            }
        );
    }
}
