//! select and pselect6: what `auditor_common::select::select` needs of a call.
//!
//! Entry reads what the entry point checks before `core_sys_select` (the timeout and, for
//! pselect6, the signal-mask argument), the table's `max_fds` and the fd_sets (walked as
//! `do_select` will, in bulk), the user memory in one read where it lies together
//! (`span`); exit adds the return value and runs the model.

use auditor_common::{
    ProcessKey, Syscall, UNFOLLOWED_RETURN,
    prelude::{Prelude, Timeout},
    select::{self, SelectCall, SetScan, StepSums},
};
use aya_ebpf::{
    cty::c_void,
    helpers::generated,
    macros::{map, tracepoint},
    maps::PerCpuArray,
    programs::TracePointContext,
};

use crate::{
    arg,
    args::{self, Checks},
    exit_ret,
    in_flight::{self, Call, Kind},
    span::{self, Spanned},
    tally,
    tally::Row,
    target,
    target::Caller,
    task,
};

/// A select or pselect6 in flight.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingSelect {
    process: ProcessKey,
    /// The table's `max_fds` at entry (core_sys_select reads it once); 0: unreadable.
    max_fds: u32,
    n: u64,
    /// The entry point's checks.
    prelude: Prelude,
    timeout: Timeout,
    /// 1 when `scan` holds the walk over the fd_sets read at entry.
    sets_read: u32,
    scan: SetScan,
}

impl Call for PendingSelect {
    const KIND: Kind = Kind::Select;

    /// Each branch the call may reach is undecided.
    fn unfollowed(&self) {
        if let Some(mut row) = Row::by_key(&self.process) {
            let call = SelectCall {
                n: select::n_from_arg(self.n),
                prelude: Prelude::Unknown,
                timeout: self.timeout,
                max_fds: None,
                ret: UNFOLLOWED_RETURN,
            };
            select::select(&mut row, &call, None, &task::Current);
        }
    }
}

/// What select's and pselect6's records pass that the model needs.
struct Entry {
    n: u64,
    /// `inp`, `outp` and `exp`.
    sets: [u64; 3],
    /// The timeout: a `struct timeval *` for select, a `struct __kernel_timespec *` for
    /// pselect6.
    timeout: u64,
    /// pselect6's `{ const sigset_t *ss; size_t ss_len; }` (0 for select).
    argpack: u64,
    syscall: Syscall,
}

#[tracepoint(category = "syscalls", name = "sys_enter_select")]
pub fn select_enter(ctx: TracePointContext) -> u32 {
    if let Some(caller) = target::current() {
        let entry = Entry {
            n: arg!(&ctx, Select, "n"),
            sets: [
                arg!(&ctx, Select, "inp"),
                arg!(&ctx, Select, "outp"),
                arg!(&ctx, Select, "exp"),
            ],
            timeout: arg!(&ctx, Select, "tvp"),
            argpack: 0,
            syscall: Syscall::Select,
        };
        enter(&caller, &entry);
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_select")]
pub fn select_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::Select);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_pselect6")]
pub fn pselect6_enter(ctx: TracePointContext) -> u32 {
    if let Some(caller) = target::current() {
        let entry = Entry {
            n: arg!(&ctx, Pselect6, "n"),
            sets: [
                arg!(&ctx, Pselect6, "inp"),
                arg!(&ctx, Pselect6, "outp"),
                arg!(&ctx, Pselect6, "exp"),
            ],
            timeout: arg!(&ctx, Pselect6, "tsp"),
            argpack: arg!(&ctx, Pselect6, "sig"),
            syscall: Syscall::Pselect6,
        };
        enter(&caller, &entry);
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_pselect6")]
pub fn pselect6_exit(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::Pselect6);
    0
}

/// The entry point's checks before `core_sys_select`: the timeout's copy and value, and
/// for pselect6 the argpack's copy (EFAULT) and `set_user_sigmask()`; with the timeout.
fn checks(entry: &Entry, spanned: &Spanned) -> Checks {
    let pair = |address| spanned.user_words::<2>(address);
    if entry.syscall == Syscall::Select {
        let timeout = args::timeval_read(entry.timeout, pair);
        return Checks {
            prelude: timeout.prelude(),
            timeout,
        };
    }
    let timeout = args::timespec_read(entry.timeout, pair);
    let sigmask = if entry.argpack == 0 {
        Prelude::Passes
    } else {
        match pair(entry.argpack) {
            Some([set, size]) => {
                args::sigmask_read(set, size, |set| spanned.user_words::<1>(set).is_some())
            }
            None => Prelude::Unknown,
        }
    };
    Checks {
        prelude: sigmask.and(timeout.prelude()),
        timeout,
    }
}

/// Reads what the call points to (its timeout, pselect6's argpack and mask, the sets
/// `do_select` will walk: `select_user_memory`), leaves the call in flight, then reads its
/// sets into it. Nothing the entry found before (the thread's state found or made, the
/// row's slot) is live across the walk's loop, whose callback the verifier would check
/// again for each way it was reached. Without memory for the thread's state the call is
/// unfollowed, its sets unread (unreadable).
fn enter(caller: &Caller, entry: &Entry) {
    let n = select::n_from_arg(entry.n);
    let max_fds = task::max_fds(caller.task).unwrap_or(0);
    let used_n = (n >= 0 && max_fds != 0).then(|| select::used_n(n, max_fds));
    let Some(state) = SET_WALK.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's walk state; programs on syscall tracepoints run with preemption
    // off, so it is not shared.
    unsafe {
        (*state).sets = entry.sets;
        (*state).timeout = entry.timeout;
        (*state).argpack = entry.argpack;
        (*state).syscall = entry.syscall;
        (*state).words = used_n.map_or(0, SetScan::words);
    }
    let Checks { prelude, timeout } = Checks::unpacked(select_user_memory());
    let Some(record) = in_flight::stash(
        &PendingSelect {
            process: caller.process.key,
            max_fds,
            n: entry.n,
            prelude,
            timeout,
            sets_read: 0,
            scan: SetScan::default(),
        },
        caller,
    ) else {
        return;
    };
    if let Some(used_n) = used_n
        && let Some(scan) = read_sets(used_n)
    {
        // SAFETY: the record just left in the thread's state (see `in_flight::stash`).
        unsafe {
            (*record).scan = scan;
            (*record).sets_read = 1;
        }
    }
}

/// What select's entry reads of user memory, from the call's arguments in `SET_WALK`: the
/// span they lie in, read at once where it can be (`span`); where each set's words are
/// to be read from (`SetWalk::sources`); and the entry point's checks and the timeout,
/// returned as [`Checks::packed`]. A global function, which the verifier checks once
/// on its own: checked as part of its caller, each way through the reads (from the span,
/// alone, unreadable) walked the rest of the program again.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn select_user_memory() -> u64 {
    const UNREAD: u64 = Checks {
        prelude: Prelude::Unknown,
        timeout: Timeout::Unreadable,
    }
    .packed();
    let Some(state) = SET_WALK.get_ptr_mut(0) else {
        return UNREAD;
    };
    // SAFETY: this CPU's walk state; see `enter`.
    let state = unsafe { &mut *state };
    let set_bytes = u64::from(state.words) * 8;
    let entry = Entry {
        // Not needed here: `words` is the sets' size.
        n: 0,
        sets: state.sets,
        timeout: state.timeout,
        argpack: state.argpack,
        syscall: state.syscall,
    };
    let spanned = span::read(&[
        (entry.timeout, 16),
        (entry.argpack, 16),
        (entry.sets[0], set_bytes),
        (entry.sets[1], set_bytes),
        (entry.sets[2], set_bytes),
    ]);
    // Where each set is read from: the span holds some, read with the rest; the walk's
    // callback finds a source and a kind of read for every set.
    state.in_span = 0;
    for (k, &set) in entry.sets.iter().enumerate() {
        match span::address(&spanned, set, state.words as usize) {
            Some(copy) if set != 0 => {
                state.sources[k] = copy;
                state.in_span |= 1 << k;
            }
            _ => state.sources[k] = set,
        }
    }
    checks(&entry, &spanned).packed()
}

fn exit(ctx: &TracePointContext, syscall: Syscall) {
    let Some((pending, slot)) = in_flight::take::<PendingSelect>() else {
        return;
    };
    let Some(mut row) = Row::of(&pending.process, slot) else {
        return;
    };
    let call = SelectCall {
        n: select::n_from_arg(pending.n),
        prelude: pending.prelude,
        timeout: pending.timeout,
        max_fds: (pending.max_fds != 0).then_some(pending.max_fds),
        ret: exit_ret(ctx),
    };
    let scan = (pending.sets_read != 0).then_some(pending.scan);
    select::select(&mut row, &call, scan, &task::Current);
    tally::call(syscall);
}

/// Words of each set read per `bpf_loop` step.
const WORDS_PER_STEP: usize = 32;

/// The walk over a call's fd_sets, in per-CPU map memory (see `poll::Walk` for why).
#[repr(C)]
struct SetWalk {
    sets: [u64; 3],
    n: u32,
    words: u32,
    readable: u32,
    /// Bit k: set k is read from the span (`span::address`), not from user memory.
    in_span: u32,
    /// The call's timeout and pselect6's argpack (`Entry`), for `select_user_memory`.
    timeout: u64,
    argpack: u64,
    /// Select or pselect6.
    syscall: Syscall,
    _pad: u32,
    /// Where each set is read from: its user address, or the kernel address of its copy
    /// in the span.
    sources: [u64; 3],
    scan: SetScan,
    _pad2: u32,
    /// All ones for each set passed, zero for a null one: what its row adds to a word.
    passed: [u64; 3],
    /// A step's words of each set, then GROUP words of zeros.
    buffer: [[u64; WORDS_PER_STEP + GROUP]; 3],
}

/// Words summed per step of `set_chunk`'s loop, with no test between them: the verifier
/// walks a way out of the loop per group rather than per word.
const GROUP: usize = 4;
const _: () = assert!(WORDS_PER_STEP.is_multiple_of(GROUP));

#[map]
static SET_WALK: PerCpuArray<SetWalk> = PerCpuArray::with_max_entries(1, 0);

/// Reads the fd_sets of a call with `n` fds (after clamping) as `get_fd_set` copies them,
/// each from where `select_user_memory` found it, and walks them as `do_select` will; None
/// if any word could not be read.
fn read_sets(n: u32) -> Option<SetScan> {
    let state = SET_WALK.get_ptr_mut(0)?;
    let words = SetScan::words(n);
    // SAFETY: this CPU's walk state; see `enter`.
    unsafe {
        (*state).n = n;
        (*state).words = words;
        (*state).readable = 1;
        (*state).scan = SetScan::default();
        for k in 0..3 {
            (*state).passed[k] = if (*state).sets[k] != 0 { u64::MAX } else { 0 };
        }
    }
    let steps = words.div_ceil(WORDS_PER_STEP as u32);
    // SAFETY: set_chunk matches bpf_loop's callback signature.
    let done =
        unsafe { generated::bpf_loop(steps, set_chunk as *mut c_void, core::ptr::null_mut(), 0) };
    // SAFETY: as above.
    let (readable, scan) = unsafe { ((*state).readable, (*state).scan) };
    (readable != 0 && done >= i64::from(steps)).then_some(scan)
}

#[inline(never)]
extern "C" fn set_chunk(index: u32, _context: *mut c_void) -> i64 {
    let Some(state) = SET_WALK.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: this CPU's walk state; see `read_sets`.
    let state = unsafe { &mut *state };
    let start = index * WORDS_PER_STEP as u32;
    let left = state.words.saturating_sub(start);
    let count = if left < WORDS_PER_STEP as u32 {
        left as usize
    } else {
        WORDS_PER_STEP
    };
    let bytes = count * 8;
    if bytes > WORDS_PER_STEP * 8 {
        return 1;
    }
    for k in 0..3 {
        let set = state.sets[k];
        if set == 0 {
            continue;
        }
        let to = state.buffer[k].as_mut_ptr().cast();
        let from = (state.sources[k] + u64::from(start) * 8) as *const c_void;
        // SAFETY: the buffer row holds WORDS_PER_STEP words and bytes fits it; the helpers
        // check the source.
        let read = unsafe {
            if state.in_span & (1 << k) != 0 {
                generated::bpf_probe_read_kernel(to, bytes as u32, from)
            } else {
                generated::bpf_probe_read_user(to, bytes as u32, from)
            }
        };
        if read != 0 {
            state.readable = 0;
            return 1;
        }
    }
    // The call's last word holds bits past n, which are no fds of the call.
    if start as usize + count == state.words as usize && count > 0 {
        let last = (count - 1) % WORDS_PER_STEP;
        let mask = SetScan::last_word_mask(state.n);
        for row in &mut state.buffer {
            row[last] &= mask;
        }
    }
    // Empty words after those read up to a whole group (the buffer's rows have GROUP
    // words past a step's), which change no sum.
    for row in &mut state.buffer {
        // SAFETY: count <= WORDS_PER_STEP, and the row is GROUP words longer.
        unsafe { crate::write_zeros::<GROUP>(row.as_mut_ptr().wrapping_add(count)) };
    }
    // SAFETY: a read of this CPU's walk state; volatile, so that the loop is compiled once
    // for every mix of sets passed rather than once per mix.
    let passed = unsafe { core::ptr::read_volatile(&state.passed) };
    let mut sums = StepSums {
        words: count as u32,
        ..StepSums::default()
    };
    // A group of words a step, each summed with no branch (`StepSums::add`).
    let groups = count.div_ceil(GROUP);
    for group in 0..WORDS_PER_STEP / GROUP {
        if group >= groups {
            break;
        }
        for i in group * GROUP..(group + 1) * GROUP {
            let word = (state.buffer[0][i] & passed[0])
                | (state.buffer[1][i] & passed[1])
                | (state.buffer[2][i] & passed[2]);
            sums.add(i as u32, word);
        }
    }
    state.scan.push_step(&sums);
    0
}
