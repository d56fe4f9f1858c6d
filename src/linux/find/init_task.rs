//! The kernel's first task (`init_task`), checked by its own structure
//! before anything is read through it, and what it leads to: the PID
//! namespace and the direct map.

use super::image::Image;
use crate::linux::offsets::InitTaskLayout;
use crate::Memory;

/// What a checked `init_task` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitTask {
    /// Its address.
    pub address: u64,
    /// Its `comm`.
    pub comm: String,
    /// `thread_pid->numbers[0].ns`: `init_pid_ns`.
    pub pid_ns: u64,
}

fn word(bytes: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// Reads the task at `address` (inside the kernel image), one batch.
pub async fn read(
    mem: &Memory,
    image: &Image,
    layout: &InitTaskLayout,
    address: u64,
) -> Result<Vec<u8>, String> {
    let size = usize::try_from(layout.size).map_err(|_| "task_struct too large")?;
    if !(64..=1 << 16).contains(&size) {
        return Err(format!("BTF gives task_struct {size} bytes"));
    }
    let pa = image
        .physical(address)
        .ok_or_else(|| format!("init_task {address:#x} lies outside the kernel image"))?;
    let mut task = vec![0u8; size];
    mem.read(pa, &mut task)
        .await
        .map_err(|e| format!("init_task at {address:#x} cannot be read: {e}"))?;
    Ok(task)
}

/// Checks that `task`, read at `address`, is `init_task`: `comm` "swapper/0" (or "swapper", before 3.x), pid 0, and
/// its `tasks` list linked both ways (`next->prev` and `prev->next` point
/// back). The neighbours are slab objects, read through the direct map:
/// the first of `direct_maps` (candidate bases) through which both point
/// back is the direct map. One batch of reads; a reason when it is not
/// `init_task`.
pub async fn check(
    mem: &Memory,
    image: &Image,
    layout: &InitTaskLayout,
    (address, task): (u64, &[u8]),
    direct_maps: &[u64],
) -> Result<(InitTask, u64), String> {
    let comm_at = layout.comm as usize;
    let comm = task
        .get(comm_at..comm_at + 16)
        .ok_or("comm lies outside task_struct")?;
    let comm = &comm[..comm.iter().position(|&c| c == 0).unwrap_or(16)];
    let comm = String::from_utf8_lossy(comm).into_owned();
    if comm != "swapper/0" && comm != "swapper" {
        return Err(format!(
            "init_task at {address:#x} has comm {comm:?}, not \"swapper/0\""
        ));
    }
    let missing = || "a member lies outside task_struct".to_string();
    let pid = word(task, layout.pid).ok_or_else(missing)? as u32;
    if pid != 0 {
        return Err(format!("init_task at {address:#x} has pid {pid}, not 0"));
    }
    let own_tasks = address + layout.tasks;
    let next = word(task, layout.tasks).ok_or_else(missing)?;
    let prev = word(task, layout.tasks + 8).ok_or_else(missing)?;
    let thread_pid = word(task, layout.thread_pid).ok_or_else(missing)?;
    let limit = mem.backend().max_address();
    let checks = futures::future::join_all(direct_maps.iter().map(|&base| async move {
        // A kernel address: in the image, else in the direct map at `base`.
        let pa = |va: u64| {
            image
                .physical(va)
                .or_else(|| va.checked_sub(base).filter(|pa| *pa < limit))
        };
        let read = |va: Option<u64>| async move {
            match va {
                Some(pa) => mem.read_val::<u64>(pa).await.ok(),
                None => None,
            }
        };
        let (next_prev, prev_next, pid_ns) = futures::join!(
            read(pa(next.wrapping_add(8))),
            read(pa(prev)),
            read(pa(thread_pid.wrapping_add(layout.pid_ns))),
        );
        (next_prev == Some(own_tasks) && prev_next == Some(own_tasks)).then_some((base, pid_ns))
    }))
    .await;
    let (base, pid_ns) = checks.into_iter().flatten().next().ok_or_else(|| {
        format!(
            "init_task at {address:#x}: its tasks list (next {next:#x}, prev {prev:#x}) does not link back through a direct map at any of {}",
            direct_maps.iter().map(|b| format!("{b:#x}")).collect::<Vec<_>>().join(", ")
        )
    })?;
    let pid_ns =
        pid_ns.ok_or_else(|| format!("init_task's thread_pid {thread_pid:#x} cannot be read"))?;
    Ok((
        InitTask {
            address,
            comm,
            pid_ns,
        },
        base,
    ))
}
