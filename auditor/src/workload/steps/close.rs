//! close steps, and the O_PATH and closed fds that reads, fcntl and close find.

use std::{fmt, os::fd::IntoRawFd};

use auditor_common::Syscall;

use super::{Case, Family, Form};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Prepared, Table},
    run::{Fds, Result, ensure, repeat},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// `close:OK:BAD`: OK closes of fds opened for it, BAD closes of fd -1 (EBADF).
    Calls { ok: u32, bad: u32 },
    /// `close-fd:FD`: close of one fd the workload opened.
    Fd { fd: u32 },
    /// `opath:CALLS`: CALLS times, an O_PATH open of /dev/null, a read of it (EBADF: the
    /// lookup does not hand O_PATH files out), an fcntl F_GETFD of it (allowed) and its
    /// close.
    PathOnly { calls: u32 },
    /// `read-closed:CALLS`: reads of an fd that is not open (EBADF).
    ReadClosed { calls: u32 },
    /// `read:CALLS`: reads of fd 3 (/dev/null: nothing to read).
    Read { calls: u32 },
}

/// How the close family's steps are written.
pub const FORMS: &[Form] = &[
    Form {
        kinds: &["close"],
        fields: "OK:BAD",
        does: "OK closes of fds opened for it, BAD closes of fd -1 (EBADF)",
    },
    Form {
        kinds: &["close-fd"],
        fields: "FD",
        does: "close of one fd the workload opened",
    },
    Form {
        kinds: &["opath"],
        fields: "CALLS",
        does: "an O_PATH open of /dev/null, a read of it (EBADF), an fcntl F_GETFD of it and \
               its close, CALLS times",
    },
    Form {
        kinds: &["read-closed"],
        fields: "CALLS",
        does: "reads of an fd that is not open (EBADF)",
    },
    Form {
        kinds: &["read"],
        fields: "CALLS",
        does: "reads of fd 3 (/dev/null)",
    },
];

/// The close family's cases.
pub const CASES: &[Case] = &[
    // close.fd_not_open, both ways, and close.ok: closes that succeed, and closes of fds
    // that are not open (EBADF, before close.ok).
    Case::new("closes", "close:5:3"),
    // fget.light_path_only, fget.rcu_no_file, fget.rcu_path_only, fdget_pos.file,
    // fdput.cloned, close.not_path_only and fcntl.path_only, both ways each: reads of open
    // fds, of O_PATH ones and of closed ones, with the table the process's own and then
    // shared with a thread; fcntl and close of O_PATH fds (and of others, in `close`).
    Case::new(
        "fd state",
        "wait read:2 opath:3 read-closed:2 close:2:1 thread read:3 opath:2 read-closed:4",
    ),
];

impl Family for Close {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Close>, StepError> {
        Ok(Some(match kind {
            "close" => Close::Calls {
                ok: f.number(0, None)?,
                bad: f.number(1, None)?,
            },
            "opath" | "read-closed" | "read" => {
                let calls = f.number(0, None)?;
                match kind {
                    "opath" => Close::PathOnly { calls },
                    "read" => Close::Read { calls },
                    _ => Close::ReadClosed { calls },
                }
            }
            "close-fd" => Close::Fd {
                fd: f.number(0, None)?,
            },
            _ => return Ok(None),
        }))
    }

    fn run(&self, fds: &Fds) -> Result<()> {
        let read = |fd: libc::c_long| {
            let mut byte = 0u8;
            // SAFETY: one byte of room; the call fails before reading anything.
            unsafe { libc::syscall(libc::SYS_read, fd, &raw mut byte, 1) }
        };
        match *self {
            Close::PathOnly { calls } => (0..calls).try_for_each(|_| {
                // SAFETY: a NUL-terminated path; the fd is the step's, closed below.
                let fd = unsafe {
                    libc::syscall(
                        libc::SYS_openat,
                        libc::AT_FDCWD,
                        c"/dev/null".as_ptr(),
                        libc::O_PATH | libc::O_CLOEXEC,
                    )
                };
                ensure!(fd >= 0, "O_PATH open failed");
                repeat(1, Some(libc::EBADF), || read(fd))?;
                // SAFETY: F_GETFD only reads the fd's flags.
                repeat(1, None, || unsafe {
                    libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFD)
                })?;
                // SAFETY: closes the fd opened above, which nothing else owns.
                repeat(1, None, || unsafe { libc::syscall(libc::SYS_close, fd) })
            }),
            Close::ReadClosed { calls } => {
                repeat(calls, Some(libc::EBADF), || read(fds.not_open.into()))
            }
            Close::Read { calls } => repeat(calls, None, || read(3)),
            Close::Calls { ok, bad } => {
                for _ in 0..ok {
                    let fd = std::fs::File::open("/dev/null")?.into_raw_fd();
                    // SAFETY: closes the fd just opened, which nothing else owns.
                    let ret = unsafe { libc::syscall(libc::SYS_close, fd) };
                    ensure!(ret == 0, "close failed");
                }
                // SAFETY: fd -1 is never open.
                repeat(bad, Some(libc::EBADF), || unsafe {
                    libc::syscall(libc::SYS_close, -1)
                })
            }
            Close::Fd { fd } => repeat(1, None, || {
                // SAFETY: the step names an fd the workload opened.
                unsafe { libc::syscall(libc::SYS_close, fd) }
            }),
        }
    }

    fn expect(&self, e: &mut Expected, _: &Layout, table: &mut Table) {
        match *self {
            Close::Calls { ok, bad } => {
                e.closes(u64::from(ok), false);
                e.bad_closes(u64::from(bad));
                e.calls[Syscall::Openat] += u64::from(ok);
                // Each ok close is of a file opened for it.
                super::alloc::opens_checked(e, ok);
                super::alloc::allocated_and_released(
                    e,
                    table,
                    ok,
                    Syscall::Openat,
                    Prepared::Published,
                );
            }
            Close::PathOnly { calls } => {
                for _ in 0..calls {
                    e.calls[Syscall::Openat] += 1;
                    super::alloc::opens_checked(e, 1);
                    let fd = table.allocate_lowest(e);
                    e.prepared(Syscall::Openat, Prepared::Published);
                    e.reads_of(1, table.shared, Some(true));
                    e.fcntls(1, true);
                    // filp_flush skips dnotify and POSIX locks for it; close returns 0.
                    e.closes(1, true);
                    table.close(fd);
                }
            }
            Close::ReadClosed { calls } => e.reads_of(u64::from(calls), table.shared, None),
            Close::Read { calls } => e.reads(u64::from(calls), table.shared),
            Close::Fd { fd } => {
                e.closes(1, false);
                table.close(fd);
            }
        }
    }
}

impl fmt::Display for Close {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Close::Calls { ok, bad } => write!(f, "close:{ok}:{bad}"),
            Close::Fd { fd } => write!(f, "close-fd:{fd}"),
            Close::PathOnly { calls } => write!(f, "opath:{calls}"),
            Close::ReadClosed { calls } => write!(f, "read-closed:{calls}"),
            Close::Read { calls } => write!(f, "read:{calls}"),
        }
    }
}
