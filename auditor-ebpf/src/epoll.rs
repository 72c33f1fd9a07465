//! epoll_wait, epoll_pwait, epoll_pwait2: what `auditor_common::epoll::epoll_wait` needs of
//! a call (its arguments at entry, its return value at exit).

use auditor_common::{
    Syscall, UNFOLLOWED_RETURN,
    epoll::{self, EpollCtlCall, EpollWaitCall},
    prelude::{Prelude, Timeout},
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{Pending, arg, args, exit_ret, stash, take_pending, tally, tally::Row, target};

#[tracepoint(category = "syscalls", name = "sys_enter_epoll_wait")]
pub fn epoll_wait_enter(ctx: TracePointContext) -> u32 {
    if let Some(process) = target::current() {
        let timeout = Timeout::from_millis(arg!(&ctx, EpollWait, "timeout") as i32);
        enter(&Pending::new(
            process,
            Syscall::EpollWait,
            arg!(&ctx, EpollWait, "events"),
            arg!(&ctx, EpollWait, "maxevents") as u32,
            timeout.prelude(),
            timeout,
        ));
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
    if let Some(process) = target::current() {
        let timeout = Timeout::from_millis(arg!(&ctx, EpollPwait, "timeout") as i32);
        let sigmask = args::sigmask(
            arg!(&ctx, EpollPwait, "sigmask"),
            arg!(&ctx, EpollPwait, "sigsetsize"),
        );
        enter(&Pending::new(
            process,
            Syscall::EpollPwait,
            arg!(&ctx, EpollPwait, "events"),
            arg!(&ctx, EpollPwait, "maxevents") as u32,
            timeout.prelude().and(sigmask),
            timeout,
        ));
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
    if let Some(process) = target::current() {
        let timeout = args::timespec(arg!(&ctx, EpollPwait2, "timeout"));
        let sigmask = args::sigmask(
            arg!(&ctx, EpollPwait2, "sigmask"),
            arg!(&ctx, EpollPwait2, "sigsetsize"),
        );
        enter(&Pending::new(
            process,
            Syscall::EpollPwait2,
            arg!(&ctx, EpollPwait2, "events"),
            arg!(&ctx, EpollPwait2, "maxevents") as u32,
            timeout.prelude().and(sigmask),
            timeout,
        ));
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_epoll_pwait2")]
pub fn epoll_pwait2_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::EpollPwait2);
    0
}

/// Leaves the call for its exit.
fn enter(pending: &Pending) {
    if !stash(pending)
        && let Some(mut row) = Row::of(&pending.process)
    {
        // No room to follow the call to its exit: each branch it may reach is undecided.
        let call = EpollWaitCall {
            maxevents: pending.count as i32,
            events: pending.arg,
            prelude: Prelude::Unknown,
            timeout: Timeout::from_u32(pending.timeout),
            ret: UNFOLLOWED_RETURN,
        };
        epoll::epoll_wait(&mut row, &call);
    }
}

fn exit(ctx: &TracePointContext, syscall: Syscall) {
    let Some(pending) = take_pending() else {
        return;
    };
    let Some(mut row) = Row::of(&pending.process) else {
        return;
    };
    let call = EpollWaitCall {
        maxevents: pending.count as i32,
        events: pending.arg,
        prelude: Prelude::from_u32(pending.prelude),
        timeout: Timeout::from_u32(pending.timeout),
        ret: exit_ret(ctx),
    };
    epoll::epoll_wait(&mut row, &call);
    tally::call(syscall);
}

#[tracepoint(category = "syscalls", name = "sys_enter_epoll_ctl")]
pub fn epoll_ctl_enter(ctx: TracePointContext) -> u32 {
    if let Some(process) = target::current() {
        let op = arg!(&ctx, EpollCtl, "op") as i32;
        let pending = Pending::new(
            process,
            Syscall::EpollCtl,
            op as u64,
            0,
            Prelude::Passes,
            Timeout::Infinite,
        );
        if !stash(&pending)
            && let Some(mut row) = Row::of(&process)
        {
            // No room to follow the call to its exit: counted without its return value.
            epoll::epoll_ctl(&mut row, &EpollCtlCall { op, ret: None });
            tally::call(Syscall::EpollCtl);
        }
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_epoll_ctl")]
pub fn epoll_ctl_exit(ctx: TracePointContext) -> u32 {
    if let Some(pending) = take_pending()
        && let Some(mut row) = Row::of(&pending.process)
    {
        let call = EpollCtlCall {
            op: pending.arg as i32,
            ret: Some(exit_ret(&ctx)),
        };
        epoll::epoll_ctl(&mut row, &call);
        tally::call(Syscall::EpollCtl);
    }
    0
}
