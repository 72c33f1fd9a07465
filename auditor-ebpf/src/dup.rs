//! dup2 and dup3: `auditor_common::dup`'s model at entry, from the arguments alone.

use auditor_common::{Syscall, dup};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{field, tally, tally::Row, target};

// Offsets from /sys/kernel/tracing/events/syscalls/sys_enter_{dup2,dup3}/format.
const ENTER_OLDFD: usize = 16;
const ENTER_NEWFD: usize = 24;
const ENTER_FLAGS: usize = 32;

#[tracepoint(category = "syscalls", name = "sys_enter_dup2")]
pub fn dup2_enter(ctx: TracePointContext) -> u32 {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of) {
        let oldfd = dup::fd_from_arg(field(&ctx, ENTER_OLDFD));
        let newfd = dup::fd_from_arg(field(&ctx, ENTER_NEWFD));
        dup::dup2(&mut row, oldfd, newfd);
        tally::call(Syscall::Dup2);
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_dup3")]
pub fn dup3_enter(ctx: TracePointContext) -> u32 {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of) {
        let oldfd = dup::fd_from_arg(field(&ctx, ENTER_OLDFD));
        let newfd = dup::fd_from_arg(field(&ctx, ENTER_NEWFD));
        // An int, as dup3 takes it.
        let flags = field(&ctx, ENTER_FLAGS) as u32;
        dup::dup3(&mut row, oldfd, newfd, flags);
        tally::call(Syscall::Dup3);
    }
    0
}
