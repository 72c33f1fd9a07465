//! poll and ppoll steps.

use std::fmt;

use auditor_common::{Site, Syscall};

use super::{Case, Family, Form, UNMAPPED, pointer, timeout, timespec};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Table},
    run::{Fds, Result, ensure, repeat},
};

/// `poll:CALLS:NFDS:NEGATIVE[:NOTOPEN[:TIMEOUT_MS]]` (or `ppoll:…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollCalls {
    pub syscall: Syscall,
    pub calls: u32,
    pub nfds: u32,
    pub negative: u32,
    pub not_open: u32,
    pub timeout_ms: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    Calls(PollCalls),
    /// `poll-efault:CALLS:NFDS`: an unmapped array (EFAULT).
    Fault {
        calls: u32,
        nfds: u32,
    },
    /// `poll-einval:CALLS`: more entries than RLIMIT_NOFILE (EINVAL).
    OverLimit {
        calls: u32,
    },
}

impl Poll {
    /// The entries of each call (RLIMIT_NOFILE must allow them).
    pub fn entries(&self) -> u64 {
        match *self {
            Poll::Calls(calls) => u64::from(calls.nfds),
            Poll::Fault { .. } | Poll::OverLimit { .. } => 0,
        }
    }
}

/// How the poll family's steps are written.
pub const FORMS: &[Form] = &[
    Form {
        kinds: &["poll", "ppoll"],
        fields: "CALLS:NFDS:NEGATIVE[:NOTOPEN[:TIMEOUT_MS]]",
        does: "calls of NFDS entries, NEGATIVE of them with fd = -1 and NOTOPEN with an fd \
               that is not open (the others on /dev/null, always readable)",
    },
    Form {
        kinds: &["poll-efault"],
        fields: "CALLS:NFDS",
        does: "polls of an unmapped array (EFAULT: every entry undecidable)",
    },
    Form {
        kinds: &["poll-einval"],
        fields: "CALLS",
        does: "polls of more entries than RLIMIT_NOFILE (EINVAL)",
    },
];

/// The poll family's cases.
pub const CASES: &[Case] = &[
    // poll.nfds_over_rlimit, poll.entries_on_heap, poll.zero_timeout, poll.fd_negative and
    // poll.fd_not_open, both ways each; 300 entries: one read, counted in two steps (few
    // ready, so that strace prints every revents: it cuts the list at about 1 KB).
    Case::new(
        "poll sites",
        "poll:3:20:2:1 ppoll:4:40:5:3:-1 poll:2:31:0:0:7 poll:1:0:0 ppoll:2:30:0:30 \
         poll:2:300:270:9 poll-einval:3 poll-efault:2:5",
    ),
    // fget.table_shared: lookups (poll entries, select fds) on a table of its own, then
    // from a second thread.
    Case::new(
        "lookups on a shared table",
        "poll:3:8:2 ppoll:1:5:0 select:2:10 thread poll:2:8:0:3 ppoll:1:4:4 pselect6:1:20",
    ),
    // Arrays the kernel cannot read (EFAULT): every entry or word unreadable.
    Case::new(
        "undecidable calls",
        "poll-efault:4:100 select-efault:3:-1 select-efault:2:7 poll:2:8:1",
    ),
];

impl Family for Poll {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Poll>, StepError> {
        Ok(Some(match kind {
            "poll" | "ppoll" => {
                let nfds: u32 = f.number(1, None)?;
                let negative: u32 = f.number(2, None)?;
                let not_open: u32 = f.number(3, Some(0))?;
                if u64::from(negative) + u64::from(not_open) > u64::from(nfds) {
                    return Err(f.error("NEGATIVE and NOTOPEN add up to more than NFDS"));
                }
                Poll::Calls(PollCalls {
                    syscall: if kind == "poll" {
                        Syscall::Poll
                    } else {
                        Syscall::Ppoll
                    },
                    calls: f.number(0, None)?,
                    nfds,
                    negative,
                    not_open,
                    timeout_ms: f.number(4, Some(0))?,
                })
            }
            "poll-efault" => Poll::Fault {
                calls: f.number(0, None)?,
                nfds: f.number(1, None)?,
            },
            "poll-einval" => Poll::OverLimit {
                calls: f.number(0, None)?,
            },
            _ => return Ok(None),
        }))
    }

    fn run(&self, fds: &Fds) -> Result<()> {
        match *self {
            Poll::Calls(calls) => run_poll(fds, calls),
            Poll::Fault { calls, nfds } => repeat(calls, Some(libc::EFAULT), || {
                // SAFETY: the kernel checks the address and fails with EFAULT.
                unsafe { libc::syscall(libc::SYS_poll, UNMAPPED, nfds, 0) }
            }),
            Poll::OverLimit { calls } => {
                let (soft, _) =
                    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
                repeat(calls, Some(libc::EINVAL), || {
                    // SAFETY: the kernel refuses nfds over RLIMIT_NOFILE before reading.
                    unsafe { libc::syscall(libc::SYS_poll, UNMAPPED, soft + 1, 0) }
                })
            }
        }
    }

    fn expect(&self, e: &mut Expected, _: &Layout, table: &mut Table) {
        match *self {
            Poll::Calls(step) => {
                let calls = u64::from(step.calls);
                e.calls[step.syscall] += calls;
                e.all(Site::PollNfdsOverRlimit, calls, false);
                if step.nfds > 0 {
                    e.all(Site::PollEntriesOnHeap, calls, step.nfds > 30);
                }
                e.all(Site::PollZeroTimeout, calls, step.timeout_ms == 0);
                let (nfds, negative, not_open) = (
                    u64::from(step.nfds),
                    u64::from(step.negative),
                    u64::from(step.not_open),
                );
                e.add(
                    Site::PollFdNegative,
                    negative * calls,
                    (nfds - negative) * calls,
                    0,
                );
                let looked_up = nfds - negative;
                e.add(
                    Site::PollFdNotOpen,
                    not_open * calls,
                    (looked_up - not_open) * calls,
                    0,
                );
                e.lookups(looked_up * calls, table.shared);
            }
            Poll::Fault { calls, nfds } => {
                let calls = u64::from(calls);
                e.calls[Syscall::Poll] += calls;
                // EFAULT: the limit check passed; whether the scan ran is unknown.
                e.all(Site::PollNfdsOverRlimit, calls, false);
                if nfds > 0 {
                    e.add(Site::PollEntriesOnHeap, 0, 0, calls);
                }
                e.add(Site::PollZeroTimeout, 0, 0, calls);
                let entries = u64::from(nfds) * calls;
                e.add(Site::PollFdNegative, 0, 0, entries);
                e.add(Site::PollFdNotOpen, 0, 0, entries);
                e.add(Site::FgetTableShared, 0, 0, entries);
            }
            Poll::OverLimit { calls } => {
                let calls = u64::from(calls);
                e.calls[Syscall::Poll] += calls;
                e.all(Site::PollNfdsOverRlimit, calls, true);
            }
        }
    }
}

fn run_poll(fds: &Fds, poll: PollCalls) -> Result<()> {
    let PollCalls {
        syscall,
        calls,
        nfds,
        negative,
        not_open,
        timeout_ms,
    } = poll;
    // Entry i is negative when it is the k-th of `negative` spread evenly; the first
    // `not_open` of the others name an fd that is not open.
    let mut left_not_open = not_open;
    let entries: Vec<libc::pollfd> = (0..nfds as usize)
        .map(|i| {
            let spread = (i as u64 * u64::from(negative)) % u64::from(nfds.max(1));
            let fd = if negative > 0 && spread < u64::from(negative) {
                -1
            } else if left_not_open > 0 {
                left_not_open -= 1;
                fds.not_open
            } else {
                fds.fd(i)
            };
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }
        })
        .collect();
    let counted = entries.iter().filter(|e| e.fd < 0).count();
    ensure!(
        counted == negative as usize,
        "spread {counted} negative entries, not {negative}"
    );
    repeat(calls, None, || {
        let mut array = entries.clone();
        let array = array.as_mut_ptr();
        // SAFETY: the array holds nfds entries; the timeout lives across the call.
        unsafe {
            if syscall == Syscall::Poll {
                libc::syscall(libc::SYS_poll, array, nfds, timeout_ms)
            } else {
                let mut timeout = timespec(timeout_ms);
                let null = std::ptr::null::<libc::c_void>();
                libc::syscall(libc::SYS_ppoll, array, nfds, pointer(&mut timeout), null, 8)
            }
        }
    })
}

impl fmt::Display for Poll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Poll::Calls(step) => {
                let PollCalls { calls, nfds, .. } = step;
                write!(
                    f,
                    "{}:{calls}:{nfds}:{}",
                    step.syscall.name(),
                    step.negative
                )?;
                if step.not_open != 0 || step.timeout_ms != 0 {
                    write!(f, ":{}{}", step.not_open, timeout(step.timeout_ms))?;
                }
                Ok(())
            }
            Poll::Fault { calls, nfds } => write!(f, "poll-efault:{calls}:{nfds}"),
            Poll::OverLimit { calls } => write!(f, "poll-einval:{calls}"),
        }
    }
}
