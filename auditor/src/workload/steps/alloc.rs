//! Steps that allocate fds (`alloc_fd`): opens, dup, fcntl F_DUPFD, accept, pipes and
//! socket pairs.

use std::{fmt, os::fd::IntoRawFd};

use auditor_common::{Site, Syscall};

use super::{Case, Family, Form, Setup};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Prepared, Table},
    run::{Context as _, Fds, Result, bail, ensure, repeat},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alloc {
    /// `open:CALLS`: opens of /dev/null, kept open.
    Open { calls: u32 },
    /// `open-enoent:CALLS`: opens of a missing path (ENOENT after the fd was allocated).
    OpenMissing { calls: u32 },
    /// `open-unmapped:CALLS`: opens of "" from a page no one has touched (ENOENT before any
    /// fd through 6.18, after it from 6.19), a fresh page each: the name cannot be read
    /// before the kernel copies it.
    OpenUnmappedEmpty { calls: u32 },
    /// `open-emfile:CALLS`: opens with RLIMIT_NOFILE lowered to the first free fd
    /// (EMFILE), then restored.
    OpenOverLimit { calls: u32 },
    /// `open-badflags:CALLS`: opens with O_CREAT | O_DIRECTORY, which build_open_flags
    /// refuses (EINVAL) before any fd is allocated.
    OpenBadFlags { calls: u32 },
    /// `openat2:CALLS:SIZE`: openat2 of /dev/null with a valid `struct open_how` and
    /// `usize` SIZE (below 24: EINVAL, over 4096: E2BIG, else the fds are kept open).
    Openat2 { calls: u32, size: u32 },
    /// `openat2-badmode:CALLS`: openat2 with a mode but no O_CREAT (EINVAL from
    /// build_open_flags).
    Openat2BadMode { calls: u32 },
    /// `openat2-emptypath:CALLS`: openat2 of /dev/null with bit 26 set: O_EMPTYPATH,
    /// which 7.2 takes; 6.18 refuses it (EINVAL); 6.12 and older strip it unchecked (it is
    /// their __FMODE_NONOTIFY). The step checks the running kernel answers as its release
    /// says, and keeps the fds it opens.
    Openat2EmptyPath { calls: u32 },
    /// `openat2-cached:CALLS`: openat2 of /dev/null with O_CREAT and RESOLVE_CACHED, which
    /// build_open_flags refuses (EAGAIN) before any fd is allocated.
    Openat2Cached { calls: u32 },
    /// `dup:CALLS`: dup of fd 3, kept open.
    Dup { calls: u32 },
    /// `dupfd:CALLS:START`: fcntl(3, F_DUPFD, START), kept open.
    DupFd { calls: u32, start: u32 },
    /// `dupfd-emfile:CALLS:START`: fcntl(3, F_DUPFD, START) that fail with EMFILE (the
    /// table cannot grow to START: past fs.nr_open).
    DupFdOverLimit { calls: u32, start: u32 },
    /// `accept-eagain:CALLS`: a non-blocking listening socket on 127.0.0.1, then accepts
    /// with no connection pending (EAGAIN: the fd is allocated, then released).
    AcceptNone { calls: u32 },
    /// `accept-einval:CALLS`: a TCP socket that does not listen, then accepts of it
    /// (EINVAL: the fd is allocated, then released).
    AcceptNotListening { calls: u32 },
    /// `accept-badflags:CALLS`: accept4 with a flag it refuses (EINVAL before the fd).
    AcceptBadFlags { calls: u32 },
    /// `pipe:CALLS`: pipe2 calls (two fds each), kept open.
    Pipe { calls: u32 },
    /// `socketpair:CALLS`: socketpair calls (two fds each), kept open.
    SocketPair { calls: u32 },
    /// `socketpair-badtype:CALLS`: socketpair(AF_UNIX, 12, 0): both fds are allocated,
    /// then the type is refused (EINVAL) and both released.
    SocketPairBadType { calls: u32 },
    /// `SYSCALL:CALLS` for one of [`ANON`]: calls that each allocate an fd of their own
    /// kind (an eventfd, an epoll fd, a timerfd, a signalfd for ufd -1, a memfd, a pidfd
    /// of the workload, an inotify or fanotify fd, a userfaultfd), kept open.
    Anon { syscall: Syscall, calls: u32 },
    /// `pidfd_getfd:CALLS`: a pidfd of the workload (one pidfd_open), then copies of its
    /// fd 3 through it, all kept open.
    PidfdGetfd { calls: u32 },
}

/// The syscalls of `SYSCALL:CALLS` steps.
pub const ANON: [Syscall; 11] = [
    Syscall::Eventfd,
    Syscall::EpollCreate,
    Syscall::TimerfdCreate,
    Syscall::Signalfd,
    Syscall::Signalfd4,
    Syscall::MemfdCreate,
    Syscall::PidfdOpen,
    Syscall::InotifyInit,
    Syscall::InotifyInit1,
    Syscall::FanotifyInit,
    Syscall::Userfaultfd,
];

/// The kinds of [`ANON`] steps: their syscalls' names.
const ANON_KINDS: [&str; ANON.len()] = {
    let mut kinds = [""; ANON.len()];
    let mut index = 0;
    while index < ANON.len() {
        kinds[index] = ANON[index].info().name;
        index += 1;
    }
    kinds
};

/// How the allocation family's steps are written.
pub const FORMS: &[Form] = &[
    Form {
        kinds: &["open"],
        fields: "CALLS",
        does: "openat of /dev/null; the fds stay open",
    },
    Form {
        kinds: &["dup"],
        fields: "CALLS",
        does: "dup of fd 3; the fds stay open",
    },
    Form {
        kinds: &["dupfd"],
        fields: "CALLS:START",
        does: "fcntl F_DUPFD from START; the fds stay open",
    },
    Form {
        kinds: &["dupfd-emfile"],
        fields: "CALLS:START",
        does: "fcntl F_DUPFD from START that fail with EMFILE (START past fs.nr_open, below \
               RLIMIT_NOFILE)",
    },
    Form {
        kinds: &["open-enoent"],
        fields: "CALLS",
        does: "opens of a missing path (the fd is allocated, then released)",
    },
    Form {
        kinds: &["open-emfile"],
        fields: "CALLS",
        does: "opens with RLIMIT_NOFILE lowered to the first free fd (EMFILE)",
    },
    Form {
        kinds: &["open-unmapped"],
        fields: "CALLS",
        does: "opens of \"\" from pages never touched (ENOENT before the fd; the name cannot \
               be read before the kernel's copy)",
    },
    Form {
        kinds: &["open-badflags"],
        fields: "CALLS",
        does: "opens with O_CREAT | O_DIRECTORY (EINVAL before the fd)",
    },
    Form {
        kinds: &["openat2"],
        fields: "CALLS:SIZE",
        does: "openat2 of /dev/null with `usize` SIZE (below 24: EINVAL, over 4096: E2BIG, \
               else the fds stay open)",
    },
    Form {
        kinds: &["openat2-badmode"],
        fields: "CALLS",
        does: "openat2 with a mode and no O_CREAT (EINVAL before the fd)",
    },
    Form {
        kinds: &["openat2-emptypath"],
        fields: "CALLS",
        does: "openat2 with bit 26 (7.2's O_EMPTYPATH; 6.18 refuses it, 6.12 and older strip \
               it), checked against the kernel",
    },
    Form {
        kinds: &["openat2-cached"],
        fields: "CALLS",
        does: "openat2 with O_CREAT and RESOLVE_CACHED (EAGAIN from build_open_flags, before \
               the fd)",
    },
    Form {
        kinds: &["accept-eagain"],
        fields: "CALLS",
        does: "a listening socket on 127.0.0.1, then accepts with nothing to accept (EAGAIN, \
               after the fd was allocated)",
    },
    Form {
        kinds: &["accept-einval"],
        fields: "CALLS",
        does: "accept4 of a TCP socket that does not listen (the fd first, then EINVAL)",
    },
    Form {
        kinds: &["accept-badflags"],
        fields: "CALLS",
        does: "accept4 with a flag it refuses (EINVAL, before the fd)",
    },
    Form {
        kinds: &["pipe", "socketpair"],
        fields: "CALLS",
        does: "pipe2 and socketpair calls, two fds each, kept open",
    },
    Form {
        kinds: &["socketpair-badtype"],
        fields: "CALLS",
        does: "socketpair of a type AF_UNIX refuses (both fds, then EINVAL)",
    },
    Form {
        kinds: &ANON_KINDS,
        fields: "CALLS",
        does: "calls that each allocate an fd of their kind, kept open (fanotify_init and \
               userfaultfd need root)",
    },
    Form {
        kinds: &["pidfd_getfd"],
        fields: "CALLS",
        does: "a pidfd of the workload, then CALLS copies of fd 3 through it",
    },
];

/// Why a case with a dup2 that fails with EBADF is not in a log.
pub const DUP2_EBADF: &str = "a dup2 that fails with EBADF: a log does not say whether oldfd was not open or the table could not grow (dup3.oldfd_not_open unreadable: ingest.rs, `dup_sites_both_ways_from_a_log`)";

/// The allocation family's cases.
pub const CASES: &[Case] = &[
    // Every allocation is followed: memfd_create, inotify_init1, timerfd_create,
    // signalfd4, epoll_create, pidfd_open, eventfd, signalfd, inotify_init,
    // fanotify_init, userfaultfd and pidfd_getfd each add their evaluations of the fd
    // sites (fanotify_init and userfaultfd need root).
    Case::new(
        "every kind of fd allocation",
        "wait memfd_create:4 inotify_init1:4 timerfd_create:3 signalfd4:4 epoll_create:3 \
         pidfd_open:3 eventfd:2 signalfd:1 inotify_init:1 fanotify_init:2 userfaultfd:2 \
         pidfd_getfd:3",
    ),
    // The FD_PREPARE() sites, both ways where a call can take them: opens that publish,
    // fail after the fd, fail for the fd; accepts with no connection; FD_PREPARE and
    // FD_ADD users.
    Case::new(
        "fd_prepare sites",
        "wait open:5 open-enoent:3 open-emfile:2 accept-eagain:4 eventfd:2 epoll_create:1 \
         userfaultfd:1 pidfd_getfd:2 memfd_create:3 signalfd4:1 inotify_init1:1 \
         timerfd_create:1 close:2:0",
    ),
    // Errors on either side of the allocation, as the kernel orders them: accept4 of a
    // TCP socket that does not listen (the fd first, then EINVAL) and with a flag it
    // refuses (EINVAL, no fd); socketpair of a type AF_UNIX refuses (both fds, then
    // EINVAL); openat2 with O_CREAT and RESOLVE_CACHED (EAGAIN from build_open_flags, no
    // fd); open of an empty name from pages not yet mapped, which the probe reads only at
    // exit (ENOENT, no fd).
    Case::new(
        "errors before and after the allocation",
        "wait accept-einval:3 accept-badflags:2 socketpair-badtype:2 openat2-cached:2 \
         open-unmapped:3 open:1",
    ),
    // openat2.size_too_small, openat2.size_too_big and open.bad_flags, both ways each:
    // opens build_open_flags takes and refuses (O_CREAT | O_DIRECTORY), openat2 of sizes
    // 24, 12, 8192 and 32 (whose flags test is undecided: the kernel copies bytes the
    // probe does not read), and with a mode but no O_CREAT; refused calls allocate
    // nothing.
    Case::new(
        "open checks",
        "wait open:3 open-badflags:2 openat2:2:24 openat2:3:12 openat2:1:8192 openat2:1:32 \
         openat2-badmode:2 openat2-emptypath:2",
    ),
    // fd.below_max, fd.fast_path, fd.table_full and fd.emfile on a real sequence: 200
    // opens (the table grows from 128 to 256 and 512), scattered closes, opens that refill
    // the holes (then find the rest of their word full: no fast path), F_DUPFD above
    // next_fd, dup, opens that fail after allocating, opens past RLIMIT_NOFILE (EMFILE).
    Case::new(
        "an allocation sequence",
        "wait open:200 close-fd:70 close-fd:71 close-fd:130 close-fd:199 close-fd:260 open:6 \
         dupfd:2:300 dup:3 open-enoent:2 close:2:0 open-emfile:3 open:1 accept-eagain:3 \
         open:1 pipe:40 socketpair:2 close-fd:3 pipe:1",
    ),
    // fd.past_nr_open and fd.rounded_past_nr_open both ways, with fs.nr_open at 1000: a
    // table filled at 512 grows to 960, not 1024; one filled at 970 cannot grow (cut to
    // 960, too small: EMFILE); an fd of 1005 is past fs.nr_open (EMFILE); and
    // dup3.expand_failed taken, with the same growth's tests: a dup2 onto 970 (cut to
    // 960) and onto 1005 (EBADF); and a fork's copy of the table of 576 fds (1024, cut
    // to 960; a pid target's child is not followed).
    // fs.nr_open at 1000 (no power of two, to see the growth cut to it).
    Case {
        setup: Setup::NrOpen {
            nr_open: 1000,
            nofile: 2048,
        },
        not_in_log: DUP2_EBADF,
        ..Case::new(
            "growth past fs.nr_open",
            "wait dupfd:1:512 dupfd-emfile:1:970 dupfd-emfile:1:1005 dup2-emfile:3:970 \
             dup2-emfile:2:1005 fork",
        )
    },
    // fd.fdtable_too_large taken: a dup2 onto fd 2^27, with fs.nr_open and RLIMIT_NOFILE
    // at 2^28, grows the table to 2^28 slots, whose 2 GiB array alloc_fdtable refuses
    // before allocating anything (EMFILE, which dup2 returns as EBADF).
    Case {
        setup: Setup::NrOpen {
            nr_open: 1 << 28,
            nofile: 1 << 28,
        },
        not_in_log: DUP2_EBADF,
        ..Case::new("a table too large", "wait dup2-emfile:1:134217728")
    },
];

impl Family for Alloc {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Alloc>, StepError> {
        if kind == "openat2" {
            return Ok(Some(Alloc::Openat2 {
                calls: f.number(0, None)?,
                size: f.number(1, None)?,
            }));
        }
        if kind == "dupfd" || kind == "dupfd-emfile" {
            let (calls, start) = (f.number(0, None)?, f.number(1, None)?);
            return Ok(Some(if kind == "dupfd" {
                Alloc::DupFd { calls, start }
            } else {
                Alloc::DupFdOverLimit { calls, start }
            }));
        }
        if let Some(&syscall) = ANON.iter().find(|s| s.name() == kind) {
            let calls = f.number(0, None)?;
            return Ok(Some(Alloc::Anon { syscall, calls }));
        }
        let step: fn(u32) -> Alloc = match kind {
            "pidfd_getfd" => |calls| Alloc::PidfdGetfd { calls },
            "open" => |calls| Alloc::Open { calls },
            "open-enoent" => |calls| Alloc::OpenMissing { calls },
            "open-emfile" => |calls| Alloc::OpenOverLimit { calls },
            "open-unmapped" => |calls| Alloc::OpenUnmappedEmpty { calls },
            "open-badflags" => |calls| Alloc::OpenBadFlags { calls },
            "openat2-badmode" => |calls| Alloc::Openat2BadMode { calls },
            "openat2-emptypath" => |calls| Alloc::Openat2EmptyPath { calls },
            "openat2-cached" => |calls| Alloc::Openat2Cached { calls },
            "accept-einval" => |calls| Alloc::AcceptNotListening { calls },
            "accept-badflags" => |calls| Alloc::AcceptBadFlags { calls },
            "socketpair-badtype" => |calls| Alloc::SocketPairBadType { calls },
            "dup" => |calls| Alloc::Dup { calls },
            "accept-eagain" => |calls| Alloc::AcceptNone { calls },
            "pipe" => |calls| Alloc::Pipe { calls },
            "socketpair" => |calls| Alloc::SocketPair { calls },
            _ => return Ok(None),
        };
        Ok(Some(step(f.number(0, None)?)))
    }

    fn run(&self, _: &Fds) -> Result<()> {
        match *self {
            Alloc::Open { calls } => (0..calls)
                .try_for_each(|_| {
                    std::fs::File::open("/dev/null").map(|file| {
                        let _kept_open = file.into_raw_fd();
                    })
                })
                .map_err(Into::into),
            Alloc::OpenMissing { calls } => {
                (0..calls).try_for_each(|_| {
                    match std::fs::File::open("/nonexistent/auditor-workload") {
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                        other => bail!("expected ENOENT, got {other:?}"),
                    }
                })
            }
            Alloc::OpenUnmappedEmpty { calls } => open_unmapped_empty(calls),
            Alloc::OpenOverLimit { calls } => with_nofile_at_next_free(|| {
                (0..calls).try_for_each(|_| match std::fs::File::open("/dev/null") {
                    Err(e) if e.raw_os_error() == Some(libc::EMFILE) => Ok(()),
                    other => bail!("expected EMFILE, got {other:?}"),
                })
            }),
            Alloc::OpenBadFlags { calls } => repeat(calls, Some(libc::EINVAL), || {
                // SAFETY: a NUL-terminated path; the call fails before opening anything.
                unsafe {
                    libc::syscall(
                        libc::SYS_openat,
                        libc::AT_FDCWD,
                        c"/dev/null".as_ptr(),
                        libc::O_CREAT | libc::O_DIRECTORY,
                        0o644,
                    )
                }
            }),
            Alloc::Openat2 { calls, size } => {
                let errno = match size {
                    0..24 => Some(libc::EINVAL),
                    24..=4096 => None,
                    _ => Some(libc::E2BIG),
                };
                repeat(calls, errno, || openat2(size, 0))
            }
            Alloc::Openat2BadMode { calls } => {
                repeat(calls, Some(libc::EINVAL), || openat2(24, 0o644))
            }
            Alloc::Openat2EmptyPath { calls } => {
                let errno = kernel_refuses_bit_26().then_some(libc::EINVAL);
                repeat(calls, errno, || openat2_flags(24, O_EMPTYPATH, 0, 0))
            }
            Alloc::Openat2Cached { calls } => repeat(calls, Some(libc::EAGAIN), || {
                openat2_flags(
                    24,
                    (libc::O_CREAT | libc::O_WRONLY) as u64,
                    0o600,
                    RESOLVE_CACHED,
                )
            }),
            Alloc::Dup { calls } => repeat(calls, None, || {
                // SAFETY: fd 3 is the workload's; the new fds stay open.
                unsafe { libc::syscall(libc::SYS_dup, 3) }
            }),
            Alloc::DupFd { calls, start } | Alloc::DupFdOverLimit { calls, start } => {
                let errno = matches!(self, Alloc::DupFdOverLimit { .. }).then_some(libc::EMFILE);
                repeat(calls, errno, || {
                    // SAFETY: as above.
                    unsafe { libc::syscall(libc::SYS_fcntl, 3, libc::F_DUPFD, start) }
                })
            }
            Alloc::AcceptNone { calls } => accept_none(calls),
            Alloc::AcceptNotListening { calls } | Alloc::AcceptBadFlags { calls } => {
                let flags = match self {
                    Alloc::AcceptBadFlags { .. } => 0x1,
                    _ => libc::SOCK_CLOEXEC,
                };
                // SAFETY: plain socket calls on a socket of this step's own.
                unsafe {
                    let socket =
                        libc::syscall(libc::SYS_socket, libc::AF_INET, libc::SOCK_STREAM, 0);
                    ensure!(socket >= 0, "socket failed");
                    let null = std::ptr::null_mut::<libc::c_void>();
                    repeat(calls, Some(libc::EINVAL), || {
                        libc::syscall(libc::SYS_accept4, socket, null, null, flags)
                    })
                }
            }
            Alloc::Anon { syscall, calls } => repeat(calls, None, || anon_fd(syscall)),
            Alloc::PidfdGetfd { calls } => {
                let pidfd = anon_fd(Syscall::PidfdOpen);
                ensure!(pidfd >= 0, "pidfd_open failed");
                repeat(calls, None, || {
                    // SAFETY: a copy of the workload's own fd 3 through its own pidfd.
                    unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, 3, 0) }
                })
            }
            Alloc::Pipe { calls } => repeat(calls, None, || {
                let mut fds = [0i32; 2];
                // SAFETY: room for the two fds; they stay open.
                unsafe { libc::syscall(libc::SYS_pipe2, fds.as_mut_ptr(), 0) }
            }),
            Alloc::SocketPairBadType { calls } => repeat(calls, Some(libc::EINVAL), || {
                let mut fds = [0i32; 2];
                // SAFETY: room for the two fds; the call releases them.
                unsafe {
                    libc::syscall(libc::SYS_socketpair, libc::AF_UNIX, 12, 0, fds.as_mut_ptr())
                }
            }),
            Alloc::SocketPair { calls } => repeat(calls, None, || {
                let mut fds = [0i32; 2];
                // SAFETY: as above.
                unsafe {
                    libc::syscall(
                        libc::SYS_socketpair,
                        libc::AF_UNIX,
                        libc::SOCK_STREAM,
                        0,
                        fds.as_mut_ptr(),
                    )
                }
            }),
        }
    }

    fn expect(&self, e: &mut Expected, _: &Layout, table: &mut Table) {
        match *self {
            Alloc::Open { calls } => {
                e.calls[Syscall::Openat] += u64::from(calls);
                for _ in 0..calls {
                    opens_checked(e, 1);
                    table.allocate_lowest(e);
                    e.prepared(Syscall::Openat, Prepared::Published);
                }
            }
            Alloc::Dup { calls } => {
                e.calls[Syscall::Dup] += u64::from(calls);
                for _ in 0..calls {
                    table.allocate_lowest(e);
                }
            }
            Alloc::OpenBadFlags { calls } => {
                e.calls[Syscall::Openat] += u64::from(calls);
                e.all(Site::OpenBadFlags, u64::from(calls), true);
            }
            Alloc::OpenUnmappedEmpty { calls } => {
                // The flags pass; the empty name is refused (ENOENT) before the fd, or,
                // from 6.19 (FD_ADD), after it.
                e.calls[Syscall::Openat] += u64::from(calls);
                opens_checked(e, calls);
                if !kernel_reads_the_name_first() {
                    allocated_and_released(e, table, calls, Syscall::Openat, Prepared::FileFailed);
                }
            }
            Alloc::Openat2 { calls, size } => {
                e.calls[Syscall::Openat2] += u64::from(calls);
                let calls = u64::from(calls);
                e.all(Site::Openat2SizeTooSmall, calls, size < 24);
                if size >= 24 {
                    e.all(Site::Openat2SizeTooBig, calls, size > 4096);
                }
                if (24..=4096).contains(&size) {
                    // The flags are read as the first 24 bytes only: past them the copy
                    // may refuse what is not zero, so the test is undecided.
                    if size == 24 {
                        e.all(Site::OpenBadFlags, calls, false);
                    } else {
                        e.add(Site::OpenBadFlags, 0, 0, calls);
                    }
                    for _ in 0..calls {
                        table.allocate_lowest(e);
                        e.prepared(Syscall::Openat2, Prepared::Published);
                    }
                }
            }
            Alloc::Openat2BadMode { calls } => {
                e.calls[Syscall::Openat2] += u64::from(calls);
                let calls = u64::from(calls);
                e.all(Site::Openat2SizeTooSmall, calls, false);
                e.all(Site::Openat2SizeTooBig, calls, false);
                e.all(Site::OpenBadFlags, calls, true);
            }
            Alloc::Openat2EmptyPath { calls } => {
                e.calls[Syscall::Openat2] += u64::from(calls);
                let refused = kernel_refuses_bit_26();
                e.all(Site::Openat2SizeTooSmall, u64::from(calls), false);
                e.all(Site::Openat2SizeTooBig, u64::from(calls), false);
                e.all(Site::OpenBadFlags, u64::from(calls), refused);
                if !refused {
                    for _ in 0..calls {
                        table.allocate_lowest(e);
                        e.prepared(Syscall::Openat2, Prepared::Published);
                    }
                }
            }
            Alloc::Openat2Cached { calls } => {
                e.calls[Syscall::Openat2] += u64::from(calls);
                let calls = u64::from(calls);
                e.all(Site::Openat2SizeTooSmall, calls, false);
                e.all(Site::Openat2SizeTooBig, calls, false);
                e.all(Site::OpenBadFlags, calls, true);
            }
            Alloc::OpenMissing { calls } => {
                e.calls[Syscall::Openat] += u64::from(calls);
                opens_checked(e, calls);
                // The fd is allocated, then released when the path is not found.
                allocated_and_released(e, table, calls, Syscall::Openat, Prepared::FileFailed);
            }
            Alloc::OpenOverLimit { calls } => {
                // The lowest free fd is found with F_GETFD: one fcntl of each open fd
                // below it, and one of it (no file: not tested).
                e.fcntls(u64::from(table.lowest_free()), false);
                e.calls[Syscall::Fcntl] += 1;
                e.calls[Syscall::Openat] += u64::from(calls);
                opens_checked(e, calls);
                // The limit is the first free fd: the search finds it and it is past `end`.
                for _ in 0..calls {
                    let end = u64::from(table.lowest_free());
                    assert_eq!(table.allocate(e, 0, end), None, "EMFILE expected");
                    e.prepared(Syscall::Openat, Prepared::FdFailed);
                }
            }
            Alloc::Pipe { calls } | Alloc::SocketPair { calls } => {
                let syscall = if matches!(self, Alloc::Pipe { .. }) {
                    Syscall::Pipe2
                } else {
                    Syscall::Socketpair
                };
                e.calls[syscall] += u64::from(calls);
                // Two allocations a call, both kept (with fd_install, not FD_PREPARE).
                for _ in 0..2 * calls {
                    table.allocate_lowest(e);
                }
            }
            Alloc::AcceptNone { calls } => {
                e.calls[Syscall::Socket] += 1;
                e.calls[Syscall::Accept4] += u64::from(calls);
                table.allocate_lowest(e);
                // Each accept allocates the fd, finds no connection and releases it.
                allocated_and_released(e, table, calls, Syscall::Accept4, Prepared::FileFailed);
            }
            Alloc::AcceptNotListening { calls } => {
                e.calls[Syscall::Socket] += 1;
                e.calls[Syscall::Accept4] += u64::from(calls);
                table.allocate_lowest(e);
                // The fd comes first; the socket is found not listening after it.
                allocated_and_released(e, table, calls, Syscall::Accept4, Prepared::FileFailed);
            }
            Alloc::AcceptBadFlags { calls } => {
                e.calls[Syscall::Socket] += 1;
                e.calls[Syscall::Accept4] += u64::from(calls);
                table.allocate_lowest(e);
            }
            Alloc::SocketPairBadType { calls } => {
                e.calls[Syscall::Socketpair] += u64::from(calls);
                for _ in 0..calls {
                    let first = table.allocate_lowest(e);
                    let second = table.allocate_lowest(e);
                    table.close(first);
                    table.close(second);
                }
            }
            Alloc::Anon { syscall, calls } => {
                e.calls[syscall] += u64::from(calls);
                for _ in 0..calls {
                    table.allocate_lowest(e);
                    e.prepared(syscall, Prepared::Published);
                }
            }
            Alloc::PidfdGetfd { calls } => {
                e.calls[Syscall::PidfdOpen] += 1;
                e.calls[Syscall::PidfdGetfd] += u64::from(calls);
                table.allocate_lowest(e);
                for _ in 0..calls {
                    table.allocate_lowest(e);
                    e.prepared(Syscall::PidfdGetfd, Prepared::Published);
                }
            }
            Alloc::DupFd { calls, start } => {
                e.fcntls(u64::from(calls), false);
                for _ in 0..calls {
                    table.allocate(e, start, u64::MAX).expect("room for an fd");
                }
            }
            Alloc::DupFdOverLimit { calls, start } => {
                e.fcntls(u64::from(calls), false);
                for _ in 0..calls {
                    let fd = table.allocate(e, start, u64::MAX);
                    assert_eq!(fd, None, "EMFILE expected");
                }
            }
        }
    }
}

/// One call of `syscall` (one of [`ANON`]) that allocates an fd, kept open.
fn anon_fd(syscall: Syscall) -> libc::c_long {
    let mask: u64 = 0;
    // SAFETY: each call reads only the arguments given here (a NUL-terminated name, an
    // empty signal mask of 8 bytes) and returns a new fd the workload keeps.
    unsafe {
        match syscall {
            Syscall::Eventfd => libc::syscall(libc::SYS_eventfd, 0),
            Syscall::EpollCreate => libc::syscall(libc::SYS_epoll_create, 1),
            Syscall::TimerfdCreate => {
                libc::syscall(libc::SYS_timerfd_create, libc::CLOCK_MONOTONIC, 0)
            }
            Syscall::Signalfd => libc::syscall(libc::SYS_signalfd, -1, &raw const mask, 8),
            Syscall::Signalfd4 => libc::syscall(libc::SYS_signalfd4, -1, &raw const mask, 8, 0),
            Syscall::MemfdCreate => libc::syscall(libc::SYS_memfd_create, c"workload".as_ptr(), 0),
            Syscall::PidfdOpen => libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0),
            Syscall::InotifyInit => libc::syscall(libc::SYS_inotify_init),
            Syscall::InotifyInit1 => libc::syscall(libc::SYS_inotify_init1, 0),
            Syscall::FanotifyInit => libc::syscall(libc::SYS_fanotify_init, 0, libc::O_RDONLY),
            Syscall::Userfaultfd => libc::syscall(libc::SYS_userfaultfd, 0),
            other => unreachable!("{} is not one of ANON", other.name()),
        }
    }
}

/// `calls` opens of `File::open` (O_RDONLY | O_CLOEXEC): build_open_flags accepts them.
/// `calls` opens of an empty name, each from the first byte of a page of its own that is
/// mapped but was never touched, so not yet in the page tables: a probe cannot read it
/// before the kernel's copy faults it in (ENOENT).
fn open_unmapped_empty(calls: u32) -> Result<()> {
    if calls == 0 {
        return Ok(());
    }
    let page = 4096;
    let len = calls as usize * page;
    // SAFETY: a new private anonymous mapping, unmapped below; nothing else uses it.
    let pages = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    ensure!(
        pages != libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    let next = std::cell::Cell::new(0);
    let opened = repeat(calls, Some(libc::ENOENT), || {
        let name = pages
            .cast::<u8>()
            .wrapping_add(next.replace(next.get() + 1) * page);
        // SAFETY: a readable page of zeros: the empty name.
        unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, name, libc::O_RDONLY) }
    });
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(pages, len) };
    opened
}

pub(super) fn opens_checked(e: &mut Expected, calls: u32) {
    e.all(Site::OpenBadFlags, u64::from(calls), false);
}

/// include/uapi/asm-generic/fcntl.h in 7.2: open relative to the fd itself when the path
/// is empty.
const O_EMPTYPATH: u64 = 1 << 26;

/// Whether the running kernel reads an open's name before it allocates the fd: 6.18's
/// do_sys_openat2() does (getname(), then get_unused_fd_flags()); 7.2's allocates in
/// FD_ADD() and hands it the name, an error or not (their trees; 6.19 on taken as 7.2).
fn kernel_reads_the_name_first() -> bool {
    // An unreadable release is taken as the newest, as the model takes it.
    crate::kernel::parse_release(&crate::kernel::release())
        .is_some_and(|release| release <= (6, 18))
}

/// Whether the running kernel's build_open_flags() refuses bit 26 from openat2: 6.18's
/// does; 6.1's and 6.12's strip it first (their trees) and 7.2's takes it as O_EMPTYPATH.
/// Measured on each of them; 6.13 to 6.17 are taken as 6.18, 6.19 to 7.1 as 7.2.
fn kernel_refuses_bit_26() -> bool {
    crate::kernel::parse_release(&crate::kernel::release())
        .is_some_and(|release| release > (6, 12) && release <= (6, 18))
}

/// One openat2 of /dev/null, `size` bytes of `struct open_how` (zeros past the first 24)
/// asking for O_RDONLY with `mode`.
fn openat2(size: u32, mode: u64) -> libc::c_long {
    openat2_flags(size, 0, mode, 0)
}

/// RESOLVE_CACHED (include/uapi/linux/openat2.h).
const RESOLVE_CACHED: u64 = 0x20;

/// As [`openat2`], with `flags` and `resolve`.
fn openat2_flags(size: u32, flags: u64, mode: u64, resolve: u64) -> libc::c_long {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
        rest: [u8; 8192 - 24],
    }
    let how = OpenHow {
        flags,
        mode,
        resolve,
        rest: [0; 8192 - 24],
    };
    // SAFETY: the struct holds 8192 bytes, more than any size the kernel reads (it
    // refuses more than 4096); the path is NUL-terminated; the fd stays open.
    unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c"/dev/null".as_ptr(),
            &raw const how,
            size as usize,
        )
    }
}

/// `calls` allocations by `syscall` whose fds are released at once (as the call fails
/// after them, or a close follows), which ended in FD_PREPARE as `ended` says.
pub(super) fn allocated_and_released(
    e: &mut Expected,
    table: &mut Table,
    calls: u32,
    syscall: Syscall,
    ended: Prepared,
) {
    for _ in 0..calls {
        let fd = table.allocate_lowest(e);
        table.close(fd);
        e.prepared(syscall, ended);
    }
}

/// A non-blocking listening socket on 127.0.0.1 (port chosen by the kernel), then
/// `calls` accepts that find no connection.
fn accept_none(calls: u32) -> Result<()> {
    // SAFETY: plain socket calls on a socket this function owns; the address outlives them.
    unsafe {
        let socket = libc::syscall(
            libc::SYS_socket,
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
            0,
        );
        ensure!(socket >= 0, "socket failed");
        let address = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        let size = std::mem::size_of::<libc::sockaddr_in>();
        ensure!(
            libc::syscall(libc::SYS_bind, socket, &raw const address, size) == 0,
            "bind failed"
        );
        ensure!(
            libc::syscall(libc::SYS_listen, socket, 1) == 0,
            "listen failed"
        );
        let null = std::ptr::null_mut::<libc::c_void>();
        repeat(calls, Some(libc::EAGAIN), || {
            libc::syscall(libc::SYS_accept4, socket, null, null, 0)
        })
    }
}

/// Runs `body` with the soft RLIMIT_NOFILE at the first free fd, then restores it.
fn with_nofile_at_next_free(body: impl FnOnce() -> Result<()>) -> Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    // The lowest free fd: what an open would get (F_GETFD allocates nothing).
    // SAFETY: F_GETFD only reads the fd's flags.
    let free = (0..).find(|&fd: &i32| unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0);
    let free = free.context("no free fd")?;
    setrlimit(Resource::RLIMIT_NOFILE, free as u64, hard)?;
    let result = body();
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard)?;
    result
}

impl fmt::Display for Alloc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Alloc::Open { calls } => write!(f, "open:{calls}"),
            Alloc::OpenMissing { calls } => write!(f, "open-enoent:{calls}"),
            Alloc::OpenOverLimit { calls } => write!(f, "open-emfile:{calls}"),
            Alloc::OpenBadFlags { calls } => write!(f, "open-badflags:{calls}"),
            Alloc::OpenUnmappedEmpty { calls } => write!(f, "open-unmapped:{calls}"),
            Alloc::Openat2 { calls, size } => write!(f, "openat2:{calls}:{size}"),
            Alloc::Openat2BadMode { calls } => write!(f, "openat2-badmode:{calls}"),
            Alloc::Openat2EmptyPath { calls } => write!(f, "openat2-emptypath:{calls}"),
            Alloc::Openat2Cached { calls } => write!(f, "openat2-cached:{calls}"),
            Alloc::AcceptNotListening { calls } => write!(f, "accept-einval:{calls}"),
            Alloc::AcceptBadFlags { calls } => write!(f, "accept-badflags:{calls}"),
            Alloc::SocketPairBadType { calls } => write!(f, "socketpair-badtype:{calls}"),
            Alloc::Dup { calls } => write!(f, "dup:{calls}"),
            Alloc::DupFd { calls, start } => write!(f, "dupfd:{calls}:{start}"),
            Alloc::DupFdOverLimit { calls, start } => write!(f, "dupfd-emfile:{calls}:{start}"),
            Alloc::AcceptNone { calls } => write!(f, "accept-eagain:{calls}"),
            Alloc::Pipe { calls } => write!(f, "pipe:{calls}"),
            Alloc::SocketPair { calls } => write!(f, "socketpair:{calls}"),
            Alloc::Anon { syscall, calls } => write!(f, "{}:{calls}", syscall.name()),
            Alloc::PidfdGetfd { calls } => write!(f, "pidfd_getfd:{calls}"),
        }
    }
}
