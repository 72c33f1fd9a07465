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
