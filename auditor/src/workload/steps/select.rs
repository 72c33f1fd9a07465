//! select and pselect6 steps.

use std::fmt;

use auditor_common::{Site, Syscall};

use super::{Case, Family, Form, UNMAPPED, pointer, timeout, timespec};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Table},
    run::{Fds, Result, repeat},
};

/// `select:CALLS:N[:TIMEOUT_MS[:FDS]]`, `pselect6:…`: the read set holds fds
/// 3..min(N, FDS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectCalls {
    pub syscall: Syscall,
    pub calls: u32,
    pub n: i32,
    pub timeout_ms: i32,
    pub fds: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Select {
    Calls(SelectCalls),
    /// `select-sparse:CALLS:N`: the read set holds only fd N - 1.
    Sparse {
        calls: u32,
        n: i32,
    },
    /// `select-efault:CALLS:N`: the timeout is unmapped (EFAULT).
    Fault {
        calls: u32,
        n: i32,
    },
    /// `select-ebadf:CALLS`: the set names an fd that is not open (EBADF).
    BadFd {
        calls: u32,
    },
}

impl Select {
    /// The highest fd number the step names (its fds must be open).
    pub fn fds_named(&self) -> i32 {
        match *self {
            Select::Calls(calls) => calls.n.min(calls.fds),
            Select::Sparse { n, .. } => n,
            Select::Fault { .. } | Select::BadFd { .. } => 0,
        }
    }
}

/// How the select family's steps are written.
pub const FORMS: &[Form] = &[
    Form {
        kinds: &["select", "pselect6"],
        fields: "CALLS:N[:TIMEOUT_MS[:FDS]]",
        does: "calls with `n`; the read set holds fds 3..min(N, FDS) (FDS defaults to N; a \
               smaller one lets N exceed the fd table); TIMEOUT_MS is 0 when left out, and \
               negative means none (NULL)",
    },
    Form {
        kinds: &["select-sparse"],
        fields: "CALLS:N",
        does: "selects with `n` whose read set holds only fd N - 1",
    },
    Form {
        kinds: &["select-efault"],
        fields: "CALLS:N",
        does: "selects whose timeout is unmapped (EFAULT, undecidable)",
    },
    Form {
        kinds: &["select-ebadf"],
        fields: "CALLS",
        does: "selects naming an fd that is not open (EBADF)",
    },
];

/// The select family's cases: select.n_negative, select.n_clamped,
/// select.bitmaps_on_heap, select.fd_not_open, select.zero_timeout and select.word_empty,
/// both ways each, and calls that cannot be decided.
pub const CASES: &[Case] = &[Case::new(
    "select sites",
    "select:4:-1 select:3:70 select:2:70:-1 pselect6:5:70:5 pselect6:1:-1 select:2:5000:0:100 \
     pselect6:1:400 select-sparse:2:300 select-ebadf:6 select-efault:2:9 select-efault:1:-1",
)];

impl Family for Select {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Select>, StepError> {
        Ok(Some(match kind {
            "select" | "pselect6" => {
                let n: i32 = f.number(1, None)?;
                Select::Calls(SelectCalls {
                    syscall: if kind == "select" {
                        Syscall::Select
                    } else {
                        Syscall::Pselect6
                    },
                    calls: f.number(0, None)?,
                    n,
                    timeout_ms: f.number(2, Some(0))?,
                    fds: f.number(3, Some(n))?,
                })
            }
            "select-sparse" => {
                let n: i32 = f.number(1, None)?;
                if n < 4 {
                    return Err(f.error("N must be at least 4 (fd N - 1 is one of the workload's)"));
                }
                Select::Sparse {
                    calls: f.number(0, None)?,
                    n,
                }
            }
            "select-efault" => Select::Fault {
                calls: f.number(0, None)?,
                n: f.number(1, None)?,
            },
            "select-ebadf" => Select::BadFd {
                calls: f.number(0, None)?,
            },
            _ => return Ok(None),
        }))
    }

    fn run(&self, fds: &Fds) -> Result<()> {
        match *self {
            Select::Calls(calls) => run_select(fds, calls),
            Select::Sparse { calls, n } => {
                let mut set = vec![0u64; (n as usize).div_ceil(64)];
                set[(n as usize - 1) / 64] |= 1 << ((n - 1) % 64);
                repeat(calls, None, || {
                    let null = std::ptr::null_mut::<libc::c_void>();
                    let mut read_set = set.clone();
                    let mut timeout = libc::timeval {
                        tv_sec: 0,
                        tv_usec: 0,
                    };
                    // SAFETY: the set holds n bits; the timeout lives across the call.
                    unsafe {
                        libc::syscall(
                            libc::SYS_select,
                            n,
                            read_set.as_mut_ptr(),
                            null,
                            null,
                            &raw mut timeout,
                        )
                    }
                })
            }
            Select::Fault { calls, n } => repeat(calls, Some(libc::EFAULT), || {
                let null = std::ptr::null_mut::<libc::c_void>();
                // SAFETY: the kernel checks the timeout address and fails with EFAULT.
                unsafe { libc::syscall(libc::SYS_select, n, null, null, null, UNMAPPED) }
            }),
            Select::BadFd { calls } => {
                let bad = fds.not_open;
                let mut set = vec![0u64; (bad as usize) / 64 + 1];
                set[bad as usize / 64] |= 1 << (bad % 64);
                repeat(calls, Some(libc::EBADF), || {
                    let null = std::ptr::null_mut::<libc::c_void>();
                    let mut read_set = set.clone();
                    // SAFETY: the set holds bad + 1 bits; no timeout.
                    unsafe {
                        libc::syscall(
                            libc::SYS_select,
                            bad + 1,
                            read_set.as_mut_ptr(),
                            null,
                            null,
                            null,
                        )
                    }
                })
            }
        }
    }

    fn expect(&self, e: &mut Expected, layout: &Layout, table: &mut Table) {
        let shared = table.shared;
        match *self {
            Select::Calls(SelectCalls {
                syscall,
                calls,
                n,
                timeout_ms,
                fds,
            }) => {
                let calls = u64::from(calls);
                e.calls[syscall] += calls;
                // n < 0 fails at once; otherwise every fd is open and the call returns.
                e.all(Site::SelectNNegative, calls, n < 0);
                if n >= 0 {
                    clamp(e, calls, n, layout);
                    e.all(Site::SelectFdNotOpen, calls, false);
                    e.all(Site::SelectZeroTimeout, calls, timeout_ms == 0);
                    // The set holds fds 3..hi, contiguous from word 0: no empty word.
                    let used_n = i64::from(n).min(i64::from(layout.max_fds()));
                    let hi = used_n.min(i64::from(fds)).max(3);
                    let set = (hi - 3) as u64;
                    let words = if set == 0 {
                        0
                    } else {
                        (hi as u64 - 1) / 64 + 1
                    };
                    e.add(Site::SelectWordEmpty, 0, words * calls, 0);
                    e.lookups(set * calls, shared);
                }
            }
            Select::Sparse { calls, n } => {
                let calls = u64::from(calls);
                e.calls[Syscall::Select] += calls;
                e.all(Site::SelectNNegative, calls, false);
                clamp(e, calls, n, layout);
                e.all(Site::SelectFdNotOpen, calls, false);
                e.all(Site::SelectZeroTimeout, calls, true);
                // Only fd n - 1: the words before its own are empty.
                let before = (n as u64 - 1) / 64;
                e.add(Site::SelectWordEmpty, before * calls, calls, 0);
                e.lookups(calls, shared);
            }
            Select::Fault { calls, n } => {
                let calls = u64::from(calls);
                e.calls[Syscall::Select] += calls;
                // EFAULT from the timeout copy: whether core_sys_select ran is unknown.
                e.add(Site::SelectNNegative, 0, 0, calls);
                if n >= 0 {
                    for site in [
                        Site::SelectNClamped,
                        Site::SelectBitmapsOnHeap,
                        Site::SelectFdNotOpen,
                        Site::SelectZeroTimeout,
                    ] {
                        e.add(site, 0, 0, calls);
                    }
                }
            }
            Select::BadFd { calls } => {
                let calls = u64::from(calls);
                e.calls[Syscall::Select] += calls;
                e.all(Site::SelectNNegative, calls, false);
                clamp(e, calls, layout.not_open() + 1, layout);
                e.all(Site::SelectFdNotOpen, calls, true);
            }
        }
    }
}

/// `core_sys_select` cuts n to max_fds, and puts the bitmaps of more than 320 fds (6
/// bitmaps of more than 5 longs) on the heap.
fn clamp(e: &mut Expected, calls: u64, n: i32, layout: &Layout) {
    let max_fds = i64::from(layout.max_fds());
    e.all(Site::SelectNClamped, calls, i64::from(n) > max_fds);
    e.all(
        Site::SelectBitmapsOnHeap,
        calls,
        i64::from(n).min(max_fds) > 320,
    );
}

fn run_select(fds: &Fds, step: SelectCalls) -> Result<()> {
    let SelectCalls {
        syscall,
        calls,
        n,
        timeout_ms,
        fds: set_below,
    } = step;
    let words = (n.max(0) as usize).div_ceil(64);
    let mut template = vec![0u64; words.max(1)];
    for &fd in &fds.pool {
        if fd < n.min(set_below) {
            template[fd as usize / 64] |= 1 << (fd % 64);
        }
    }
    let errno = (n < 0).then_some(libc::EINVAL);
    repeat(calls, errno, || {
        let mut read_set = template.clone();
        let set = read_set.as_mut_ptr();
        let null = std::ptr::null_mut::<libc::c_void>();
        let mut timespec = timespec(timeout_ms);
        // SAFETY: the set holds n bits; the timeout structs live across the call.
        unsafe {
            if syscall == Syscall::Select {
                let mut timeval = timespec.map(|t| libc::timeval {
                    tv_sec: t.tv_sec,
                    tv_usec: t.tv_nsec / 1000,
                });
                libc::syscall(libc::SYS_select, n, set, null, null, pointer(&mut timeval))
            } else {
                libc::syscall(
                    libc::SYS_pselect6,
                    n,
                    set,
                    null,
                    null,
                    pointer(&mut timespec),
                    null,
                )
            }
        }
    })
}

impl fmt::Display for Select {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Select::Calls(step) => {
                write!(f, "{}:{}:{}", step.syscall.name(), step.calls, step.n)?;
                if step.fds != step.n {
                    write!(f, ":{}:{}", step.timeout_ms, step.fds)
                } else {
                    f.write_str(&timeout(step.timeout_ms))
                }
            }
            Select::Sparse { calls, n } => write!(f, "select-sparse:{calls}:{n}"),
            Select::Fault { calls, n } => write!(f, "select-efault:{calls}:{n}"),
            Select::BadFd { calls } => write!(f, "select-ebadf:{calls}"),
        }
    }
}
