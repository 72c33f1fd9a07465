//! poll and ppoll: what `auditor_common::poll::poll` needs of a call.
//!
//! poll has no entry program: its exit reads the arguments from the task's registers
//! (`poll_at_exit`). ppoll's entry reads its timeout, which the kernel overwrites with the
//! time left, and its signal mask.
//!
//! At exit an array of up to `SMALL` entries is read onto the stack in one helper call
//! (`read_small`); a larger one in bulk, `READ` entries per helper call and `CHUNK` counted
//! per `bpf_loop` step, so any nfds the kernel accepts (up to RLIMIT_NOFILE) is counted
//! whole; revents then holds POLLNVAL for the entries whose fd was not open. Entries that
//! cannot be read are counted as unreadable.

use auditor_common::{
    ProcessKey, Syscall, UNFOLLOWED_RETURN,
    poll::{self, EntryScan, POLLFD_SIZE, PollCall, PollFd, words},
    prelude::{Prelude, Timeout},
};
use aya_ebpf::{
    cty::c_void,
    helpers::{bpf_probe_read_user, generated},
    macros::{map, tracepoint},
    maps::PerCpuArray,
    programs::TracePointContext,
};

use crate::{
    arg,
    args::{self, Registers, exit_arg},
    exit_record,
    in_flight::{self, Call, Kind},
    tally,
    tally::Row,
    target,
    task::{self, Task},
    write_zeros,
};

/// A poll or ppoll in flight.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingPoll {
    process: ProcessKey,
    syscall: Syscall,
    nfds: u32,
    /// The pollfd array.
    ufds: u64,
    /// The entry point's checks.
    prelude: Prelude,
    timeout: Timeout,
}

impl Call for PendingPoll {
    const KIND: Kind = Kind::Poll;

    fn unfollowed(&self) {
        if let Some(mut row) = Row::by_key(&self.process) {
            let call = PollCall {
                nfds: self.nfds,
                prelude: Prelude::Unknown,
                timeout: self.timeout,
                ret: UNFOLLOWED_RETURN,
            };
            poll::poll(&mut row, &call, || None, &task::Current);
        }
    }
}

/// Entries counted per `bpf_loop` step.
const CHUNK: usize = 256;
const _: () = assert!(CHUNK <= words::MAX_SUMMED);
/// Entries read per helper call (8 KiB), every `STEPS_PER_READ` steps: a read of user
/// memory costs some 150 ns whatever its size, and a poll of 1024 fds made four.
const READ: usize = 1024;
const READ_BYTES: usize = READ * POLLFD_SIZE;
const STEPS_PER_READ: usize = READ / CHUNK;
const _: () = assert!(READ.is_multiple_of(CHUNK) && STEPS_PER_READ.is_power_of_two());

/// Poll's number on this machine, set by the loader: the exit of both tells poll's calls
/// by it.
#[unsafe(no_mangle)]
static POLL_SYSCALL_NR: u32 = 0;

#[tracepoint(category = "syscalls", name = "sys_enter_ppoll")]
pub fn ppoll_enter(ctx: TracePointContext) -> u32 {
    if let Some(caller) = target::current() {
        let checks = args::timespec_and_sigmask(
            arg!(&ctx, Ppoll, "tsp"),
            arg!(&ctx, Ppoll, "sigmask"),
            arg!(&ctx, Ppoll, "sigsetsize"),
        );
        in_flight::stash(
            &PendingPoll {
                process: caller.process.key,
                syscall: Syscall::Ppoll,
                nfds: poll::nfds_from_arg(arg!(&ctx, Ppoll, "nfds")),
                ufds: arg!(&ctx, Ppoll, "ufds"),
                prelude: checks.prelude,
                timeout: checks.timeout,
            },
            &caller,
        );
    }
    0
}

/// The exit of poll and ppoll, attached to both (their rows' `Program::Shared`): the walk
/// over the array is the costliest body of the probe to verify, once for both.
#[tracepoint]
pub fn polls_exit(ctx: TracePointContext) -> u32 {
    let task = Task::current();
    if in_flight::may_hold(task) {
        exit(&ctx, task);
    }
    0
}

fn exit(ctx: &TracePointContext, task: Task) {
    let record = exit_record(ctx);
    let (syscall_nr, ret) = (record.header.syscall_nr, record.ret);
    // Counted in one body, called from both ways: a record built on either path and
    // merged after would let the compiler spill whatever register it likes into the
    // record's padding, which the verifier refuses for a pointer.
    if syscall_nr as u32 == target::global(&POLL_SYSCALL_NR) {
        if let Some((pending, slot)) = poll_at_exit(task) {
            count(&pending, slot, ret, task);
        }
    } else if let Some((pending, slot)) = in_flight::take_of::<PendingPoll>(task) {
        count(&pending, slot, ret, task);
    }
}

/// Counts a finished call of poll or ppoll, into the row in `slot` or by key.
#[inline(never)]
fn count(pending: &PendingPoll, slot: u32, ret: i64, task: Task) {
    let Some(mut row) = Row::of(&pending.process, slot) else {
        return;
    };
    let call = PollCall {
        nfds: pending.nfds,
        prelude: pending.prelude,
        timeout: pending.timeout,
        ret,
    };
    poll::poll(
        &mut row,
        &call,
        || read_small(pending.ufds, pending.nfds).or_else(|| walk(pending.ufds, pending.nfds)),
        &task,
    );
    tally::call(pending.syscall);
}

/// A poll, read at its exit alone: its arguments from the task's registers, its array
/// from user memory, where the kernel changed no entry but its `revents`. Without an
/// entry program a poll costs one program run, not two, and a call in flight when the
/// session began is counted whole. With the slot of its process's row.
fn poll_at_exit(task: Task) -> Option<(PendingPoll, u32)> {
    let process = target::counted_of(task)?;
    let registers = Registers::of(task);
    let pending = PendingPoll {
        process: process.key,
        syscall: Syscall::Poll,
        nfds: poll::nfds_from_arg(exit_arg!(registers, Poll, "nfds")),
        ufds: exit_arg!(registers, Poll, "ufds"),
        prelude: Prelude::Passes,
        timeout: Timeout::from_millis(exit_arg!(registers, Poll, "timeout_msecs") as i32),
    };
    Some((pending, process.slot))
}

/// Entries read at once on the program's stack, for the small arrays most programs pass.
const SMALL: usize = 8;

/// The scan of an array of at most `SMALL` entries, read in one helper call onto the
/// stack: no loop helper, no map lookup. The entries past nfds stay zero, which the word
/// sums (`poll::words`) count as neither negative nor closed, so every entry is summed
/// without a branch, both sums at once. None for a larger array, or one not wholly
/// readable (the walk then reads it entry by entry).
fn read_small(ufds: u64, nfds: u32) -> Option<EntryScan> {
    if nfds as usize > SMALL {
        return None;
    }
    // Bounded again on the register the helper gets: the compiler drops a second test it
    // can prove, and 6.1's verifier does not carry the first one over to it.
    // SAFETY: a read of a local.
    let bytes = unsafe { core::ptr::read_volatile(&(nfds as usize * POLLFD_SIZE)) };
    if bytes > SMALL * POLLFD_SIZE {
        return None;
    }
    let mut entries = core::mem::MaybeUninit::<[u64; SMALL]>::uninit();
    let words = entries.as_mut_ptr().cast::<u64>();
    // SAFETY: the array's SMALL words.
    unsafe { write_zeros::<SMALL>(words) };
    // SAFETY: `entries` is SMALL * POLLFD_SIZE bytes long and bytes is no more.
    let read = unsafe {
        generated::bpf_probe_read_user(words.cast(), bytes as u32, ufds as *const c_void)
    };
    if read != 0 {
        return None;
    }
    // SAFETY: every byte was written above (zeros, then what was read).
    let entries = unsafe { entries.assume_init() };
    let (mut bits, mut skipped_nval) = (0, 0);
    for word in entries {
        bits += words::word_bits(word);
        skipped_nval += words::word_skipped_nval(word);
    }
    let mut scan = EntryScan::default();
    scan.add(u64::from(nfds), words::word_sums(bits, skipped_nval));
    Some(scan)
}

/// One walk over a pollfd array, in per-CPU map memory rather than on the stack: the
/// verifier does not track values in map memory, so loop iterations that count differently
/// still prune to one state, and verifying the loops stays cheap. Programs attached to
/// syscall tracepoints through perf run with preemption off, so the walk is never shared.
#[repr(C)]
struct Walk {
    scan: EntryScan,
    ufds: u64,
    nfds: u32,
    _pad: u32,
    /// The address of the chunk read entry by entry (`read_entry`).
    chunk: u64,
    /// 1 when the last read of `entries` read all it asked for.
    read_whole: u32,
    _pad2: u32,
    /// The chunk's first sum and its entries (see `walk_chunk`).
    bits: u64,
    summed: u64,
    /// The entries read, each as the word `PollFd::word` says it is (summed a word at a
    /// time: `walk_chunk`), then zeros up to a multiple of `GROUP`, which count as neither
    /// negative nor closed.
    entries: [u64; READ + GROUP],
}

#[map]
static WALK: PerCpuArray<Walk> = PerCpuArray::with_max_entries(1, 0);

/// The scan of the array, read after the kernel's; None only if the per-CPU state is
/// missing, which cannot happen with a one-entry array map.
fn walk(ufds: u64, nfds: u32) -> Option<EntryScan> {
    let state = WALK.get_ptr_mut(0)?;
    // SAFETY: this CPU's walk state; see `Walk`.
    unsafe {
        (*state).scan = EntryScan::default();
        (*state).ufds = ufds;
        (*state).nfds = nfds;
    }
    let chunks = nfds.div_ceil(CHUNK as u32);
    // SAFETY: walk_chunk matches bpf_loop's callback signature.
    let done =
        unsafe { generated::bpf_loop(chunks, walk_chunk as *mut c_void, core::ptr::null_mut(), 0) };
    // SAFETY: as above.
    let mut scan = unsafe { (*state).scan };
    // bpf_loop stops at 1 << 23 steps; entries past those were not read.
    let walked = (done.max(0) as u64).saturating_mul(CHUNK as u64);
    scan.unreadable += u64::from(nfds).saturating_sub(walked);
    Some(scan)
}

/// Entries summed per step of [`sum_words`]: a step's own tests cost as many instructions
/// as four entries' sums, and sixteen a step leave them a sixth of the loop.
const GROUP: usize = 16;
const _: () = assert!(CHUNK.is_multiple_of(GROUP));

/// The sum of `part` of the first `entries` words of `window` and of the zeros after them
/// up to a multiple of [`GROUP`] (`walk_chunk` pads every read so), a group at a time with
/// no branch per entry: the verifier follows one path through a group, and the loop's
/// own tests are a sixth of it.
#[inline(always)]
fn sum_words(window: &[u64; CHUNK], entries: usize, part: impl Fn(u64) -> u64) -> u64 {
    let mut sum = 0;
    let groups = entries.div_ceil(GROUP);
    for (index, group) in window.as_chunks::<GROUP>().0.iter().enumerate() {
        if index >= groups {
            break;
        }
        for word in group {
            sum += part(*word);
        }
    }
    sum
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
    // Which of the read's steps this is: the first reads for all of them.
    let step = index as usize & (STEPS_PER_READ - 1);
    if step == 0 {
        let bytes = if left < READ as u64 {
            left as usize * POLLFD_SIZE
        } else {
            READ_BYTES
        };
        // Bounded again on the register the helper gets: the compiler folds the test into
        // the one on `left`, which the verifier does not carry over to `bytes`.
        // SAFETY: a read of a local.
        let bytes = unsafe { core::ptr::read_volatile(&bytes) };
        if bytes > READ_BYTES {
            return 1;
        }
        // SAFETY: `entries` is READ_BYTES long and bytes <= READ_BYTES.
        let read = unsafe {
            generated::bpf_probe_read_user(
                state.entries.as_mut_ptr().cast(),
                bytes as u32,
                source as *const c_void,
            )
        };
        state.read_whole = u32::from(read == 0);
        // Zeros after the entries up to a multiple of GROUP, so that every group is summed
        // whole: a store per word of a group, with no test, rather than a test per entry.
        let padding = state.entries.as_mut_ptr().wrapping_add(bytes / POLLFD_SIZE);
        // SAFETY: `entries` has GROUP words past the READ it is read into.
        unsafe { write_zeros::<GROUP>(padding) };
    }
    let window = state
        .entries
        .get(step * CHUNK..(step + 1) * CHUNK)
        .and_then(|window| <&[u64; CHUNK]>::try_from(window).ok());
    if let Some(window) = window
        && state.read_whole != 0
    {
        // `fd < 0`, and for the others whether the fd was open, a word at a time
        // (`poll::words`): one sum of every entry, and a second only for a chunk where
        // some revents holds POLLNVAL. The first sum and the entries go through map
        // memory, which the verifier does not track: each of the first loop's ways out
        // knows another range of `entries`, and would verify the second loop once more.
        let bits = sum_words(window, entries, words::word_bits);
        // SAFETY: fields of this CPU's walk state.
        let (bits, entries) = unsafe {
            core::ptr::write_volatile(&mut state.bits, bits);
            core::ptr::write_volatile(&mut state.summed, entries as u64);
            (
                core::ptr::read_volatile(&state.bits),
                core::ptr::read_volatile(&state.summed) as usize,
            )
        };
        let skipped_nval = if words::has_nval(bits) {
            sum_words(window, entries, words::word_skipped_nval)
        } else {
            0
        };
        state
            .scan
            .add(entries as u64, words::word_sums(bits, skipped_nval));
    } else {
        // Part of the chunk is not readable (a page not resident): read entry by entry so
        // that only the entries really out of reach are unreadable, in a loop of its own
        // that the verifier checks once rather than once per entry.
        state.chunk = source;
        // SAFETY: read_entry matches bpf_loop's callback signature.
        unsafe {
            generated::bpf_loop(
                entries as u32,
                read_entry as *mut c_void,
                core::ptr::null_mut(),
                0,
            )
        };
    }
    0
}

/// Reads entry `index` of the chunk at `Walk::chunk` alone: counted, or unreadable.
#[inline(never)]
extern "C" fn read_entry(index: u32, _context: *mut c_void) -> i64 {
    let Some(state) = WALK.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: this CPU's walk state; see `Walk`.
    let state = unsafe { &mut *state };
    let address = state.chunk + u64::from(index) * POLLFD_SIZE as u64;
    // SAFETY: bpf_probe_read_user checks the address; a fault is an Err.
    match unsafe { bpf_probe_read_user(address as *const PollFd) } {
        Ok(entry) => state.scan.push(entry),
        Err(_) => state.scan.unreadable += 1,
    }
    0
}
