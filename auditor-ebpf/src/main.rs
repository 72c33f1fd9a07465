//! The auditor's eBPF probe: syscall tracepoints that decide, from arguments, return
//! values and the user memory a syscall reads, which way each catalogued kernel branch
//! goes, and count the outcomes per (process, site) in per-CPU maps the user side reads.
//!
//! Entry handlers note what the branch depends on in the thread's call in flight
//! (`in_flight`); exit handlers know the return value, decide the branch with the shared
//! predicates of `auditor-common`, and count. Reading user arrays at exit is deliberate: the kernel has
//! just copied them, so their pages are resident and `bpf_probe_read_user` succeeds.
#![no_std]
#![no_main]

mod addfd;
mod alloc;
mod args;
mod chmod;
mod close;
mod copy;
mod dup;
mod epoll;
mod failures;
mod fget;
mod in_flight;
mod poll;
mod rows;
mod select;
mod span;
mod stacks;
mod tally;
mod target;
mod task;
mod thread;

use auditor_common::syscalls::{SysEnter, SysExit};
use aya_ebpf::{EbpfContext as _, macros::tracepoint, programs::TracePointContext};

/// `sched:sched_process_exec`: the targets learn of the exec (`target::process_exec`),
/// then the stacks of the mappings it replaced. Here, above both, so that the targets
/// need nothing of the stacks.
#[tracepoint(category = "sched", name = "sched_process_exec")]
pub fn process_exec(ctx: TracePointContext) -> u32 {
    // A plain u32 (0: no traced process exec'd), every byte written before it is read: an
    // `Option` leaves its payload unwritten when None, a read older verifiers (6.1) refuse.
    let mut exec_of = 0;
    if let Err(failure) = target::process_exec(&ctx, &mut exec_of) {
        failures::failed(failure);
    }
    if exec_of != 0 {
        stacks::mappings_changed(auditor_common::stacks::kind::EXEC, exec_of);
    }
    0
}

/// The record of a program on `syscalls:sys_enter_*` of a syscall with `N` arguments,
/// typed as `auditor_common::syscalls::SysEnter`. Its fields are read where they lie: each
/// a load the verifier checks against the context, which cannot fail (a probe-read helper
/// call to copy the record would cost more than the rest of a small handler).
#[inline(always)]
fn enter_record<const N: usize>(ctx: &TracePointContext) -> &SysEnter<N> {
    // SAFETY: a program on sys_enter_NAME gets that event's record, laid out as SysEnter
    // with the arguments the syscall table gives NAME (checked against the format files
    // by the user side's tests); `arg!` picks N from the same table.
    unsafe { &*ctx.as_ptr().cast::<SysEnter<N>>() }
}

/// Writes `N` zero words from `words`, a store each: an array initialiser or
/// `write_bytes` becomes a call to a byte loop.
///
/// # Safety
/// `words` is valid for `N` words' writes.
#[inline(always)]
unsafe fn write_zeros<const N: usize>(words: *mut u64) {
    for i in 0..N {
        // SAFETY: word i of the N the caller vouches for.
        unsafe { core::ptr::write_volatile(words.add(i), 0) };
    }
}

/// The record of a program on `syscalls:sys_exit_*`.
#[inline(always)]
fn exit_record(ctx: &TracePointContext) -> &SysExit {
    // SAFETY: every sys_exit record is laid out as SysExit, and lives as long as `ctx`.
    unsafe { &*ctx.as_ptr().cast::<SysExit>() }
}

/// The return value in the record of a program on `syscalls:sys_exit_*`.
#[inline(always)]
fn exit_ret(ctx: &TracePointContext) -> i64 {
    exit_record(ctx).ret
}

/// Argument `$name` of `$syscall`'s `sys_enter` record, as the syscall table names it after
/// the event's format file: `arg!(ctx, Poll, "nfds")`. A name the table does not give
/// the syscall fails the build.
macro_rules! arg {
    ($ctx:expr, $syscall:ident, $name:literal) => {{
        const ARITY: usize = auditor_common::Syscall::$syscall.arity();
        const INDEX: usize = auditor_common::Syscall::$syscall.arg($name);
        $crate::enter_record::<ARITY>($ctx).args[INDEX]
    }};
}
pub(crate) use arg;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path; this is never run.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
