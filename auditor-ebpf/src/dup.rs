//! dup2 and dup3: `auditor_common::dup`'s model at entry, from the arguments alone.

use auditor_common::{Syscall, dup};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{arg, tally, tally::Row, target};

#[tracepoint(category = "syscalls", name = "sys_enter_dup2")]
pub fn dup2_enter(ctx: TracePointContext) -> u32 {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of) {
        let oldfd = dup::fd_from_arg(arg!(&ctx, Dup2, "oldfd"));
        let newfd = dup::fd_from_arg(arg!(&ctx, Dup2, "newfd"));
        dup::dup2(&mut row, oldfd, newfd);
        tally::call(Syscall::Dup2);
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_dup3")]
pub fn dup3_enter(ctx: TracePointContext) -> u32 {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of) {
        let oldfd = dup::fd_from_arg(arg!(&ctx, Dup3, "oldfd"));
        let newfd = dup::fd_from_arg(arg!(&ctx, Dup3, "newfd"));
        // An int, as dup3 takes it.
        let flags = arg!(&ctx, Dup3, "flags") as u32;
        dup::dup3(&mut row, oldfd, newfd, flags);
        tally::call(Syscall::Dup3);
    }
    0
}
