//! The results as a table (text or Markdown) or JSON lines.

use super::*;

pub(super) fn print_rows(rows: &[Row], markdown: bool, json_output: bool) {
    // Rows of one workload together, in the order workloads first came.
    let mut order: Vec<&str> = Vec::new();
    for r in rows {
        if !order.contains(&r.workload.as_str()) {
            order.push(&r.workload);
        }
    }
    let mut rows: Vec<&Row> = rows.iter().collect();
    rows.sort_by_key(|r| order.iter().position(|w| *w == r.workload));
    // The rows each one is compared with: the limit (throughput, as a
    // share of the limit's) and memflow's read-by-read code (speed-up).
    let find = |workload: &str, method: &str| {
        rows.iter()
            .find(|r| r.workload == workload && r.method.contains(method))
            .map(|r| r.time.as_secs_f64())
    };
    if markdown {
        outln!("| workload | method | device calls | median time | MB/s | of the limit | vs read by read |");
        outln!("|---|---|---:|---:|---:|---:|---:|");
    }
    for r in &rows {
        let ms = r.time.as_secs_f64() * 1e3;
        let mbs = r.bytes as f64 / r.time.as_secs_f64() / 1e6;
        // A path that got bytes wrong says so beside its name, and so
        // does one whose reads could not all be judged.
        let mut method = r.method.to_string();
        if let Some(v) = r.verdict {
            if v.wrong > 0 {
                method += &format!(" ({} of {} reads wrong or failed)", v.wrong, v.checked);
            }
            if v.changing > 0 {
                method += &format!(
                    " ({} reads not judged: the target kept changing that memory)",
                    v.changing
                );
            }
        }
        if let Some(lists) = &r.lists {
            method += &list_note(lists);
        }
        // A row that reads no fixed amount (a process list) has no rate.
        let mbs = match r.bytes {
            0 => String::new(),
            _ => three_digits(mbs),
        };
        if json_output {
            let lists = r.lists.as_ref();
            outln!(
                "{}",
                json!({"workload": r.workload, "method": r.method, "calls": r.calls, "ms": ms, "bytes": r.bytes,
                    "wrong_reads": r.verdict.map(|v| v.wrong), "checked_reads": r.verdict.map(|v| v.checked),
                    "changing_reads": r.verdict.map(|v| v.changing),
                    "processes": lists.map(|l| l.processes),
                    "differing_pids": lists.map(|l| &l.differing),
                    "changing_pids": lists.map(|l| &l.changing)})
            );
        } else if markdown {
            let secs = r.time.as_secs_f64();
            let of_limit = find(&r.workload, "limit")
                .map_or("".into(), |limit| format!("{:.0}%", limit / secs * 100.0));
            let speedup = find(&r.workload, "read by read")
                .map_or("".into(), |slow| format!("{:.1}x", slow / secs));
            outln!(
                "| {} | {} | {} | {ms:.2} ms | {} | {of_limit} | {speedup} |",
                r.workload,
                method,
                r.calls,
                mbs
            );
        } else {
            outln!(
                "{:<44} {:<54} {:>6} calls {:>10.2} ms {:>9} MB/s",
                r.workload,
                method,
                r.calls,
                ms,
                mbs
            );
        }
    }
}

/// What a process-list row says beside its name when the two lists
/// differ, or when some processes changed while they were read.
fn list_note(lists: &ListCheck) -> String {
    let pids = |pids: &[u32]| {
        let shown: Vec<String> = pids.iter().take(8).map(u32::to_string).collect();
        let more = if pids.len() > 8 { ", …" } else { "" };
        format!("{}{more}", shown.join(", "))
    };
    let (items, key) = match lists.keys {
        Keys::Pids => ("processes", "pid "),
        Keys::Items(items) => (items, "at "),
    };
    let mut note = String::new();
    if !lists.differing.is_empty() {
        note += &format!(
            " (the two lists differ at {} {items}: {key}{})",
            lists.differing.len(),
            pids(&lists.differing)
        );
    }
    if !lists.changing.is_empty() {
        note += &format!(
            " ({} {items} not checked: the target changed them meanwhile: {key}{})",
            lists.changing.len(),
            pids(&lists.changing)
        );
    }
    note
}

/// A throughput with at least three significant digits (8-byte reads over
/// an emulated board run at a few hundredths of a MB/s).
pub(super) fn three_digits(x: f64) -> String {
    match x {
        x if x >= 100.0 => format!("{x:.0}"),
        x if x >= 10.0 => format!("{x:.1}"),
        x if x >= 1.0 => format!("{x:.2}"),
        x => format!("{x:.3}"),
    }
}
