//! `ps --tree`'s order: each process under its parent, depth first.

use std::collections::{BTreeMap, HashSet};

use leechio::linux::Process;

/// `processes` (by pid) in tree order, each with its depth: a process
/// whose parent is not listed is a root. The parents are the target's
/// word, so a cycle of them (which no kernel makes) cannot hide its
/// members: what no root reaches is listed after, each as a root.
pub fn order(processes: &[Process]) -> Vec<(&Process, usize)> {
    let listed: HashSet<u32> = processes.iter().map(|p| p.pid).collect();
    let mut children: BTreeMap<u32, Vec<&Process>> = BTreeMap::new();
    let mut roots = Vec::new();
    for p in processes {
        match p.ppid {
            Some(ppid) if ppid != p.pid && listed.contains(&ppid) => {
                children.entry(ppid).or_default().push(p)
            }
            _ => roots.push(p),
        }
    }
    let mut out = Vec::with_capacity(processes.len());
    let mut shown = HashSet::new();
    let mut stack: Vec<(&Process, usize)> = Vec::new();
    let unreached = processes.iter();
    for root in roots.into_iter().chain(unreached) {
        if shown.contains(&root.pid) {
            continue;
        }
        stack.push((root, 0));
        while let Some((p, depth)) = stack.pop() {
            if !shown.insert(p.pid) {
                continue;
            }
            out.push((p, depth));
            if let Some(kids) = children.get(&p.pid) {
                stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, ppid: Option<u32>) -> Process {
        Process {
            pid,
            tgid: pid,
            ppid,
            name: format!("p{pid}"),
            cmdline: Vec::new(),
            state: 'S',
            kernel_thread: false,
            dtb: None,
            task: u64::from(pid),
            mm: None,
            threads: Vec::new(),
        }
    }

    fn shape(processes: &[Process]) -> Vec<(u32, usize)> {
        order(processes).iter().map(|(p, d)| (p.pid, *d)).collect()
    }

    #[test]
    fn children_follow_their_parents_depth_first_by_pid() {
        let ps = [
            process(1, Some(0)),
            process(2, Some(0)),
            process(10, Some(1)),
            process(11, Some(10)),
            process(12, Some(1)),
            process(20, Some(2)),
            process(30, None),
        ];
        assert_eq!(
            shape(&ps),
            [(1, 0), (10, 1), (11, 2), (12, 1), (2, 0), (20, 1), (30, 0)]
        );
    }

    #[test]
    fn a_cycle_of_parents_hides_no_process() {
        // 5 and 6 name each other; 7 names itself.
        let ps = [
            process(1, Some(0)),
            process(5, Some(6)),
            process(6, Some(5)),
            process(7, Some(7)),
        ];
        let got = shape(&ps);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], (1, 0));
        assert!(got.contains(&(7, 0)));
        let mut pids: Vec<u32> = got.iter().map(|g| g.0).collect();
        pids.sort_unstable();
        assert_eq!(pids, [1, 5, 6, 7]);
    }
}
