//! select and pselect6: `core_sys_select`'s `n < 0`, `max_select_fd`'s not-open fd and
//! `do_select`'s zero timeout.
//!
//! Entry reads what the entry point checks before `core_sys_select` (the timeout and, for
//! pselect6, the signal-mask argument); exit decides each branch from that and the return
//! value.

use auditor_common::{
    Evaluation, Site, Syscall,
    prelude::{Prelude, Timeout},
    select,
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{EXIT_RET, Pending, args, field, stash, take_pending, tally, target, task};

// Offsets from /sys/kernel/tracing/events/syscalls/sys_enter_{select,pselect6}/format.
const ENTER_N: usize = 16;
/// `tvp` (select) or `tsp` (pselect6).
const ENTER_TIMEOUT: usize = 48;
/// pselect6's sixth argument: a pointer to `{ const sigset_t *ss; size_t ss_len; }`.
const ENTER_SIGMASK_ARGPACK: usize = 56;

#[tracepoint(category = "syscalls", name = "sys_enter_select")]
pub fn select_enter(ctx: TracePointContext) -> u32 {
    enter(&ctx, Syscall::Select);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_select")]
pub fn select_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::Select);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_pselect6")]
pub fn pselect6_enter(ctx: TracePointContext) -> u32 {
    enter(&ctx, Syscall::Pselect6);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_pselect6")]
pub fn pselect6_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::Pselect6);
    0
}

/// pselect6's argpack copy (EFAULT) and `set_user_sigmask()`.
fn sigmask_prelude(argpack: u64) -> Prelude {
    if argpack == 0 {
        return Prelude::Passes;
    }
    match args::read_user::<[u64; 2]>(argpack) {
        Some([set, size]) => args::sigmask(set, size),
        None => Prelude::Unknown,
    }
}

fn enter(ctx: &TracePointContext, syscall: Syscall) {
    if !target::is_traced() {
        return;
    }
    let timeout = if syscall == Syscall::Select {
        args::timeval(field(ctx, ENTER_TIMEOUT))
    } else {
        args::timespec(field(ctx, ENTER_TIMEOUT))
    };
    let mut prelude = timeout.prelude();
    if syscall == Syscall::Pselect6 {
        prelude = sigmask_prelude(field(ctx, ENTER_SIGMASK_ARGPACK)).and(prelude);
    }
    let pending = Pending {
        arg: field(ctx, ENTER_N),
        // core_sys_select reads max_fds once, at its start; 0: unreadable.
        count: task::max_fds().unwrap_or(0),
        prelude: prelude as u32,
        timeout: timeout as u32,
        _pad: 0,
    };
    if !stash(&pending) {
        // No room to follow the call to its exit: each branch may run, direction unknown.
        for site in [
            Site::SelectNNegative,
            Site::SelectFdNotOpen,
            Site::SelectZeroTimeout,
        ] {
            tally::record_one(site, Evaluation::Undecided);
        }
    }
}

fn exit(ctx: &TracePointContext, syscall: Syscall) {
    let Some(pending) = take_pending() else {
        return;
    };
    let ret = field(ctx, EXIT_RET) as i64;
    let n = select::n_from_arg(pending.arg);
    let prelude = Prelude::from_u32(pending.prelude);
    let timeout = Timeout::from_u32(pending.timeout);
    // In the kernel's order, each branch gated by the one before it.
    let n_negative = select::n_negative_evaluation(n, prelude, ret);
    let max_fds = (pending.count != 0).then_some(pending.count);
    let (clamped, on_heap, _) = select::clamp_evaluations(select::after(n_negative), n, max_fds);
    let fd_not_open = select::fd_not_open_evaluation(n, n_negative, ret);
    let zero_timeout = select::zero_timeout_evaluation(fd_not_open, timeout.is_zero());
    tally::record_one(Site::SelectNNegative, n_negative);
    tally::record_one(Site::SelectNClamped, clamped);
    tally::record_one(Site::SelectBitmapsOnHeap, on_heap);
    tally::record_one(Site::SelectFdNotOpen, fd_not_open);
    tally::record_one(Site::SelectZeroTimeout, zero_timeout);
    tally::call(syscall);
}
