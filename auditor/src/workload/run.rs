//! Running a workload: every step issues its syscalls directly (`libc::syscall`), so the
//! process makes exactly the calls the step names, and checks that each returned what the
//! step expects; a call that did not is an error naming the step. This module is what the
//! steps run with (the fds, the checks, the error); `drive.rs` runs the steps.

use std::os::fd::{AsRawFd, IntoRawFd, RawFd};

use super::Layout;

/// Why a workload could not run as its steps say: what failed, and why, innermost last.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RunError(String);

impl RunError {
    pub(super) fn new(why: impl Into<String>) -> RunError {
        RunError(why.into())
    }

    /// The error, as part of `what`.
    pub(super) fn within(self, what: &str) -> RunError {
        RunError(format!("{what}: {}", self.0))
    }
}

impl From<std::io::Error> for RunError {
    fn from(error: std::io::Error) -> RunError {
        RunError(error.to_string())
    }
}

impl From<nix::errno::Errno> for RunError {
    fn from(error: nix::errno::Errno) -> RunError {
        RunError(error.desc().to_string())
    }
}

pub(super) type Result<T> = std::result::Result<T, RunError>;

/// What failed, for a result or an option.
pub(super) trait Context<T> {
    fn context(self, what: &str) -> Result<T>;
}

impl<T, E: std::fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.map_err(|error| RunError(format!("{what}: {error}")))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: &str) -> Result<T> {
        self.ok_or_else(|| RunError::new(what))
    }
}

/// `return Err(...)` with a formatted reason.
macro_rules! bail {
    ($($why:tt)+) => {
        return Err($crate::workload::run::RunError::new(format!($($why)+)))
    };
}

/// [`bail!`] unless `condition` holds.
macro_rules! ensure {
    ($condition:expr, $($why:tt)+) => {
        if !$condition {
            $crate::workload::run::bail!($($why)+);
        }
    };
}
pub(super) use {bail, ensure};

/// The fds of [`Layout`], opened. None is ever closed: the process ends with them, so the
/// only closes are those of `close` steps.
#[derive(Clone)]
pub(super) struct Fds {
    pub(super) pool: Vec<RawFd>,
    /// The first fd number that is not open.
    pub(super) not_open: RawFd,
    pub(super) epoll: Option<RawFd>,
}

impl Fds {
    pub(super) fn open(layout: &Layout) -> Result<Fds> {
        // Inherited fds past 2 would change where allocations land.
        // SAFETY: closes fds nothing in this process uses.
        let closed = unsafe { libc::syscall(libc::SYS_close_range, 3, u32::MAX, 0) };
        ensure!(closed == 0, "close_range failed");
        // dup2 places every fd exactly, whatever the workload inherited, and does not go
        // through fd allocation. /dev/null opens as fd 3, or as one of 0-2 when closed.
        let null = std::fs::File::open("/dev/null")?.into_raw_fd();
        let dup2 = |fd: RawFd| -> Result<()> {
            // SAFETY: dup2 onto an fd number this process owns from now on.
            let placed = unsafe { libc::syscall(libc::SYS_dup2, null, fd) };
            ensure!(placed == libc::c_long::from(fd), "dup2 to {fd} failed");
            Ok(())
        };
        let mut kept = 0;
        for fd in 0..=layout.highest_pool_fd {
            // Fds 0-2 stay as inherited when open (a run without stdin has them closed).
            // SAFETY: F_GETFD only reads the fd's flags.
            let open = unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
            if fd < 3 && open {
                kept += 1;
            } else if fd != null {
                dup2(fd)?;
            }
        }
        // One more dup2 for each of fds 0-2 kept as inherited: the set-up then makes
        // `highest_pool_fd` dup2 calls, each of two fds, whatever it inherited (the counts
        // `workload::expected` gives its exec).
        for _ in 0..kept {
            dup2(layout.highest_pool_fd)?;
        }
        let epoll = layout.epoll.then(ready_epoll).transpose()?;
        // An allocation and its release leave next_fd at the first fd past the layout,
        // whatever fd the first open got.
        let probe = std::fs::File::open("/dev/null")?.into_raw_fd();
        ensure!(
            probe == layout.not_open(),
            "fd {probe} is not past the layout"
        );
        // SAFETY: closes the fd just opened.
        let closed = unsafe { libc::syscall(libc::SYS_close, probe) };
        ensure!(closed == 0, "close failed");
        ensure!(
            epoll.is_none_or(|fd| fd == layout.highest_fd()),
            "the epoll fd is not where the layout puts it"
        );
        Ok(Fds {
            pool: (3..=layout.highest_pool_fd).collect(),
            not_open: layout.not_open(),
            epoll,
        })
    }

    pub(super) fn fd(&self, i: usize) -> RawFd {
        self.pool[i % self.pool.len()]
    }
}

/// An epoll fd watching an eventfd that is readable.
fn ready_epoll() -> Result<RawFd> {
    use nix::sys::{
        epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags},
        eventfd::{EfdFlags, EventFd},
    };
    let event = EventFd::from_value_and_flags(1, EfdFlags::empty())?;
    let epoll = Epoll::new(EpollCreateFlags::empty())?;
    epoll.add(&event, EpollEvent::new(EpollFlags::EPOLLIN, 0))?;
    let fd = epoll.0.as_raw_fd();
    // Both stay open until the process ends (see `Fds`).
    std::mem::forget(event);
    std::mem::forget(epoll);
    Ok(fd)
}

/// Issues `calls` calls, each of which must fail with `errno` (or succeed, for None).
pub(super) fn repeat(
    calls: u32,
    errno: Option<i32>,
    call: impl Fn() -> libc::c_long,
) -> Result<()> {
    for _ in 0..calls {
        let ret = call();
        let got = (ret < 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        ensure!(
            got == errno,
            "returned {ret} (errno {got:?}), expected errno {errno:?}"
        );
    }
    Ok(())
}
