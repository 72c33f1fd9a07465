//! read, write, recvmsg and sendmsg: one `__fget_light` lookup each, at entry (poll's and
//! select's lookups are their models').

use auditor_common::{Reached, Syscall, fd};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{tally, tally::Row, target, task};

/// A syscall that looks its one fd up first thing.
fn single_lookup(syscall: Syscall) {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of) {
        fd::fget(&mut row, 1, Reached::Yes, &task::Current);
        tally::call(syscall);
    }
}

#[tracepoint(category = "syscalls", name = "sys_enter_read")]
pub fn read_enter(_ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Read);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_write")]
pub fn write_enter(_ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Write);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_recvmsg")]
pub fn recvmsg_enter(_ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Recvmsg);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_sendmsg")]
pub fn sendmsg_enter(_ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Sendmsg);
    0
}
