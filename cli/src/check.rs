//! `leechio check`: what hides on a Linux target, found with no profile:
//! each task through the kernel's independent views (the pid table, the
//! task list, its thread group, the run queues), and every task missing
//! from a view that must have it.

use std::process::ExitCode;

use leechio::linux::{ProcessViews, TaskViews, View};
use serde_json::json;

use crate::device::open;
use crate::numbers::hex;
use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{Cli, Failure};

/// `leechio check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    kernel: KernelArgs,
}

/// Checks the views: a line for each task missing from one (its pid,
/// name, task and the views that have it and lack it), then a summary;
/// with `--json`, an object a task and one for the summary. What could not
/// be read goes to stderr. Exit 1 when a task hides or a view could not
/// be read whole, 0 when the views agree.
pub fn check(cli: &Cli, args: &CheckArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = args.kernel.find(&mem)?;
    let views = kernel.process_views();
    for (view, why) in &views.unread {
        errln!("leechio: not on this kernel: the {view}: {}", escape(why));
    }
    for f in &views.failed {
        errln!("leechio: {}", escape(&f.to_string()));
    }
    let hidden: Vec<&TaskViews> = views.hidden().collect();
    for t in &hidden {
        match cli.json {
            true => outln!("{}", task_json(t)),
            false => outln!(
                "pid {}  {}  task {}  in: {}; missing from: {}",
                t.pid,
                escape(&t.name),
                hex(t.task),
                names(&t.seen_in),
                names(&t.missing_from)
            ),
        }
    }
    match cli.json {
        true => outln!("{}", summary_json(&views, hidden.len())),
        false => outln!("{}", summary(&views, hidden.len())),
    }
    Ok(match hidden.is_empty() && views.failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// Views by name, joined; "none" for none.
fn names(views: &[View]) -> String {
    match views.is_empty() {
        true => "none".into(),
        false => views
            .iter()
            .map(View::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The JSON line of a task that hides.
fn task_json(t: &TaskViews) -> serde_json::Value {
    let names = |views: &[View]| views.iter().map(View::to_string).collect::<Vec<_>>();
    json!({
        "pid": t.pid, "tgid": t.tgid, "name": t.name, "task": hex(t.task),
        "in": names(&t.seen_in), "missing_from": names(&t.missing_from),
        "cpu": t.cpu,
    })
}

/// How many tasks each view has, as the summary counts them.
fn counts(views: &ProcessViews) -> [(View, usize); 4] {
    [
        View::PidTable,
        View::TaskList,
        View::ThreadGroup,
        View::RunQueue,
    ]
    .map(|v| (v, views.count_in(v)))
}

/// The summary line: how many tasks hide, of how many, and what each
/// view holds.
fn summary(views: &ProcessViews, hidden: usize) -> String {
    let verdict = match (hidden, views.failed.len()) {
        (0, 0) => "no task hides".to_string(),
        (0, n) => format!("no task found hiding, but {n} part(s) of the views could not be read"),
        (1, _) => "1 task hides".to_string(),
        (n, _) => format!("{n} tasks hide"),
    };
    let unread = |v: View| views.unread.iter().any(|u| u.0 == v);
    let held: Vec<String> = counts(views)
        .iter()
        .map(|&(view, n)| match view {
            _ if unread(view) => format!("{view}: not read"),
            View::TaskList => format!("{n} on the task list"),
            View::ThreadGroup => format!("{n} in {} thread groups", views.thread_groups),
            View::RunQueue => format!(
                "{n} running or runnable on {} CPU(s)",
                views.run_queues.len()
            ),
            View::PidTable => format!("{n} in the pid table"),
        })
        .collect();
    format!(
        "{verdict}: {} tasks; {}",
        views.tasks.len(),
        held.join(", ")
    )
}

/// The summary as JSON.
fn summary_json(views: &ProcessViews, hidden: usize) -> serde_json::Value {
    let counts: serde_json::Map<String, serde_json::Value> = counts(views)
        .iter()
        .map(|(view, n)| (view.to_string(), json!(n)))
        .collect();
    let unread: Vec<String> = views.unread.iter().map(|u| u.0.to_string()).collect();
    json!({
        "hidden": hidden, "tasks": views.tasks.len(), "in": counts,
        "thread_groups": views.thread_groups, "run_queues": views.run_queues.len(),
        "failed": views.failed.len(), "unread": unread,
    })
}
