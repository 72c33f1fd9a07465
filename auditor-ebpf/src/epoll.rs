//! epoll_wait, epoll_pwait, epoll_pwait2: what `auditor_common::epoll::epoll_wait` needs of
//! a call (its arguments at entry, its return value at exit).

use auditor_common::{
    ProcessKey, Syscall, UNFOLLOWED_RETURN,
    epoll::{self, EpollCtlCall, EpollWaitCall},
    prelude::{Prelude, Timeout},
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{
    arg, args, exit_ret,
    in_flight::{self, Call, Kind},
    tally,
    tally::Row,
    target,
};

/// An epoll_wait, epoll_pwait or epoll_pwait2 in flight.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingWait {
    process: ProcessKey,
    maxevents: i32,
    /// The events buffer.
    events: u64,
    /// The entry point's checks.
    prelude: Prelude,
    timeout: Timeout,
}

impl Call for PendingWait {
    const KIND: Kind = Kind::EpollWait;

    /// Each branch the call may reach is undecided.
    fn unfollowed(&self) {
        if let Some(mut row) = Row::by_key(&self.process) {
            let call = EpollWaitCall {
                maxevents: self.maxevents,
                events: self.events,
                prelude: Prelude::Unknown,
                timeout: self.timeout,
                ret: UNFOLLOWED_RETURN,
            };
            epoll::epoll_wait(&mut row, &call);
        }
    }
}

/// An epoll_ctl in flight.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingCtl {
    process: ProcessKey,
    op: i32,
}

impl Call for PendingCtl {
    const KIND: Kind = Kind::EpollCtl;

    /// Counted without its return value.
    fn unfollowed(&self) {
        if let Some(mut row) = Row::by_key(&self.process) {
            epoll::epoll_ctl(
                &mut row,
                &EpollCtlCall {
                    op: self.op,
                    ret: None,
                },
            );
            tally::call(Syscall::EpollCtl);
        }
    }
}

#[tracepoint(category = "syscalls", name = "sys_enter_epoll_wait")]
pub fn epoll_wait_enter(ctx: TracePointContext) -> u32 {
    if let Some(caller) = target::current() {
        let timeout = Timeout::from_millis(arg!(&ctx, EpollWait, "timeout") as i32);
        in_flight::stash(
            &PendingWait {
                process: caller.process.key,
                maxevents: arg!(&ctx, EpollWait, "maxevents") as i32,
                events: arg!(&ctx, EpollWait, "events"),
                prelude: timeout.prelude(),
                timeout,
            },
            &caller,
        );
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_epoll_wait")]
pub fn epoll_wait_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::EpollWait);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_epoll_pwait")]
pub fn epoll_pwait_enter(ctx: TracePointContext) -> u32 {
    if let Some(caller) = target::current() {
        let timeout = Timeout::from_millis(arg!(&ctx, EpollPwait, "timeout") as i32);
        let sigmask = args::sigmask(
            arg!(&ctx, EpollPwait, "sigmask"),
            arg!(&ctx, EpollPwait, "sigsetsize"),
        );
        in_flight::stash(
            &PendingWait {
                process: caller.process.key,
                maxevents: arg!(&ctx, EpollPwait, "maxevents") as i32,
                events: arg!(&ctx, EpollPwait, "events"),
                prelude: timeout.prelude().and(sigmask),
                timeout,
            },
            &caller,
        );
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_epoll_pwait")]
pub fn epoll_pwait_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::EpollPwait);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_epoll_pwait2")]
pub fn epoll_pwait2_enter(ctx: TracePointContext) -> u32 {
    if let Some(caller) = target::current() {
        let checks = args::timespec_and_sigmask(
            arg!(&ctx, EpollPwait2, "timeout"),
            arg!(&ctx, EpollPwait2, "sigmask"),
            arg!(&ctx, EpollPwait2, "sigsetsize"),
        );
        in_flight::stash(
            &PendingWait {
                process: caller.process.key,
                maxevents: arg!(&ctx, EpollPwait2, "maxevents") as i32,
                events: arg!(&ctx, EpollPwait2, "events"),
                prelude: checks.prelude,
                timeout: checks.timeout,
            },
            &caller,
        );
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_epoll_pwait2")]
pub fn epoll_pwait2_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::EpollPwait2);
    0
}

fn exit(ctx: &TracePointContext, syscall: Syscall) {
    let Some((pending, slot)) = in_flight::take::<PendingWait>() else {
        return;
    };
    let Some(mut row) = Row::of(&pending.process, slot) else {
        return;
    };
    let call = EpollWaitCall {
        maxevents: pending.maxevents,
        events: pending.events,
        prelude: pending.prelude,
        timeout: pending.timeout,
        ret: exit_ret(ctx),
    };
    epoll::epoll_wait(&mut row, &call);
    tally::call(syscall);
}

#[tracepoint(category = "syscalls", name = "sys_enter_epoll_ctl")]
pub fn epoll_ctl_enter(ctx: TracePointContext) -> u32 {
    if let Some(caller) = target::current() {
        let op = arg!(&ctx, EpollCtl, "op") as i32;
        in_flight::stash(
            &PendingCtl {
                process: caller.process.key,
                op,
            },
            &caller,
        );
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_epoll_ctl")]
pub fn epoll_ctl_exit(ctx: TracePointContext) -> u32 {
    if let Some((pending, slot)) = in_flight::take::<PendingCtl>()
        && let Some(mut row) = Row::of(&pending.process, slot)
    {
        let call = EpollCtlCall {
            op: pending.op,
            ret: Some(exit_ret(&ctx)),
        };
        epoll::epoll_ctl(&mut row, &call);
        tally::call(Syscall::EpollCtl);
    }
    0
}
