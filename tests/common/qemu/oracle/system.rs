//! What the guest's kernel says of itself at boot, and its log: the
//! oracle's `uname`, `btime`, `clock`, `dmesg` and `dmesg-end` lines
//! (format in `scripts/guest.sh`).

use std::collections::BTreeMap;

/// The `uname` keys the guest prints, in its order.
pub const UNAME_KEYS: [&str; 6] = [
    "sysname",
    "nodename",
    "release",
    "version",
    "machine",
    "domainname",
];

/// The kernel's names, clocks and log as the guest saw them.
#[derive(Debug, Clone, PartialEq)]
pub struct GuestSystem {
    /// By [`UNAME_KEYS`].
    pub uname: BTreeMap<String, String>,
    /// `/proc/stat`'s `btime`.
    pub btime: u64,
    /// `/proc/uptime`'s first number, in hundredths of a second.
    pub uptime_centis: u64,
    /// `date +%s`, read just after the uptime.
    pub now: u64,
    /// Each line busybox `dmesg` printed, without its newline.
    pub dmesg: Vec<Vec<u8>>,
}

impl GuestSystem {
    /// The `uname` field `key`.
    pub fn uname(&self, key: &str) -> &str {
        &self.uname[key]
    }
}

/// The lines as they are read.
#[derive(Default)]
pub struct SystemItems {
    uname: BTreeMap<String, String>,
    btime: Option<u64>,
    clock: Option<(u64, u64)>,
    dmesg: Vec<Vec<u8>>,
    dmesg_end: Option<usize>,
}

impl SystemItems {
    /// One line of `kind` (`uname`, `btime`, `clock`, `dmesg`,
    /// `dmesg-end`), without its kind.
    pub fn add(&mut self, kind: &str, rest: &str) -> Result<(), String> {
        match kind {
            "uname" => {
                let (key, value) = rest.split_once(' ').ok_or("uname: no value")?;
                if !UNAME_KEYS.contains(&key) {
                    return Err(format!("uname: unknown key {key:?}"));
                }
                match self.uname.insert(key.into(), value.into()) {
                    None => Ok(()),
                    Some(_) => Err(format!("uname {key} given twice")),
                }
            }
            "btime" => once(&mut self.btime, rest.parse().map_err(|_| "btime")?),
            "clock" => {
                let mut uptime = None;
                let mut now = None;
                for word in rest.split_whitespace() {
                    match word.split_once('=') {
                        Some(("uptime", v)) => uptime = Some(centis(v)?),
                        Some(("now", v)) => now = Some(v.parse().map_err(|_| "clock now")?),
                        _ => return Err(format!("clock: {word:?}")),
                    }
                }
                let clock = (uptime.ok_or("no uptime=")?, now.ok_or("no now=")?);
                once(&mut self.clock, clock)
            }
            "dmesg" => {
                self.dmesg.push(hex(rest)?);
                Ok(())
            }
            "dmesg-end" => {
                let n = rest
                    .strip_prefix("lines=")
                    .and_then(|n| n.parse().ok())
                    .ok_or("dmesg-end is not lines=N")?;
                once(&mut self.dmesg_end, n)
            }
            _ => Err("unknown kind".into()),
        }
    }

    /// The whole, once every line came and the dmesg count agrees.
    pub fn finish(self) -> Result<GuestSystem, String> {
        for key in UNAME_KEYS {
            if !self.uname.contains_key(key) {
                return Err(format!("no uname {key} line"));
            }
        }
        let end = self.dmesg_end.ok_or("no dmesg-end line")?;
        if end != self.dmesg.len() || end == 0 {
            return Err(format!(
                "the guest printed {end} dmesg lines, {} read",
                self.dmesg.len()
            ));
        }
        let (uptime_centis, now) = self.clock.ok_or("no clock line")?;
        Ok(GuestSystem {
            uname: self.uname,
            btime: self.btime.ok_or("no btime line")?,
            uptime_centis,
            now,
            dmesg: self.dmesg,
        })
    }
}

fn once<T>(slot: &mut Option<T>, value: T) -> Result<(), String> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err("given twice".into()),
    }
}

/// `S.HH` seconds as hundredths.
fn centis(text: &str) -> Result<u64, String> {
    let (s, h) = text.split_once('.').ok_or("uptime is not S.HH")?;
    let parse = |v: &str| v.parse::<u64>().map_err(|_| format!("uptime {text:?}"));
    if h.len() != 2 {
        return Err(format!("uptime {text:?} is not S.HH"));
    }
    Ok(parse(s)? * 100 + parse(h)?)
}

/// Bytes from hex digits.
fn hex(text: &str) -> Result<Vec<u8>, String> {
    if text.len() % 2 != 0 {
        return Err("dmesg: odd number of hex digits".into());
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16))
        .collect::<Result<_, _>>()
        .map_err(|_| "dmesg: not hex".into())
}
