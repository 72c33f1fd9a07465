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

mod alloc;
mod args;
mod close;
mod epoll;
mod fget;
mod poll;
mod select;
mod tally;
mod target;
mod task;

use auditor_common::{
    prelude::{Prelude, Timeout},
    select::SetScan,
};
use aya_ebpf::{macros::map, maps::HashMap};

/// What an entry handler leaves for the exit handler of the same thread.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Pending {
    /// select: `n`; poll: the pollfd array; epoll: the events buffer.
    pub arg: u64,
    /// poll: `nfds`; epoll: `maxevents`.
    pub count: u32,
    /// The entry point's checks, an `auditor_common::prelude::Prelude` as u32.
    pub prelude: u32,
    /// An `auditor_common::prelude::Timeout` as u32.
    pub timeout: u32,
    /// select: 1 when `scan` holds the walk over the fd_sets read at entry.
    pub sets_read: u32,
    pub scan: SetScan,
    pub _pad: u32,
}

impl Pending {
    pub const fn new(arg: u64, count: u32, prelude: Prelude, timeout: Timeout) -> Pending {
        Pending {
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
            _pad: 0,
        }
    }
}

/// Calls in flight, keyed by thread id. Sized for every thread of a busy machine being
/// inside one of the followed syscalls at once.
#[map]
static PENDING: HashMap<u32, Pending> = HashMap::with_max_entries(65_536, 0);

/// Thread id of the current task.
fn current_tid() -> u32 {
    aya_ebpf::helpers::bpf_get_current_pid_tgid() as u32
}

/// Leaves `pending` for this thread's exit handler; false when the table is full.
fn stash(pending: &Pending) -> bool {
    PENDING.insert(current_tid(), pending, 0).is_ok()
}

/// Takes what this thread's entry handler left, if it traced the call.
fn take_pending() -> Option<Pending> {
    if target::empty_programs() {
        return None;
    }
    let tid = current_tid();
    // SAFETY: the value is copied out before the entry is removed.
    let pending = unsafe { PENDING.get(tid) }.copied()?;
    let _ = PENDING.remove(tid);
    Some(pending)
}

/// Reads the syscall argument or return value at `offset` of a `syscalls:*` record.
fn field(ctx: &aya_ebpf::programs::TracePointContext, offset: usize) -> u64 {
    // SAFETY: offsets come from the tracefs format files of the syscall records (cited at
    // each use); read_at is a bounds-checked bpf_probe_read of the record.
    unsafe { ctx.read_at::<u64>(offset) }.unwrap_or(0)
}

/// Offset of `ret` in every `syscalls:sys_exit_*` record
/// (`/sys/kernel/tracing/events/syscalls/sys_exit_poll/format`).
const EXIT_RET: usize = 16;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path; this is never run.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
