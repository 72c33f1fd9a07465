//! chmod, fchmodat and fchmodat2: `auditor_common::chmod`'s model at entry.

use auditor_common::{Syscall, chmod};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{arg, tally, tally::Row, target};

/// `do_fchmodat(..., flags)` for a call of `syscall`.
fn do_fchmodat(syscall: Syscall, flags: u32) {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of) {
        chmod::do_fchmodat(&mut row, flags);
        tally::call(syscall);
    }
}

#[tracepoint(category = "syscalls", name = "sys_enter_chmod")]
pub fn chmod_enter(_ctx: TracePointContext) -> u32 {
    do_fchmodat(Syscall::Chmod, 0);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_fchmodat")]
pub fn fchmodat_enter(_ctx: TracePointContext) -> u32 {
    do_fchmodat(Syscall::Fchmodat, 0);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_fchmodat2")]
pub fn fchmodat2_enter(ctx: TracePointContext) -> u32 {
    // An unsigned int, as the syscall takes it.
    do_fchmodat(Syscall::Fchmodat2, arg!(&ctx, Fchmodat2, "flags") as u32);
    0
}
