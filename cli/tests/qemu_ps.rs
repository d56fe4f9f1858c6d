//! `leechio ps` and `leechio spaces` against a live Linux guest, checked
//! against what the guest's /proc said at boot (its oracle) and the bytes
//! of its pattern process. The guest is paused while the binary reads.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::Duration;

use common::qemu::shared_guest;
use serde_json::Value;

/// How long one run may take (LeechCore opens the qemu device in ~1 s).
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// Runs the binary; fails the test if it has not ended by the deadline.
fn leechio(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leechio"))
        .args(args)
        .env_remove("LEECHIO_DEVICE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run leechio");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    std::thread::spawn(move || {
        child.stdout = stdout;
        child.stderr = stderr;
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(RUN_LIMIT) {
        Ok(output) => output.expect("leechio's output"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("leechio {} ran past {RUN_LIMIT:?}", args.join(" "));
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json_lines(output: &Output) -> Vec<Value> {
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

fn parse_hex(v: &Value) -> u64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a string: {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("{s:?}"))
}

#[test]
fn ps_lists_what_the_guests_proc_says() {
    let guest = shared_guest();
    let device = guest.device_string();
    let _paused = guest.pause();
    let lines = json_lines(&leechio(&["-d", &device, "ps", "--json", "--no-cache"]));
    let by_pid = |pid: u32| lines.iter().find(|l| l["pid"] == pid);
    for task in guest.processes() {
        let Some(line) = by_pid(task.pid) else {
            // Kernel threads come and go (tests/linux_processes.rs).
            assert!(task.kernel_thread, "{task:?} not listed");
            continue;
        };
        assert_eq!(line["ppid"], task.ppid, "{line}");
        assert_eq!(line["name"], task.task_comm(), "{line}");
        assert_eq!(line["cmdline"], task.cmdline.join(" "), "{line}");
        assert_eq!(line["kernel_thread"], task.kernel_thread, "{line}");
        assert_eq!(line["state"], task.state.to_string(), "{line}");
        let threads = guest.tasks().iter().filter(|t| t.tgid == task.pid).count();
        assert_eq!(line["threads"].as_array().unwrap().len(), threads - 1);
        if task.kernel_thread || task.state == 'Z' {
            assert!(line["dtb"].is_null(), "{line}");
        } else {
            parse_hex(&line["dtb"]);
        }
    }
    assert_eq!(lines.len(), guest.processes().len(), "{lines:#?}");

    // The pattern process's DTB reads its pattern.
    let pattern = guest.pattern();
    let dtb = by_pid(pattern.pid).unwrap()["dtb"]
        .as_str()
        .unwrap()
        .to_string();
    let start = format!("{:#x}", pattern.start);
    let read = json_lines(&leechio(&[
        "-d", &device, "read", "--json", "--dtb", &dtb, &start, "64",
    ]));
    let want: String = pattern
        .bytes(pattern.start, 64)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(read[0]["data"], want);
}

#[test]
fn ps_prints_a_table_one_process_a_line() {
    let guest = shared_guest();
    let device = guest.device_string();
    let _paused = guest.pause();
    let output = leechio(&["-d", &device, "ps"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["PID", "PPID", "S", "THR", "DTB", "NAME", "COMMAND"]
    );
    assert_eq!(lines.len(), 1 + guest.processes().len());
    let kthreadd: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        kthreadd,
        ["2", "0", "S", "1", "-", "kthreadd", "[kthreadd]"]
    );
    // The pattern process: three threads, its comm with spaces.
    let pattern = guest.pattern().pid.to_string();
    let line = lines
        .iter()
        .find(|l| l.split_whitespace().next() == Some(&pattern))
        .unwrap();
    assert!(
        line.ends_with("  leech (pat) x    leechio-pattern"),
        "{line:?}"
    );
    assert_eq!(line.split_whitespace().nth(3), Some("3"), "{line:?}");
    // The long command line on one line, its tab escaped.
    let args = lines.iter().find(|l| l.contains("leechio-args")).unwrap();
    assert!(args.contains("tab\\tand 'quotes'"), "{args}");
    assert!(args.ends_with("1000600 last-argument"), "{args}");
}

#[test]
fn spaces_names_the_process_of_each_table() {
    let guest = shared_guest();
    let device = guest.device_string();
    let _paused = guest.pause();
    let ps = json_lines(&leechio(&["-d", &device, "ps", "--json", "--no-cache"]));
    let spaces = json_lines(&leechio(&["-d", &device, "spaces", "--json"]));
    let kernel = spaces
        .iter()
        .find(|s| parse_hex(&s["dtb"]) == guest.kernel_dtb())
        .expect("the kernel's table");
    assert_eq!(
        (&kernel["pid"], &kernel["process"]),
        (&Value::Null, &Value::from("kernel"))
    );
    let mut named = 0;
    for p in ps.iter().filter(|p| !p["dtb"].is_null()) {
        let space = spaces
            .iter()
            .find(|s| s["dtb"] == p["dtb"])
            .unwrap_or_else(|| panic!("no space for {p}"));
        assert_eq!(
            (&space["pid"], &space["process"]),
            (&p["pid"], &p["name"]),
            "{space}"
        );
        named += 1;
    }
    let with_pid = spaces.iter().filter(|s| !s["pid"].is_null()).count();
    assert_eq!(with_pid, named);
    let user = guest
        .processes()
        .iter()
        .filter(|t| !t.kernel_thread && t.state != 'Z')
        .count();
    assert_eq!(named, user, "{ps:#?}");
}
