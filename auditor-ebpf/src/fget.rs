//! read, write, recvmsg and sendmsg: one lookup of their fd each, at entry, on the table
//! as it is then (poll's and select's lookups are their models'); and the tests of the
//! file a close or an fcntl finds.

use auditor_common::{
    Syscall,
    fd::{self, Lookup},
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{arg, tally, tally::Row, target, task};

/// A syscall that looks its one fd up first thing.
fn single_lookup(syscall: Syscall, fd: u64, lookup: Lookup) {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of) {
        // An unsigned int, as the syscalls take it.
        fd::single_lookup(&mut row, fd as u32, lookup, &task::Current);
        tally::call(syscall);
    }
}

#[tracepoint(category = "syscalls", name = "sys_enter_read")]
pub fn read_enter(ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Read, arg!(&ctx, Read, "fd"), Lookup::FdgetPos);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_write")]
pub fn write_enter(ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Write, arg!(&ctx, Write, "fd"), Lookup::FdgetPos);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_recvmsg")]
pub fn recvmsg_enter(ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Recvmsg, arg!(&ctx, Recvmsg, "fd"), Lookup::Fdget);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_sendmsg")]
pub fn sendmsg_enter(ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Sendmsg, arg!(&ctx, Sendmsg, "fd"), Lookup::Fdget);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_close")]
pub fn close_enter(ctx: TracePointContext) -> u32 {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of) {
        fd::close_flush(&mut row, arg!(&ctx, Close, "fd") as u32, &task::Current);
    }
    0
}

/// Every fcntl (its call is counted here; F_DUPFD's allocation is followed in `alloc`).
pub fn fcntl_entry(fd: u32) {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of) {
        fd::fcntl_path_only(&mut row, fd, &task::Current);
        tally::call(Syscall::Fcntl);
    }
}
