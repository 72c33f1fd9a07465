//! fd allocation and lookup (fs/file.c): the branches of `alloc_fd`, `find_next_fd` and
//! `__fget_light`, as predicates over the task's fd table, and the walk `alloc_fd` makes
//! through them, from the table an allocation starts with and the fd it returned.

use crate::{
    Evaluation, Reached,
    catalogue::{Recorder, branch, likely, unlikely},
    errno,
    syscalls::{Allocator, FdPrepare, PairAllocator},
};

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

/// A syscall's lookup of its one `fd` (`__fget_light(fd, FMODE_PATH)`), and the `fdput()`
/// at the end of its scope. On an unshared table the file found is tested for O_PATH; on
/// a shared one `__fget_files_rcu` tests that there is a file, then its mode (its races
/// with other threads are not modelled); `fdput()` drops a reference only the shared arm
/// takes. Whatever the observer cannot read is undecided where it may have run.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn single_lookup<R: Recorder>(
    recorder: &mut R,
    fd: u32,
    lookup: Lookup,
    task: &impl TaskState,
) {
    // The table is read once for `__fget_light`'s test and the arm it takes.
    let shared = task.table_shared();
    unlikely!(recorder, FgetTableShared, Evaluation::from_known(shared));
    let file = task.fd_file(fd);
    let path_only = match file {
        Some(FdFile::Open { path_only }) => Some(path_only),
        _ => None,
    };
    match shared {
        Some(false) => {
            if file != Some(FdFile::NotOpen) {
                unlikely!(
                    recorder,
                    FgetLightPathOnly,
                    Evaluation::from_known(path_only)
                );
            }
        }
        Some(true) => {
            let missing = file.map(|file| file == FdFile::NotOpen);
            unlikely!(recorder, FgetRcuNoFile, Evaluation::from_known(missing));
            if missing != Some(true) {
                unlikely!(recorder, FgetRcuPathOnly, Evaluation::from_known(path_only));
            }
        }
        None => {
            // Either arm: each test that may have run is undecided.
            unlikely!(recorder, FgetLightPathOnly, Evaluation::Undecided);
            unlikely!(recorder, FgetRcuNoFile, Evaluation::Undecided);
            unlikely!(recorder, FgetRcuPathOnly, Evaluation::Undecided);
        }
    }
    // The file handed out: open, and not O_PATH.
    let found = file.map(|file| file == FdFile::Open { path_only: false });
    if lookup == Lookup::FdgetPos {
        likely!(recorder, FdgetPosFile, Evaluation::from_known(found));
    }
    let cloned = match (shared, found) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    };
    unlikely!(recorder, FdputCloned, Evaluation::from_known(cloned));
}

/// `filp_flush()` of the file a close takes from `fd`: `likely(!(f_mode & FMODE_PATH))`,
/// run only when there was a file.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn close_flush<R: Recorder>(recorder: &mut R, fd: u32, task: &impl TaskState) {
    match task.fd_file(fd) {
        Some(FdFile::NotOpen) => {}
        Some(FdFile::Open { path_only }) => {
            likely!(
                recorder,
                CloseNotPathOnly,
                Evaluation::from_taken(!path_only)
            );
        }
        None => {
            likely!(recorder, CloseNotPathOnly, Evaluation::Undecided);
        }
    }
}

/// fcntl's `unlikely(fd_file(f)->f_mode & FMODE_PATH)`, once `fdget_raw()` found a file.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn fcntl_path_only<R: Recorder>(recorder: &mut R, fd: u32, task: &impl TaskState) {
    match task.fd_file(fd) {
        Some(FdFile::NotOpen) => {}
        Some(FdFile::Open { path_only }) => {
            unlikely!(recorder, FcntlPathOnly, Evaluation::from_taken(path_only));
        }
        None => {
            unlikely!(recorder, FcntlPathOnly, Evaluation::Undecided);
        }
    }
}

/// `__fget_light` for `lookups` fd lookups, made if `reached`: only reached lookups
/// depend on the table, so only they read it.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn fget<R: Recorder>(recorder: &mut R, lookups: u64, reached: Reached, task: &impl TaskState) {
    if lookups == 0 {
        return;
    }
    let shared = match reached {
        Reached::Yes => task.table_shared(),
        Reached::No | Reached::Unknown => None,
    };
    unlikely!(recorder, FgetTableShared, reached.evaluate(shared), lookups);
}

/// `expand_files`: `if (unlikely(nr >= sysctl_nr_open))` — the table cannot grow to hold
/// `fd` (-EMFILE).
pub const fn past_nr_open(fd: u32, nr_open: u32) -> bool {
    fd >= nr_open
}

/// `alloc_fdtable`: `if (unlikely(nr > sysctl_nr_open))` — the size rounded up to a power
/// of two is past fs.nr_open (it is then cut to fs.nr_open rounded down to 64 fds).
pub const fn rounded_past_nr_open(nr: u32, nr_open: u32) -> bool {
    nr > nr_open
}

/// `alloc_fdtable`: `if (unlikely(nr > INT_MAX / sizeof(struct file *)))` — the fd array
/// would pass INT_MAX bytes (-EMFILE).
pub const fn fd_array_too_large(nr: u32) -> bool {
    nr as u64 > i32::MAX as u64 / 8
}

/// A recorder that keeps nothing: for working out what the kernel did without counting it
/// again.
struct Uncounted;

impl Recorder for Uncounted {
    fn record(&mut self, _: crate::Site, _: Evaluation) {}
    fn record_counts(&mut self, _: crate::Site, _: &crate::Counts) {}
}

/// `expand_files(files, fd)` once the table is full at `fd`, then `expand_fdtable` →
/// `alloc_fdtable(fd + 1)`: the size the table grows to, or None when it cannot
/// (-EMFILE). A race with another thread growing it is not modelled.
#[cfg_attr(target_arch = "bpf", inline(always))]
fn grow<R: Recorder>(recorder: &mut R, fd: u32, nr_open: u32) -> Option<u32> {
    let past = unlikely!(
        recorder,
        FdPastNrOpen,
        Evaluation::from_taken(past_nr_open(fd, nr_open))
    );
    if past == Evaluation::Taken {
        return None;
    }
    alloc_fdtable(recorder, fd + 1, nr_open)
}

/// `alloc_fdtable(slots_wanted)`: the size of the new table (a power of two, or fs.nr_open
/// rounded down to 64 fds when that is past it), or None when it cannot (-EMFILE).
#[cfg_attr(target_arch = "bpf", inline(always))]
fn alloc_fdtable<R: Recorder>(recorder: &mut R, wanted: u32, nr_open: u32) -> Option<u32> {
    let mut nr = wanted.next_power_of_two();
    let rounded_past = unlikely!(
        recorder,
        FdtableRoundedPastNrOpen,
        Evaluation::from_taken(rounded_past_nr_open(nr, nr_open))
    );
    if rounded_past == Evaluation::Taken {
        nr = nr_open / BITS_PER_LONG * BITS_PER_LONG;
        if nr < wanted {
            return None;
        }
    }
    let too_large = unlikely!(
        recorder,
        FdtableTooLarge,
        Evaluation::from_taken(fd_array_too_large(nr))
    );
    (too_large == Evaluation::NotTaken).then_some(nr)
}

/// `NR_OPEN_DEFAULT`: the fds of the table embedded in every `files_struct`.
pub const NR_OPEN_DEFAULT: u32 = BITS_PER_LONG;

/// `sane_fdtable_size()`: the slots a copy of a table needs, from its highest open fd
/// (None: none is open): that fd's 64-fd word and every word below, at least
/// [`NR_OPEN_DEFAULT`].
pub const fn copied_size(last_open: Option<u32>) -> u32 {
    match last_open {
        Some(fd) => (fd / BITS_PER_LONG + 1) * BITS_PER_LONG,
        None => NR_OPEN_DEFAULT,
    }
}

/// How a copy of the table (`dup_fd`: fork without CLONE_FILES, `unshare(CLONE_FILES)` of
/// a shared one) went, as the syscall's return value tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyOutcome {
    /// The call succeeded: the table was copied.
    Copied,
    /// It failed: before the copy or in it, the return value does not say.
    Maybe,
}

/// `dup_fd()` of a table whose open fds need `open_files` slots ([`copied_size`]; None:
/// the table could not be read): past the embedded [`NR_OPEN_DEFAULT`] it allocates a
/// table of its own, `alloc_fdtable(open_files)`, whose tests the growth shares. A race
/// with another thread growing the table meanwhile (the copy then tries again) is not
/// modelled.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn copy_table<R: Recorder>(
    recorder: &mut R,
    open_files: Option<u32>,
    nr_open: u32,
    outcome: CopyOutcome,
) {
    let outgrows = open_files.map(|slots| slots > NR_OPEN_DEFAULT);
    if outcome == CopyOutcome::Maybe {
        // The call failed, before the copy or in it.
        unlikely!(recorder, FdCopyOutgrowsEmbedded, Evaluation::Undecided);
        if outgrows != Some(false) {
            unlikely!(recorder, FdtableRoundedPastNrOpen, Evaluation::Undecided);
            unlikely!(recorder, FdtableTooLarge, Evaluation::Undecided);
        }
        return;
    }
    let outgrows = unlikely!(
        recorder,
        FdCopyOutgrowsEmbedded,
        Evaluation::from_known(outgrows)
    );
    match (outgrows, open_files) {
        (Evaluation::Taken, Some(slots)) => {
            // The test is a `while`: once the table is allocated it is made again, on the
            // new table, which holds the open fds.
            if alloc_fdtable(recorder, slots, nr_open).is_some() {
                unlikely!(recorder, FdCopyOutgrowsEmbedded, Evaluation::NotTaken);
            }
        }
        (Evaluation::NotTaken, _) => {}
        _ => {
            unlikely!(recorder, FdtableRoundedPastNrOpen, Evaluation::Undecided);
            unlikely!(recorder, FdtableTooLarge, Evaluation::Undecided);
        }
    }
}

/// The size a table full at `fd` grows to (None: it cannot), as [`grow`] works it out.
pub fn grown_max_fds(fd: u32, nr_open: u32) -> Option<u32> {
    grow(&mut Uncounted, fd, nr_open)
}

/// What `expand_files(files, fd)` did to a table of `max_fds` fds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expansion {
    /// `fd` is inside the table: nothing is tested.
    Fits,
    /// The table grew to this many fds (unless its allocation failed: -ENOMEM, which
    /// only the return value tells).
    Grew(u32),
    /// -EMFILE: past fs.nr_open, or rounded down to it below `fd`, or too large.
    Refused,
}

/// `expand_files(files, fd)` as every caller reaches it (the allocator's search, dup2's
/// newfd): the growth's tests counted once, here.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn expand_files<R: Recorder>(
    recorder: &mut R,
    fd: u32,
    max_fds: u32,
    nr_open: u32,
) -> Expansion {
    if fd < max_fds {
        return Expansion::Fits;
    }
    match grow(recorder, fd, nr_open) {
        Some(grown) => Expansion::Grew(grown),
        None => Expansion::Refused,
    }
}

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
            Allocator::Socket if e == errno::ENFILE || e == errno::ENOMEM => AllocOutcome::Maybe,
            Allocator::Socket => AllocOutcome::NotReached,
            // EINVAL is the flags' test (`refused`) or, after the fd, a socket that is
            // not listening.
            Allocator::Accept if refused || e == errno::EBADF => AllocOutcome::NotReached,
            Allocator::Accept => AllocOutcome::Reached(AllocResult::Unknown),
            Allocator::Dup | Allocator::DupFd | Allocator::Anon | Allocator::Group => {
                AllocOutcome::Maybe
            }
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
const fn word_before(from: u32, found: u32) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

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
