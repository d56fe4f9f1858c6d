//! The parameters of a `qemu://` device string, read as LeechCore's qemu
//! device reads them.

use std::path::{Path, PathBuf};

use super::delay::EmulatedDelay;

/// The parameters of a `qemu://` device string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QemuParams {
    /// `shm=NAME`: the guest's RAM is `/dev/shm/NAME`.
    pub(crate) shm: Option<String>,
    /// `qmp=SOCKET`, as the device resolves it: a name that does not start
    /// with `/` is in `/tmp`.
    pub(crate) qmp: Option<PathBuf>,
    /// `delay-latency-ns=N`, `delay-readpage-ns=M`: FPGA-like delays, when
    /// either is nonzero.
    pub(crate) delay: Option<EmulatedDelay>,
}

impl QemuParams {
    /// Reads the parameters; `param` gives a key's value (the device
    /// string's parser knows how keys are written).
    pub(crate) fn read<'a>(param: impl Fn(&str) -> Option<&'a str>) -> QemuParams {
        QemuParams {
            shm: param("shm").map(String::from),
            qmp: param("qmp").map(|q| match q.starts_with('/') {
                true => PathBuf::from(q),
                false => Path::new("/tmp").join(q),
            }),
            delay: EmulatedDelay::new(
                numeric(param("delay-latency-ns")),
                numeric(param("delay-readpage-ns")),
            ),
        }
    }

    /// The guest's RAM file, `/dev/shm/NAME`.
    pub(crate) fn ram_file(&self) -> Option<PathBuf> {
        self.shm.as_ref().map(|shm| Path::new("/dev/shm").join(shm))
    }
}

/// A parameter's number as LeechCore reads it: hexadecimal after `0x`,
/// else decimal, up to the first other character; 0 without one.
fn numeric(value: Option<&str>) -> u64 {
    let Some(value) = value else { return 0 };
    let (digits, radix) = match value.get(..2) {
        Some("0x" | "0X") => (&value[2..], 16),
        _ => (value, 10),
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    u64::from_str_radix(&digits[..end], radix).unwrap_or(if end == 0 { 0 } else { u64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_decimal_or_hexadecimal_up_to_the_first_other_character() {
        assert_eq!(numeric(None), 0);
        assert_eq!(numeric(Some("")), 0);
        assert_eq!(numeric(Some("150000")), 150_000);
        assert_eq!(numeric(Some("0x10")), 16);
        assert_eq!(numeric(Some("0X1f")), 31);
        assert_eq!(numeric(Some("12abc")), 12);
        assert_eq!(numeric(Some("abc")), 0);
        assert_eq!(numeric(Some("99999999999999999999999")), u64::MAX);
    }
}
