//! dup2 and dup3: `auditor_common::dup`'s model at exit, from the arguments, the fd table
//! read at entry (RLIMIT_NOFILE, max_fds, whether oldfd is open) and the return value.

use auditor_common::{
    ProcessKey, Syscall,
    dup::{self, DupCall, DupTable},
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{
    arg, exit_ret,
    in_flight::{self, Call, Kind},
    tally,
    tally::Row,
    target, task,
};

/// A dup2 or dup3 in flight.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingDup {
    process: ProcessKey,
    /// 1 for dup2 (its corner case first), 0 for dup3.
    dup2: u32,
    /// oldfd, newfd, flags.
    args: [u32; 3],
    /// 1 when `table` could be read.
    table_read: u32,
    table: DupTable,
}

impl PendingDup {
    fn syscall(&self) -> Syscall {
        if self.dup2 != 0 {
            Syscall::Dup2
        } else {
            Syscall::Dup3
        }
    }
}

impl Call for PendingDup {
    const KIND: Kind = Kind::Dup;

    fn unfollowed(&self) {
        if let Some(mut row) = Row::by_key(&self.process) {
            model(&mut row, self, None);
            tally::call(self.syscall());
        }
    }
}

// Inlined: as a function of its own, the compiler left a pointer to its stack in r0 when
// it returned, which the verifier refuses ("cannot return stack pointer to the caller").
#[inline(always)]
fn enter(syscall: Syscall, args: [u32; 3]) {
    let Some(caller) = target::current() else {
        return;
    };
    let table = task::dup_table(caller.task, args[0]);
    in_flight::stash(
        &PendingDup {
            process: caller.process.key,
            dup2: u32::from(syscall == Syscall::Dup2),
            args,
            table_read: u32::from(table.is_some()),
            table: table.unwrap_or_default(),
        },
        &caller,
    );
}

// Inlined: an `Option<i64>` takes two of a BPF call's five argument registers.
#[inline(always)]
fn model(row: &mut Row, pending: &PendingDup, ret: Option<i64>) {
    let table = (pending.table_read != 0).then_some(&pending.table);
    let [oldfd, newfd, flags] = pending.args;
    let call = DupCall {
        oldfd,
        newfd,
        flags,
        ret,
    };
    if pending.dup2 != 0 {
        dup::dup2(row, &call, table);
    } else {
        dup::dup3(row, &call, table);
    }
}

fn exit(ctx: &TracePointContext) {
    let Some((pending, slot)) = in_flight::take::<PendingDup>() else {
        return;
    };
    if let Some(mut row) = Row::of(&pending.process, slot) {
        model(&mut row, &pending, Some(exit_ret(ctx)));
        tally::call(pending.syscall());
    }
}

#[tracepoint(category = "syscalls", name = "sys_enter_dup2")]
pub fn dup2_enter(ctx: TracePointContext) -> u32 {
    let oldfd = dup::fd_from_arg(arg!(&ctx, Dup2, "oldfd"));
    let newfd = dup::fd_from_arg(arg!(&ctx, Dup2, "newfd"));
    enter(Syscall::Dup2, [oldfd, newfd, 0]);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_dup3")]
pub fn dup3_enter(ctx: TracePointContext) -> u32 {
    let oldfd = dup::fd_from_arg(arg!(&ctx, Dup3, "oldfd"));
    let newfd = dup::fd_from_arg(arg!(&ctx, Dup3, "newfd"));
    // An int, as dup3 takes it.
    let flags = arg!(&ctx, Dup3, "flags") as u32;
    enter(Syscall::Dup3, [oldfd, newfd, flags]);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_dup2")]
pub fn dup2_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_dup3")]
pub fn dup3_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx);
    0
}
