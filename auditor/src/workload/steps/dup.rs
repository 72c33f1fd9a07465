//! Steps that place a file at a chosen fd: dup2, dup3, and a seccomp supervisor's ADDFD
//! (SETFD).

use std::{fmt, os::fd::RawFd};

use auditor_common::{Site, Syscall};

use super::{Case, Family, Form, Setup};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Prepared, Table},
    run::{Fds, Result, RunError, ensure, repeat},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dup {
    /// `dup2:CALLS:SAME`: dup2 calls, SAME of them of fd 3 onto itself, the others of fd 3
    /// onto fd 4 (which stays open: the fd table does not change).
    Dup2 { calls: u32, same: u32 },
    /// `dup3:CALLS:SAME[:BADFLAGS]`: dup3 calls, SAME of them of fd 3 onto itself (EINVAL),
    /// BADFLAGS of them onto itself with a flag dup3 refuses first (EINVAL), the others of
    /// fd 3 onto fd 4.
    Dup3 {
        calls: u32,
        same: u32,
        bad_flags: u32,
    },
    /// `dup2-closed:CALLS`: dup2 of an fd that is not open onto fd 4 (EBADF from
    /// ksys_dup3's lookup).
    Dup2Closed { calls: u32 },
    /// `dup2-emfile:CALLS:NEWFD`: dup2 of fd 3 onto NEWFD, below RLIMIT_NOFILE, where the
    /// table cannot grow to hold it (EBADF): at or past fs.nr_open, or below it where the
    /// size rounded up is cut back below NEWFD.
    Dup2PastNrOpen { calls: u32, newfd: u32 },
    /// `addfd:CALLS`: a seccomp supervisor (the calling thread) answers a thread's trapped
    /// call after CALLS ioctls SECCOMP_IOCTL_NOTIF_ADDFD with SECCOMP_ADDFD_FLAG_SETFD,
    /// each placing its fd 3 at the thread's fd 4 (the table they share: `replace_fd`).
    AddFd { calls: u32 },
    /// `addfd-emfile:CALLS:NEWFD`: as `addfd`, at NEWFD, below RLIMIT_NOFILE, where the
    /// table cannot grow to hold it (EMFILE).
    AddFdPastNrOpen { calls: u32, newfd: u32 },
}

/// How the dup family's steps are written.
pub const FORMS: &[Form] = &[
    Form {
        kinds: &["dup2"],
        fields: "CALLS:SAME",
        does: "dup2 calls, SAME of them of fd 3 onto itself, the others of fd 3 onto fd 4 \
               (which stays open: the fd table does not change)",
    },
    Form {
        kinds: &["dup3"],
        fields: "CALLS:SAME[:BADFLAGS]",
        does: "dup3 calls, SAME of them of fd 3 onto itself (EINVAL), BADFLAGS of them of fd \
               3 onto itself with a flag dup3 refuses first (EINVAL), the others of fd 3 onto \
               fd 4",
    },
    Form {
        kinds: &["dup2-closed"],
        fields: "CALLS",
        does: "dup2 of an fd that is not open onto fd 4 (EBADF)",
    },
    Form {
        kinds: &["dup2-emfile"],
        fields: "CALLS:NEWFD",
        does: "dup2 of fd 3 onto NEWFD, below RLIMIT_NOFILE, where the table cannot grow to \
               hold it (EBADF): at or past fs.nr_open, or below it where the size rounded up \
               is cut back below NEWFD",
    },
    Form {
        kinds: &["addfd"],
        fields: "CALLS",
        does: "a seccomp supervisor answers a thread's trapped call after CALLS ioctls \
               SECCOMP_IOCTL_NOTIF_ADDFD with SECCOMP_ADDFD_FLAG_SETFD, each placing fd 3 \
               at fd 4 of the table they share",
    },
    Form {
        kinds: &["addfd-emfile"],
        fields: "CALLS:NEWFD",
        does: "as `addfd`, at NEWFD, below RLIMIT_NOFILE, where the table cannot grow to \
               hold it (EMFILE)",
    },
];

/// The dup family's cases: dup2.same_fd and dup3.same_fd, both ways each: dup2 of an fd
/// onto itself (returned at once) and onto another (on to ksys_dup3, not taken there),
/// dup3 onto itself (EINVAL), onto another, and with a flag refused before the fds are
/// compared; dup3.oldfd_not_open both ways (dup2 of a closed fd) and dup3.expand_failed
/// not taken; in a child too.
pub const CASES: &[Case] = &[
    Case {
        not_in_log: super::alloc::DUP2_EBADF,
        ..Case::new(
            "dup sites",
            "dup2:7:3 dup3:9:4:2 dup2-closed:3 fork dup2:2:2 dup3:3:0:3 dup2-closed:1",
        )
    },
    // replace_fd.expand_failed both ways, with fs.nr_open at 1000: a seccomp supervisor's
    // ADDFD (SETFD) at fd 4, which the table holds, and at 1005 (past fs.nr_open) and 970
    // (cut to 960), where it cannot grow (EMFILE), with the growth's tests; from a second
    // thread too. Attached to after its set-up (which sets fs.nr_open), so no child.
    Case {
        setup: Setup::NrOpen {
            nr_open: 1000,
            nofile: 2048,
        },
        ..Case::new(
            "seccomp's ADDFD",
            "wait addfd:3 addfd-emfile:2:1005 addfd-emfile:1:970 thread addfd:1 addfd-emfile:1:1005",
        )
    },
];

impl Family for Dup {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Dup>, StepError> {
        if kind == "dup2-closed" {
            return Ok(Some(Dup::Dup2Closed {
                calls: f.number(0, None)?,
            }));
        }
        if kind == "addfd" {
            return Ok(Some(Dup::AddFd {
                calls: f.number(0, None)?,
            }));
        }
        if kind == "addfd-emfile" {
            return Ok(Some(Dup::AddFdPastNrOpen {
                calls: f.number(0, None)?,
                newfd: f.number(1, None)?,
            }));
        }
        if kind == "dup2-emfile" {
            return Ok(Some(Dup::Dup2PastNrOpen {
                calls: f.number(0, None)?,
                newfd: f.number(1, None)?,
            }));
        }
        if kind != "dup2" && kind != "dup3" {
            return Ok(None);
        }
        let calls: u32 = f.number(0, None)?;
        let same: u32 = f.number(1, None)?;
        let bad_flags: u32 = f.number(2, Some(0))?;
        if u64::from(same) + u64::from(bad_flags) > u64::from(calls) {
            return Err(f.error("SAME and BADFLAGS add up to more than CALLS"));
        }
        Ok(Some(if kind == "dup2" {
            Dup::Dup2 { calls, same }
        } else {
            Dup::Dup3 {
                calls,
                same,
                bad_flags,
            }
        }))
    }

    fn run(&self, fds: &Fds) -> Result<()> {
        match *self {
            Dup::Dup2Closed { calls } => repeat(calls, Some(libc::EBADF), || {
                // SAFETY: the fd is not open; the call fails without changing the table.
                unsafe { libc::syscall(libc::SYS_dup2, fds.not_open, 4) }
            }),
            Dup::Dup2PastNrOpen { calls, newfd } => repeat(calls, Some(libc::EBADF), || {
                // SAFETY: the call fails without changing the table.
                unsafe { libc::syscall(libc::SYS_dup2, 3, newfd) }
            }),
            Dup::AddFd { calls } => supervise(calls, 4, None),
            Dup::AddFdPastNrOpen { calls, newfd } => supervise(calls, newfd, Some(libc::EMFILE)),
            Dup::Dup2 { calls, same } => {
                // dup2(3, 3) returns 3; dup2(3, 4) replaces fd 4 by a copy of fd 3.
                repeat(same, None, || dup(libc::SYS_dup2, 3, 0))?;
                repeat(calls - same, None, || dup(libc::SYS_dup2, 4, 0))
            }
            Dup::Dup3 {
                calls,
                same,
                bad_flags,
            } => {
                repeat(same, Some(libc::EINVAL), || dup(libc::SYS_dup3, 3, 0))?;
                repeat(bad_flags, Some(libc::EINVAL), || {
                    dup(libc::SYS_dup3, 3, libc::O_NONBLOCK)
                })?;
                repeat(calls - same - bad_flags, None, || {
                    dup(libc::SYS_dup3, 4, libc::O_CLOEXEC)
                })
            }
        }
    }

    fn expect(&self, e: &mut Expected, _: &Layout, table: &mut Table) {
        match *self {
            Dup::Dup2 { calls, same } => dup2s(e, calls, same),
            Dup::Dup3 {
                calls,
                same,
                bad_flags,
            } => {
                e.calls[Syscall::Dup3] += u64::from(calls);
                // The flags are checked before the fds (and refuse the call).
                let reached = u64::from(calls - bad_flags);
                e.add(
                    Site::Dup3SameFd,
                    u64::from(same),
                    reached - u64::from(same),
                    0,
                );
                looked_up(e, reached - u64::from(same));
            }
            Dup::Dup2Closed { calls } => {
                let calls = u64::from(calls);
                e.calls[Syscall::Dup2] += calls;
                e.all(Site::Dup2SameFd, calls, false);
                e.all(Site::Dup3SameFd, calls, false);
                // Below RLIMIT_NOFILE: oldfd is looked up and missing.
                e.all(Site::Dup3OldfdNotOpen, calls, true);
            }
            Dup::Dup2PastNrOpen { calls, newfd } => {
                assert!(
                    newfd >= table.max_fds(),
                    "dup2-emfile: NEWFD inside the table"
                );
                let calls = u64::from(calls);
                e.calls[Syscall::Dup2] += calls;
                e.all(Site::Dup2SameFd, calls, false);
                e.all(Site::Dup3SameFd, calls, false);
                // The table grows for newfd before oldfd (open) is looked up, and cannot.
                for _ in 0..calls {
                    let grew = table.expand(e, newfd);
                    assert!(!grew, "dup2-emfile: the table can grow to NEWFD");
                }
                e.all(Site::Dup3OldfdNotOpen, calls, false);
                e.all(Site::Dup3ExpandFailed, calls, true);
            }
            Dup::AddFd { calls } => supervised(e, table, calls, |e, _| {
                // Fd 4 is open: the table holds it.
                e.all(Site::ReplaceFdExpandFailed, 1, false);
            }),
            Dup::AddFdPastNrOpen { calls, newfd } => {
                assert!(
                    newfd >= table.max_fds(),
                    "addfd-emfile: NEWFD inside the table"
                );
                supervised(e, table, calls, |e, table| {
                    let grew = table.expand(e, newfd);
                    assert!(!grew, "addfd-emfile: the table can grow to NEWFD");
                    e.all(Site::ReplaceFdExpandFailed, 1, true);
                });
            }
        }
    }
}

/// What a seccomp supervisor step counts, `each` for each of its `calls` ADDFD ioctls: the
/// thread whose call it answers (a clone3 sharing the table), the listener's fd the
/// thread's seccomp() allocates, its close at the end; the other ioctls (RECV, SEND)
/// reach no site.
fn supervised(
    e: &mut Expected,
    table: &mut Table,
    calls: u32,
    mut each: impl FnMut(&mut Expected, &mut Table),
) {
    e.calls[Syscall::Clone3] += 1;
    e.calls[Syscall::Seccomp] += 1;
    let listener = table.allocate_lowest(e);
    e.prepared(Syscall::Seccomp, Prepared::Published);
    for _ in 0..calls {
        e.calls[Syscall::Ioctl] += 1;
        each(e, table);
    }
    e.closes(1, false);
    table.close(listener);
}

/// A seccomp supervisor: a thread traps its own getppid (a filter with a listener, its
/// fd in the table the threads share); this thread receives the notification, makes
/// `calls` ADDFD ioctls placing its fd 3 at the other's `newfd` (SETFD), each returning
/// `newfd` or failing with `errno`, answers the call and closes the listener.
fn supervise(calls: u32, newfd: u32, errno: Option<i32>) -> Result<()> {
    let (listener_tx, listener_rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let trapped = scope.spawn(move || trap_getppid(&listener_tx));
        let listener = listener_rx
            .recv()
            .map_err(|_| RunError::new("the trapped thread made no listener"))?;
        let answered = answer(listener, calls, newfd, errno);
        // SAFETY: the listener is this step's; closing it also answers a call still
        // waiting (ENOSYS), so the thread ends either way.
        let closed = unsafe { libc::syscall(libc::SYS_close, listener) };
        let trapped = trapped
            .join()
            .map_err(|_| RunError::new("the trapped thread panicked"))?;
        answered?;
        ensure!(closed == 0, "close of the listener failed");
        trapped
    })
}

/// The supervisor's side of [`supervise`].
fn answer(listener: RawFd, calls: u32, newfd: u32, errno: Option<i32>) -> Result<()> {
    // SAFETY: plain data, all zeroes valid.
    let mut notification: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV writes one notification into the struct it is given.
    let received = unsafe {
        libc::ioctl(
            listener,
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            &raw mut notification,
        )
    };
    ensure!(received == 0, "SECCOMP_IOCTL_NOTIF_RECV failed");
    let addfd = libc::seccomp_notif_addfd {
        id: notification.id,
        flags: libc::SECCOMP_ADDFD_FLAG_SETFD as u32,
        srcfd: 3,
        newfd,
        newfd_flags: 0,
    };
    let placed = repeat(calls, errno, || {
        // SAFETY: ADDFD reads the struct; fd 3 is the workload's /dev/null.
        libc::c_long::from(unsafe {
            libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ADDFD, &raw const addfd)
        })
    });
    let response = libc::seccomp_notif_resp {
        id: notification.id,
        val: 0,
        error: 0,
        flags: 0,
    };
    // SAFETY: SEND reads the struct.
    let sent = unsafe {
        libc::ioctl(
            listener,
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &raw const response,
        )
    };
    placed?;
    ensure!(sent == 0, "SECCOMP_IOCTL_NOTIF_SEND failed");
    Ok(())
}

/// The trapped side of [`supervise`]: a filter on this thread alone that hands its
/// getppid calls to a listener, sent to the supervisor, then one getppid, answered 0.
fn trap_getppid(listener: &std::sync::mpsc::Sender<RawFd>) -> Result<()> {
    const fn statement(code: u32, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        }
    }
    const fn jump_unless_equal(k: u32, skip: u8) -> libc::sock_filter {
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: skip,
            k,
        }
    }
    // include/uapi/linux/audit.h: EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    // struct seccomp_data: nr at 0, arch at 4.
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let mut program = [
        statement(load, 4),
        jump_unless_equal(AUDIT_ARCH_X86_64, 3),
        statement(load, 0),
        jump_unless_equal(libc::SYS_getppid as u32, 1),
        statement(ret, libc::SECCOMP_RET_USER_NOTIF),
        statement(ret, libc::SECCOMP_RET_ALLOW),
    ];
    let filter = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: no_new_privs on this thread alone (an unprivileged filter needs it), then a
    // filter on this thread alone, read from `filter` during the call.
    let fd = unsafe {
        ensure!(
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0,
            "PR_SET_NO_NEW_PRIVS failed"
        );
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &raw const filter,
        )
    };
    ensure!(fd >= 0, "seccomp with a listener failed");
    listener
        .send(fd as RawFd)
        .map_err(|_| RunError::new("the supervisor is gone"))?;
    // SAFETY: getppid has no arguments; the supervisor answers it.
    let answered = unsafe { libc::syscall(libc::SYS_getppid) };
    ensure!(
        answered == 0,
        "the trapped getppid returned {answered}, not 0"
    );
    Ok(())
}

/// `calls` ksys_dup3 calls past the same-fd test, of an open oldfd onto a newfd below
/// RLIMIT_NOFILE, whose table grows (if at all) within fs.nr_open.
fn looked_up(e: &mut Expected, calls: u64) {
    e.all(Site::Dup3OldfdNotOpen, calls, false);
    e.all(Site::Dup3ExpandFailed, calls, false);
}

/// `calls` dup2 calls, `same` of them with newfd == oldfd (returned at once), the others
/// going on to ksys_dup3, which finds two fds.
pub fn dup2s(e: &mut Expected, calls: u32, same: u32) {
    let (calls, same) = (u64::from(calls), u64::from(same));
    e.calls[Syscall::Dup2] += calls;
    e.add(Site::Dup2SameFd, same, calls - same, 0);
    e.add(Site::Dup3SameFd, 0, calls - same, 0);
    looked_up(e, calls - same);
}

/// dup2 or dup3 (dup2 ignores `flags`) of fd 3 onto `newfd`, 3 or 4.
fn dup(syscall: libc::c_long, newfd: RawFd, flags: libc::c_int) -> libc::c_long {
    // SAFETY: fds 3 and 4 are the workload's own, both /dev/null: a copy of fd 3 onto fd
    // 4 replaces one with the other.
    unsafe { libc::syscall(syscall, 3, newfd, flags) }
}

impl fmt::Display for Dup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Dup::Dup2 { calls, same } => write!(f, "dup2:{calls}:{same}"),
            Dup::Dup3 {
                calls,
                same,
                bad_flags,
            } => write!(f, "dup3:{calls}:{same}:{bad_flags}"),
            Dup::Dup2Closed { calls } => write!(f, "dup2-closed:{calls}"),
            Dup::Dup2PastNrOpen { calls, newfd } => write!(f, "dup2-emfile:{calls}:{newfd}"),
            Dup::AddFd { calls } => write!(f, "addfd:{calls}"),
            Dup::AddFdPastNrOpen { calls, newfd } => write!(f, "addfd-emfile:{calls}:{newfd}"),
        }
    }
}
