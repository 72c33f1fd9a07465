//! What a workload must count, worked out per step from what each call does — by hand, not
//! with the predicates under test — so the probe is checked against numbers it did not make.

use auditor_common::{Counts, SITE_COUNT, SYSCALL_COUNT, Site, Syscall};

use super::{Layout, PollStep, Step};
use crate::readiness::{Recorder, fd::Task};

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

    /// Allocations replayed on the readiness core's model of the fd table: for fd
    /// allocation the model is the oracle.
    fn allocations(
        &mut self,
        task: &mut Task,
        calls: u32,
        allocate: impl Fn(&mut Task, &mut Recorder),
    ) {
        let mut recorder = Recorder::default();
        for _ in 0..calls {
            allocate(task, &mut recorder);
        }
        for site in [
            Site::FdBelowMax,
            Site::FdFastPath,
            Site::FdTableFull,
            Site::FdEmfile,
        ] {
            self.sites[site as usize].add(&recorder.counts(site));
        }
    }

    /// `count` fd lookups, on a table that other threads share when `shared`.
    fn lookups(&mut self, count: u64, shared: bool) {
        self.all(Site::FgetTableShared, count, shared);
    }

    fn step(&mut self, step: &Step, layout: &Layout, task: &mut Task) {
        let shared = task.shared;
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
                self.allocations(task, ok, |task, recorder| {
                    let fd = task.open(recorder).expect("room for an fd");
                    task.close(fd);
                });
            }
            Step::Open { calls } => {
                self.calls[Syscall::Openat as usize] += u64::from(calls);
                self.allocations(task, calls, |task, recorder| {
                    task.open(recorder).expect("room for an fd");
                });
            }
            Step::OpenMissing { calls } => {
                self.calls[Syscall::Openat as usize] += u64::from(calls);
                // The fd is allocated, then released when the path is not found.
                self.allocations(task, calls, |task, recorder| {
                    let fd = task.open(recorder).expect("room for an fd");
                    task.close(fd);
                });
            }
            Step::OpenOverLimit { calls } => {
                self.calls[Syscall::Openat as usize] += u64::from(calls);
                // The limit is the first free fd: the search finds it and it is past `end`.
                self.allocations(task, calls, |task, recorder| {
                    let end = u64::from(task.next_free());
                    let result = task.alloc_fd(recorder, 0, end);
                    assert!(result.is_err(), "EMFILE expected");
                });
            }
            Step::Pipe { calls } | Step::SocketPair { calls } => {
                let syscall = if matches!(step, Step::Pipe { .. }) {
                    Syscall::Pipe2
                } else {
                    Syscall::Socketpair
                };
                self.calls[syscall as usize] += u64::from(calls);
                // Two allocations a call, both kept.
                self.allocations(task, 2 * calls, |task, recorder| {
                    task.open(recorder).expect("room for an fd");
                });
            }
            Step::AcceptNone { calls } => {
                self.calls[Syscall::Socket as usize] += 1;
                self.calls[Syscall::Accept4 as usize] += u64::from(calls);
                self.allocations(task, 1, |task, recorder| {
                    task.open(recorder).expect("room for an fd");
                });
                // Each accept allocates the fd, finds no connection and releases it.
                self.allocations(task, calls, |task, recorder| {
                    let fd = task.open(recorder).expect("room for an fd");
                    task.close(fd);
                });
            }
            Step::Dup { calls } => {
                self.calls[Syscall::Dup as usize] += u64::from(calls);
                self.allocations(task, calls, |task, recorder| {
                    task.open(recorder).expect("room for an fd");
                });
            }
            Step::DupFd { calls, start } => {
                self.calls[Syscall::Fcntl as usize] += u64::from(calls);
                self.allocations(task, calls, |task, recorder| {
                    let end = task.nofile;
                    task.alloc_fd(recorder, start, end).expect("room for an fd");
                });
            }
            Step::CloseFd { fd } => {
                self.calls[Syscall::Close as usize] += 1;
                self.all(Site::CloseOk, 1, true);
                task.close(fd);
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
    expected_on_table(steps, Layout::of(steps).max_fds())
}

/// [`expected`], for a workload whose fd table has `max_fds` slots after set-up: a table
/// never shrinks, and a process starts with one sized like its parent's, so a workload
/// started by a process with many fds has a larger one than its own fds need.
pub fn expected_on_table(steps: &[Step], max_fds: u32) -> Vec<Expected> {
    let layout = Layout::of(steps);
    let mut processes = vec![Expected::default()];
    // The table after set-up: fds 0 up to the layout's last open, the search starting
    // right after. No test allocates near RLIMIT_NOFILE.
    let mut task = Task::with_open_fds(layout.not_open() as u32, u64::MAX);
    task.grow_to(max_fds);
    for step in steps {
        match step {
            // A forked child has a table of its own (next_fd back at 0).
            Step::Fork => {
                processes.push(Expected::default());
                task = task.fork();
            }
            // The steps after `thread` run in a second thread sharing the table.
            Step::Thread => task.shared = true,
            // The main thread is gone: the table is the remaining thread's alone.
            Step::LeaderExit => task.shared = false,
            step => processes
                .last_mut()
                .expect("never empty")
                .step(step, &layout, &mut task),
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
