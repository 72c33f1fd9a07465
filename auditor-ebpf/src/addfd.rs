//! ioctl: a seccomp supervisor's `SECCOMP_IOCTL_NOTIF_ADDFD` (`auditor_common::addfd`'s
//! model at exit, from the argument read at entry and the return value). Every other
//! ioctl returns at entry, uncounted.

use auditor_common::{
    ProcessKey, Syscall,
    addfd::{self, AddFdCall, NotifAddFd},
    maps,
};
use aya_ebpf::{
    bindings::BPF_F_NO_PREALLOC,
    macros::{map, tracepoint},
    maps::HashMap,
    programs::TracePointContext,
};

use crate::{arg, args, exit_ret, stash_in, take_from, tally, tally::Row, target, task};

/// An ADDFD ioctl in flight.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingAddFd {
    process: ProcessKey,
    /// 1 from entry to exit (see `crate::PENDING`).
    live: u32,
    /// 1 when `addfd` could be read.
    read: u32,
    addfd: NotifAddFd,
}

/// ADDFD ioctls in flight, by thread id, as `crate::PENDING` (few at once: its own
/// capacity, not one per thread).
#[map]
static PENDING_ADDFD: HashMap<u32, PendingAddFd> =
    HashMap::with_max_entries(maps::ADDFD_CAPACITY, BPF_F_NO_PREALLOC);

pub fn forget_thread(tid: u32) {
    let _ = PENDING_ADDFD.remove(tid);
}

// Inlined: an `Option<i64>` takes two of a BPF call's five argument registers.
#[inline(always)]
fn model(row: &mut Row, pending: &PendingAddFd, ret: Option<i64>) {
    let call = AddFdCall {
        addfd: (pending.read != 0).then_some(pending.addfd),
        ret,
    };
    addfd::notif_addfd(row, &call, Some(task::nr_open()));
}

#[tracepoint(category = "syscalls", name = "sys_enter_ioctl")]
pub fn ioctl_enter(ctx: TracePointContext) -> u32 {
    if !addfd::is_addfd(arg!(&ctx, Ioctl, "cmd")) {
        return 0;
    }
    let Some(process) = target::current() else {
        return 0;
    };
    let addfd = args::read_user::<NotifAddFd>(arg!(&ctx, Ioctl, "arg"));
    let pending = PendingAddFd {
        process,
        live: 1,
        read: u32::from(addfd.is_some()),
        addfd: addfd.unwrap_or_default(),
    };
    if !stash_in(&PENDING_ADDFD, &pending)
        && let Some(mut row) = Row::of(&process)
    {
        // No room to follow the call to its exit: counted without its return value.
        model(&mut row, &pending, None);
        tally::call(Syscall::Ioctl);
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_ioctl")]
pub fn ioctl_exit(ctx: TracePointContext) -> u32 {
    let Some(pending) = take_from(&PENDING_ADDFD, |p| &mut p.live) else {
        return 0;
    };
    if let Some(mut row) = Row::of(&pending.process) {
        model(&mut row, &pending, Some(exit_ret(&ctx)));
        tally::call(Syscall::Ioctl);
    }
    0
}
