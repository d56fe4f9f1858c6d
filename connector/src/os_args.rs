//! The OS plugin's arguments: memflow's `linux_btf:key=value,…` turned into
//! what the kernel search is told.

use std::path::PathBuf;

use leechio::linux::{CacheLocation, Hints};
use leechio::Paging;
use memflow::plugins::{Args, OsArgs};

use crate::args::{pairs_of, parse_hex, repeated_key, unquote};

/// Every key the OS plugin takes, with what it means, for help and errors.
pub const KEYS: [(&str, &str); 5] = [
    ("dtb", "physical address of a page-table root that maps the kernel (its init_top_pgt, or any process's CR3), hex: the search skips reading low memory for one"),
    ("kernel_base", "the kernel's virtual base (_text), hex: a 2 MiB aligned address from 0xffffffff80000000"),
    ("paging", "4 or 5: the levels of the kernel's page tables, for tables that read both ways (found otherwise)"),
    ("btf", "path of the kernel's BTF (its /sys/kernel/btf/vmlinux, copied off the target), for a kernel with no BTF in memory"),
    ("kernel_cache", "folder where kernels found are remembered, so the next start checks one in a single read, or `off` (default: $XDG_CACHE_HOME/leechio, else ~/.cache/leechio)"),
];

/// The valid keys, for error messages.
fn valid_keys() -> String {
    KEYS.map(|(k, _)| k).join(", ")
}

/// Reads the arguments; the error says what is wrong and what is valid,
/// on one line.
pub fn parse(args: &OsArgs) -> Result<Hints, String> {
    read_hints(args).map_err(|e| leechio::printable(&e))
}

fn read_hints(args: &OsArgs) -> Result<Hints, String> {
    // `linux_btf:dtb=…` puts the arguments in the target's place,
    // `linux_btf::dtb=…` after it: both are read.
    let mut pairs = Vec::new();
    if let Some(target) = args.target.as_deref().filter(|t| !t.trim().is_empty()) {
        let target: Args = target
            .parse()
            .map_err(|e| format!("arguments `{target}` unreadable: {e}"))?;
        pairs.extend(pairs_of(&target)?);
    }
    pairs.extend(pairs_of(&args.extra_args)?);
    if let Some(repeated) = repeated_key(&pairs) {
        return Err(repeated);
    }
    let mut hints = Hints::default();
    for (key, value) in &pairs {
        let Some((_, about)) = KEYS.iter().find(|(k, _)| k == key) else {
            return Err(match key.as_str() {
                "default" => format!(
                    "`{value}` is not an argument (give key=value); valid arguments: {}",
                    valid_keys()
                ),
                _ => format!(
                    "unknown argument `{key}`; valid arguments: {}",
                    valid_keys()
                ),
            });
        };
        if value.is_empty() {
            return Err(format!("`{key}=` has no value; {key}: {about}"));
        }
        match key.as_str() {
            "dtb" => hints.dtb = Some(parse_hex(value).map_err(|e| format!("dtb `{value}`: {e}"))?),
            "kernel_base" => {
                hints.kernel_base =
                    Some(parse_hex(value).map_err(|e| format!("kernel_base `{value}`: {e}"))?)
            }
            "paging" => {
                hints.paging = Some(match value.as_str() {
                    "4" => Paging::FourLevel,
                    "5" => Paging::FiveLevel,
                    _ => return Err(format!("paging `{value}`: give 4 or 5")),
                })
            }
            "btf" => hints.btf_file = Some(PathBuf::from(unquote(value))),
            _ => {
                hints.cache = match value.as_str() {
                    "off" => CacheLocation::Off,
                    folder => CacheLocation::Folder(PathBuf::from(unquote(folder))),
                }
            }
        }
    }
    Ok(hints)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(text: &str) -> Result<Hints, String> {
        parse(&text.parse::<OsArgs>().map_err(|e| e.to_string())?)
    }

    #[test]
    fn every_key_is_read_in_either_place() {
        let h = hints("dtb=0x2a10000,kernel_base=0xffffffff81000000,paging=5").unwrap();
        assert_eq!(h.dtb, Some(0x2a1_0000));
        assert_eq!(h.kernel_base, Some(0xffff_ffff_8100_0000));
        assert_eq!(h.paging, Some(Paging::FiveLevel));
        let h = hints(":btf=/tmp/vmlinux.btf,kernel_cache=off").unwrap();
        assert_eq!(h.btf_file, Some(PathBuf::from("/tmp/vmlinux.btf")));
        assert_eq!(h.cache, CacheLocation::Off);
        let h = hints("paging=4:kernel_cache=\"/tmp/a:b\"").unwrap();
        assert_eq!(h.paging, Some(Paging::FourLevel));
        assert_eq!(h.cache, CacheLocation::Folder(PathBuf::from("/tmp/a:b")));
        // Nothing given: the defaults.
        let h = hints("").unwrap();
        assert_eq!((h.dtb, h.cache), (None, CacheLocation::User));
    }

    #[test]
    fn bad_arguments_say_what_is_wrong_and_what_is_valid() {
        let valid = "valid arguments: dtb, kernel_base, paging, btf, kernel_cache";
        assert_eq!(
            hints("colour=red").unwrap_err(),
            format!("unknown argument `colour`; {valid}")
        );
        assert_eq!(
            hints(":profile=/tmp/x.toml").unwrap_err(),
            format!("unknown argument `profile`; {valid}")
        );
        assert_eq!(
            hints("fast").unwrap_err(),
            format!("`fast` is not an argument (give key=value); {valid}")
        );
        assert_eq!(hints("paging=6").unwrap_err(), "paging `6`: give 4 or 5");
        assert!(hints("dtb=xyz")
            .unwrap_err()
            .starts_with("dtb `xyz`: give a hex address"));
        assert!(hints("btf=")
            .unwrap_err()
            .starts_with("`btf=` has no value; btf: "));
        assert_eq!(
            hints("dtb=0x1000:dtb=0x2000").unwrap_err(),
            "`dtb` is given twice (`0x1000` and `0x2000`); give each argument once"
        );
    }
}
