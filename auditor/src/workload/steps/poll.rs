//! poll and ppoll steps.

use std::fmt;

use auditor_common::{Site, Syscall};

use super::{Case, Family, Form, SIGSET_SIZE, TimeoutAndMask, UNMAPPED, timeout, with_guard_page};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Table},
    run::{Fds, Result, ensure, repeat},
};

/// `poll:CALLS:NFDS:NEGATIVE[:NOTOPEN[:TIMEOUT_MS]]` (or `ppoll:…`, `ppoll-mask:…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollCalls {
    pub syscall: Syscall,
    pub calls: u32,
    pub nfds: u32,
    pub negative: u32,
    pub not_open: u32,
    pub timeout_ms: i32,
    /// ppoll passes an (empty) signal mask beside its timeout, as glibc's ppoll passes its
    /// own copy of the timeout and its caller's mask (OpenSSH's); else NULL.
    pub mask: bool,
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
    /// `ppoll-mask-efault:CALLS:NFDS`: the timeout ends a readable page and the mask
    /// starts the next, which is not (EFAULT before the body): read whole, what lies
    /// between them cannot be; the timeout can be read alone.
    MaskFault {
        calls: u32,
        nfds: u32,
    },
    /// `ppoll-mask-einval:CALLS`: a mask of 16 bytes (EINVAL before the body).
    MaskSize {
        calls: u32,
    },
}

impl Poll {
    /// The entries of each call (RLIMIT_NOFILE must allow them).
    pub fn entries(&self) -> u64 {
        match *self {
            Poll::Calls(calls) => u64::from(calls.nfds),
            Poll::MaskFault { nfds, .. } => u64::from(nfds),
            Poll::Fault { .. } | Poll::OverLimit { .. } | Poll::MaskSize { .. } => 0,
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
        kinds: &["ppoll-mask"],
        fields: "CALLS:NFDS:NEGATIVE[:NOTOPEN[:TIMEOUT_MS]]",
        does: "ppolls as `ppoll:…` passing an empty signal mask beside the timeout, as \
               glibc's ppoll passes its copy of the timeout and its caller's mask",
    },
    Form {
        kinds: &["ppoll-mask-efault"],
        fields: "CALLS:NFDS",
        does: "ppolls whose timeout ends a readable page and whose mask starts an \
               unreadable one (EFAULT before the body: every entry undecidable)",
    },
    Form {
        kinds: &["ppoll-mask-einval"],
        fields: "CALLS",
        does: "ppolls with a signal mask of 16 bytes (EINVAL before the body)",
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
    // ppoll's timeout and signal mask, read at once where they lie together: beside each
    // other (with and without a timeout), the mask unreadable, the mask's size wrong.
    Case::new(
        "ppoll's signal mask",
        "ppoll-mask:3:6:2:1 ppoll-mask:2:4:0:0:-1 ppoll-mask:1:3:1:0:5 \
         ppoll-mask-efault:2:5 ppoll-mask-einval:3",
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
            "poll" | "ppoll" | "ppoll-mask" => {
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
                    mask: kind == "ppoll-mask",
                })
            }
            "poll-efault" => Poll::Fault {
                calls: f.number(0, None)?,
                nfds: f.number(1, None)?,
            },
            "poll-einval" => Poll::OverLimit {
                calls: f.number(0, None)?,
            },
            "ppoll-mask-efault" => Poll::MaskFault {
                calls: f.number(0, None)?,
                nfds: f.number(1, None)?,
            },
            "ppoll-mask-einval" => Poll::MaskSize {
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
            Poll::MaskFault { calls, nfds } => run_mask_fault(fds, calls, nfds),
            Poll::MaskSize { calls } => {
                let frame = TimeoutAndMask::new(0);
                repeat(calls, Some(libc::EINVAL), || {
                    let (timespec, mask) = frame.pointers(true);
                    // SAFETY: the kernel refuses the size before reading the mask or the
                    // (empty) array; the frame lives across the call.
                    unsafe { libc::syscall(libc::SYS_ppoll, UNMAPPED, 0, timespec, mask, 16_usize) }
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
            Poll::Fault { calls, nfds } | Poll::MaskFault { calls, nfds } => {
                let calls = u64::from(calls);
                if let Poll::Fault { .. } = self {
                    // EFAULT: the limit check passed; whether the scan ran is unknown.
                    e.calls[Syscall::Poll] += calls;
                    e.all(Site::PollNfdsOverRlimit, calls, false);
                } else {
                    // EFAULT, and the mask could not be read: it or the array failed to
                    // copy, so whether the limit check ran, and all after it, is unknown.
                    e.calls[Syscall::Ppoll] += calls;
                    e.add(Site::PollNfdsOverRlimit, 0, 0, calls);
                }
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
            // EINVAL from the mask's size, read as passed: no branch of the body reached.
            Poll::MaskSize { calls } => e.calls[Syscall::Ppoll] += u64::from(calls),
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
        mask,
    } = poll;
    let entries = entries(fds, nfds, negative, not_open)?;
    repeat(calls, None, || {
        let mut array = entries.clone();
        let array = array.as_mut_ptr();
        let frame = TimeoutAndMask::new(timeout_ms);
        let (timespec, mask) = frame.pointers(mask);
        // SAFETY: the array holds nfds entries; the timeout and mask live across the call.
        unsafe {
            if syscall == Syscall::Poll {
                libc::syscall(libc::SYS_poll, array, nfds, timeout_ms)
            } else {
                libc::syscall(libc::SYS_ppoll, array, nfds, timespec, mask, SIGSET_SIZE)
            }
        }
    })
}

/// `nfds` entries, `negative` of them with fd -1 and `not_open` naming an fd not open.
fn entries(fds: &Fds, nfds: u32, negative: u32, not_open: u32) -> Result<Vec<libc::pollfd>> {
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
    Ok(entries)
}

/// `ppoll-mask-efault`: the timeout at the end of a readable page, the mask at the start
/// of the next, which is mapped but not readable.
fn run_mask_fault(fds: &Fds, calls: u32, nfds: u32) -> Result<()> {
    let entries = entries(fds, nfds, 0, 0)?;
    with_guard_page(|guard| {
        let timespec = guard.wrapping_sub(size_of::<libc::timespec>()) as *mut libc::timespec;
        // SAFETY: the timeout's bytes end the readable page.
        unsafe {
            timespec.write(libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            })
        };
        repeat(calls, Some(libc::EFAULT), || {
            let mut array = entries.clone();
            // SAFETY: the array holds nfds entries; the kernel copies the timeout, then
            // fails to copy the mask (EFAULT).
            unsafe {
                libc::syscall(
                    libc::SYS_ppoll,
                    array.as_mut_ptr(),
                    nfds,
                    timespec,
                    guard,
                    SIGSET_SIZE,
                )
            }
        })
    })
}

impl fmt::Display for Poll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Poll::Calls(step) => {
                let PollCalls { calls, nfds, .. } = step;
                let mask = if step.mask { "-mask" } else { "" };
                write!(
                    f,
                    "{}{mask}:{calls}:{nfds}:{}",
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
            Poll::MaskFault { calls, nfds } => write!(f, "ppoll-mask-efault:{calls}:{nfds}"),
            Poll::MaskSize { calls } => write!(f, "ppoll-mask-einval:{calls}"),
        }
    }
}
