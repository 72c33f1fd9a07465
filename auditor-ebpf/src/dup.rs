//! dup2 and dup3: `auditor_common::dup`'s model at exit, from the arguments, the fd table
//! read at entry (RLIMIT_NOFILE, max_fds, whether oldfd is open) and the return value.

use auditor_common::{
    ProcessKey, Syscall,
    dup::{self, DupCall, DupTable},
    maps,
};
use aya_ebpf::{
    bindings::BPF_F_NO_PREALLOC,
    macros::{map, tracepoint},
    maps::HashMap,
    programs::TracePointContext,
};

use crate::{arg, exit_ret, stash_in, take_from, tally, tally::Row, target, task};

/// A dup2 or dup3 in flight.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingDup {
    process: ProcessKey,
    /// 1 from entry to exit (see `crate::PENDING`).
    live: u32,
    /// 1 for dup2 (its corner case first), 0 for dup3.
    dup2: u32,
    /// oldfd, newfd, flags.
    args: [u32; 3],
    /// 1 when `table` could be read.
    table_read: u32,
    table: DupTable,
}

/// dup2 and dup3 calls in flight, by thread id, as `crate::PENDING`.
#[map]
static PENDING_DUP: HashMap<u32, PendingDup> =
    HashMap::with_max_entries(maps::THREADS_CAPACITY, BPF_F_NO_PREALLOC);

pub fn forget_thread(tid: u32) {
    let _ = PENDING_DUP.remove(tid);
}

fn enter(syscall: Syscall, args: [u32; 3]) {
    let Some(process) = target::current() else {
        return;
    };
    let table = task::dup_table(args[0]);
    let pending = PendingDup {
        process,
        live: 1,
        dup2: u32::from(syscall == Syscall::Dup2),
        args,
        table_read: u32::from(table.is_some()),
        table: table.unwrap_or_default(),
    };
    if !stash_in(&PENDING_DUP, &pending)
        && let Some(mut row) = Row::of(&process)
    {
        // No room to follow the call to its exit: counted without its return value.
        model(&mut row, &pending, None);
        tally::call(syscall);
    }
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
    let Some(pending) = take_from(&PENDING_DUP, |p| &mut p.live) else {
        return;
    };
    if let Some(mut row) = Row::of(&pending.process) {
        model(&mut row, &pending, Some(exit_ret(ctx)));
        tally::call(if pending.dup2 != 0 {
            Syscall::Dup2
        } else {
            Syscall::Dup3
        });
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
