//! fd allocation and lookup (fs/file.c): the branches of `alloc_fd`, `find_next_fd` and
//! `__fget_light`, as predicates over the task's fd table, and the walk `alloc_fd` makes
//! through them, from the table an allocation starts with and the fd it returned. The
//! predicates and the task state they read are here; the model's walks are by what they
//! follow: a lookup of one fd ([`lookup`]), the table's growth and copy ([`growth`]), an
//! allocation and how `FD_PREPARE()` ends it ([`allocation`]).

mod allocation;
mod growth;
mod lookup;

pub use allocation::*;
pub use growth::*;
pub use lookup::*;

/// Fds per word of the open-fd bitmap.
pub const BITS_PER_LONG: u32 = 64;

/// `alloc_fd`: `if (likely(fd < fdt->max_fds))` — search the table (else it must grow).
pub const fn below_max(fd: u32, max_fds: u32) -> bool {
    fd < max_fds
}

/// `find_next_fd`: a free fd exists from `start` to the end of start's 64-fd word
/// (`open_word` is that word of `open_fds`).
pub const fn fast_path(open_word: u64, start: u32) -> bool {
    let free_from_start = !open_word >> (start % BITS_PER_LONG);
    free_from_start != 0
}

/// `alloc_fd`: `if (unlikely(fd >= fdt->max_fds))` — the table grows (`expand_files`).
pub const fn table_full(fd: u32, max_fds: u32) -> bool {
    fd >= max_fds
}

/// `alloc_fd`: `if (unlikely(fd >= end))` — EMFILE (`end` is usually RLIMIT_NOFILE).
pub const fn emfile(fd: u32, end: u64) -> bool {
    fd as u64 >= end
}

/// `__fget_light`: the fd table is shared (`files->count > 1`), so the lookup takes a
/// reference (the slow arm; the fast arm is hinted likely).
pub const fn table_shared(files_count: u32) -> bool {
    files_count > 1
}

/// include/linux/fs.h: a file opened with O_PATH, which `fdget()` does not hand out.
pub const FMODE_PATH: u32 = 1 << 14;

/// What an fd names in the task's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdFile {
    NotOpen,
    Open {
        /// Opened with O_PATH (`f_mode & FMODE_PATH`).
        path_only: bool,
    },
}

impl FdFile {
    /// What a probe's record holds of an `Option<FdFile>` (None: unreadable): a plain u32,
    /// every byte written, where an `Option`'s payload is left unwritten when None (a read
    /// older verifiers refuse).
    pub const fn to_u32(file: Option<FdFile>) -> u32 {
        match file {
            None => 0,
            Some(FdFile::NotOpen) => 1,
            Some(FdFile::Open { path_only: false }) => 2,
            Some(FdFile::Open { path_only: true }) => 3,
        }
    }

    /// The inverse of [`FdFile::to_u32`].
    pub const fn from_u32(value: u32) -> Option<FdFile> {
        match value {
            1 => Some(FdFile::NotOpen),
            2 => Some(FdFile::Open { path_only: false }),
            3 => Some(FdFile::Open { path_only: true }),
            _ => None,
        }
    }
}

/// What the model may ask of the calling task's state, when the observer can read it.
pub trait TaskState {
    /// `files->count > 1`: other tasks share the fd table (None: unknown).
    fn table_shared(&self) -> Option<bool>;
    /// What `fd` names in the table (None: unknown).
    fn fd_file(&self, fd: u32) -> Option<FdFile>;
}

/// An observer that reads no task state (a log).
pub struct Unseen;

impl TaskState for Unseen {
    fn table_shared(&self) -> Option<bool> {
        None
    }

    fn fd_file(&self, _: u32) -> Option<FdFile> {
        None
    }
}

pub use crate::syscalls::Lookup;

#[cfg(test)]
mod tests {
    #[test]
    fn a_file_survives_its_u32() {
        use super::FdFile;
        for file in [
            None,
            Some(FdFile::NotOpen),
            Some(FdFile::Open { path_only: false }),
            Some(FdFile::Open { path_only: true }),
        ] {
            assert_eq!(FdFile::from_u32(FdFile::to_u32(file)), file);
        }
    }

    use super::{allocation::word_before, *};
    use crate::{
        errno,
        syscalls::{Allocator, FdPrepare, PairAllocator},
    };

    #[test]
    fn table_bounds() {
        for max_fds in [64, 128, 256] {
            assert!(below_max(max_fds - 1, max_fds));
            assert!(!below_max(max_fds, max_fds));
            assert!(table_full(max_fds, max_fds));
            assert!(!table_full(max_fds - 1, max_fds));
        }
        assert!(emfile(1024, 1024));
        assert!(!emfile(1023, 1024));
        assert!(!table_shared(1));
        assert!(table_shared(2));
    }

    use crate::{Counts, Site, catalogue::Counters};

    /// The four sites of allocations, as the model recorded them.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct AllocCounts {
        below_max: Counts,
        fast_path: Counts,
        table_full: Counts,
        emfile: Counts,
    }

    impl AllocCounts {
        fn of(counters: &Counters) -> AllocCounts {
            AllocCounts {
                below_max: counters.get(Site::FdBelowMax),
                fast_path: counters.get(Site::FdFastPath),
                table_full: counters.get(Site::FdTableFull),
                emfile: counters.get(Site::FdEmfile),
            }
        }
    }

    fn alloc_evaluations(table: &AllocStart, outcome: AllocOutcome) -> AllocCounts {
        let mut counters = Counters::default();
        allocation(&mut counters, Some(table), outcome);
        AllocCounts::of(&counters)
    }

    fn pair_evaluations(table: &AllocStart, first: u32, second: u32) -> AllocCounts {
        let mut counters = Counters::default();
        pair(&mut counters, Some(table), Some([first, second]));
        AllocCounts::of(&counters)
    }

    fn start(next_fd: u32, max_fds: u32, word: u64) -> AllocStart {
        AllocStart {
            start: 0,
            next_fd,
            max_fds,
            nr_open: 1 << 20,
            word,
            end: 1024,
        }
    }

    #[test]
    fn allocation_in_the_word() {
        let counts = alloc_evaluations(
            &start(3, 64, 0b111),
            AllocOutcome::Reached(AllocResult::Fd(3)),
        );
        assert_eq!(counts.below_max, Counts::new(1, 0, 0));
        assert_eq!(counts.fast_path, Counts::new(1, 0, 0));
        assert_eq!(counts.emfile, Counts::new(0, 1, 0));
        assert_eq!(counts.table_full, Counts::new(0, 1, 0));
    }

    #[test]
    fn allocation_that_grows_the_table() {
        // next_fd 64 on a 64-fd table: no search, table full, grow to 128, repeat.
        let counts = alloc_evaluations(
            &start(64, 64, 0),
            AllocOutcome::Reached(AllocResult::Fd(64)),
        );
        assert_eq!(counts.below_max, Counts::new(1, 1, 0));
        assert_eq!(counts.fast_path, Counts::new(1, 0, 0));
        assert_eq!(counts.emfile, Counts::new(0, 2, 0));
        assert_eq!(counts.table_full, Counts::new(1, 1, 0));
        // Every fd from 4 to 63 open: the slow search finds nothing below 64, grows.
        let counts = alloc_evaluations(
            &start(4, 64, u64::MAX),
            AllocOutcome::Reached(AllocResult::Fd(64)),
        );
        assert_eq!(counts.below_max, Counts::new(2, 0, 0));
        assert_eq!(counts.fast_path, Counts::new(0, 2, 0));
        assert_eq!(counts.table_full, Counts::new(1, 1, 0));
    }

    #[test]
    fn allocation_outcomes() {
        let counts = alloc_evaluations(
            &start(3, 64, 0b111),
            AllocOutcome::Reached(AllocResult::Unknown),
        );
        // The fast path says which fd it found even when the syscall failed later.
        assert_eq!(counts.emfile, Counts::new(0, 1, 0));
        let counts = alloc_evaluations(
            &start(4, 64, u64::MAX),
            AllocOutcome::Reached(AllocResult::Unknown),
        );
        assert_eq!(counts.emfile, Counts::new(0, 0, 1));
        let mut limited = start(3, 64, 0b111);
        limited.end = 3;
        let counts = alloc_evaluations(&limited, AllocOutcome::Reached(AllocResult::Emfile));
        assert_eq!(counts.emfile, Counts::new(1, 0, 0));
        assert_eq!(counts.table_full, Counts::ZERO);
        assert_eq!(
            alloc_evaluations(&limited, AllocOutcome::NotReached),
            AllocCounts::default()
        );
        assert_eq!(
            alloc_evaluations(&limited, AllocOutcome::Maybe).below_max,
            Counts::new(0, 0, 1)
        );
        let mut counters = Counters::default();
        allocation(
            &mut counters,
            None,
            AllocOutcome::Reached(AllocResult::Fd(3)),
        );
        assert_eq!(AllocCounts::of(&counters).emfile, Counts::new(0, 0, 1));
        let mut counters = Counters::default();
        pair(&mut counters, Some(&limited), None);
        assert_eq!(AllocCounts::of(&counters).fast_path, Counts::new(0, 0, 2));
    }

    #[test]
    fn pairs_of_allocations() {
        // fds 0-2 open, next_fd 3: pipe gets 3 and 4, both in word 0.
        let counts = pair_evaluations(&start(3, 64, 0b111), 3, 4);
        assert_eq!(counts.fast_path, Counts::new(2, 0, 0));
        assert_eq!(counts.table_full, Counts::new(0, 2, 0));
        // The first takes fd 63, the last of word 0: the second starts at 64 = max_fds,
        // so the table grows (and the second pass searches it).
        let counts = pair_evaluations(&start(63, 64, !(1u64 << 63)), 63, 64);
        assert_eq!(counts.below_max, Counts::new(2, 1, 0));
        assert_eq!(counts.table_full, Counts::new(1, 2, 0));
        assert_eq!(word_before(3, 5), 0b11000);
        assert_eq!(word_before(62, 70), !((1u64 << 62) - 1));
        assert_eq!(PairAllocator::Pipe.fds_written(0, false), Some(true));
        assert_eq!(
            PairAllocator::Pipe.fds_written(-errno::EINVAL, false),
            Some(false)
        );
        assert_eq!(PairAllocator::Pipe.fds_written(-errno::EMFILE, false), None);
        assert_eq!(
            PairAllocator::SocketPair.fds_written(-errno::EAFNOSUPPORT, false),
            Some(true)
        );
        // socketpair(AF_UNIX, 12, 0): both fds, then the type refused (EINVAL); a flag
        // past SOCK_CLOEXEC and SOCK_NONBLOCK refuses it before either.
        assert_eq!(
            PairAllocator::SocketPair.fds_written(-errno::EINVAL, socketpair_flags_refused(12)),
            Some(true)
        );
        assert!(!socketpair_flags_refused(1 | 0o2_000_000 | 0o4000));
        assert!(socketpair_flags_refused(1 | 0x100));
        assert_eq!(
            PairAllocator::SocketPair.fds_written(-errno::EINVAL, true),
            Some(false)
        );
    }

    #[test]
    fn which_errors_come_before_the_allocation() {
        use AllocOutcome::*;
        let e = |n: i64| -n;
        assert_eq!(
            Allocator::Open.outcome(5, false),
            Reached(AllocResult::Fd(5))
        );
        assert_eq!(
            Allocator::Open.outcome(e(errno::ENOENT), false),
            Reached(AllocResult::Unknown)
        );
        assert_eq!(Allocator::Open.outcome(e(errno::ENOENT), true), NotReached);
        // A name that could not be read: only ENOENT is in doubt (not EACCES, 13).
        assert_eq!(
            Allocator::Open.outcome_if_refused(e(errno::ENOENT), None),
            Maybe
        );
        assert_eq!(
            Allocator::Open.outcome_if_refused(e(13), None),
            Reached(AllocResult::Unknown)
        );
        assert_eq!(
            Allocator::Open.outcome_if_refused(3, None),
            Reached(AllocResult::Fd(3))
        );
        assert_eq!(
            Allocator::Open.outcome_if_refused(e(errno::ENOENT), Some(true)),
            NotReached
        );
        assert_eq!(Allocator::Open.outcome(e(errno::EINVAL), false), Maybe);
        assert_eq!(
            Allocator::Open.outcome(e(errno::EMFILE), false),
            Reached(AllocResult::Emfile)
        );
        assert_eq!(Allocator::Dup.outcome(e(errno::EBADF), false), NotReached);
        assert_eq!(
            Allocator::DupFd.outcome(e(errno::EINVAL), false),
            NotReached
        );
        assert_eq!(Allocator::Anon.outcome(e(errno::ENOMEM), false), Maybe);
        assert_eq!(
            Allocator::Socket.outcome(e(errno::EAFNOSUPPORT), false),
            NotReached
        );
        assert_eq!(
            Allocator::Accept.outcome(e(11), false),
            Reached(AllocResult::Unknown)
        );
        assert_eq!(
            Allocator::Accept.outcome(e(errno::EBADF), false),
            NotReached
        );
        // EINVAL: accept4's flags refused first, or (after the fd) no listening socket.
        assert_eq!(
            Allocator::Accept.outcome(e(errno::EINVAL), accept_flags_refused(0x100)),
            NotReached
        );
        assert_eq!(
            Allocator::Accept.outcome(e(errno::EINVAL), accept_flags_refused(0o4000)),
            Reached(AllocResult::Unknown)
        );
        for a in [
            Allocator::Open,
            Allocator::Dup,
            Allocator::DupFd,
            Allocator::Anon,
            Allocator::Socket,
            Allocator::Accept,
            Allocator::Group,
            Allocator::Listener,
        ] {
            assert_eq!(Allocator::from_u32(a as u32), a);
        }
        // Refused before the allocation: timerfd's alarm clock, pidfd_open's pid.
        assert_eq!(Allocator::Anon.outcome(e(errno::EPERM), false), NotReached);
        assert_eq!(Allocator::Anon.outcome(e(errno::ESRCH), false), NotReached);
        // inotify's per-user limit is EMFILE too: unknown whether it allocated.
        assert_eq!(Allocator::Group.outcome(e(errno::EMFILE), false), Maybe);
        assert_eq!(
            Allocator::Group.outcome(e(errno::EINVAL), false),
            NotReached
        );
        // seccomp's listener: refused by its flags, filter or rights first; a second
        // listener and TSYNC's thread after the fd; ENOMEM either side.
        for before in [errno::EINVAL, errno::EFAULT, errno::EACCES] {
            assert_eq!(Allocator::Listener.outcome(e(before), false), NotReached);
        }
        for after in [errno::EBUSY, errno::ESRCH] {
            assert_eq!(
                Allocator::Listener.outcome(e(after), false),
                Reached(AllocResult::Unknown)
            );
        }
        assert_eq!(Allocator::Listener.outcome(e(errno::ENOMEM), false), Maybe);
    }

    #[test]
    fn growth_past_fs_nr_open() {
        let grown = |fd, nr_open| {
            let mut counters = Counters::default();
            let size = grow(&mut counters, fd, nr_open);
            let counts = [
                Site::FdPastNrOpen,
                Site::FdtableRoundedPastNrOpen,
                Site::FdtableTooLarge,
            ]
            .map(|site| counters.get(site));
            (size, counts)
        };
        let (t, n, z) = (Counts::new(1, 0, 0), Counts::new(0, 1, 0), Counts::ZERO);
        assert_eq!(grown(64, 1 << 20), (Some(128), [n, n, n]));
        assert_eq!(grown(1 << 20, 1 << 20), (None, [t, z, z]));
        // 1000 is no power of two: a table full at 512 grows to 960, not 1024.
        assert_eq!(grown(512, 1000), (Some(960), [n, t, n]));
        // ... and one full at 970 cannot grow at all.
        assert_eq!(grown(970, 1000), (None, [n, t, z]));
        // A table of 2^28 pointers is 2 GiB.
        assert_eq!(grown(1 << 28, 1 << 30), (None, [n, n, t]));
        assert_eq!(grown(1 << 27, 1 << 30), (None, [n, n, t]));
        assert_eq!(grown((1 << 27) - 1, 1 << 30), (Some(1 << 27), [n, n, n]));
    }

    #[test]
    fn a_copy_of_the_table_allocates_one_past_64_fds() {
        assert_eq!(copied_size(None), 64);
        assert_eq!(copied_size(Some(2)), 64);
        assert_eq!(copied_size(Some(63)), 64);
        assert_eq!(copied_size(Some(64)), 128);
        assert_eq!(copied_size(Some(200)), 256);
        let copied = |open_files, nr_open, outcome| {
            let mut counters = Counters::default();
            copy_table(&mut counters, open_files, nr_open, outcome);
            [
                Site::FdCopyOutgrowsEmbedded,
                Site::FdPastNrOpen,
                Site::FdtableRoundedPastNrOpen,
                Site::FdtableTooLarge,
            ]
            .map(|site| counters.get(site))
        };
        let (t, n, u, z) = (
            Counts::new(1, 0, 0),
            Counts::new(0, 1, 0),
            Counts::new(0, 0, 1),
            Counts::ZERO,
        );
        use CopyOutcome::*;
        // The embedded table holds 64: nothing is allocated.
        assert_eq!(copied(Some(64), 1 << 20, Copied), [n, z, z, z]);
        assert_eq!(copied(Some(64), 1 << 20, Maybe), [u, z, z, z]);
        // expand_files is not on this path: its test is never evaluated.
        // A table of its own, then the loop's test again (not taken).
        let tn = Counts::new(1, 1, 0);
        assert_eq!(copied(Some(192), 1 << 20, Copied), [tn, z, n, n]);
        // 1024 slots, rounded down to fs.nr_open's 960.
        assert_eq!(copied(Some(576), 1000, Copied), [tn, z, t, n]);
        assert_eq!(copied(Some(192), 1 << 20, Maybe), [u, z, u, u]);
        assert_eq!(copied(None, 1 << 20, Copied), [u, z, u, u]);
    }

    #[test]
    fn fd_prepare_follows_the_allocation_and_the_file() {
        use AllocOutcome::*;
        let sites = [
            Site::FdPrepareFdOk,
            Site::FdPrepareErrSet,
            Site::FdPrepareFdFailed,
            Site::FdPrepareFileFailed,
            Site::FdPrepareFileNull,
            Site::FdAddOk,
            Site::FdPrepareUnpublishedFd,
            Site::FdPrepareUnpublishedFile,
        ];
        let run = |prepares, outcome, ret| {
            let mut counters = Counters::default();
            fd_prepare(&mut counters, prepares, outcome, ret);
            sites.map(|site| counters.get(site))
        };
        let (t, n, u, z) = (
            Counts::new(1, 0, 0),
            Counts::new(0, 1, 0),
            Counts::new(0, 0, 1),
            Counts::ZERO,
        );
        // Published: the fd, then the file; FD_ADD's test taken; nothing left to put.
        assert_eq!(
            run(FdPrepare::Add, Reached(AllocResult::Fd(3)), 3),
            [t, n, n, n, n, t, n, n]
        );
        // FD_PREPARE users publish themselves: no FD_ADD test.
        assert_eq!(
            run(FdPrepare::Prepare, Reached(AllocResult::Fd(3)), 3),
            [t, n, n, n, n, z, n, n]
        );
        // The fd failed: lock_err returns before the file's tests.
        assert_eq!(
            run(FdPrepare::Add, Reached(AllocResult::Emfile), -errno::EMFILE),
            [n, n, t, z, z, n, n, n]
        );
        // The file failed after the fd: the destructor puts the fd back.
        assert_eq!(
            run(
                FdPrepare::Add,
                Reached(AllocResult::Unknown),
                -errno::ENOENT
            ),
            [t, n, n, t, z, n, t, n]
        );
        // -ENOMEM after the allocation ran, or a call that may not have allocated.
        assert_eq!(
            run(
                FdPrepare::Add,
                Reached(AllocResult::Unknown),
                -errno::ENOMEM
            ),
            [u, u, u, u, u, u, u, u]
        );
        assert_eq!(run(FdPrepare::Prepare, Maybe, -errno::ENOMEM)[5], z);
        assert_eq!(run(FdPrepare::Add, NotReached, -errno::EINVAL), [z; 8]);
        assert_eq!(
            run(FdPrepare::Direct, Reached(AllocResult::Fd(3)), 3),
            [z; 8]
        );
    }

    #[test]
    fn fast_path_within_a_word() {
        // Word 0 with fds 0-2 open: start 0 finds 3.
        assert!(fast_path(0b111, 0));
        // A full word: no free fd from any start inside it.
        assert!(!fast_path(u64::MAX, 0));
        assert!(!fast_path(u64::MAX, 63));
        // Free only below start: the fast path fails.
        assert!(!fast_path(!1u64, 1));
        // Free at the word's last bit, start at it.
        assert!(fast_path(u64::MAX >> 1, 63));
        // Word 1: start 70 (bit 6), bits 6.. open but 63 free.
        assert!(fast_path(!(1u64 << 63), 70));
    }
}
