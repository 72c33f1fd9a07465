//! The auditor's eBPF probe: syscall tracepoints that decide, from arguments, return
//! values and the user memory a syscall reads, which way each catalogued kernel branch
//! goes, and count the outcomes per (process, site) in per-CPU maps the user side reads.
//!
//! Entry handlers note what the branch depends on in `PENDING` (keyed by thread); exit
//! handlers know the return value, decide the branch with the shared predicates of
//! `auditor-common`, and count. Reading user arrays at exit is deliberate: the kernel has
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
mod poll;
mod select;
mod stacks;
mod tally;
mod target;
mod task;

use auditor_common::{
    ProcessKey, Syscall, failure, maps,
    prelude::{Prelude, Timeout},
    select::SetScan,
    shared,
    syscalls::{SysEnter, SysExit},
};
use aya_ebpf::{
    EbpfContext as _,
    bindings::BPF_F_NO_PREALLOC,
    macros::{map, tracepoint},
    maps::{HashMap, ProgramArray},
    programs::TracePointContext,
};

/// What an entry handler leaves for the exit handler of the same thread.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Pending {
    /// The process the call is counted for.
    pub process: ProcessKey,
    /// The call's `Syscall` as u32 (for a shared program's count of calls).
    pub syscall: u32,
    /// 1 from entry to exit: a thread's entry stays in the map between its calls.
    pub live: u32,
    /// select: `n`; poll: the pollfd array; epoll: the events buffer; a copy of the fd
    /// table: the slots it needs (0: unread).
    pub arg: u64,
    /// poll: `nfds`; epoll: `maxevents`; a copy of the table: whether the call copies it.
    pub count: u32,
    /// The entry point's checks, an `auditor_common::prelude::Prelude` as u32.
    pub prelude: u32,
    /// An `auditor_common::prelude::Timeout` as u32.
    pub timeout: u32,
    /// select: 1 when `scan` holds the walk over the fd_sets read at entry.
    pub sets_read: u32,
    pub scan: SetScan,
}

impl Pending {
    pub const fn new(
        process: ProcessKey,
        syscall: Syscall,
        arg: u64,
        count: u32,
        prelude: Prelude,
        timeout: Timeout,
    ) -> Pending {
        Pending {
            process,
            syscall: syscall as u32,
            live: 1,
            arg,
            count,
            prelude: prelude as u32,
            timeout: timeout as u32,
            sets_read: 0,
            scan: SetScan {
                pushed: 0,
                scanned: 0,
                empty: 0,
                lookups: 0,
                pending_empty: 0,
            },
        }
    }
}

/// Calls in flight, keyed by thread id. A thread's entry is rewritten in place by its
/// next call and removed when the thread exits: an insert and a delete per call cost more
/// than the rest of a small call's work. Entries are allocated as threads come (as are
/// those of every hash map of the probe): memory follows what is traced, not capacity.
#[map]
static PENDING: HashMap<u32, Pending> =
    HashMap::with_max_entries(maps::THREADS_CAPACITY, BPF_F_NO_PREALLOC);

/// Thread id of the current task.
fn current_tid() -> u32 {
    aya_ebpf::helpers::bpf_get_current_pid_tgid() as u32
}

/// Leaves `value` for this thread's exit handler in `map`; false when the table is full.
fn stash_in<T: Copy>(map: &HashMap<u32, T>, value: &T) -> bool {
    let tid = current_tid();
    if let Some(slot) = map.get_ptr_mut(tid) {
        // SAFETY: a pointer into the map's value, valid for this program run; only this
        // thread uses its entry.
        unsafe { *slot = *value };
        return true;
    }
    map.insert(tid, value, 0).is_ok()
}

/// What this thread's entry handler left in `map`, if it followed the call; `live` says
/// where the value's live flag is, and is cleared.
fn take_from<T: Copy>(map: &HashMap<u32, T>, live: impl Fn(&mut T) -> &mut u32) -> Option<T> {
    if target::empty_programs() || target::stopped() {
        return None;
    }
    let slot = map.get_ptr_mut(current_tid())?;
    // SAFETY: as in `stash_in`.
    let value = unsafe { &mut *slot };
    let flag = live(value);
    if *flag == 0 {
        return None;
    }
    *flag = 0;
    Some(*value)
}

fn stash(pending: &Pending) -> bool {
    stash_in(&PENDING, pending)
}

fn take_pending() -> Option<Pending> {
    take_from(&PENDING, |p| &mut p.live)
}

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

/// Forgets an exiting thread's calls in flight.
fn forget_thread(tid: u32) {
    let _ = PENDING.remove(tid);
    addfd::forget_thread(tid);
    alloc::forget_thread(tid);
    dup::forget_thread(tid);
    stacks::forget_thread(tid);
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

/// The shared programs (`auditor_common::shared`), by index: the loader fills it before it
/// attaches any program.
#[map]
static SHARED: ProgramArray = ProgramArray::with_max_entries(shared::COUNT as u32, 0);

/// Runs shared program `index` on this program's record in place of the rest of this
/// program. A hand-over that returns (it cannot, once the loader filled `SHARED`) is
/// counted, never silent.
#[inline(always)]
fn run_shared(ctx: &TracePointContext, index: u32) {
    // SAFETY: each shared program is a tracepoint program on records of the layout of the
    // programs that hand over to it (every `sys_exit_*` record, for `ALLOC_EXIT`).
    unsafe { SHARED.tail_call(ctx, index) };
    failures::failed(failure::TAIL_CALL);
}

/// The return value in the record of a program on `syscalls:sys_exit_*`.
#[inline(always)]
fn exit_ret(ctx: &TracePointContext) -> i64 {
    // SAFETY: every sys_exit record is laid out as SysExit.
    unsafe { (*ctx.as_ptr().cast::<SysExit>()).ret }
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
