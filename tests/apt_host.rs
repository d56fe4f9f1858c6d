//! `scripts/apt-host.sh`, which tells `scripts/fresh-debian.sh` the Debian
//! mirror and the proxy of the host's apt, run on sample apt
//! configurations (one-line `.list` files, deb822 `.sources` files, proxy
//! settings) through apt's own `APT_CONFIG`.

use std::path::Path;
use std::process::Command;

/// A sample apt configuration under a temporary root.
struct AptRoot {
    dir: tempfile::TempDir,
}

impl AptRoot {
    fn new() -> AptRoot {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc/apt/sources.list.d")).unwrap();
        std::fs::create_dir_all(dir.path().join("etc/apt/apt.conf.d")).unwrap();
        // apt reads APT_CONFIG first: everything else is then under the root.
        std::fs::write(
            dir.path().join("apt.conf"),
            format!("Dir \"{}/\";\n", dir.path().display()),
        )
        .unwrap();
        AptRoot { dir }
    }

    /// Writes `text` to `etc/apt/NAME` under the root.
    fn file(self, name: &str, text: &str) -> AptRoot {
        std::fs::write(self.dir.path().join("etc/apt").join(name), text).unwrap();
        self
    }

    /// Runs `FUNCTION ARGS…` of the script; its stdout, or `None` when it
    /// fails.
    fn run(&self, call: &str) -> Option<String> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/apt-host.sh");
        let o = Command::new("bash")
            .args(["-euc", &format!(". \"$0\"; {call}")])
            .arg(script)
            .env("APT_CONFIG", self.dir.path().join("apt.conf"))
            .output()
            .expect("run bash");
        assert!(
            o.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        o.status
            .success()
            .then(|| String::from_utf8(o.stdout).unwrap().trim_end().to_string())
    }

    fn mirror(&self, suite: &str) -> Option<String> {
        self.run(&format!("debian_mirror {suite}"))
    }
}

#[test]
fn the_mirror_comes_from_one_line_sources() {
    let root = AptRoot::new().file(
        "sources.list",
        "# deb http://commented.example/debian bookworm main\n\
         deb http://security.example/debian-security bookworm-security main\n\
         deb-src http://source.example/debian bookworm main\n\
         deb http://contrib.example/debian bookworm contrib\n\
         deb [ arch=amd64 signed-by=/usr/share/keyrings/debian.gpg ] http://mirror.example/debian bookworm main contrib # ours\n\
         deb http://late.example/debian bookworm main\n",
    );
    assert_eq!(
        root.mirror("bookworm").as_deref(),
        Some("http://mirror.example/debian")
    );
}

#[test]
fn the_mirror_comes_from_deb822_sources() {
    let root = AptRoot::new().file(
        "sources.list.d/debian.sources",
        "# A comment\n\
         Types: deb\n\
         URIs: http://disabled.example/debian\n\
         Suites: bookworm\n\
         Components: main\n\
         Enabled: no\n\
         \n\
         Types: deb-src\n\
         URIs: http://source.example/debian\n\
         Suites: bookworm\n\
         Components: main\n\
         \n\
         types: deb deb-src\n\
         uris: https://mirror.example/debian\n\
         suites: bookworm-updates\n \
          bookworm\n\
         components: contrib main\n\
         Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
    );
    assert_eq!(
        root.mirror("bookworm").as_deref(),
        Some("https://mirror.example/debian")
    );
}

#[test]
fn sources_list_comes_before_the_folder_and_the_folder_in_name_order() {
    let root = AptRoot::new()
        .file(
            "sources.list.d/b.list",
            "deb http://b.example/debian bookworm main\n",
        )
        .file(
            "sources.list.d/a.sources",
            "Types: deb\nURIs: http://a.example/debian\nSuites: bookworm\nComponents: main\n",
        )
        .file(
            "sources.list.d/c.list.disabled",
            "deb http://c.example/debian bookworm main\n",
        );
    assert_eq!(
        root.mirror("bookworm").as_deref(),
        Some("http://a.example/debian")
    );
    let root = root.file(
        "sources.list",
        "deb http://first.example/debian bookworm main\n",
    );
    assert_eq!(
        root.mirror("bookworm").as_deref(),
        Some("http://first.example/debian")
    );
}

#[test]
fn another_release_of_the_mirror_serves_when_no_source_names_the_suite() {
    let root = AptRoot::new().file(
        "sources.list",
        "deb cdrom:[Debian 13]/ trixie main\n\
         deb mirror+file:/etc/apt/mirrors.txt trixie main\n\
         deb http://updates.example/debian trixie-updates main\n\
         deb http://mirror.example/debian trixie main\n",
    );
    assert_eq!(
        root.mirror("bookworm").as_deref(),
        Some("http://mirror.example/debian")
    );
}

#[test]
fn no_usable_source_is_a_failure() {
    assert_eq!(AptRoot::new().mirror("bookworm"), None);
    let root = AptRoot::new().file(
        "sources.list",
        "deb http://security.example/debian-security bookworm-security main\n",
    );
    assert_eq!(root.mirror("bookworm"), None);
}

#[test]
fn the_apt_proxy_is_read_per_scheme() {
    let root = AptRoot::new();
    assert_eq!(root.run("apt_proxy http").as_deref(), Some(""));
    let root = root.file(
        "apt.conf.d/90proxy",
        "Acquire::http::Proxy \"http://proxy.example:3128/\";\n\
         Acquire::https::Proxy \"DIRECT\";\n",
    );
    assert_eq!(
        root.run("apt_proxy http").as_deref(),
        Some("http://proxy.example:3128/")
    );
    assert_eq!(root.run("apt_proxy https").as_deref(), Some(""));
}
