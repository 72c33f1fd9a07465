//! An allocation's walk through `alloc_fd` and `find_next_fd`, from the table it starts
//! with and the fd it returned, two for a pair, and how `FD_PREPARE()` / `FD_ADD()` end it.

use super::{BITS_PER_LONG, below_max, emfile, fast_path, grow, grown_max_fds, table_full};
use crate::{
    Evaluation,
    catalogue::{Recorder, branch, likely, unlikely},
    errno,
    syscalls::{Allocator, FdPrepare, PairAllocator},
};

/// The fd table as an `alloc_fd` call finds it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStart {
    /// Where the caller starts the search (0, or F_DUPFD's argument).
    pub start: u32,
    /// `files->next_fd`.
    pub next_fd: u32,
    /// `fdt->max_fds`.
    pub max_fds: u32,
    /// `sysctl_nr_open`: expand_files refuses to grow past it.
    pub nr_open: u32,
    /// The word of `open_fds` that holds fd max(start, next_fd) (0 past the table).
    pub word: u64,
    /// `end`: RLIMIT_NOFILE.
    pub end: u64,
}

/// How an allocation ended, as the syscall's return value tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocResult {
    /// It found this fd.
    Fd(u32),
    /// EMFILE: past `end`, or the table could not grow.
    Emfile,
    /// It ran, but the syscall failed later and does not say which fd it found.
    Unknown,
}

/// Whether a syscall got to its `alloc_fd` call, and how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocOutcome {
    NotReached,
    Reached(AllocResult),
    /// The return value does not tell whether the allocation ran.
    Maybe,
}

/// The model's rules of an [`Allocator`]: what its return value says.
impl Allocator {
    /// What the return value says about the allocation (`refused`: a call its arguments
    /// refuse before it — an open's empty name, flags or openat2 size the checks before
    /// the path walk refuse; accept4's flags, [`accept_flags_refused`]).
    pub const fn outcome(self, ret: i64, refused: bool) -> AllocOutcome {
        if ret >= 0 {
            return AllocOutcome::Reached(AllocResult::Fd(ret as u32));
        }
        if ret == -errno::EMFILE {
            return match self {
                Allocator::Group => AllocOutcome::Maybe,
                _ => AllocOutcome::Reached(AllocResult::Emfile),
            };
        }
        let e = -ret;
        match self {
            Allocator::Open if refused => AllocOutcome::NotReached,
            Allocator::Open
                if e == errno::EINVAL || e == errno::EFAULT || e == errno::ENAMETOOLONG =>
            {
                AllocOutcome::Maybe
            }
            Allocator::Open => AllocOutcome::Reached(AllocResult::Unknown),
            Allocator::Dup if e == errno::EBADF => AllocOutcome::NotReached,
            Allocator::DupFd if e == errno::EBADF || e == errno::EINVAL => AllocOutcome::NotReached,
            Allocator::Anon
                if e == errno::EINVAL
                    || e == errno::EPERM
                    || e == errno::EFAULT
                    || e == errno::ESRCH
                    || e == errno::EBADF =>
            {
                AllocOutcome::NotReached
            }
            Allocator::Group if e == errno::EINVAL || e == errno::EPERM => AllocOutcome::NotReached,
            Allocator::Listener
                if e == errno::EINVAL || e == errno::EFAULT || e == errno::EACCES =>
            {
                AllocOutcome::NotReached
            }
            Allocator::Listener if e == errno::EBUSY || e == errno::ESRCH => {
                AllocOutcome::Reached(AllocResult::Unknown)
            }
            Allocator::Socket if e == errno::ENFILE || e == errno::ENOMEM => AllocOutcome::Maybe,
            Allocator::Socket => AllocOutcome::NotReached,
            // EINVAL is the flags' test (`refused`) or, after the fd, a socket that is
            // not listening.
            Allocator::Accept if refused || e == errno::EBADF => AllocOutcome::NotReached,
            Allocator::Accept => AllocOutcome::Reached(AllocResult::Unknown),
            Allocator::Dup
            | Allocator::DupFd
            | Allocator::Anon
            | Allocator::Group
            | Allocator::Listener => AllocOutcome::Maybe,
        }
    }

    /// [`Allocator::outcome`] when whether the arguments refuse the call may be unknown
    /// (None: an open's name that could not be read): then the error a refusal gives
    /// (ENOENT, for an empty name) does not tell whether the allocation ran.
    pub const fn outcome_if_refused(self, ret: i64, refused: Option<bool>) -> AllocOutcome {
        match refused {
            Some(refused) => self.outcome(ret, refused),
            None if ret == -errno::ENOENT => AllocOutcome::Maybe,
            None => self.outcome(ret, false),
        }
    }
}

/// The model's rules of a [`PairAllocator`].
impl PairAllocator {
    /// Whether both allocations ran with their fds in user memory (Some(true)), did not
    /// run (Some(false)), or the return value does not tell (None: EMFILE from either,
    /// EFAULT). `refused`: the arguments refuse the call first (socketpair's flags,
    /// [`socketpair_flags_refused`]).
    pub const fn fds_written(self, ret: i64, refused: bool) -> Option<bool> {
        if refused {
            return Some(false);
        }
        if ret == 0 {
            return Some(true);
        }
        let e = -ret;
        if e == errno::EMFILE || e == errno::EFAULT {
            return None;
        }
        match self {
            PairAllocator::Pipe => Some(false),
            // Any error past the flags (a type or family refused: EINVAL too) comes once
            // both fds are written.
            PairAllocator::SocketPair => Some(true),
        }
    }
}

/// SOCK_CLOEXEC and SOCK_NONBLOCK (x86_64: O_CLOEXEC and O_NONBLOCK).
const SOCK_FLAGS: u32 = 0o2_000_000 | 0o4000;

/// `__sys_accept4_file`: `if (flags & ~(SOCK_CLOEXEC | SOCK_NONBLOCK)) return -EINVAL;`,
/// before the fd is allocated.
pub const fn accept_flags_refused(flags: u64) -> bool {
    flags as u32 & !SOCK_FLAGS != 0
}

/// `__sys_socketpair`: the same test on the flags in `type` past `SOCK_TYPE_MASK`, before
/// either fd is allocated.
pub const fn socketpair_flags_refused(socket_type: u64) -> bool {
    accept_flags_refused(socket_type & !0xf)
}

/// How an allocation through `FD_PREPARE()` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prepared {
    /// Fd and file made, the fd published.
    Published,
    /// The fd allocation failed.
    FdFailed,
    /// The fd was allocated, the file was not.
    FileFailed,
}

/// The branches of `FD_PREPARE()` (and `FD_ADD()`) around one allocation of a syscall that
/// allocates through them (`prepares`), from how the allocation ended (`outcome`) and the
/// syscall's return value. The model orders the allocation among the syscall's own checks
/// as 6.x does (an open's name is read before); -ENOMEM after the allocation ran may be
/// the table's growth or the file's, so it decides nothing.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn fd_prepare<R: Recorder>(
    recorder: &mut R,
    prepares: FdPrepare,
    outcome: AllocOutcome,
    ret: i64,
) {
    if prepares == FdPrepare::Direct {
        return;
    }
    let ended = match outcome {
        AllocOutcome::NotReached => return,
        AllocOutcome::Maybe => None,
        AllocOutcome::Reached(AllocResult::Fd(_)) => Some(Prepared::Published),
        AllocOutcome::Reached(AllocResult::Emfile) => Some(Prepared::FdFailed),
        AllocOutcome::Reached(AllocResult::Unknown) if ret == -errno::ENOMEM => None,
        AllocOutcome::Reached(AllocResult::Unknown) => Some(Prepared::FileFailed),
    };
    let when = |taken: fn(Prepared) -> bool| match ended {
        Some(ended) => Evaluation::from_taken(taken(ended)),
        None => Evaluation::Undecided,
    };
    likely!(recorder, FdPrepareFdOk, when(|e| e != Prepared::FdFailed));
    // class_fd_prepare_lock_err, run once by the initialiser: it returns at the first
    // test taken. The error field is still zero then.
    unlikely!(recorder, FdPrepareErrSet, when(|_| false));
    let fd_failed = unlikely!(
        recorder,
        FdPrepareFdFailed,
        when(|e| e == Prepared::FdFailed)
    );
    if fd_failed != Evaluation::Taken {
        let file_failed = unlikely!(
            recorder,
            FdPrepareFileFailed,
            when(|e| e == Prepared::FileFailed)
        );
        if file_failed != Evaluation::Taken {
            unlikely!(recorder, FdPrepareFileNull, when(|_| false));
        }
    }
    if prepares == FdPrepare::Add {
        likely!(recorder, FdAddOk, when(|e| e == Prepared::Published));
    }
    // The destructor: fd_publish() took both, a failed file left the fd to put back.
    unlikely!(
        recorder,
        FdPrepareUnpublishedFd,
        when(|e| e == Prepared::FileFailed)
    );
    unlikely!(recorder, FdPrepareUnpublishedFile, when(|_| false));
}

/// A word of open fds consistent with an allocation from `from` finding `found`: the lowest
/// free fd from `from` is `found`, so the fds between are open (and, past `found`'s word,
/// the rest of `from`'s word).
pub(super) const fn word_before(from: u32, found: u32) -> u64 {
    let from_bit = from % BITS_PER_LONG;
    let below_from = (1u64 << from_bit) - 1;
    if found / BITS_PER_LONG == from / BITS_PER_LONG {
        let up_to_found = (1u64 << (found % BITS_PER_LONG)) - 1;
        up_to_found & !below_from
    } else {
        !below_from
    }
}

/// Both allocations of a call that allocates two fds, which it found to be `first` and
/// `second` (None: the table or the fds could not be read, though both ran or may have):
/// the second starts where the first left `next_fd` (first + 1), on a table that may have
/// grown, and the fds it passed over were open.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn pair<R: Recorder>(recorder: &mut R, table: Option<&AllocStart>, fds: Option<[u32; 2]>) {
    let (Some(table), Some([first, second])) = (table, fds) else {
        allocation(recorder, None, AllocOutcome::Maybe);
        allocation(recorder, None, AllocOutcome::Maybe);
        return;
    };
    alloc_fd(recorder, table, AllocResult::Fd(first));
    let max_fds = if first >= table.max_fds {
        // It grew, or the first allocation would have failed.
        grown_max_fds(first, table.nr_open).unwrap_or(table.max_fds)
    } else {
        table.max_fds
    };
    let next_fd = first + 1;
    let then = AllocStart {
        start: 0,
        next_fd,
        max_fds,
        nr_open: table.nr_open,
        word: word_before(next_fd, second),
        end: table.end,
    };
    alloc_fd(recorder, &then, AllocResult::Fd(second));
}

/// The first free fd at or after `from` in `word` (the word's own fds only).
const fn free_in_word(word: u64, from: u32) -> Option<u32> {
    let free = !word >> (from % BITS_PER_LONG);
    if free == 0 {
        None
    } else {
        Some(from + free.trailing_zeros())
    }
}

/// One allocation of a syscall, as far as the observer knows whether it ran (`outcome`)
/// and the table it started with (None: not read).
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn allocation<R: Recorder>(
    recorder: &mut R,
    table: Option<&AllocStart>,
    outcome: AllocOutcome,
) {
    match (outcome, table) {
        (AllocOutcome::NotReached, _) => {}
        (AllocOutcome::Reached(result), Some(table)) => alloc_fd(recorder, table, result),
        // It ran, or may have, on a table the observer could not read: every branch from
        // the first may have run, directions unknown.
        (AllocOutcome::Maybe, _) | (AllocOutcome::Reached(_), None) => {
            likely!(recorder, FdBelowMax, Evaluation::Undecided);
            branch!(recorder, FdFastPath, Evaluation::Undecided);
            later_undecided(recorder);
        }
    }
}

/// The branches after the search, when which fd it found is unknown (the table's growth
/// among them: it may have run).
#[cfg_attr(target_arch = "bpf", inline(always))]
fn later_undecided<R: Recorder>(recorder: &mut R) {
    unlikely!(recorder, FdEmfile, Evaluation::Undecided);
    unlikely!(recorder, FdTableFull, Evaluation::Undecided);
    unlikely!(recorder, FdPastNrOpen, Evaluation::Undecided);
    unlikely!(recorder, FdtableRoundedPastNrOpen, Evaluation::Undecided);
    unlikely!(recorder, FdtableTooLarge, Evaluation::Undecided);
}

/// `alloc_fd(start, end)` from the table it started with, which returned `result`. Each
/// pass of its `repeat` loop (after the table grew) evaluates the branches again.
#[cfg_attr(target_arch = "bpf", inline(always))]
fn alloc_fd<R: Recorder>(recorder: &mut R, table: &AllocStart, result: AllocResult) {
    // fd = max(start, files->next_fd).
    let fd0 = if table.start > table.next_fd {
        table.start
    } else {
        table.next_fd
    };
    let (mut max_fds, mut word) = (table.max_fds, table.word);
    // Two passes at most: a grown table always has room at fd0.
    for _ in 0..2 {
        let below = likely!(
            recorder,
            FdBelowMax,
            Evaluation::from_taken(below_max(fd0, max_fds))
        );
        let found = if below == Evaluation::Taken {
            // find_next_fd(fdt, fd0).
            let fast = branch!(
                recorder,
                FdFastPath,
                Evaluation::from_taken(fast_path(word, fd0))
            );
            if fast == Evaluation::Taken {
                free_in_word(word, fd0)
            } else {
                // The search beyond fd0's word: the fd the call returned, or the end of
                // the table when it had to grow.
                match result {
                    AllocResult::Fd(fd) if fd < max_fds => Some(fd),
                    AllocResult::Fd(_) => Some(max_fds),
                    AllocResult::Emfile | AllocResult::Unknown => None,
                }
            }
        } else {
            Some(fd0)
        };
        let Some(found) = found else {
            later_undecided(recorder);
            return;
        };
        let over = unlikely!(
            recorder,
            FdEmfile,
            Evaluation::from_taken(emfile(found, table.end))
        );
        if over == Evaluation::Taken {
            return;
        }
        let full = unlikely!(
            recorder,
            FdTableFull,
            Evaluation::from_taken(table_full(found, max_fds))
        );
        if full == Evaluation::NotTaken {
            return;
        }
        // expand_files: -EMFILE, or a larger table and the search again.
        let Some(grown) = grow(recorder, found, table.nr_open) else {
            return;
        };
        // Fds past the old table are free.
        if fd0 >= max_fds {
            word = 0;
        }
        max_fds = grown;
    }
}
