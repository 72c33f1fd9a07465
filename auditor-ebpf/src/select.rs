//! select and pselect6: the `n < 0` branch of `core_sys_select`.
//!
//! Entry reads what the kernel checks before that branch (the timeout and, for pselect6,
//! the signal-mask argument); exit decides the branch from that and the return value.

use auditor_common::{
    Counts, Evaluation, Site, Syscall,
    select::{self, Prelude},
};
use aya_ebpf::{helpers::bpf_probe_read_user, macros::tracepoint, programs::TracePointContext};

use crate::{EXIT_RET, PENDING, Pending, current_tid, field, tally, target};

// Offsets from /sys/kernel/tracing/events/syscalls/sys_enter_{select,pselect6}/format.
const ENTER_N: usize = 16;
/// `tvp` (select) or `tsp` (pselect6).
const ENTER_TIMEOUT: usize = 48;
/// pselect6's sixth argument: a pointer to `{ const sigset_t *ss; size_t ss_len; }`.
const ENTER_SIGMASK_ARGPACK: usize = 56;

/// Size of the kernel's `sigset_t` on x86_64; any other `ss_len` is EINVAL.
const SIGSET_SIZE: u64 = 8;

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

fn read_user<T>(address: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_user checks the address; a fault is an Err.
    unsafe { bpf_probe_read_user(address as *const T) }.ok()
}

/// The timeout check of `kern_select` (a timeval) or `do_pselect` (a timespec).
fn timeout_prelude(address: u64, syscall: Syscall) -> Prelude {
    if address == 0 {
        return Prelude::Passes;
    }
    Prelude::from_check(read_user::<[i64; 2]>(address).map(|[sec, fraction]| {
        if syscall == Syscall::Select {
            select::timeval_valid(sec, fraction)
        } else {
            select::timespec_valid(sec, fraction)
        }
    }))
}

/// pselect6's argpack copy and `set_user_sigmask()`.
fn sigmask_prelude(argpack: u64) -> Prelude {
    if argpack == 0 {
        return Prelude::Passes;
    }
    let Some([set, size]) = read_user::<[u64; 2]>(argpack) else {
        return Prelude::Unknown;
    };
    if set == 0 {
        Prelude::Passes
    } else if size != SIGSET_SIZE {
        Prelude::Fails
    } else {
        Prelude::from_check(read_user::<u64>(set).map(|_| true))
    }
}

fn enter(ctx: &TracePointContext, syscall: Syscall) {
    if !target::is_traced() {
        return;
    }
    let mut prelude = timeout_prelude(field(ctx, ENTER_TIMEOUT), syscall);
    if syscall == Syscall::Pselect6 {
        prelude = sigmask_prelude(field(ctx, ENTER_SIGMASK_ARGPACK)).and(prelude);
    }
    let pending = Pending {
        arg: field(ctx, ENTER_N),
        count: 0,
        prelude: prelude as u32,
    };
    if PENDING.insert(current_tid(), pending, 0).is_err() {
        // No room to follow the call to its exit: the branch may run, direction unknown.
        let mut counts = Counts::ZERO;
        counts.record(Evaluation::Undecided, 1);
        tally::record(Site::SelectNNegative, &counts);
    }
}

fn exit(ctx: &TracePointContext, syscall: Syscall) {
    let tid = current_tid();
    // SAFETY: the value is copied out before the entry is removed.
    let Some(pending) = (unsafe { PENDING.get(tid) }).copied() else {
        return;
    };
    let _ = PENDING.remove(tid);
    let prelude = Prelude::from_u32(pending.prelude);
    let ret = field(ctx, EXIT_RET) as i64;
    let mut counts = Counts::ZERO;
    counts.record(
        select::n_negative_evaluation(select::n_from_arg(pending.arg), prelude, ret),
        1,
    );
    tally::record(Site::SelectNNegative, &counts);
    tally::call(syscall);
}
