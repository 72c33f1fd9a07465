//! What a workload must count, worked out per step from what each call does: a deliberate
//! oracle, independent of the model under test. Nothing here calls `auditor_common`'s
//! model or predicates; the counts are worked by hand from the kernel source for the calls
//! each step makes, and fd allocation is replayed on a table of this module's own
//! ([`Table`], written from fs/file.c apart from `auditor_common::fd`). The probe and the
//! strace source are checked against numbers their shared model did not make.

use auditor_common::{Counts, SITE_COUNT, SYSCALL_COUNT, Site, Syscall};

use super::{Layout, PollStep, Step};

/// The fd table as fs/file.c keeps it, for the oracle: which fds are open, where
/// `alloc_fd` starts searching (`next_fd`), how large the table is (`max_fds`).
#[derive(Clone, Debug)]
struct Table {
    open: Vec<bool>,
    next_fd: u32,
    max_fds: u32,
    /// Other threads share the table (`files->count > 1`).
    shared: bool,
}

impl Table {
    /// fds 0..count open, the search starting after them, `max_fds` slots.
    fn with_open_fds(count: u32, max_fds: u32) -> Table {
        // A table holds its open fds: 64 slots, doubled as needed.
        let max_fds = max_fds.max(count.next_power_of_two()).max(64);
        let mut open = vec![false; max_fds as usize];
        open[..count as usize].fill(true);
        Table {
            open,
            next_fd: count,
            max_fds,
            shared: false,
        }
    }

    fn is_open(&self, fd: u32) -> bool {
        self.open.get(fd as usize).copied().unwrap_or(false)
    }

    /// The lowest fd that is not open.
    fn lowest_free(&self) -> u32 {
        (0..)
            .find(|&fd| !self.is_open(fd))
            .expect("some fd is free")
    }

    /// `alloc_fd(start, end)`, hand-worked: each pass of its `repeat` loop evaluates
    /// `fd < max_fds` (then `find_next_fd`'s free fd in start's 64-fd word), `fd >= end`,
    /// `fd >= max_fds` (the table then doubles past fd, and the loop repeats).
    fn allocate(&mut self, expected: &mut Expected, start: u32, end: u64) -> Option<u32> {
        loop {
            let first = start.max(self.next_fd);
            let below = first < self.max_fds;
            expected.all(Site::FdBelowMax, 1, below);
            let fd = if below {
                let word_end = (first / 64 + 1) * 64;
                let in_word = (first..word_end).find(|&fd| !self.is_open(fd));
                expected.all(Site::FdFastPath, 1, in_word.is_some());
                in_word.unwrap_or_else(|| {
                    (word_end..self.max_fds)
                        .find(|&fd| !self.is_open(fd))
                        .unwrap_or(self.max_fds)
                })
            } else {
                first
            };
            let over = u64::from(fd) >= end;
            expected.all(Site::FdEmfile, 1, over);
            if over {
                return None;
            }
            let full = fd >= self.max_fds;
            expected.all(Site::FdTableFull, 1, full);
            if full {
                // 64 -> 128 -> 256 ...: the smallest power of two above fd.
                self.max_fds = (fd + 1).next_power_of_two();
                self.open.resize(self.max_fds as usize, false);
                continue;
            }
            if start <= self.next_fd {
                self.next_fd = fd + 1;
            }
            self.open[fd as usize] = true;
            return Some(fd);
        }
    }

    /// An ordinary allocation (open, socket, dup, ...): from 0, no limit reached.
    fn allocate_lowest(&mut self, expected: &mut Expected) -> u32 {
        self.allocate(expected, 0, u64::MAX)
            .expect("room for an fd")
    }

    /// close of an open fd: the search starts at it again if it is lower.
    fn close(&mut self, fd: u32) {
        if self.is_open(fd) {
            self.open[fd as usize] = false;
            self.next_fd = self.next_fd.min(fd);
        }
    }

    /// The child's table after fork: the same open fds, the search from 0, its own.
    fn fork(&self) -> Table {
        Table {
            next_fd: 0,
            shared: false,
            ..self.clone()
        }
    }
}

/// Expected counts of one process of a workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// Per site, in `Site` order.
    pub sites: [Counts; SITE_COUNT],
    /// Calls per followed syscall, in `Syscall` order.
    pub calls: [u64; SYSCALL_COUNT],
}

impl Expected {
    pub fn site(&self, site: Site) -> Counts {
        self.sites[site as usize]
    }

    pub fn calls(&self, syscall: Syscall) -> u64 {
        self.calls[syscall as usize]
    }

    fn add(&mut self, site: Site, taken: u64, not_taken: u64, unreadable: u64) {
        self.sites[site as usize].add(&Counts::new(taken, not_taken, unreadable));
    }

    /// `calls` evaluations of `site`, all taken when `taken` says so, else all not taken.
    fn all(&mut self, site: Site, calls: u64, taken: bool) {
        if taken {
            self.add(site, calls, 0, 0);
        } else {
            self.add(site, 0, calls, 0);
        }
    }

    /// `core_sys_select` cuts n to max_fds, and puts the bitmaps of more than 320 fds (6
    /// bitmaps of more than 5 longs) on the heap.
    fn clamp(&mut self, calls: u64, n: i32, layout: &Layout) {
        let max_fds = i64::from(layout.max_fds());
        self.all(Site::SelectNClamped, calls, i64::from(n) > max_fds);
        self.all(
            Site::SelectBitmapsOnHeap,
            calls,
            i64::from(n).min(max_fds) > 320,
        );
    }

    /// `calls` dup2 calls, `same` of them with newfd == oldfd (returned at once), the
    /// others going on to ksys_dup3, which finds two fds.
    fn dup2s(&mut self, calls: u32, same: u32) {
        let (calls, same) = (u64::from(calls), u64::from(same));
        self.calls[Syscall::Dup2 as usize] += calls;
        self.add(Site::Dup2SameFd, same, calls - same, 0);
        self.add(Site::Dup3SameFd, 0, calls - same, 0);
    }

    /// `count` fd lookups, on a table that other threads share when `shared`.
    fn lookups(&mut self, count: u64, shared: bool) {
        self.all(Site::FgetTableShared, count, shared);
    }

    fn step(&mut self, step: &Step, layout: &Layout, table: &mut Table) {
        let shared = table.shared;
        match *step {
            Step::Select {
                syscall,
                calls,
                n,
                timeout_ms,
                fds,
            } => {
                let calls = u64::from(calls);
                self.calls[syscall as usize] += calls;
                // n < 0 fails at once; otherwise every fd is open and the call returns.
                self.all(Site::SelectNNegative, calls, n < 0);
                if n >= 0 {
                    self.clamp(calls, n, layout);
                    self.all(Site::SelectFdNotOpen, calls, false);
                    self.all(Site::SelectZeroTimeout, calls, timeout_ms == 0);
                    // The set holds fds 3..hi, contiguous from word 0: no empty word.
                    let used_n = i64::from(n).min(i64::from(layout.max_fds()));
                    let hi = used_n.min(i64::from(fds)).max(3);
                    let set = (hi - 3) as u64;
                    let words = if set == 0 {
                        0
                    } else {
                        (hi as u64 - 1) / 64 + 1
                    };
                    self.add(Site::SelectWordEmpty, 0, words * calls, 0);
                    self.lookups(set * calls, shared);
                }
            }
            Step::SelectSparse { calls, n } => {
                let calls = u64::from(calls);
                self.calls[Syscall::Select as usize] += calls;
                self.all(Site::SelectNNegative, calls, false);
                self.clamp(calls, n, layout);
                self.all(Site::SelectFdNotOpen, calls, false);
                self.all(Site::SelectZeroTimeout, calls, true);
                // Only fd n - 1: the words before its own are empty.
                let before = (n as u64 - 1) / 64;
                self.add(Site::SelectWordEmpty, before * calls, calls, 0);
                self.lookups(calls, shared);
            }
            Step::SelectFault { calls, n } => {
                let calls = u64::from(calls);
                self.calls[Syscall::Select as usize] += calls;
                // EFAULT from the timeout copy: whether core_sys_select ran is unknown.
                self.add(Site::SelectNNegative, 0, 0, calls);
                if n >= 0 {
                    for site in [
                        Site::SelectNClamped,
                        Site::SelectBitmapsOnHeap,
                        Site::SelectFdNotOpen,
                        Site::SelectZeroTimeout,
                    ] {
                        self.add(site, 0, 0, calls);
                    }
                }
            }
            Step::SelectBadFd { calls } => {
                let calls = u64::from(calls);
                self.calls[Syscall::Select as usize] += calls;
                self.all(Site::SelectNNegative, calls, false);
                self.clamp(calls, layout.not_open() + 1, layout);
                self.all(Site::SelectFdNotOpen, calls, true);
            }
            Step::Poll(PollStep {
                syscall,
                calls,
                nfds,
                negative,
                not_open,
                timeout_ms,
            }) => {
                let calls = u64::from(calls);
                self.calls[syscall as usize] += calls;
                self.all(Site::PollNfdsOverRlimit, calls, false);
                if nfds > 0 {
                    self.all(Site::PollEntriesOnHeap, calls, nfds > 30);
                }
                self.all(Site::PollZeroTimeout, calls, timeout_ms == 0);
                let (nfds, negative, not_open) =
                    (u64::from(nfds), u64::from(negative), u64::from(not_open));
                self.add(
                    Site::PollFdNegative,
                    negative * calls,
                    (nfds - negative) * calls,
                    0,
                );
                let looked_up = nfds - negative;
                self.add(
                    Site::PollFdNotOpen,
                    not_open * calls,
                    (looked_up - not_open) * calls,
                    0,
                );
                self.lookups(looked_up * calls, shared);
            }
            Step::PollFault { calls, nfds } => {
                let calls = u64::from(calls);
                self.calls[Syscall::Poll as usize] += calls;
                // EFAULT: the limit check passed; whether the scan ran is unknown.
                self.all(Site::PollNfdsOverRlimit, calls, false);
                if nfds > 0 {
                    self.add(Site::PollEntriesOnHeap, 0, 0, calls);
                }
                self.add(Site::PollZeroTimeout, 0, 0, calls);
                let entries = u64::from(nfds) * calls;
                self.add(Site::PollFdNegative, 0, 0, entries);
                self.add(Site::PollFdNotOpen, 0, 0, entries);
                self.add(Site::FgetTableShared, 0, 0, entries);
            }
            Step::PollOverLimit { calls } => {
                let calls = u64::from(calls);
                self.calls[Syscall::Poll as usize] += calls;
                self.all(Site::PollNfdsOverRlimit, calls, true);
            }
            Step::Epoll {
                syscall,
                calls,
                maxevents,
                timeout_ms,
            } => {
                let calls = u64::from(calls);
                self.calls[syscall as usize] += calls;
                self.all(Site::EpollBadArgs, calls, maxevents <= 0);
                if maxevents > 0 {
                    self.all(Site::EpollZeroTimeout, calls, timeout_ms == 0);
                }
            }
            Step::EpollBadFd { calls } => {
                let calls = u64::from(calls);
                self.calls[Syscall::EpollWait as usize] += calls;
                self.all(Site::EpollBadArgs, calls, true);
            }
            Step::Close { ok, bad } => {
                self.calls[Syscall::Close as usize] += u64::from(ok) + u64::from(bad);
                self.calls[Syscall::Openat as usize] += u64::from(ok);
                // A close of fd -1 fails with EBADF before the branch.
                self.all(Site::CloseOk, u64::from(ok), true);
                // Each ok close is of a file opened for it.
                for _ in 0..ok {
                    let fd = table.allocate_lowest(self);
                    table.close(fd);
                }
            }
            Step::Open { calls } => {
                self.calls[Syscall::Openat as usize] += u64::from(calls);
                for _ in 0..calls {
                    table.allocate_lowest(self);
                }
            }
            Step::OpenMissing { calls } => {
                self.calls[Syscall::Openat as usize] += u64::from(calls);
                // The fd is allocated, then released when the path is not found.
                for _ in 0..calls {
                    let fd = table.allocate_lowest(self);
                    table.close(fd);
                }
            }
            Step::OpenOverLimit { calls } => {
                self.calls[Syscall::Openat as usize] += u64::from(calls);
                // The limit is the first free fd: the search finds it and it is past `end`.
                for _ in 0..calls {
                    let end = u64::from(table.lowest_free());
                    assert_eq!(table.allocate(self, 0, end), None, "EMFILE expected");
                }
            }
            Step::Pipe { calls } | Step::SocketPair { calls } => {
                let syscall = if matches!(step, Step::Pipe { .. }) {
                    Syscall::Pipe2
                } else {
                    Syscall::Socketpair
                };
                self.calls[syscall as usize] += u64::from(calls);
                // Two allocations a call, both kept.
                for _ in 0..2 * calls {
                    table.allocate_lowest(self);
                }
            }
            Step::AcceptNone { calls } => {
                self.calls[Syscall::Socket as usize] += 1;
                self.calls[Syscall::Accept4 as usize] += u64::from(calls);
                table.allocate_lowest(self);
                // Each accept allocates the fd, finds no connection and releases it.
                for _ in 0..calls {
                    let fd = table.allocate_lowest(self);
                    table.close(fd);
                }
            }
            Step::Dup { calls } => {
                self.calls[Syscall::Dup as usize] += u64::from(calls);
                for _ in 0..calls {
                    table.allocate_lowest(self);
                }
            }
            Step::DupFd { calls, start } => {
                self.calls[Syscall::Fcntl as usize] += u64::from(calls);
                for _ in 0..calls {
                    table
                        .allocate(self, start, u64::MAX)
                        .expect("room for an fd");
                }
            }
            Step::CloseFd { fd } => {
                self.calls[Syscall::Close as usize] += 1;
                self.all(Site::CloseOk, 1, true);
                table.close(fd);
            }
            Step::Dup2 { calls, same } => self.dup2s(calls, same),
            Step::Dup3 {
                calls,
                same,
                bad_flags,
            } => {
                self.calls[Syscall::Dup3 as usize] += u64::from(calls);
                // The flags are checked before the fds (and refuse the call).
                let reached = u64::from(calls - bad_flags);
                self.add(
                    Site::Dup3SameFd,
                    u64::from(same),
                    reached - u64::from(same),
                    0,
                );
            }
            Step::Wait => {
                // One read of the line on stdin.
                self.calls[Syscall::Read as usize] += 1;
                self.lookups(1, shared);
            }
            Step::Fork
            | Step::Thread
            | Step::LeaderExit
            | Step::Name { .. }
            | Step::Sleep { .. } => {}
        }
    }
}

/// What each process of the workload must count: index 0 is the process started, index i
/// the child created by the i-th `fork`.
pub fn expected(steps: &[Step]) -> Vec<Expected> {
    let layout = Layout::of(steps);
    let mut processes = expected_on_table(steps, layout.max_fds());
    // The set-up after exec places the layout's fds with `highest_pool_fd` dup2 calls,
    // each of two fds (see `run::Fds::open`).
    processes[0].dup2s(layout.highest_pool_fd as u32, 0);
    processes
}

/// [`expected`], for a workload whose fd table has `max_fds` slots after set-up: a table
/// never shrinks, and a process starts with one sized like its parent's, so a workload
/// started by a process with many fds has a larger one than its own fds need.
pub fn expected_on_table(steps: &[Step], max_fds: u32) -> Vec<Expected> {
    let layout = Layout::of(steps);
    let mut processes = vec![Expected::default()];
    // The table after set-up: fds 0 up to the layout's last open, the search starting
    // right after. No test allocates near RLIMIT_NOFILE.
    let mut table = Table::with_open_fds(layout.not_open() as u32, max_fds);
    for step in steps {
        match step {
            // A forked child has a table of its own (next_fd back at 0).
            Step::Fork => {
                processes.push(Expected::default());
                table = table.fork();
            }
            // The steps after `thread` run in a second thread sharing the table.
            Step::Thread => table.shared = true,
            // The main thread is gone: the table is the remaining thread's alone.
            Step::LeaderExit => table.shared = false,
            step => processes
                .last_mut()
                .expect("never empty")
                .step(step, &layout, &mut table),
        }
    }
    processes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::parse;

    #[test]
    fn default_expectations() {
        let expected = expected(&parse("default").unwrap());
        assert_eq!(expected.len(), 1);
        let select = expected[0].site(Site::SelectNNegative);
        assert_eq!((select.taken, select.not_taken), (20, 2000));
        let poll = expected[0].site(Site::PollFdNegative);
        assert_eq!((poll.taken, poll.not_taken), (6400, 2_100 * 1024 - 6400));
        assert_eq!(
            expected[0].site(Site::PollZeroTimeout),
            Counts::new(2100, 0, 0)
        );
    }

    #[test]
    fn fork_splits_processes() {
        let expected = expected(&parse("select:3:-1 fork poll:2:10:4").unwrap());
        assert_eq!(expected.len(), 2);
        assert_eq!(expected[0].site(Site::SelectNNegative).taken, 3);
        assert_eq!(expected[0].site(Site::PollFdNegative).total(), 0);
        assert_eq!(
            expected[1].site(Site::PollFdNegative),
            Counts::new(8, 12, 0)
        );
        assert_eq!(expected[0].calls(Syscall::Select), 3);
        assert_eq!(expected[1].calls(Syscall::Poll), 2);
        assert_eq!(expected[1].calls(Syscall::Select), 0);
    }

    #[test]
    fn threads_share_the_table() {
        let expected = expected(&parse("poll:1:4:1 thread poll:2:4:0 wait").unwrap());
        assert_eq!(
            expected[0].site(Site::FgetTableShared),
            Counts::new(9, 3, 0)
        );
        assert_eq!(expected[0].calls(Syscall::Read), 1);
    }

    #[test]
    fn the_layout_follows_the_steps() {
        let layout = Layout::of(&parse("select:1:1000 epoll_wait:1:1").unwrap());
        assert_eq!(
            (layout.highest_fd(), layout.not_open(), layout.max_fds()),
            (1002, 1003, 1024)
        );
        let layout = Layout::of(&parse("poll:1:8:0").unwrap());
        assert_eq!((layout.highest_fd(), layout.max_fds()), (64, 128));
    }

    #[test]
    fn not_open_entries_are_the_non_negative_ones() {
        let expected = expected(&parse("ppoll:2:40:5:3:-1").unwrap());
        assert_eq!(expected[0].site(Site::PollFdNotOpen), Counts::new(6, 64, 0));
        assert_eq!(
            expected[0].site(Site::PollEntriesOnHeap),
            Counts::new(2, 0, 0)
        );
        assert_eq!(
            expected[0].site(Site::PollZeroTimeout),
            Counts::new(0, 2, 0)
        );
    }
}
