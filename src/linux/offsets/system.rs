//! The offsets `Kernel::system` reads by: the first UTS namespace's name
//! (`struct new_utsname`, what `uname` shows) and the timekeeper in
//! `tk_core` (boot time and uptime).

use crate::linux::find::btf::{Btf, BtfError};

/// Longest name field read (`__NEW_UTS_LEN + 1` is 65).
const MAX_UTS_FIELD: u64 = 256;

/// The fields of `struct new_utsname`, in `uname`'s order.
pub(crate) const UTS_FIELDS: [&str; 6] = [
    "sysname",
    "nodename",
    "release",
    "version",
    "machine",
    "domainname",
];

/// Where the first UTS namespace's name fields lie in `init_uts_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UtsLayout {
    /// Each of [`UTS_FIELDS`]: its offset in `struct uts_namespace` and
    /// its length (a char array, NUL-terminated within it).
    pub(crate) fields: [(u64, u64); 6],
}

impl UtsLayout {
    /// The offsets in `btf`.
    pub fn from_btf(btf: &Btf) -> Result<UtsLayout, BtfError> {
        let name = btf.member_offset("uts_namespace", "name")?;
        let mut fields = [(0, 0); 6];
        for (slot, field) in fields.iter_mut().zip(UTS_FIELDS) {
            let len = btf.member_size("new_utsname", field)?;
            if !(1..=MAX_UTS_FIELD).contains(&len) {
                return Err(BtfError::Parse(format!(
                    "BTF gives new_utsname.{field} {len} bytes, not 1 to {MAX_UTS_FIELD}"
                )));
            }
            *slot = (name + btf.member_offset("new_utsname", field)?, len);
        }
        Ok(UtsLayout { fields })
    }

    /// The span of `init_uts_ns` read: every name field.
    pub(crate) fn span(&self) -> (u64, u64) {
        let start = self.fields.iter().map(|f| f.0).min().unwrap_or(0);
        let end = self.fields.iter().map(|f| f.0 + f.1).max().unwrap_or(0);
        (start, end - start)
    }
}

/// Where the timekeeper's clocks lie in `tk_core`, each offset from the
/// start of `tk_core`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClockLayout {
    /// The sequence count writers make odd while they update (a `u32`).
    pub(crate) sequence: u64,
    /// `timekeeper.xtime_sec`: the wall clock's seconds (a `u64`).
    pub(crate) xtime_sec: u64,
    /// `timekeeper.tkr_mono.xtime_nsec` (a `u64`, shifted left by
    /// `tkr_mono.shift`): the nanoseconds past both clocks' last second.
    pub(crate) xtime_nsec: u64,
    /// `timekeeper.tkr_mono.shift` (a `u32`).
    pub(crate) shift: u64,
    /// `timekeeper.tkr_mono.base` (a `ktime_t`): CLOCK_MONOTONIC at the
    /// last update, less `xtime_nsec`.
    pub(crate) mono_base: u64,
    /// `timekeeper.offs_real` and `offs_boot` (each a `ktime_t`): from
    /// CLOCK_MONOTONIC to the wall clock and to CLOCK_BOOTTIME.
    pub(crate) offs_real: u64,
    pub(crate) offs_boot: u64,
}

impl ClockLayout {
    /// The offsets in `btf`. `tk_core` is a `struct tk_data` from 6.13;
    /// before, an anonymous struct of the sequence count
    /// (`seqcount_raw_spinlock_t`, a `seqcount_t` before 5.10) and the
    /// timekeeper, which then starts at the count's size aligned to 8
    /// (the timekeeper holds 64-bit members).
    pub fn from_btf(btf: &Btf) -> Result<ClockLayout, BtfError> {
        let (sequence, timekeeper) = match btf.member_offset("tk_data", "timekeeper") {
            Ok(timekeeper) => (
                btf.member_offset("tk_data", "seq.seqcount.sequence")?,
                timekeeper,
            ),
            Err(_) => match btf.size_of("seqcount_raw_spinlock") {
                Ok(size) => (
                    btf.member_offset("seqcount_raw_spinlock", "seqcount.sequence")?,
                    size.next_multiple_of(8),
                ),
                Err(_) => (
                    btf.member_offset("seqcount", "sequence")?,
                    btf.size_of("seqcount")?.next_multiple_of(8),
                ),
            },
        };
        let tk = |m: &str| Ok::<_, BtfError>(timekeeper + btf.member_offset("timekeeper", m)?);
        Ok(ClockLayout {
            sequence,
            xtime_sec: tk("xtime_sec")?,
            xtime_nsec: tk("tkr_mono.xtime_nsec")?,
            shift: tk("tkr_mono.shift")?,
            mono_base: tk("tkr_mono.base")?,
            offs_real: tk("offs_real")?,
            offs_boot: tk("offs_boot")?,
        })
    }

    /// The bytes of `tk_core` read: from its start to the last member.
    pub(crate) fn len(&self) -> u64 {
        [
            self.sequence + 4,
            self.xtime_sec + 8,
            self.xtime_nsec + 8,
            self.shift + 4,
            self.mono_base + 8,
            self.offs_real + 8,
            self.offs_boot + 8,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test guest's BTF cut down to what the walks ask about.
    const GUEST_BTF: &[u8] = include_bytes!("../../../fuzz/seeds/btf/debian12-6.1-walks.btf");

    #[test]
    fn a_6_1_kernels_timekeeper_follows_a_4_byte_sequence_count_at_8() {
        let btf = Btf::parse(GUEST_BTF).unwrap();
        // No `struct tk_data` before 6.13.
        assert!(btf.size_of("tk_data").is_err());
        let clock = ClockLayout::from_btf(&btf).unwrap();
        let tk = |m: &str| 8 + btf.member_offset("timekeeper", m).unwrap();
        assert_eq!(clock.sequence, 0);
        assert_eq!(clock.xtime_sec, tk("xtime_sec"));
        assert_eq!(clock.mono_base, tk("tkr_mono.base"));
        assert_eq!(clock.offs_boot, tk("offs_boot"));
        assert_eq!(clock.len(), tk("offs_boot") + 8);
        let uts = UtsLayout::from_btf(&btf).unwrap();
        assert_eq!(uts.fields[5], (5 * 65, 65));
        assert_eq!(uts.span(), (0, 390));
    }
}
