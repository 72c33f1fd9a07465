//! The syscall table: every syscall the auditor follows, declared once with what follows
//! it — its family (which model runs it, which probe programs and which strace decoder),
//! the probe's programs on its `syscalls:sys_enter_*` / `sys_exit_*` tracepoints, the
//! arguments of its records, whether the strace source decodes its lines, whether and
//! when it allocates fds through `alloc_fd`. The loader's attach list, the probe's typed
//! records and its family programs, strace's `-e trace=` list, the replay's dispatch and
//! the catalogue's syscall sets are derived from it.

/// How a syscall allocates, a fact of its row; the rules the return value follows are the
/// model's (`fd/allocation.rs`).
/// The syscalls that allocate one fd, by what fails before the allocation.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocator {
    /// open, openat, openat2, creat: flags (EINVAL) and the name (EFAULT, ENAMETOOLONG,
    /// ENOENT for an empty one) come first; the path walk after.
    Open = 0,
    /// dup: EBADF first.
    Dup = 1,
    /// fcntl F_DUPFD: EBADF, and EINVAL for a start past RLIMIT_NOFILE, first.
    DupFd = 2,
    /// An anonymous-inode fd (eventfd, eventfd2, epoll_create, epoll_create1,
    /// timerfd_create, signalfd, signalfd4, memfd_create, pidfd_open, pidfd_getfd,
    /// userfaultfd): the arguments and the caller's rights are checked first — EINVAL,
    /// EPERM (timerfd's alarm clocks, userfaultfd's sysctl, pidfd_getfd's ptrace check),
    /// EFAULT (memfd's name, signalfd's mask), ESRCH (a pid gone), EBADF (pidfd_getfd's
    /// fds) —; ENOMEM comes before or after.
    Anon = 3,
    /// socket: the socket is created first (any error); ENFILE and ENOMEM after too.
    Socket = 4,
    /// accept, accept4: the listening fd (EBADF) and the flags (EINVAL) come first; the fd
    /// is allocated before waiting for a connection, so every later error (EAGAIN,
    /// ENOTSOCK, EINTR, ...) comes after it.
    Accept = 5,
    /// inotify_init, inotify_init1, fanotify_init: the flags (EINVAL) and the caller's
    /// rights (EPERM) first, then the group, whose per-user limit is EMFILE too: an EMFILE
    /// does not say whether the allocation ran.
    Group = 6,
    /// seccomp with SECCOMP_FILTER_FLAG_NEW_LISTENER: the flags and the filter (EINVAL,
    /// EFAULT) and the caller's rights (EACCES) first; after the fd, a listener already in
    /// the filter chain (EBUSY) and TSYNC_ESRCH's thread that cannot sync (ESRCH); ENOMEM
    /// before or after.
    Listener = 7,
}

impl Allocator {
    pub const fn from_u32(value: u32) -> Allocator {
        match value {
            0 => Allocator::Open,
            1 => Allocator::Dup,
            2 => Allocator::DupFd,
            3 => Allocator::Anon,
            4 => Allocator::Socket,
            5 => Allocator::Accept,
            6 => Allocator::Group,
            _ => Allocator::Listener,
        }
    }
}

/// The syscalls that allocate two fds and write them to user memory, by what fails before.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairAllocator {
    /// pipe, pipe2: flags (EINVAL) and the pipe's files (ENFILE, ENOMEM) come first; the
    /// fds are written after both allocations (EFAULT releases them).
    Pipe = 0,
    /// socketpair: flags (EINVAL) first; both fds are allocated and written before the
    /// sockets are made, so later errors still leave them in user memory.
    SocketPair = 1,
}

impl PairAllocator {
    pub const fn from_u32(value: u32) -> PairAllocator {
        match value {
            0 => PairAllocator::Pipe,
            _ => PairAllocator::SocketPair,
        }
    }
}

/// What a syscall does that the auditor follows: which of the model's functions runs it,
/// which of the probe's modules holds its programs, which strace decoder reads its lines
/// and which sites it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// select, pselect6: `core_sys_select`'s checks and bitmaps (`select.*`).
    Select,
    /// poll, ppoll: `do_sys_poll`'s entries (`poll.*`).
    Poll,
    /// epoll_wait, epoll_pwait, epoll_pwait2: `do_epoll_wait` (`epoll.*`).
    EpollWait,
    /// epoll_ctl (`epoll_ctl.*`).
    EpollCtl,
    /// close: the flush of the file it finds, and its return (`close.*`).
    Close,
    /// read, write, recvmsg, sendmsg: one lookup of their fd first thing (`fget.*`,
    /// `fdput.*`; `fdget_pos.*` for read and write).
    Lookup(Lookup),
    /// open, openat, openat2, creat: `build_open_flags()`'s checks, then one fd
    /// (`open.*`, `openat2.*`, `fd.*`, `fd_prepare.*`).
    Open,
    /// The other syscalls that allocate one fd (`fd.*`, `fd_prepare.*`), when [`Asks`]
    /// says.
    Allocate,
    /// pipe, pipe2, socketpair: two fds written to user memory (`fd.*`).
    AllocatePair,
    /// dup2, dup3: install oldfd's file at newfd, growing the table for it without
    /// allocating (`dup2.*`, `dup3.*`, `fd.*`'s growth).
    Replace,
    /// chmod, fchmodat, fchmodat2: `do_fchmodat`'s flags (`fchmodat.*`).
    Chmod,
    /// mmap, mprotect, munmap: followed for `--stacks` alone (code mapped, made
    /// executable or unmapped: the user side reads the mappings again) and counted at no
    /// site; without `--stacks` their programs are neither loaded nor attached.
    Mappings,
    /// ioctl's `SECCOMP_IOCTL_NOTIF_ADDFD` with `SECCOMP_ADDFD_FLAG_SETFD` (`addfd.rs`): a
    /// seccomp supervisor places one of its files at a chosen fd of the task whose call it
    /// answers (`replace_fd.*`, `fd.*`'s growth, in that task's table). Its calls are the
    /// ADDFD ones alone: every other ioctl reaches no site.
    AddFd,
    /// fork, vfork, clone, clone3, unshare: may copy the caller's table (`dup_fd()`):
    /// fork without CLONE_FILES, unshare with CLONE_FILES of a shared table. A log does
    /// not show the table (strace traces clone and clone3 for the threads they make).
    CopyTable,
}

impl Family {
    /// The same family, a lookup of the same kind for [`Family::Lookup`] (`==` is not
    /// constant).
    pub const fn is(self, other: Family) -> bool {
        match (self, other) {
            (Family::Lookup(a), Family::Lookup(b)) => a as u32 == b as u32,
            _ => self.ordinal() == other.ordinal(),
        }
    }

    /// The family of any lookup (read, write, recvmsg, sendmsg).
    pub const fn looks_up(self) -> bool {
        matches!(self, Family::Lookup(_))
    }

    /// The name of the probe's program at the exit of the family's syscalls whose rows
    /// say [`Program::Shared`].
    pub const fn shared_exit(self) -> Option<&'static str> {
        match self {
            Family::Open | Family::Allocate | Family::AllocatePair => Some("alloc_exit"),
            Family::Poll => Some("polls_exit"),
            _ => None,
        }
    }

    const fn ordinal(self) -> u32 {
        match self {
            Family::Select => 0,
            Family::Poll => 1,
            Family::EpollWait => 2,
            Family::EpollCtl => 3,
            Family::Close => 4,
            Family::Lookup(_) => 5,
            Family::Open => 6,
            Family::Allocate => 7,
            Family::AllocatePair => 8,
            Family::Replace => 9,
            Family::Chmod => 10,
            Family::Mappings => 11,
            Family::CopyTable => 12,
            Family::AddFd => 13,
        }
    }

    /// Its syscalls, in table order (`N` of them: [`Family::size`]).
    pub const fn members<const N: usize>(self) -> [Syscall; N] {
        Property::In(self).select()
    }

    /// How many syscalls of the table are of it.
    pub const fn size(self) -> usize {
        Property::In(self).count()
    }
}

/// How a syscall looks its one fd up: `fdget()`, or `fdget_pos()` (read and write), which
/// then tests the file it got.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Fdget = 0,
    FdgetPos = 1,
}

/// When a call of an allocating syscall asks for an fd: always, or as one of its
/// arguments says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asks {
    Always,
    /// signalfd, signalfd4: `ufd` is -1; another ufd names a signalfd to change.
    UfdIsMinusOne,
    /// fcntl: `cmd` is F_DUPFD or F_DUPFD_CLOEXEC.
    DupFdCommand,
    /// seccomp: `flags` has SECCOMP_FILTER_FLAG_NEW_LISTENER (with any operation but
    /// SECCOMP_SET_MODE_FILTER it is refused first, EINVAL).
    NewListenerFlag,
}

/// fcntl's commands that allocate (include/uapi/linux/fcntl.h).
pub const F_DUPFD: u64 = 0;
pub const F_DUPFD_CLOEXEC: u64 = 1030;

/// seccomp's flag that asks for a listener's fd (include/uapi/linux/seccomp.h).
pub const SECCOMP_FILTER_FLAG_NEW_LISTENER: u64 = 1 << 3;

impl Asks {
    /// The argument the answer depends on, as the table names it.
    pub const fn argument(self) -> Option<&'static str> {
        match self {
            Asks::Always => None,
            Asks::UfdIsMinusOne => Some("ufd"),
            Asks::DupFdCommand => Some("cmd"),
            Asks::NewListenerFlag => Some("flags"),
        }
    }

    /// Whether a call whose [`Asks::argument`] is `value` (as its record holds it: 8
    /// bytes, the int in the low 4) asks for an fd.
    pub const fn asks(self, value: u64) -> bool {
        match self {
            Asks::Always => true,
            Asks::UfdIsMinusOne => value as u32 as i32 == -1,
            Asks::DupFdCommand => {
                let cmd = value as u32 as u64;
                cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC
            }
            // An unsigned int.
            Asks::NewListenerFlag => value as u32 as u64 & SECCOMP_FILTER_FLAG_NEW_LISTENER != 0,
        }
    }
}

/// A program the probe has on one of a syscall's tracepoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    No,
    /// Written in its family's module, reading what that syscall's record holds.
    Own,
    /// Made from the table by the probe's build: its family's program, the same for every
    /// row (an allocation's exit; an allocation's entry that reads at most its
    /// [`Asks::argument`]).
    Derived,
    /// Its family's one program ([`Family::shared_exit`]), attached here and on the same
    /// tracepoint of every other row of the family: the verifier checks its body once, and
    /// a call runs one program, not a program and a tail call (which cost the helper calls
    /// the first had made, made again). It tells the syscalls apart by the record's number.
    Shared,
}

impl Program {
    pub const fn exists(self) -> bool {
        !matches!(self, Program::No)
    }
}

/// How a syscall is followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallInfo {
    pub syscall: Syscall,
    /// Its name, as strace prints it and as its tracepoints are named.
    pub name: &'static str,
    pub family: Family,
    /// The probe's program `NAME_enter` on `syscalls:sys_enter_NAME`.
    pub enter: Program,
    /// The probe's program `NAME_exit` on `syscalls:sys_exit_NAME`.
    pub exit: Program,
    /// The strace source decodes its lines (it is in `-e trace=`).
    pub logged: bool,
    /// Whether it allocates fds through `alloc_fd` (counted at the `fd.*` sites), and what
    /// fails before.
    pub allocates: Allocates,
    /// When a call asks for its allocation.
    pub asks: Asks,
    /// How the newest kernel (7.2) wraps that allocation (the `fd_prepare.*` sites).
    pub prepares: FdPrepare,
    /// Its arguments, as its `sys_enter_NAME` format file names them, in order: the
    /// record's fields after `__syscall_nr` ([`SysEnter`]).
    pub args: &'static [&'static str],
}

impl SyscallInfo {
    /// What each row of the table starts from.
    const NONE: SyscallInfo = SyscallInfo {
        syscall: Syscall::Select,
        name: "",
        family: Family::Select,
        enter: Program::No,
        exit: Program::No,
        logged: false,
        allocates: Allocates::No,
        asks: Asks::Always,
        prepares: FdPrepare::Direct,
        args: &[],
    };

    /// Followed for `--stacks` alone ([`Family::Mappings`]).
    pub const fn stacks_only(&self) -> bool {
        matches!(self.family, Family::Mappings)
    }
}

/// The fd allocations of a syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocates {
    No,
    /// One fd, with what fails before it.
    One(Allocator),
    /// Two fds, written to user memory.
    Two(PairAllocator),
}

impl Allocates {
    /// The allocator of a syscall that allocates one fd; asked for in a constant, any other
    /// fails the build.
    pub const fn one(self) -> Allocator {
        match self {
            Allocates::One(allocator) => allocator,
            _ => panic!("the syscall does not allocate one fd"),
        }
    }

    /// As [`Allocates::one`], for two fds.
    pub const fn two(self) -> PairAllocator {
        match self {
            Allocates::Two(allocator) => allocator,
            _ => panic!("the syscall does not allocate two fds"),
        }
    }
}

/// How a syscall allocates its fd in Linux 7.2 (include/linux/file.h, 6.19 on): through
/// `FD_ADD()`, through `FD_PREPARE()` then `fd_publish()`, or with `get_unused_fd_flags()`
/// and `fd_install()` as before.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdPrepare {
    Direct = 0,
    Prepare = 1,
    Add = 2,
}

impl FdPrepare {
    pub const fn from_u32(value: u32) -> FdPrepare {
        match value {
            1 => FdPrepare::Prepare,
            2 => FdPrepare::Add,
            _ => FdPrepare::Direct,
        }
    }
}

/// Declares the table: `Variant = "name" in Family { field: value, ... }`, fields of
/// [`SyscallInfo`] left out are as in `SyscallInfo::NONE` (no programs, not logged,
/// allocating nothing).
macro_rules! syscalls {
    ($($variant:ident = $name:literal in $family:ident $(($lookup:ident))? { $($field:ident: $value:expr),* $(,)? }),* $(,)?) => {
        /// A followed syscall; the discriminant indexes the probe's per-syscall counters.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Syscall {
            $($variant),*
        }

        /// Number of followed syscalls.
        pub const SYSCALL_COUNT: usize = [$($name),*].len();

        /// The table, in [`Syscall`] order.
        #[allow(clippy::needless_update, reason = "a row may set every field, or few")]
        pub const SYSCALLS: [SyscallInfo; SYSCALL_COUNT] = [$(SyscallInfo {
            syscall: Syscall::$variant,
            name: $name,
            family: Family::$family $((Lookup::$lookup))?,
            $($field: $value,)*
            ..SyscallInfo::NONE
        }),*];

        impl Syscall {
            /// Every followed syscall, in table order.
            pub const ALL: [Syscall; SYSCALL_COUNT] = [$(Syscall::$variant),*];
        }
    };
}

use Allocates::{One, Two};
use Allocator as A;
use PairAllocator as P;
use Program::{Derived, Own, Shared};

syscalls! {
    Select = "select" in Select { enter: Own, exit: Own, logged: true, args: &["n", "inp", "outp", "exp", "tvp"] },
    Pselect6 = "pselect6" in Select { enter: Own, exit: Own, logged: true, args: &["n", "inp", "outp", "exp", "tsp", "sig"] },
    // Decided at its exit alone: its arguments are still in the task's registers there,
    // and the kernel writes no pollfd but its revents.
    Poll = "poll" in Poll { exit: Shared, logged: true, args: &["ufds", "nfds", "timeout_msecs"] },
    Ppoll = "ppoll" in Poll { enter: Own, exit: Shared, logged: true, args: &["ufds", "nfds", "tsp", "sigmask", "sigsetsize"] },
    EpollWait = "epoll_wait" in EpollWait { enter: Own, exit: Own, logged: true, args: &["epfd", "events", "maxevents", "timeout"] },
    EpollPwait = "epoll_pwait" in EpollWait { enter: Own, exit: Own, logged: true, args: &["epfd", "events", "maxevents", "timeout", "sigmask", "sigsetsize"] },
    EpollPwait2 = "epoll_pwait2" in EpollWait { enter: Own, exit: Own, logged: true, args: &["epfd", "events", "maxevents", "timeout", "sigmask", "sigsetsize"] },
    EpollCtl = "epoll_ctl" in EpollCtl { enter: Own, exit: Own, logged: true, args: &["epfd", "op", "fd", "event"] },
    Close = "close" in Close { enter: Own, exit: Own, logged: true, args: &["fd"] },
    Read = "read" in Lookup(FdgetPos) { enter: Derived, args: &["fd", "buf", "count"] },
    Write = "write" in Lookup(FdgetPos) { enter: Derived, args: &["fd", "buf", "count"] },
    Recvmsg = "recvmsg" in Lookup(Fdget) { enter: Derived, args: &["fd", "msg", "flags"] },
    Sendmsg = "sendmsg" in Lookup(Fdget) { enter: Derived, args: &["fd", "msg", "flags"] },
    Open = "open" in Open { enter: Own, exit: Shared, allocates: One(A::Open), logged: true, prepares: FdPrepare::Add, args: &["filename", "flags", "mode"] },
    Openat = "openat" in Open { enter: Own, exit: Shared, allocates: One(A::Open), logged: true, prepares: FdPrepare::Add, args: &["dfd", "filename", "flags", "mode"] },
    Openat2 = "openat2" in Open { enter: Own, exit: Shared, allocates: One(A::Open), logged: true, prepares: FdPrepare::Add, args: &["dfd", "filename", "how", "usize"] },
    Creat = "creat" in Open { enter: Own, exit: Shared, allocates: One(A::Open), logged: true, prepares: FdPrepare::Add, args: &["pathname", "mode"] },
    Dup = "dup" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Dup), args: &["fildes"] },
    // Its entry also looks the fd up (`fcntl.path_only`), and F_DUPFD starts at `arg`.
    Fcntl = "fcntl" in Allocate { enter: Own, exit: Shared, allocates: One(A::DupFd), asks: Asks::DupFdCommand, args: &["fd", "cmd", "arg"] },
    Eventfd2 = "eventfd2" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), logged: true, prepares: FdPrepare::Prepare, args: &["count", "flags"] },
    EpollCreate1 = "epoll_create1" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), logged: true, prepares: FdPrepare::Prepare, args: &["flags"] },
    Socket = "socket" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Socket), args: &["family", "type", "protocol"] },
    Accept = "accept" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Accept), logged: true, prepares: FdPrepare::Add, args: &["fd", "upeer_sockaddr", "upeer_addrlen"] },
    // Its flags may refuse it before the fd.
    Accept4 = "accept4" in Allocate { enter: Own, exit: Shared, allocates: One(A::Accept), logged: true, prepares: FdPrepare::Add, args: &["fd", "upeer_sockaddr", "upeer_addrlen", "flags"] },
    Pipe = "pipe" in AllocatePair { enter: Own, exit: Shared, allocates: Two(P::Pipe), args: &["fildes"] },
    Pipe2 = "pipe2" in AllocatePair { enter: Own, exit: Shared, allocates: Two(P::Pipe), args: &["fildes", "flags"] },
    Socketpair = "socketpair" in AllocatePair { enter: Own, exit: Shared, allocates: Two(P::SocketPair), args: &["family", "type", "protocol", "usockvec"] },
    EpollCreate = "epoll_create" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), logged: true, prepares: FdPrepare::Prepare, args: &["size"] },
    Eventfd = "eventfd" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), logged: true, prepares: FdPrepare::Prepare, args: &["count"] },
    TimerfdCreate = "timerfd_create" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), logged: true, prepares: FdPrepare::Add, args: &["clockid", "flags"] },
    Signalfd = "signalfd" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), asks: Asks::UfdIsMinusOne, logged: true, prepares: FdPrepare::Add, args: &["ufd", "user_mask", "sizemask"] },
    Signalfd4 = "signalfd4" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), asks: Asks::UfdIsMinusOne, logged: true, prepares: FdPrepare::Add, args: &["ufd", "user_mask", "sizemask", "flags"] },
    MemfdCreate = "memfd_create" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), logged: true, prepares: FdPrepare::Add, args: &["uname", "flags"] },
    PidfdOpen = "pidfd_open" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), args: &["pid", "flags"] },
    InotifyInit = "inotify_init" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Group), logged: true, prepares: FdPrepare::Add, args: &[] },
    InotifyInit1 = "inotify_init1" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Group), logged: true, prepares: FdPrepare::Add, args: &["flags"] },
    FanotifyInit = "fanotify_init" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Group), logged: true, prepares: FdPrepare::Add, args: &["flags", "event_f_flags"] },
    Userfaultfd = "userfaultfd" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), logged: true, prepares: FdPrepare::Prepare, args: &["flags"] },
    PidfdGetfd = "pidfd_getfd" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Anon), logged: true, prepares: FdPrepare::Prepare, args: &["pidfd", "fd", "flags"] },
    Dup2 = "dup2" in Replace { enter: Own, exit: Own, logged: true, args: &["oldfd", "newfd"] },
    Dup3 = "dup3" in Replace { enter: Own, exit: Own, logged: true, args: &["oldfd", "newfd", "flags"] },
    // `do_fchmodat`'s flags are the `flags` argument of the rows that have one, else 0.
    Chmod = "chmod" in Chmod { enter: Derived, logged: true, args: &["filename", "mode"] },
    Fchmodat = "fchmodat" in Chmod { enter: Derived, logged: true, args: &["dfd", "filename", "mode"] },
    // Not logged: Debian's strace 6.1 does not know it (it prints `syscall_0x1c4`).
    Fchmodat2 = "fchmodat2" in Chmod { enter: Derived, args: &["dfd", "filename", "mode", "flags"] },
    Mmap = "mmap" in Mappings { enter: Own, exit: Own, args: &["addr", "len", "prot", "flags", "fd", "off"] },
    Mprotect = "mprotect" in Mappings { enter: Own, exit: Own, args: &["start", "len", "prot"] },
    Munmap = "munmap" in Mappings { enter: Own, exit: Own, args: &["addr", "len"] },
    Fork = "fork" in CopyTable { enter: Own, exit: Derived, args: &[] },
    Vfork = "vfork" in CopyTable { enter: Own, exit: Derived, args: &[] },
    Clone = "clone" in CopyTable { enter: Own, exit: Derived, args: &["clone_flags", "newsp", "parent_tidptr", "child_tidptr", "tls"] },
    Clone3 = "clone3" in CopyTable { enter: Own, exit: Derived, args: &["uargs", "size"] },
    Unshare = "unshare" in CopyTable { enter: Own, exit: Derived, args: &["unshare_flags"] },
    // A listener's fd (seccomp's user notification), when its flags ask for one.
    Seccomp = "seccomp" in Allocate { enter: Derived, exit: Shared, allocates: One(A::Listener), asks: Asks::NewListenerFlag, logged: true, args: &["op", "flags", "uargs"] },
    Ioctl = "ioctl" in AddFd { enter: Own, exit: Own, logged: true, args: &["fd", "cmd", "arg"] },
}

/// The syscalls that allocate fds through `alloc_fd` which the auditor does not follow, and
/// why: their allocations are missing from the `fd.*` and `fd_prepare.*` counts.
pub const NOT_FOLLOWED: [(&str, &str); 8] = [
    (
        "fsopen, fspick, fsmount, open_tree, open_tree_attr",
        "the mount API (FD_ADD users in 7.2): what each refuses before its allocation is the filesystem's; not in the syscall table yet",
    ),
    (
        "perf_event_open",
        "allocates once the event is made: an error does not tell whether alloc_fd ran",
    ),
    (
        "bpf",
        "which commands allocate (MAP_CREATE, PROG_LOAD, the *_GET_FD_BY_ID, ...) is in the attr union, and they allocate after verification",
    ),
    (
        "io_uring_setup",
        "allocates after the rings are set up; its fds and fixed files are io_uring's",
    ),
    (
        "recvmsg, recvmmsg (SCM_RIGHTS)",
        "receive_fd() runs once per fd of the control message, which the probe would have to walk in the cmsg the kernel writes back",
    ),
    (
        "clone, clone3 (CLONE_PIDFD)",
        "the pidfd is allocated inside copy_process, among its many errors",
    ),
    (
        "ioctl SECCOMP_IOCTL_NOTIF_ADDFD without SECCOMP_ADDFD_FLAG_SETFD",
        "receive_fd() allocates in the table of the task the supervisor answers, another task's, which the supervisor's call does not show",
    ),
    (
        "open_by_handle_at, memfd_secret",
        "not in the syscall table yet (open_by_handle_at allocates through FD_ADD in 7.2)",
    ),
];

/// The header of every `syscalls:*` record, as its format file lays it out
/// (`/sys/kernel/tracing/events/syscalls/sys_enter_poll/format`): `common_type` at 0,
/// `common_flags` at 2, `common_preempt_count` at 3, `common_pid` at 4, `int
/// __syscall_nr` at 8; the arguments, or the return value, from 16.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SyscallHeader {
    pub common_type: u16,
    pub common_flags: u8,
    pub common_preempt_count: u8,
    pub common_pid: i32,
    pub syscall_nr: i32,
    _pad: u32,
}

/// Offsets in x86-64's `struct pt_regs` (arch/x86/include/asm/ptrace.h), where the kernel
/// keeps a task's user registers from its entry to its return: the unwinder's (`--stacks`)
/// and the syscall's arguments, which stay there until the exit (the kernel writes only
/// `ax`, the return value). Fixed by the architecture's entry code; the user side's tests
/// check them against the running kernel's BTF.
pub mod pt_regs {
    pub const BP: u32 = 4 * 8;
    pub const R10: u32 = 7 * 8;
    pub const R9: u32 = 8 * 8;
    pub const R8: u32 = 9 * 8;
    pub const DX: u32 = 12 * 8;
    pub const SI: u32 = 13 * 8;
    pub const DI: u32 = 14 * 8;
    pub const IP: u32 = 16 * 8;
    pub const SP: u32 = 19 * 8;
    /// A syscall's arguments, in order (the x86-64 syscall ABI).
    pub const ARGS: [u32; 6] = [DI, SI, DX, R10, R8, R9];
}

/// A `syscalls:sys_enter_NAME` record of a syscall with `N` arguments: each 8 bytes, from
/// offset 16 (`field:unsigned int fd; offset:16; size:8;`, then 24, 32, ...), named by
/// [`SyscallInfo::args`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SysEnter<const N: usize> {
    pub header: SyscallHeader,
    pub args: [u64; N],
}

/// A `syscalls:sys_exit_NAME` record (`field:long ret; offset:16; size:8;`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SysExit {
    pub header: SyscallHeader,
    pub ret: i64,
}

/// A value per followed syscall, indexed by [`Syscall`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerSyscall<T>(pub [T; SYSCALL_COUNT]);

impl<T: Copy + Default> Default for PerSyscall<T> {
    fn default() -> PerSyscall<T> {
        PerSyscall([T::default(); SYSCALL_COUNT])
    }
}

impl<T> core::ops::Index<Syscall> for PerSyscall<T> {
    type Output = T;

    fn index(&self, syscall: Syscall) -> &T {
        &self.0[syscall as usize]
    }
}

impl<T> core::ops::IndexMut<Syscall> for PerSyscall<T> {
    fn index_mut(&mut self, syscall: Syscall) -> &mut T {
        &mut self.0[syscall as usize]
    }
}

/// A property of a table row that a derived set selects by.
#[derive(Clone, Copy)]
enum Property {
    In(Family),
    /// Looks its one fd up first thing (either kind of [`Family::Lookup`]).
    LooksUp,
    Allocates,
    Logged,
    /// Allocates through `FD_PREPARE()` (`FD_ADD()` included).
    Prepares,
    Adds,
    /// Reaches `expand_files()`: allocates, or grows the table for dup2's newfd or an
    /// ADDFD's.
    Expands,
    /// Reaches `alloc_fdtable()`: expands the table, or copies it.
    Grows,
    /// May copy the table (`dup_fd()`).
    Copies,
}

impl Property {
    const fn of(self, info: &SyscallInfo) -> bool {
        match self {
            Property::In(family) => info.family.is(family),
            Property::LooksUp => info.family.looks_up(),
            Property::Allocates => !matches!(info.allocates, Allocates::No),
            Property::Logged => info.logged,
            Property::Prepares => !matches!(info.prepares, FdPrepare::Direct),
            Property::Adds => matches!(info.prepares, FdPrepare::Add),
            Property::Expands => {
                Property::Allocates.of(info)
                    || info.family.is(Family::Replace)
                    || info.family.is(Family::AddFd)
            }
            Property::Grows => Property::Expands.of(info) || Property::Copies.of(info),
            Property::Copies => info.family.is(Family::CopyTable),
        }
    }

    /// How many syscalls of the table have it.
    const fn count(self) -> usize {
        let (mut index, mut count) = (0, 0);
        while index < SYSCALL_COUNT {
            if self.of(&SYSCALLS[index]) {
                count += 1;
            }
            index += 1;
        }
        count
    }

    /// The syscalls of the table that have it, in table order (`N` of them).
    const fn select<const N: usize>(self) -> [Syscall; N] {
        let mut out = [Syscall::Select; N];
        let (mut index, mut found) = (0, 0);
        while index < SYSCALL_COUNT {
            if self.of(&SYSCALLS[index]) {
                out[found] = SYSCALLS[index].syscall;
                found += 1;
            }
            index += 1;
        }
        out
    }
}

/// The syscalls that look their one fd up first thing.
pub const LOOKING_UP: [Syscall; Property::LooksUp.count()] = Property::LooksUp.select();

/// The syscalls whose `alloc_fd` calls the probe follows.
pub const ALLOCATING: [Syscall; Property::Allocates.count()] = Property::Allocates.select();

/// The syscalls that reach `expand_files()`.
pub const EXPANDING: [Syscall; Property::Expands.count()] = Property::Expands.select();

/// The syscalls that reach `alloc_fdtable()`.
pub const GROWING: [Syscall; Property::Grows.count()] = Property::Grows.select();

/// The syscalls that may copy the table (`dup_fd()`).
pub const COPYING: [Syscall; Property::Copies.count()] = Property::Copies.select();

/// The syscalls whose allocation goes through `FD_PREPARE()` in 7.2.
pub const PREPARING: [Syscall; Property::Prepares.count()] = Property::Prepares.select();

/// The syscalls whose allocation goes through `FD_ADD()` in 7.2.
pub const ADDING: [Syscall; Property::Adds.count()] = Property::Adds.select();

/// The syscalls the strace source decodes.
pub const LOGGED: [Syscall; Property::Logged.count()] = Property::Logged.select();

impl Syscall {
    pub const fn info(self) -> &'static SyscallInfo {
        &SYSCALLS[self as usize]
    }

    pub const fn name(self) -> &'static str {
        self.info().name
    }

    /// Arguments in its `sys_enter_NAME` record.
    pub const fn arity(self) -> usize {
        self.info().args.len()
    }

    /// Where argument `name` is in its `sys_enter_NAME` record's `args`. Asked for in a
    /// constant, a name the table does not give it fails the build.
    pub const fn arg(self, name: &str) -> usize {
        match self.find_arg(name) {
            Some(index) => index,
            None => panic!("the syscall table names no such argument"),
        }
    }

    /// Where argument `name` is in its record, if it takes one of that name.
    pub const fn find_arg(self, name: &str) -> Option<usize> {
        let args = self.info().args;
        let mut index = 0;
        while index < args.len() {
            if same_bytes(args[index].as_bytes(), name.as_bytes()) {
                return Some(index);
            }
            index += 1;
        }
        None
    }

    /// The syscall named `name`, if followed. Constant time: a strace log asks once per line.
    pub fn from_name(name: &str) -> Option<Syscall> {
        let mut slot = name_slot(name.as_bytes());
        loop {
            let syscall = Syscall::ALL[NAME_TABLE[slot]? as usize];
            // Bytes compared inline: the names are short, a memcmp call costs more.
            let known = syscall.name().as_bytes();
            if known.len() == name.len() && known.iter().zip(name.as_bytes()).all(|(a, b)| a == b) {
                return Some(syscall);
            }
            slot = (slot + 1) % NAME_SLOTS;
        }
    }
}

const fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut index = 0;
    while index < a.len() {
        if a[index] != b[index] {
            return false;
        }
        index += 1;
    }
    true
}

const NAME_SLOTS: usize = 2 * SYSCALL_COUNT;

/// Where a name starts looking in [`NAME_TABLE`] (its length and first and last bytes).
const fn name_slot(name: &[u8]) -> usize {
    match name {
        [] => 0,
        [first, ..] => {
            let last = name[name.len() - 1];
            (name.len() * 31 + *first as usize * 7 + last as usize) % NAME_SLOTS
        }
    }
}

/// The followed syscalls' names, open-addressed by [`name_slot`]: the index into
/// [`Syscall::ALL`] of the name in each slot; half the slots stay empty, so probes end.
static NAME_TABLE: [Option<u8>; NAME_SLOTS] = {
    let mut table = [None; NAME_SLOTS];
    let mut index = 0;
    while index < SYSCALL_COUNT {
        let mut slot = name_slot(Syscall::ALL[index].name().as_bytes());
        while table[slot].is_some() {
            slot = (slot + 1) % NAME_SLOTS;
        }
        table[slot] = Some(index as u8);
        index += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscalls_are_found_by_name_and_nothing_else_is() {
        for syscall in Syscall::ALL {
            assert_eq!(Syscall::from_name(syscall.name()), Some(syscall));
            assert_eq!(syscall.info().syscall, syscall);
        }
        for other in [
            "",
            "c",
            "clos",
            "closed",
            "epoll_ctl2",
            "select2",
            "openat3",
            "Close",
        ] {
            assert_eq!(Syscall::from_name(other), None, "{other}");
        }
    }

    #[test]
    fn records_lay_out_as_the_format_files_say() {
        assert_eq!(core::mem::offset_of!(SyscallHeader, syscall_nr), 8);
        assert_eq!(core::mem::offset_of!(SysEnter<3>, args), 16);
        assert_eq!(core::mem::size_of::<SysEnter<3>>(), 40);
        assert_eq!(core::mem::offset_of!(SysExit, ret), 16);
        assert_eq!(Syscall::Poll.arity(), 3);
        assert_eq!(Syscall::Ppoll.arg("sigsetsize"), 4);
        assert_eq!(Syscall::Dup3.arg("flags"), 2);
    }

    #[test]
    fn derived_sets() {
        assert_eq!(ALLOCATING.len(), 27);
        assert!(ALLOCATING.contains(&Syscall::Socketpair));
        assert!(!ALLOCATING.contains(&Syscall::Dup2));
        assert!(LOGGED.contains(&Syscall::Dup3));
        assert_eq!((PREPARING.len(), ADDING.len()), (19, 13));
        // Every FD_PREPARE user allocates one fd, and a log shows its result.
        assert!(
            PREPARING
                .iter()
                .all(|s| matches!(s.info().allocates, One(_)) && s.info().logged)
        );
        assert!(!LOGGED.contains(&Syscall::Read));
        // Every followed syscall has a program, or nothing would follow it.
        assert!(
            SYSCALLS
                .iter()
                .all(|info| info.enter.exists() || info.exit.exists())
        );
    }

    /// What a family says of its rows holds of each: the facts are not said twice.
    #[test]
    fn families_agree_with_their_rows() {
        for info in SYSCALLS {
            let allocates = info.allocates;
            let fits = match info.family {
                Family::Open => matches!(allocates, One(Allocator::Open)),
                Family::Allocate => {
                    matches!(allocates, One(allocator) if allocator != Allocator::Open)
                }
                Family::AllocatePair => matches!(allocates, Two(_)),
                _ => allocates == Allocates::No,
            };
            assert!(fits, "{}: {:?} with {allocates:?}", info.name, info.family);
            // An allocation's exit is its family's (the return value is all it reads), and
            // so is every exit of a family that has a shared one.
            if allocates != Allocates::No {
                assert_eq!(info.exit, Program::Shared, "{}", info.name);
            }
            assert_eq!(
                info.exit == Program::Shared,
                info.family.shared_exit().is_some(),
                "{}",
                info.name
            );
            assert_ne!(info.enter, Program::Shared, "{}", info.name);
            // Only an allocation asks for its fd by an argument, and it has that argument.
            if let Some(argument) = info.asks.argument() {
                assert_eq!(info.family, Family::Allocate, "{}", info.name);
                assert!(info.args.contains(&argument), "{}", info.name);
            }
        }
        assert_eq!(
            Family::Select.members::<2>(),
            [Syscall::Select, Syscall::Pselect6]
        );
        assert_eq!(Family::Lookup(Lookup::FdgetPos).size(), 2);
        assert_eq!(LOOKING_UP.len(), 4);
        assert_eq!(COPYING.len(), 5);
        // dup2, dup3 and ioctl (ADDFD) grow the table without allocating.
        assert_eq!(EXPANDING.len(), ALLOCATING.len() + 3);
        assert!(Asks::UfdIsMinusOne.asks(u64::from(u32::MAX)));
        assert!(!Asks::UfdIsMinusOne.asks(3));
        assert!(Asks::DupFdCommand.asks(F_DUPFD_CLOEXEC));
        assert!(!Asks::DupFdCommand.asks(1));
    }
}
