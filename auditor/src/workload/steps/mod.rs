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

/// An address below `vm.mmap_min_addr`: never mapped.
const UNMAPPED: usize = 0x10;
