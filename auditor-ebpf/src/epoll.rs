//! epoll_wait, epoll_pwait, epoll_pwait2: what `auditor_common::epoll::epoll_wait` needs of
//! a call (its arguments at entry, its return value at exit).

use auditor_common::{
    Syscall, UNFOLLOWED_RETURN,
    epoll::{self, EpollWaitCall},
    prelude::{Prelude, Timeout},
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{EXIT_RET, Pending, args, field, stash, take_pending, tally, tally::Row, target};

// Offsets from /sys/kernel/tracing/events/syscalls/sys_enter_epoll_{wait,pwait,pwait2}/format.
const ENTER_EVENTS: usize = 24;
const ENTER_MAXEVENTS: usize = 32;
/// `int` milliseconds (epoll_wait, epoll_pwait) or a timespec pointer (epoll_pwait2).
const ENTER_TIMEOUT: usize = 40;
const ENTER_SIGMASK: usize = 48;
const ENTER_SIGSETSIZE: usize = 56;

#[tracepoint(category = "syscalls", name = "sys_enter_epoll_wait")]
pub fn epoll_wait_enter(ctx: TracePointContext) -> u32 {
    enter(&ctx, Syscall::EpollWait);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_epoll_wait")]
pub fn epoll_wait_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::EpollWait);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_epoll_pwait")]
pub fn epoll_pwait_enter(ctx: TracePointContext) -> u32 {
    enter(&ctx, Syscall::EpollPwait);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_epoll_pwait")]
pub fn epoll_pwait_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::EpollPwait);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_epoll_pwait2")]
pub fn epoll_pwait2_enter(ctx: TracePointContext) -> u32 {
    enter(&ctx, Syscall::EpollPwait2);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_epoll_pwait2")]
pub fn epoll_pwait2_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::EpollPwait2);
    0
}

fn enter(ctx: &TracePointContext, syscall: Syscall) {
    let Some(process) = target::current() else {
        return;
    };
    let timeout = if syscall == Syscall::EpollPwait2 {
        args::timespec(field(ctx, ENTER_TIMEOUT))
    } else {
        Timeout::from_millis(field(ctx, ENTER_TIMEOUT) as i32)
    };
    let sigmask = if syscall == Syscall::EpollWait {
        Prelude::Passes
    } else {
        args::sigmask(field(ctx, ENTER_SIGMASK), field(ctx, ENTER_SIGSETSIZE))
    };
    let pending = Pending::new(
        process,
        field(ctx, ENTER_EVENTS),
        field(ctx, ENTER_MAXEVENTS) as u32,
        timeout.prelude().and(sigmask),
        timeout,
    );
    if !stash(&pending)
        && let Some(mut row) = Row::of(&process)
    {
        // No room to follow the call to its exit: each branch it may reach is undecided.
        let call = EpollWaitCall {
            maxevents: pending.count as i32,
            events: pending.arg,
            prelude: Prelude::Unknown,
            timeout,
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
        ret: field(ctx, EXIT_RET) as i64,
    };
    epoll::epoll_wait(&mut row, &call);
    tally::call(syscall);
}
