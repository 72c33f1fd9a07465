//! Whether the machine is quiet enough to measure on, read from the kernel's own state:
//! the BPF programs and links alive (an earlier session's are torn down seconds after its
//! process exits, and tracepoints cost every syscall until they are), and how busy the
//! CPUs were just before a run (`/proc/stat`) with the load average beside it.

use std::time::{Duration, Instant};

/// The ids of the BPF programs and links alive now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BpfObjects {
    pub programs: Vec<u32>,
    pub links: Vec<u32>,
}

/// `bpf(2)` commands that walk the ids of what is loaded (include/uapi/linux/bpf.h).
const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
const BPF_LINK_GET_NEXT_ID: libc::c_long = 31;

/// Every id `command` walks, in order (root: CAP_SYS_ADMIN).
fn ids(command: libc::c_long) -> std::io::Result<Vec<u32>> {
    // `union bpf_attr` for the GET_NEXT_ID commands: start_id, next_id, open_flags.
    #[repr(C)]
    struct NextId {
        start_id: u32,
        next_id: u32,
        open_flags: u32,
    }
    let mut found = Vec::new();
    let mut start_id = 0;
    loop {
        let mut attr = NextId {
            start_id,
            next_id: 0,
            open_flags: 0,
        };
        // SAFETY: bpf(2) reads and writes `attr`, a valid value of the size passed.
        let done = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                command,
                &mut attr as *mut NextId,
                std::mem::size_of::<NextId>(),
            )
        };
        if done < 0 {
            let error = std::io::Error::last_os_error();
            return match error.raw_os_error() {
                Some(libc::ENOENT) => Ok(found),
                _ => Err(error),
            };
        }
        found.push(attr.next_id);
        start_id = attr.next_id;
    }
}

impl BpfObjects {
    pub fn now() -> std::io::Result<BpfObjects> {
        Ok(BpfObjects {
            programs: ids(BPF_PROG_GET_NEXT_ID)?,
            links: ids(BPF_LINK_GET_NEXT_ID)?,
        })
    }

    /// What is alive now that was not in `before`.
    pub fn added_since(&self, before: &BpfObjects) -> BpfObjects {
        let new = |now: &[u32], then: &[u32]| {
            now.iter()
                .copied()
                .filter(|id| !then.contains(id))
                .collect()
        };
        BpfObjects {
            programs: new(&self.programs, &before.programs),
            links: new(&self.links, &before.links),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.programs.is_empty() && self.links.is_empty()
    }
}

/// Waits until every BPF program and link loaded since `before` is gone (a program's id
/// goes only once the last link or perf event holding it is freed), for at most `limit`.
/// How long it waited; an error naming what outlived the limit.
pub fn wait_for_teardown(before: &BpfObjects, limit: Duration) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        let left = BpfObjects::now()?.added_since(before);
        if left.is_empty() {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= limit {
            anyhow::bail!(
                "{} BPF programs and {} links of an earlier run were still alive after {limit:?}",
                left.programs.len(),
                left.links.len()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Makes this process the reaper of its descendants' orphans (`PR_SET_CHILD_SUBREAPER`):
/// an auditor session's detaching helper, which outlives the auditor, becomes its child,
/// and [`wait_for_children`] can wait for its end.
pub fn adopt_orphans() -> anyhow::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        anyhow::bail!(
            "prctl(PR_SET_CHILD_SUBREAPER): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Waits until every child of this process (orphans adopted by [`adopt_orphans`] among
/// them) has exited, reaping each, for at most `limit`; how long it waited. An auditor's
/// detaching helper frees the tracepoints' perf events as it exits: in the kernel's exit
/// path, its fds already gone from /proc, it waits for an RCU grace period per tracepoint,
/// some 3.5 s after the programs' ids went; until then every syscall of the machine still
/// takes the traced path (getppid 530 against 422 ns here). Only its exit says it is done.
pub fn wait_for_children(limit: Duration) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status it is given.
        let reaped = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        match reaped {
            -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) => {
                return Ok(started.elapsed());
            }
            -1 => anyhow::bail!("waitpid: {}", std::io::Error::last_os_error()),
            0 if started.elapsed() >= limit => {
                anyhow::bail!("a child of an earlier run was still alive after {limit:?}")
            }
            0 => std::thread::sleep(Duration::from_millis(20)),
            _ => {}
        }
    }
}

/// Jiffies each CPU spent busy and in all, from `/proc/stat`'s `cpu` line.
fn cpu_times() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().sum();
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The share of the machine's CPU time used over `window`, by anything.
pub fn busy_share(window: Duration) -> f64 {
    let (busy_before, total_before) = cpu_times();
    std::thread::sleep(window);
    let (busy_after, total_after) = cpu_times();
    let total = total_after.saturating_sub(total_before);
    if total == 0 {
        return 0.0;
    }
    busy_after.saturating_sub(busy_before) as f64 / total as f64
}

/// The 1-minute load average.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_added_is_what_was_not_there_before() {
        let before = BpfObjects {
            programs: vec![1, 2, 5],
            links: vec![3],
        };
        let now = BpfObjects {
            programs: vec![2, 5, 9],
            links: vec![3, 4],
        };
        let added = now.added_since(&before);
        assert_eq!(added.programs, [9]);
        assert_eq!(added.links, [4]);
        assert!(before.added_since(&before).is_empty());
    }

    #[test]
    fn a_busy_share_is_a_share() {
        let share = busy_share(Duration::from_millis(30));
        assert!((0.0..=1.0).contains(&share), "{share}");
        assert!(load_average() >= 0.0);
    }
}
