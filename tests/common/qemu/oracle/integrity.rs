//! The guest's modules' taint and parameters, and its kernel's taint, as
//! its own /proc and /sys show them: the oracle's `tainted`,
//! `module-taint`, `param`, `parmtype`, `param-given` and `integrity-end`
//! lines (format in `scripts/guest.sh`).

use std::collections::BTreeMap;

/// What the guest said of its modules' integrity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestIntegrity {
    /// `/proc/sys/kernel/tainted`.
    pub tainted: u64,
    /// `/sys/module/NAME/taint`, by module name.
    pub module_taint: BTreeMap<String, String>,
    /// `/sys/module/NAME/parameters/PARAM`, by (module, parameter).
    pub params: BTreeMap<(String, String), String>,
    /// Each parameter a module file declares, with its type
    /// (`module_param`'s: `int`, `charp`...), by (module, parameter).
    pub parmtypes: BTreeMap<(String, String), String>,
    /// What /init gave insmod, by (module, parameter).
    pub given: BTreeMap<(String, String), String>,
    /// The directories of `/sys/module` (a module's or a built-in's).
    pub sysfs_entries: usize,
}

/// The lines as they are read.
#[derive(Default)]
pub struct IntegrityItems {
    found: GuestIntegrity,
    tainted: Option<u64>,
    /// taints, params, parmtypes, sysmodule
    end: Option<[usize; 3]>,
}

impl IntegrityItems {
    /// One line of `kind`, without its kind.
    pub fn add(&mut self, kind: &str, rest: &str) -> Result<(), String> {
        let mut words = rest.splitn(3, ' ');
        let mut next = |what: &str| {
            words
                .next()
                .map(str::to_string)
                .ok_or(format!("{kind}: no {what}"))
        };
        match kind {
            "tainted" => {
                let mask = rest.trim().parse().map_err(|_| "tainted: not a number")?;
                match self.tainted.replace(mask) {
                    None => Ok(()),
                    Some(_) => Err("tainted given twice".into()),
                }
            }
            "module-taint" => {
                let name = next("name")?;
                let letters = words.next().unwrap_or("").trim().to_string();
                self.found.module_taint.insert(name, letters);
                Ok(())
            }
            "param" | "parmtype" | "param-given" => {
                let key = (next("module")?, next("parameter")?);
                let value = words.next().unwrap_or("").to_string();
                let map = match kind {
                    "param" => &mut self.found.params,
                    "parmtype" => &mut self.found.parmtypes,
                    _ => &mut self.found.given,
                };
                map.insert(key, value);
                Ok(())
            }
            "integrity-end" => {
                let mut counts = [0usize; 4];
                for (slot, key) in
                    counts
                        .iter_mut()
                        .zip(["taints", "params", "parmtypes", "sysmodule"])
                {
                    let word = rest
                        .split_whitespace()
                        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
                        .ok_or(format!("integrity-end: no {key}="))?;
                    *slot = word
                        .parse()
                        .map_err(|_| format!("integrity-end: {key}={word}"))?;
                }
                self.found.sysfs_entries = counts[3];
                self.end = Some([counts[0], counts[1], counts[2]]);
                Ok(())
            }
            _ => Err(format!("unknown kind {kind}")),
        }
    }

    /// What was read, once the counts agree (a guest that printed none
    /// of it: none).
    pub fn finish(self) -> Result<GuestIntegrity, String> {
        let Some(end) = self.end else {
            return Ok(GuestIntegrity::default());
        };
        let found = self.found;
        let counted = [
            found.module_taint.len(),
            found.params.len(),
            found.parmtypes.len(),
        ];
        if counted != end {
            return Err(format!(
                "the guest printed {end:?} module taints, parameters and parameter types; {counted:?} read"
            ));
        }
        Ok(GuestIntegrity {
            tainted: self.tainted.ok_or("no tainted line")?,
            ..found
        })
    }
}
