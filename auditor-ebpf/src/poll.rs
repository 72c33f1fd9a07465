//! poll and ppoll: the `fd < 0` branch of `do_pollfd`, one evaluation per pollfd entry.
//!
//! At exit the array is read in bulk, `CHUNK` entries per `bpf_loop` step, so any nfds the
//! kernel accepts (up to RLIMIT_NOFILE) is counted whole. Entries that cannot be read are
//! counted as unreadable.

use auditor_common::{
    Counts, Evaluation, Site, Syscall,
    poll::{self, POLLFD_SIZE, PollFd, Scan},
};
use aya_ebpf::{
    cty::c_void,
    helpers::{bpf_probe_read_user, generated},
    macros::{map, tracepoint},
    maps::PerCpuArray,
    programs::TracePointContext,
};

use crate::{EXIT_RET, PENDING, Pending, current_tid, field, tally, target};

// Offsets from /sys/kernel/tracing/events/syscalls/sys_enter_{poll,ppoll}/format.
const ENTER_UFDS: usize = 16;
const ENTER_NFDS: usize = 24;

/// Entries read per helper call (2 KiB).
const CHUNK: usize = 256;
const CHUNK_BYTES: usize = CHUNK * POLLFD_SIZE;

#[tracepoint(category = "syscalls", name = "sys_enter_poll")]
pub fn poll_enter(ctx: TracePointContext) -> u32 {
    enter(&ctx);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_poll")]
pub fn poll_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::Poll);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_ppoll")]
pub fn ppoll_enter(ctx: TracePointContext) -> u32 {
    enter(&ctx);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_ppoll")]
pub fn ppoll_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::Ppoll);
    0
}

fn undecided(entries: u32) -> Counts {
    let mut counts = Counts::ZERO;
    counts.record(Evaluation::Undecided, u64::from(entries));
    counts
}

fn enter(ctx: &TracePointContext) {
    if !target::is_traced() {
        return;
    }
    let pending = Pending {
        arg: field(ctx, ENTER_UFDS),
        count: poll::nfds_from_arg(field(ctx, ENTER_NFDS)),
        prelude: 0,
    };
    if PENDING.insert(current_tid(), pending, 0).is_err() {
        tally::record(Site::PollFdNegative, &undecided(pending.count));
    }
}

fn exit(ctx: &TracePointContext, syscall: Syscall) {
    let tid = current_tid();
    // SAFETY: the value is copied out before the entry is removed.
    let Some(pending) = (unsafe { PENDING.get(tid) }).copied() else {
        return;
    };
    let _ = PENDING.remove(tid);
    let ret = field(ctx, EXIT_RET) as i64;
    let counts = match poll::scan_from_return(ret) {
        Scan::NotScanned => Counts::ZERO,
        Scan::Unknown => undecided(pending.count),
        Scan::Scanned => walk(pending.arg, pending.count),
    };
    tally::record(Site::PollFdNegative, &counts);
    tally::call(syscall);
}

/// One walk over a pollfd array, in per-CPU map memory rather than on the stack: the
/// verifier does not track values in map memory, so loop iterations that count differently
/// still prune to one state, and verifying the loops stays cheap. Programs attached to
/// syscall tracepoints through perf run with preemption off, so the walk is never shared.
#[repr(C)]
struct Walk {
    counts: Counts,
    ufds: u64,
    nfds: u32,
    _pad: u32,
    entries: [PollFd; CHUNK],
}

#[map]
static WALK: PerCpuArray<Walk> = PerCpuArray::with_max_entries(1, 0);

fn walk(ufds: u64, nfds: u32) -> Counts {
    let Some(state) = WALK.get_ptr_mut(0) else {
        return undecided(nfds);
    };
    // SAFETY: this CPU's walk state; see `Walk`.
    unsafe {
        (*state).counts = Counts::ZERO;
        (*state).ufds = ufds;
        (*state).nfds = nfds;
    }
    let chunks = nfds.div_ceil(CHUNK as u32);
    // SAFETY: walk_chunk matches bpf_loop's callback signature.
    let done =
        unsafe { generated::bpf_loop(chunks, walk_chunk as *mut c_void, core::ptr::null_mut(), 0) };
    // SAFETY: as above.
    let mut counts = unsafe { (*state).counts };
    // bpf_loop stops at 1 << 23 steps; entries past those were not read.
    let walked = (done.max(0) as u64).saturating_mul(CHUNK as u64);
    counts.record(
        Evaluation::Undecided,
        u64::from(nfds).saturating_sub(walked),
    );
    counts
}

#[inline(never)]
extern "C" fn walk_chunk(index: u32, _context: *mut c_void) -> i64 {
    let Some(state) = WALK.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: this CPU's walk state; see `Walk`.
    let state = unsafe { &mut *state };
    let start = u64::from(index) * CHUNK as u64;
    let left = u64::from(state.nfds).saturating_sub(start);
    let entries = if left < CHUNK as u64 {
        left as usize
    } else {
        CHUNK
    };
    let source = state.ufds + start * POLLFD_SIZE as u64;
    let bytes = entries * POLLFD_SIZE;
    if bytes > CHUNK_BYTES {
        return 1;
    }
    // SAFETY: `entries` is CHUNK_BYTES long and bytes <= CHUNK_BYTES.
    let read = unsafe {
        generated::bpf_probe_read_user(
            state.entries.as_mut_ptr().cast(),
            bytes as u32,
            source as *const c_void,
        )
    };
    if read == 0 {
        let mut negative = 0u64;
        for (i, entry) in state.entries.iter().enumerate() {
            if i >= entries {
                break;
            }
            negative += u64::from(poll::fd_negative(entry.fd));
        }
        state.counts.taken += negative;
        state.counts.not_taken += entries as u64 - negative;
    } else {
        // Part of the chunk is not readable (a page not resident): read entry by entry so
        // that only the entries really out of reach are unreadable.
        for i in 0..CHUNK {
            if i >= entries {
                break;
            }
            let address = source + (i * POLLFD_SIZE) as u64;
            // SAFETY: bpf_probe_read_user checks the address; a fault is an Err.
            match unsafe { bpf_probe_read_user(address as *const i32) } {
                Ok(fd) => state
                    .counts
                    .record(Evaluation::from_taken(poll::fd_negative(fd)), 1),
                Err(_) => state.counts.record(Evaluation::Undecided, 1),
            }
        }
    }
    0
}
