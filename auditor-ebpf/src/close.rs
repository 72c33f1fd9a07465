//! close: `auditor_common::close::close` at exit, from the return value.

use auditor_common::{Syscall, close};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{exit_ret, tally, tally::Row, target};

#[tracepoint(category = "syscalls", name = "sys_exit_close")]
pub fn close_exit(ctx: TracePointContext) -> u32 {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of) {
        close::close(&mut row, exit_ret(&ctx));
        tally::call(Syscall::Close);
    }
    0
}
