//! epoll_wait, epoll_pwait and epoll_pwait2 steps.

use std::fmt;

use auditor_common::{Site, Syscall};

use super::{Family, pointer, timeout, timespec};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Table},
    run::{Fds, Result, bail, repeat},
};

/// `epoll_wait:CALLS:MAXEVENTS[:TIMEOUT_MS]`, `epoll_pwait:…`, `epoll_pwait2:…`: waits on
/// an epoll fd with one ready eventfd (MAXEVENTS <= 0 is refused with EINVAL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpollWaits {
    pub syscall: Syscall,
    pub calls: u32,
    pub maxevents: i32,
    pub timeout_ms: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epoll {
    Wait(EpollWaits),
    /// `epoll-ebadf:CALLS`: epoll_wait on an fd that is not open (EBADF, before the
    /// hinted check of the arguments).
    BadFd {
        calls: u32,
    },
}

impl Epoll {
    /// Whether the step waits on the workload's epoll fd (which the layout then holds).
    pub fn needs_epoll_fd(&self) -> bool {
        matches!(self, Epoll::Wait { .. })
    }
}

impl Family for Epoll {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Epoll>, StepError> {
        Ok(Some(match kind {
            "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => {
                f.at_most(3)?;
                Epoll::Wait(EpollWaits {
                    syscall: match kind {
                        "epoll_wait" => Syscall::EpollWait,
                        "epoll_pwait" => Syscall::EpollPwait,
                        _ => Syscall::EpollPwait2,
                    },
                    calls: f.number(0, "CALLS", None)?,
                    maxevents: f.number(1, "MAXEVENTS", None)?,
                    timeout_ms: f.number(2, "TIMEOUT_MS", Some(0))?,
                })
            }
            "epoll-ebadf" => {
                f.at_most(1)?;
                Epoll::BadFd {
                    calls: f.number(0, "CALLS", None)?,
                }
            }
            _ => return Ok(None),
        }))
    }

    fn run(&self, fds: &Fds) -> Result<()> {
        match *self {
            Epoll::Wait(waits) => run_epoll(fds, waits),
            Epoll::BadFd { calls } => repeat(calls, Some(libc::EBADF), || {
                let mut events = [libc::epoll_event { events: 0, u64: 0 }];
                // SAFETY: one event of room.
                unsafe {
                    libc::syscall(
                        libc::SYS_epoll_wait,
                        fds.not_open,
                        events.as_mut_ptr(),
                        1,
                        0,
                    )
                }
            }),
        }
    }

    fn expect(&self, e: &mut Expected, _: &Layout, _: &mut Table) {
        match *self {
            Epoll::Wait(waits) => {
                let calls = u64::from(waits.calls);
                e.calls[waits.syscall] += calls;
                e.all(Site::EpollBadArgs, calls, waits.maxevents <= 0);
                if waits.maxevents > 0 {
                    e.all(Site::EpollZeroTimeout, calls, waits.timeout_ms == 0);
                }
            }
            // The fd is looked up before the hinted check: nothing is evaluated.
            Epoll::BadFd { calls } => e.calls[Syscall::EpollWait] += u64::from(calls),
        }
    }
}

fn run_epoll(fds: &Fds, waits: EpollWaits) -> Result<()> {
    let EpollWaits {
        syscall,
        calls,
        maxevents,
        timeout_ms,
    } = waits;
    let Some(epoll) = fds.epoll else {
        bail!("no epoll fd");
    };
    let errno = (maxevents <= 0).then_some(libc::EINVAL);
    repeat(calls, errno, || {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; maxevents.max(1) as usize];
        let events = events.as_mut_ptr();
        let null = std::ptr::null::<libc::c_void>();
        // SAFETY: the buffer holds maxevents events; the timeout lives across the call.
        unsafe {
            match syscall {
                Syscall::EpollWait => {
                    libc::syscall(libc::SYS_epoll_wait, epoll, events, maxevents, timeout_ms)
                }
                Syscall::EpollPwait => libc::syscall(
                    libc::SYS_epoll_pwait,
                    epoll,
                    events,
                    maxevents,
                    timeout_ms,
                    null,
                    8,
                ),
                _ => {
                    let mut timeout = timespec(timeout_ms);
                    libc::syscall(
                        libc::SYS_epoll_pwait2,
                        epoll,
                        events,
                        maxevents,
                        pointer(&mut timeout),
                        null,
                        8,
                    )
                }
            }
        }
    })
}

impl fmt::Display for Epoll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Epoll::Wait(waits) => write!(
                f,
                "{}:{}:{}{}",
                waits.syscall.name(),
                waits.calls,
                waits.maxevents,
                timeout(waits.timeout_ms)
            ),
            Epoll::BadFd { calls } => write!(f, "epoll-ebadf:{calls}"),
        }
    }
}
