//! select and pselect6 steps.

use std::fmt;

use auditor_common::{Site, Syscall};

use super::{Case, Family, Form, UNMAPPED, pointer, timeout, timespec, with_guard_page};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Table},
    run::{Fds, Result, repeat},
};

/// `select:CALLS:N[:TIMEOUT_MS[:FDS]]`, `pselect6:…`: the read set holds fds
/// 3..min(N, FDS). `select-frame:CALLS:N[:TIMEOUT_MS]`, `pselect6-frame:…`: the three
/// sets hold fds 3..N between them, side by side with the timeout (and pselect6's argpack
/// and signal mask) in one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectCalls {
    pub syscall: Syscall,
    pub calls: u32,
    pub n: i32,
    pub timeout_ms: i32,
    pub fds: i32,
    /// The three sets and the timeout are one frame's locals, as programs keep them; the
    /// plain steps pass a read set alone, on the heap, far from the timeout on the stack.
    pub frame: bool,
}

/// The most fds a `-frame` step's sets hold: `FD_SETSIZE`, as a program's `fd_set`s.
const FRAME_FDS: i32 = 1024;
const FRAME_WORDS: usize = FRAME_FDS as usize / 64;

/// A `-frame` step's locals, side by side as a C function's.
#[repr(C)]
#[derive(Clone, Copy)]
struct Frame {
    sets: [[u64; FRAME_WORDS]; 3],
    timeval: libc::timeval,
    timespec: libc::timespec,
    /// pselect6's `{ const sigset_t *ss; size_t ss_len; }` and the (empty) mask.
    argpack: [u64; 2],
    mask: u64,
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
    /// `select-frame-efault:CALLS:N`: the read set, holding fd 0, ends a readable page
    /// and the timeout starts the next one, which is not (EFAULT): what lies between them
    /// cannot be read whole, each can be read alone.
    FrameFault {
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
            Select::Fault { .. } | Select::FrameFault { .. } | Select::BadFd { .. } => 0,
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
        kinds: &["select-frame", "pselect6-frame"],
        fields: "CALLS:N[:TIMEOUT_MS]",
        does: "calls with `n` up to 1024 whose read, write and except sets hold fds 3..N \
               between them, side by side with the timeout (and pselect6's signal mask) in \
               one frame, as programs keep them",
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
        kinds: &["select-frame-efault"],
        fields: "CALLS:N",
        does: "selects with `n` up to 1024 whose read set, holding fd 0, ends a readable \
               page and whose timeout starts an unreadable one (EFAULT, undecidable)",
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
     pselect6:1:400 select-sparse:2:300 select-ebadf:6 select-efault:2:9 select-efault:1:-1 \
     select-frame:3:70 select-frame:2:9:-1 pselect6-frame:4:200:5 select-frame-efault:3:200",
)];

impl Family for Select {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Select>, StepError> {
        Ok(Some(match kind {
            "select" | "pselect6" | "select-frame" | "pselect6-frame" => {
                let n: i32 = f.number(1, None)?;
                let frame = kind.ends_with("-frame");
                if frame && n > FRAME_FDS {
                    return Err(f.error("N must be at most 1024 (FD_SETSIZE) in a frame"));
                }
                Select::Calls(SelectCalls {
                    syscall: if kind.starts_with("select") {
                        Syscall::Select
                    } else {
                        Syscall::Pselect6
                    },
                    calls: f.number(0, None)?,
                    n,
                    timeout_ms: f.number(2, Some(0))?,
                    fds: if frame { n } else { f.number(3, Some(n))? },
                    frame,
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
            "select-frame-efault" => {
                let n: i32 = f.number(1, None)?;
                if !(1..=FRAME_FDS).contains(&n) {
                    return Err(f.error("N must be 1 to 1024 (FD_SETSIZE) in a frame"));
                }
                Select::FrameFault {
                    calls: f.number(0, None)?,
                    n,
                }
            }
            "select-ebadf" => Select::BadFd {
                calls: f.number(0, None)?,
            },
            _ => return Ok(None),
        }))
    }

    fn run(&self, fds: &Fds) -> Result<()> {
        match *self {
            Select::Calls(calls) if calls.frame => run_frame(fds, calls),
            Select::Calls(calls) => run_select(fds, calls),
            Select::FrameFault { calls, n } => run_frame_fault(calls, n),
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
                frame: _,
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
            Select::Fault { calls, n } | Select::FrameFault { calls, n } => {
                let calls = u64::from(calls);
                e.calls[Syscall::Select] += calls;
                // EFAULT from the timeout copy: whether core_sys_select ran is unknown.
                e.add(Site::SelectNNegative, 0, 0, calls);
                if matches!(self, Select::FrameFault { .. }) {
                    // The set read alone: one word up to fd 0, one fd, neither decided.
                    e.add(Site::SelectWordEmpty, 0, 0, calls);
                    e.add(Site::FgetTableShared, 0, 0, calls);
                }
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
        frame: _,
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

/// A `-frame` step: the sets, the timeout, pselect6's argpack and mask copied into one
/// local before each call (select overwrites the sets), as a program's locals. The pool's
/// fds below n go to the read set and the write set by turns, the first also to the
/// except set, so that a set read from the wrong place changes what is counted.
fn run_frame(fds: &Fds, step: SelectCalls) -> Result<()> {
    let mut template = Frame {
        sets: [[0; FRAME_WORDS]; 3],
        timeval: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        timespec: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        argpack: [0, 8],
        mask: 0,
    };
    let named: Vec<_> = fds.pool.iter().filter(|&&fd| fd < step.n).collect();
    for (i, &&fd) in named.iter().enumerate() {
        let (word, bit) = (fd as usize / 64, 1 << (fd % 64));
        template.sets[i % 2][word] |= bit;
        if i == 0 {
            template.sets[2][word] |= bit;
        }
    }
    let timeout = timespec(step.timeout_ms);
    if let Some(timeout) = timeout {
        template.timespec = timeout;
        template.timeval = libc::timeval {
            tv_sec: timeout.tv_sec,
            tv_usec: timeout.tv_nsec / 1000,
        };
    }
    let errno = (step.n < 0).then_some(libc::EINVAL);
    repeat(step.calls, errno, || {
        let mut frame = template;
        frame.argpack[0] = &raw const frame.mask as u64;
        let [read, write, except] = &mut frame.sets;
        let sets = [read, write, except].map(|set| set.as_mut_ptr());
        // SAFETY: each set holds 1024 bits, n is at most 1024; the timeouts, argpack and
        // mask live across the call.
        unsafe {
            if step.syscall == Syscall::Select {
                let timeval = match timeout {
                    Some(_) => &raw mut frame.timeval,
                    None => std::ptr::null_mut(),
                };
                libc::syscall(libc::SYS_select, step.n, sets[0], sets[1], sets[2], timeval)
            } else {
                let timespec = match timeout {
                    Some(_) => &raw mut frame.timespec,
                    None => std::ptr::null_mut(),
                };
                libc::syscall(
                    libc::SYS_pselect6,
                    step.n,
                    sets[0],
                    sets[1],
                    sets[2],
                    timespec,
                    &raw const frame.argpack,
                )
            }
        }
    })
}

/// `select-frame-efault`: the read set at the end of a readable page, the timeout at the
/// start of the next, which is mapped but not readable.
fn run_frame_fault(calls: u32, n: i32) -> Result<()> {
    with_guard_page(|guard| {
        let bytes = (n as usize).div_ceil(64) * 8;
        let set = guard.wrapping_sub(bytes).cast::<u64>();
        // SAFETY: the set's words lie in the readable page: fd 0 only.
        unsafe {
            std::ptr::write_bytes(set, 0, bytes / 8);
            *set = 1;
        }
        let timeout = guard.cast::<libc::timeval>();
        repeat(calls, Some(libc::EFAULT), || {
            let null = std::ptr::null_mut::<libc::c_void>();
            // SAFETY: the kernel copies the timeout first and fails with EFAULT.
            unsafe { libc::syscall(libc::SYS_select, n, set, null, null, timeout) }
        })
    })
}

impl fmt::Display for Select {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Select::Calls(step) => {
                let frame = if step.frame { "-frame" } else { "" };
                write!(
                    f,
                    "{}{frame}:{}:{}",
                    step.syscall.name(),
                    step.calls,
                    step.n
                )?;
                if step.fds != step.n {
                    write!(f, ":{}:{}", step.timeout_ms, step.fds)
                } else {
                    f.write_str(&timeout(step.timeout_ms))
                }
            }
            Select::Sparse { calls, n } => write!(f, "select-sparse:{calls}:{n}"),
            Select::Fault { calls, n } => write!(f, "select-efault:{calls}:{n}"),
            Select::FrameFault { calls, n } => write!(f, "select-frame-efault:{calls}:{n}"),
            Select::BadFd { calls } => write!(f, "select-ebadf:{calls}"),
        }
    }
}
