//! What a workload must count, worked out per step from what each call does: a deliberate
//! oracle, independent of the model under test. Nothing here calls `auditor_common`'s
//! model or predicates; the counts are worked by hand from the kernel source for the calls
//! each step makes, and fd allocation is replayed on a table of this module's own
//! ([`Table`], written from fs/file.c apart from `auditor_common::fd`). The probe and the
//! strace source are checked against numbers their shared model did not make.

use auditor_common::{
    Counts, SITE_COUNT, Site, Syscall,
    syscalls::{FdPrepare, PerSyscall},
};

/// The fd table as fs/file.c keeps it, for the oracle: which fds are open, where
/// `alloc_fd` starts searching (`next_fd`), how large the table is (`max_fds`).
#[derive(Clone, Debug)]
pub(super) struct Table {
    open: Vec<bool>,
    next_fd: u32,
    max_fds: u32,
    /// Other threads share the table (`files->count > 1`).
    pub(super) shared: bool,
    /// `sysctl fs.nr_open`: how far the table may grow.
    nr_open: u32,
}

impl Table {
    /// fds 0..count open, the search starting after them, `max_fds` slots.
    pub(super) fn with_open_fds(count: u32, max_fds: u32, nr_open: u32) -> Table {
        // A table holds its open fds: 64 slots, doubled as needed.
        let max_fds = max_fds.max(count.next_power_of_two()).max(64);
        let mut open = vec![false; max_fds as usize];
        open[..count as usize].fill(true);
        Table {
            open,
            next_fd: count,
            max_fds,
            shared: false,
            nr_open,
        }
    }

    fn is_open(&self, fd: u32) -> bool {
        self.open.get(fd as usize).copied().unwrap_or(false)
    }

    /// The lowest fd that is not open.
    pub(super) fn lowest_free(&self) -> u32 {
        (0..)
            .find(|&fd| !self.is_open(fd))
            .expect("some fd is free")
    }

    /// `alloc_fd(start, end)`, hand-worked: each pass of its `repeat` loop evaluates
    /// `fd < max_fds` (then `find_next_fd`'s free fd in start's 64-fd word), `fd >= end`,
    /// `fd >= max_fds` (the table then doubles past fd, and the loop repeats).
    pub(super) fn allocate(
        &mut self,
        expected: &mut Expected,
        start: u32,
        end: u64,
    ) -> Option<u32> {
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
                if !self.expand(expected, fd) {
                    return None;
                }
                continue;
            }
            if start <= self.next_fd {
                self.next_fd = fd + 1;
            }
            self.open[fd as usize] = true;
            return Some(fd);
        }
    }

    /// `expand_files` for `fd`, hand-worked, when `fd` is past the table: refused at or
    /// past fs.nr_open; else `alloc_fdtable` takes the smallest power of two above fd,
    /// cut to fs.nr_open rounded down to 64 when past it (and refuses if that is too
    /// small), and refuses a 2 GiB fd array. Whether the table grew.
    pub(super) fn expand(&mut self, expected: &mut Expected, fd: u32) -> bool {
        let past = fd >= self.nr_open;
        expected.all(Site::FdPastNrOpen, 1, past);
        if past {
            return false;
        }
        let mut size = (fd + 1).next_power_of_two();
        let rounded_past = size > self.nr_open;
        expected.all(Site::FdtableRoundedPastNrOpen, 1, rounded_past);
        if rounded_past {
            size = self.nr_open - self.nr_open % 64;
            if size <= fd {
                return false;
            }
        }
        let too_large = u64::from(size) * 8 > u64::from(i32::MAX as u32);
        expected.all(Site::FdtableTooLarge, 1, too_large);
        if too_large {
            return false;
        }
        self.max_fds = size;
        self.open.resize(self.max_fds as usize, false);
        true
    }

    /// The table's size.
    pub(super) fn max_fds(&self) -> u32 {
        self.max_fds
    }

    /// An ordinary allocation (open, socket, dup, ...): from 0, no limit reached.
    pub(super) fn allocate_lowest(&mut self, expected: &mut Expected) -> u32 {
        self.allocate(expected, 0, u64::MAX)
            .expect("room for an fd")
    }

    /// close of an open fd: the search starts at it again if it is lower.
    pub(super) fn close(&mut self, fd: u32) {
        if self.is_open(fd) {
            self.open[fd as usize] = false;
            self.next_fd = self.next_fd.min(fd);
        }
    }

    /// The child's table after fork (or the caller's after unshare(CLONE_FILES) of a shared
    /// one): `dup_fd`, hand-worked, with the copy's tests counted in the caller's
    /// `expected`: the same open fds, the search from 0, its own table of
    /// the 64 fds `files_struct` embeds, or, when the open fds reach past them (up to the
    /// last one's 64-fd word), one `alloc_fdtable` makes as a growth does: the smallest
    /// power of two that holds them, cut to fs.nr_open rounded down to 64 when past it.
    pub(super) fn fork(&self, expected: &mut Expected) -> Table {
        let last_open = (0..self.max_fds).rev().find(|&fd| self.is_open(fd));
        let slots = last_open.map_or(64, |fd| (fd / 64 + 1) * 64);
        let mut max_fds = 64;
        expected.all(Site::FdCopyOutgrowsEmbedded, 1, slots > 64);
        if slots > 64 {
            max_fds = slots.next_power_of_two();
            let rounded_past = max_fds > self.nr_open;
            expected.all(Site::FdtableRoundedPastNrOpen, 1, rounded_past);
            if rounded_past {
                max_fds = self.nr_open - self.nr_open % 64;
                assert!(max_fds >= slots, "no step copies a table past fs.nr_open");
            }
            let too_large = u64::from(max_fds) * 8 > u64::from(i32::MAX as u32);
            expected.all(Site::FdtableTooLarge, 1, too_large);
            // dup_fd's test is its loop's: made again on the new table, which holds them.
            expected.all(Site::FdCopyOutgrowsEmbedded, 1, false);
        }
        let mut open = self.open.clone();
        open.resize(max_fds as usize, false);
        Table {
            open,
            next_fd: 0,
            max_fds,
            shared: false,
            nr_open: self.nr_open,
        }
    }
}

/// How an allocation through `FD_PREPARE()` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prepared {
    /// Fd and file made: published.
    Published,
    /// No fd (EMFILE).
    FdFailed,
    /// An fd, then the file failed (a missing path, no connection to accept).
    FileFailed,
}

/// Expected counts of one process of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// Per site, in `Site` order.
    pub sites: [Counts; SITE_COUNT],
    /// Calls per followed syscall, in `Syscall` order.
    pub calls: PerSyscall<u64>,
}

impl Default for Expected {
    fn default() -> Expected {
        Expected {
            sites: [Counts::ZERO; SITE_COUNT],
            calls: PerSyscall::default(),
        }
    }
}

impl Expected {
    pub fn site(&self, site: Site) -> Counts {
        self.sites[site as usize]
    }

    pub fn calls(&self, syscall: Syscall) -> u64 {
        self.calls[syscall]
    }

    pub(super) fn add(&mut self, site: Site, taken: u64, not_taken: u64, unreadable: u64) {
        self.sites[site as usize].add(&Counts::new(taken, not_taken, unreadable));
    }

    /// `calls` evaluations of `site`, all taken when `taken` says so, else all not taken.
    pub(super) fn all(&mut self, site: Site, calls: u64, taken: bool) {
        if taken {
            self.add(site, calls, 0, 0);
        } else {
            self.add(site, 0, calls, 0);
        }
    }

    /// One allocation by `syscall` through `FD_PREPARE()` (or `FD_ADD()`) as
    /// include/linux/file.h (7.2) evaluates it, if the syscall allocates through them:
    /// the initialiser tests the fd, `class_fd_prepare_lock_err` tests the error field
    /// (zero), the fd, the file, NULL — returning at the first taken —, `FD_ADD` tests
    /// that both were made, and the destructor puts back what was not published.
    pub fn prepared(&mut self, syscall: Syscall, ended: Prepared) {
        let add = match syscall.info().prepares {
            FdPrepare::Direct => return,
            FdPrepare::Prepare => false,
            FdPrepare::Add => true,
        };
        let fd_made = ended != Prepared::FdFailed;
        self.all(Site::FdPrepareFdOk, 1, fd_made);
        self.all(Site::FdPrepareErrSet, 1, false);
        self.all(Site::FdPrepareFdFailed, 1, !fd_made);
        if fd_made {
            self.all(Site::FdPrepareFileFailed, 1, ended == Prepared::FileFailed);
            if ended == Prepared::Published {
                self.all(Site::FdPrepareFileNull, 1, false);
            }
        }
        if add {
            self.all(Site::FdAddOk, 1, ended == Prepared::Published);
        }
        self.all(
            Site::FdPrepareUnpublishedFd,
            1,
            ended == Prepared::FileFailed,
        );
        self.all(Site::FdPrepareUnpublishedFile, 1, false);
    }

    /// `count` fd lookups, on a table that other threads share when `shared`.
    pub(super) fn lookups(&mut self, count: u64, shared: bool) {
        self.all(Site::FgetTableShared, count, shared);
    }

    /// `count` reads of an open fd (not O_PATH): `fdget_pos()` — `__fget_light()` on the
    /// table, tests of the file found (its mode on an unshared table; that it is there,
    /// then its mode, on a shared one), then that a file was handed out — and the
    /// `fdput()` at the end, which drops a reference only a shared table's lookup took.
    pub fn reads(&mut self, count: u64, shared: bool) {
        self.reads_of(count, shared, Some(false));
    }

    /// [`Expected::reads`] of an fd whose file is O_PATH (`Some(true)`), not O_PATH
    /// (`Some(false)`) or which is not open (None): only a file that is not O_PATH is
    /// handed out (else -EBADF).
    pub(super) fn reads_of(&mut self, count: u64, shared: bool, path_only: Option<bool>) {
        self.calls[Syscall::Read] += count;
        self.lookups(count, shared);
        if shared {
            self.all(Site::FgetRcuNoFile, count, path_only.is_none());
            if let Some(path_only) = path_only {
                self.all(Site::FgetRcuPathOnly, count, path_only);
            }
        } else if let Some(path_only) = path_only {
            self.all(Site::FgetLightPathOnly, count, path_only);
        }
        let handed_out = path_only == Some(false);
        self.all(Site::FdgetPosFile, count, handed_out);
        self.all(Site::FdputCloned, count, shared && handed_out);
    }

    /// `count` closes of open fds that succeed (O_PATH ones when `path_only`): `filp_flush()`
    /// tests the file's mode, and close returns 0.
    pub fn closes(&mut self, count: u64, path_only: bool) {
        self.calls[Syscall::Close] += count;
        self.all(Site::CloseFdNotOpen, count, false);
        self.all(Site::CloseNotPathOnly, count, !path_only);
        self.all(Site::CloseOk, count, true);
    }

    /// `count` closes of an fd that is not open: -EBADF at the first test.
    pub fn bad_closes(&mut self, count: u64) {
        self.calls[Syscall::Close] += count;
        self.all(Site::CloseFdNotOpen, count, true);
    }

    /// `count` fcntl calls on open fds, O_PATH ones when `path_only`.
    pub(super) fn fcntls(&mut self, count: u64, path_only: bool) {
        self.calls[Syscall::Fcntl] += count;
        self.all(Site::FcntlPathOnly, count, path_only);
    }
}

/// fs.nr_open as Linux sets it by default.
pub const DEFAULT_NR_OPEN: u32 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Layout, expected, parse};

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
