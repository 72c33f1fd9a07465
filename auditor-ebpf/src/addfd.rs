//! ioctl: a seccomp supervisor's `SECCOMP_IOCTL_NOTIF_ADDFD` (`auditor_common::addfd`'s
//! model at exit, from the argument read at entry and the return value). Every other
//! ioctl returns at entry, uncounted.

use auditor_common::{
    ProcessKey, Syscall,
    addfd::{self, AddFdCall, NotifAddFd},
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{
    arg, args, exit_ret,
    in_flight::{self, Call, Kind},
    tally,
    tally::Row,
    target, task,
};

/// An ADDFD ioctl in flight.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingAddFd {
    process: ProcessKey,
    /// 1 when `addfd` could be read.
    read: u32,
    addfd: NotifAddFd,
}

impl Call for PendingAddFd {
    const KIND: Kind = Kind::AddFd;

    fn unfollowed(&self) {
        if let Some(mut row) = Row::by_key(&self.process) {
            model(&mut row, self, None);
            tally::call(Syscall::Ioctl);
        }
    }
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
    let Some(caller) = target::current() else {
        return 0;
    };
    let addfd = args::read_user::<NotifAddFd>(arg!(&ctx, Ioctl, "arg"));
    in_flight::stash(
        &PendingAddFd {
            process: caller.process.key,
            read: u32::from(addfd.is_some()),
            addfd: addfd.unwrap_or_default(),
        },
        &caller,
    );
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_ioctl")]
pub fn ioctl_exit(ctx: TracePointContext) -> u32 {
    let Some((pending, slot)) = in_flight::take::<PendingAddFd>() else {
        return 0;
    };
    if let Some(mut row) = Row::of(&pending.process, slot) {
        model(&mut row, &pending, Some(exit_ret(&ctx)));
        tally::call(Syscall::Ioctl);
    }
    0
}
