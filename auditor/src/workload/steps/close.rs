//! close steps.

use std::{fmt, os::fd::IntoRawFd};

use auditor_common::{Site, Syscall};

use super::Family;
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
}

impl Family for Close {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Close>, StepError> {
        Ok(Some(match kind {
            "close" => {
                f.at_most(2)?;
                Close::Calls {
                    ok: f.number(0, "OK", None)?,
                    bad: f.number(1, "BAD", None)?,
                }
            }
            "close-fd" => {
                f.at_most(1)?;
                Close::Fd {
                    fd: f.number(0, "FD", None)?,
                }
            }
            _ => return Ok(None),
        }))
    }

    fn run(&self, _: &Fds) -> Result<()> {
        match *self {
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
                e.calls[Syscall::Close] += u64::from(ok) + u64::from(bad);
                e.calls[Syscall::Openat] += u64::from(ok);
                // A close of fd -1 fails with EBADF before the branch.
                e.all(Site::CloseOk, u64::from(ok), true);
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
            Close::Fd { fd } => {
                e.calls[Syscall::Close] += 1;
                e.all(Site::CloseOk, 1, true);
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
        }
    }
}
