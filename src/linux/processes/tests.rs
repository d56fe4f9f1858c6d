//! The walk's parts that read nothing: state letters, command lines,
//! thread groups, spans.

use super::groups::thread_of;
use super::split_command_line;
use super::walk::{span, state_letter, TaskFields};

#[test]
fn state_letters_follow_proc() {
    assert_eq!(state_letter(0, 0), 'R');
    assert_eq!(state_letter(1, 0), 'S');
    assert_eq!(state_letter(2, 0), 'D');
    assert_eq!(state_letter(4, 0), 'T');
    assert_eq!(state_letter(8, 0), 't');
    assert_eq!(state_letter(0, 0x20), 'Z');
    assert_eq!(state_letter(0, 0x10), 'X');
    assert_eq!(state_letter(0x40, 0), 'P');
    assert_eq!(state_letter(0x402, 0), 'I');
    assert_eq!(state_letter(0x1000, 0), 'D');
    // Bits /proc does not report (TASK_WAKEKILL with stopped: T).
    assert_eq!(state_letter(0x100 | 4, 0), 'T');
}

#[test]
fn command_lines_split_as_proc_does() {
    assert_eq!(split_command_line(b""), Vec::<String>::new());
    assert_eq!(
        split_command_line(b"sh\0-c\0\0x y\0"),
        ["sh", "-c", "", "x y"]
    );
    // Rewritten in place: one title up to its first NUL.
    assert_eq!(split_command_line(b"title: x\0 junk"), ["title: x"]);
    assert_eq!(split_command_line(b"\xff\0"), ["\u{fffd}"]);
}

fn task(address: u64, pid: u32, tgid: u32, mm: u64, kernel_thread: bool) -> TaskFields {
    TaskFields {
        address,
        pid,
        tgid,
        real_parent: 0,
        group_leader: address,
        mm,
        kernel_thread,
        state: 'S',
        name: String::new(),
    }
}

#[test]
fn a_thread_belongs_to_a_group_only_when_its_leader_checks_out() {
    let leader = task(0x1000, 10, 10, 0x9000, false);
    let thread = TaskFields {
        group_leader: 0x1000,
        ..task(0x2000, 11, 10, 0x9000, false)
    };
    assert_eq!(thread_of(&thread, &leader), Ok(()));
    // A leader that exited first has no mm left.
    assert_eq!(thread_of(&thread, &task(0x1000, 10, 10, 0, false)), Ok(()));
    let cases = [
        (
            TaskFields {
                group_leader: 0x2000,
                ..thread.clone()
            },
            "its group_leader is 0x2000, not that process's task 0x1000",
        ),
        (
            TaskFields {
                mm: 0x8000,
                ..thread.clone()
            },
            "its mm is 0x8000, that process's 0x9000",
        ),
        (
            TaskFields {
                kernel_thread: true,
                ..thread.clone()
            },
            "it is a kernel thread and that process a user task",
        ),
    ];
    for (t, why) in cases {
        assert_eq!(thread_of(&t, &leader), Err(why.to_string()));
    }
}

#[test]
fn spans_cover_every_member() {
    assert_eq!(span(&[(0x40, 8), (0x10, 4), (0x30, 16)]), (0x10, 0x38));
}
