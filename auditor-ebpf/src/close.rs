//! close: whether `sys_close` succeeded for an fd that was open, decided at exit.

use auditor_common::{Site, Syscall, close};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{EXIT_RET, field, tally, tally::Row, target};

#[tracepoint(category = "syscalls", name = "sys_exit_close")]
pub fn close_exit(ctx: TracePointContext) -> u32 {
    if let Some(row) = target::current().as_ref().and_then(Row::of) {
        let ret = field(&ctx, EXIT_RET) as i64;
        row.record_one(Site::CloseOk, close::ok_evaluation(ret));
        tally::call(Syscall::Close);
    }
    0
}
