//! The workload's steps, by family: each family's module holds all there is to know of
//! its steps — how they are written (parsed and displayed), how they run (the syscalls
//! they issue and what each must return), and what they must count (the oracle's
//! hand-worked counts). A new step of a family is an edit to its module alone.

pub mod alloc;
pub mod chmod;
pub mod close;
pub mod dup;
pub mod epoll;
pub mod poll;
pub mod select;
pub mod task;

use std::fmt;

use super::{
    Fields, Layout, StepError,
    expected::{Expected, Table},
    run::{Fds, Result},
};

/// A workload of known calls that drives sites both ways (`cases.rs` runs every family's),
/// and what it takes to run it.
#[derive(Debug)]
pub struct Case {
    /// What it drives, as a failure names it.
    pub name: &'static str,
    /// The steps. A case that starts with `wait` is traced attached to after its set-up
    /// (its fd allocations are then counted exactly); the others from their exec.
    pub steps: &'static str,
    /// What the machine is set to while it runs.
    pub setup: Setup,
    /// The `syscalls` tracepoint it needs (a syscall newer than some kernels): where the
    /// kernel lacks it, the case is left out (and another case covers that kernel).
    pub needs_event: Option<&'static str>,
    /// Why a strace log of it cannot give its exact counts (empty: it can); the strace
    /// source's own test of such a case says what the log gives instead.
    pub not_in_log: &'static str,
}

/// What a case sets the machine to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// Nothing.
    Nothing,
    /// `fs.nr_open` set to `nr_open`, and RLIMIT_NOFILE raised to `nofile` (past the fds
    /// the case names, so that the limit is not what refuses them).
    NrOpen { nr_open: u32, nofile: u64 },
}

impl Case {
    /// A case of `steps` that needs nothing.
    pub const fn new(name: &'static str, steps: &'static str) -> Case {
        Case {
            name,
            steps,
            setup: Setup::Nothing,
            needs_event: None,
            not_in_log: "",
        }
    }

    /// Traced attached to after its set-up, not from its exec.
    pub fn attached(&self) -> bool {
        self.steps.starts_with("wait")
    }

    /// fs.nr_open while it runs, on a machine whose own is `machine`.
    pub fn nr_open(&self, machine: u32) -> u32 {
        match self.setup {
            Setup::Nothing => machine,
            Setup::NrOpen { nr_open, .. } => nr_open,
        }
    }
}

/// How steps are written and what they do, declared once in each family's `FORMS`: a
/// step's fields are checked against its form and named from it, and the guide's list and
/// `auditor-workload --help` are made from the forms.
#[derive(Debug)]
pub struct Form {
    /// The kinds written this way (`select`, `pselect6`).
    pub kinds: &'static [&'static str],
    /// The fields after the kind, `:`-separated, the optional ones last and in brackets:
    /// `CALLS:N[:TIMEOUT_MS[:FDS]]` (empty: none).
    pub fields: &'static str,
    /// What it does.
    pub does: &'static str,
}

impl Form {
    /// The fields' names, and how many of them are required.
    pub fn names(&self) -> (Vec<&'static str>, usize) {
        let names = |text: &'static str| -> Vec<&'static str> {
            text.split([':', '[', ']'])
                .filter(|name| !name.is_empty())
                .collect()
        };
        let required = names(self.fields.split('[').next().unwrap_or("")).len();
        (names(self.fields), required)
    }

    /// As it is written: `select:CALLS:N[:TIMEOUT_MS[:FDS]]`, `pselect6:…`.
    pub fn written(&self) -> String {
        let with_fields = |kind: &str| {
            if self.fields.is_empty() {
                format!("`{kind}`")
            } else if self.fields.starts_with('[') {
                format!("`{kind}{}`", self.fields)
            } else {
                format!("`{kind}:{}`", self.fields)
            }
        };
        let mut kinds = self.kinds.iter();
        let first = kinds
            .next()
            .map(|kind| with_fields(kind))
            .unwrap_or_default();
        kinds.fold(first, |written, kind| format!("{written}, `{kind}:…`"))
    }
}

/// Every family's forms (`FORMS` in its module).
pub const FORMS: [&[Form]; 8] = [
    select::FORMS,
    poll::FORMS,
    epoll::FORMS,
    close::FORMS,
    alloc::FORMS,
    dup::FORMS,
    chmod::FORMS,
    task::FORMS,
];

/// Every family's cases (`CASES` in its module).
pub const CASES: [&[Case]; 8] = [
    select::CASES,
    poll::CASES,
    epoll::CASES,
    close::CASES,
    alloc::CASES,
    dup::CASES,
    chmod::CASES,
    task::CASES,
];

/// What every family of steps knows of its own.
pub(super) trait Family: Sized + fmt::Display {
    /// The step written `kind:FIELDS`, if `kind` is one of this family's (else None).
    fn parse(kind: &str, fields: &Fields) -> std::result::Result<Option<Self>, StepError>;

    /// Issues the step's syscalls, checking what each returns.
    fn run(&self, fds: &Fds) -> Result<()>;

    /// Adds what the step must count to `expected`, in a process laid out as `layout`
    /// whose fd table is `table`.
    fn expect(&self, expected: &mut Expected, layout: &Layout, table: &mut Table);
}

/// Optional trailing `:TIMEOUT_MS`, written only when it is not the default 0.
fn timeout(ms: i32) -> String {
    if ms == 0 {
        String::new()
    } else {
        format!(":{ms}")
    }
}

/// Milliseconds as a timespec, NULL for a negative timeout.
fn timespec(timeout_ms: i32) -> Option<libc::timespec> {
    (timeout_ms >= 0).then(|| libc::timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    })
}

fn pointer<T>(value: &mut Option<T>) -> *mut T {
    value.as_mut().map_or(std::ptr::null_mut(), |v| v as *mut T)
}

/// The kernel's `sigset_t` size, as a syscall's `sigsetsize`: a full register (a literal
/// passed to the variadic `libc::syscall` would be an int, its upper half undefined).
const SIGSET_SIZE: usize = auditor_common::prelude::SIGSET_SIZE as usize;

/// A timeout and an empty signal mask side by side, as locals of one frame: glibc's ppoll
/// passes its own copy of the timeout and its caller's mask (OpenSSH's).
#[repr(C)]
struct TimeoutAndMask {
    timespec: libc::timespec,
    mask: u64,
}

impl TimeoutAndMask {
    /// A timeout of `timeout_ms` ([`timespec`]; negative: none, passed as NULL).
    fn new(timeout_ms: i32) -> TimeoutAndMask {
        TimeoutAndMask {
            timespec: timespec(timeout_ms).unwrap_or(libc::timespec {
                tv_sec: -1,
                tv_nsec: 0,
            }),
            mask: 0,
        }
    }

    /// The timeout (NULL for none) and the mask (NULL unless `mask`), for the kernel.
    fn pointers(&self, mask: bool) -> (*const libc::timespec, *const u64) {
        let timespec = if self.timespec.tv_sec >= 0 {
            &raw const self.timespec
        } else {
            std::ptr::null()
        };
        let mask = if mask {
            &raw const self.mask
        } else {
            std::ptr::null()
        };
        (timespec, mask)
    }
}

/// An address below `vm.mmap_min_addr`: never mapped.
const UNMAPPED: usize = 0x10;

/// Runs `f` with the address where a readable page ends and the next, mapped but not
/// readable, starts: what lies across it can be read only in parts.
fn with_guard_page<T>(f: impl FnOnce(*mut u8) -> Result<T>) -> Result<T> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a fresh anonymous mapping of two pages, unmapped below.
    let pages = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if pages == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error().into());
    }
    let guard = pages.cast::<u8>().wrapping_add(page);
    // SAFETY: the second page of the mapping.
    let result = if unsafe { libc::mprotect(guard.cast(), page, libc::PROT_NONE) } != 0 {
        Err(std::io::Error::last_os_error().into())
    } else {
        f(guard)
    };
    // SAFETY: the mapping made above, used by nothing else.
    unsafe { libc::munmap(pages, 2 * page) };
    result
}
