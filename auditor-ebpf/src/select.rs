//! select and pselect6: what `auditor_common::select::select` needs of a call.
//!
//! Entry reads what the entry point checks before `core_sys_select` (the timeout and, for
//! pselect6, the signal-mask argument), the table's `max_fds` and the fd_sets (walked as
//! `do_select` will, in bulk); exit adds the return value and runs the model.

use auditor_common::{
    Syscall, UNFOLLOWED_RETURN,
    prelude::{Prelude, Timeout},
    select::{self, SelectCall, SetScan},
};
use aya_ebpf::{
    cty::c_void,
    helpers::generated,
    macros::{map, tracepoint},
    maps::PerCpuArray,
    programs::TracePointContext,
};

use crate::{EXIT_RET, Pending, args, field, stash, take_pending, tally, tally::Row, target, task};

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
    let Some(process) = target::current() else {
        return;
    };
    let timeout = if syscall == Syscall::Select {
        args::timeval(field(ctx, ENTER_TIMEOUT))
    } else {
        args::timespec(field(ctx, ENTER_TIMEOUT))
    };
    let mut prelude = timeout.prelude();
    if syscall == Syscall::Pselect6 {
        prelude = sigmask_prelude(field(ctx, ENTER_SIGMASK_ARGPACK)).and(prelude);
    }
    let n = select::n_from_arg(field(ctx, ENTER_N));
    // core_sys_select reads max_fds once, at its start; 0: unreadable.
    let max_fds = task::max_fds().unwrap_or(0);
    let mut pending = Pending::new(process, field(ctx, ENTER_N), max_fds, prelude, timeout);
    if n >= 0 && max_fds != 0 {
        let used_n = (n as u32).min(max_fds);
        if let Some(scan) = read_sets(ctx, used_n) {
            pending.sets_read = 1;
            pending.scan = scan;
        }
    }
    if !stash(&pending)
        && let Some(mut row) = Row::of(&process)
    {
        // No room to follow the call to its exit: each branch it may reach is undecided.
        let call = SelectCall {
            n,
            prelude: Prelude::Unknown,
            timeout,
            max_fds: None,
            ret: UNFOLLOWED_RETURN,
        };
        select::select(&mut row, &call, None, &task::Current);
    }
}

fn exit(ctx: &TracePointContext, syscall: Syscall) {
    let Some(pending) = take_pending() else {
        return;
    };
    let Some(mut row) = Row::of(&pending.process) else {
        return;
    };
    let call = SelectCall {
        n: select::n_from_arg(pending.arg),
        prelude: Prelude::from_u32(pending.prelude),
        timeout: Timeout::from_u32(pending.timeout),
        max_fds: (pending.count != 0).then_some(pending.count),
        ret: field(ctx, EXIT_RET) as i64,
    };
    let scan = (pending.sets_read != 0).then_some(pending.scan);
    select::select(&mut row, &call, scan, &task::Current);
    tally::call(syscall);
}

/// Offsets of `inp`, `outp` and `exp` in the enter records of select and pselect6.
const ENTER_SETS: [usize; 3] = [24, 32, 40];

/// Words of each set read per `bpf_loop` step.
const WORDS_PER_STEP: usize = 32;

/// The walk over a call's fd_sets, in per-CPU map memory (see `poll::Walk` for why).
#[repr(C)]
struct SetWalk {
    sets: [u64; 3],
    n: u32,
    words: u32,
    readable: u32,
    _pad: u32,
    scan: SetScan,
    _pad2: u32,
    buffer: [[u64; WORDS_PER_STEP]; 3],
}

#[map]
static SET_WALK: PerCpuArray<SetWalk> = PerCpuArray::with_max_entries(1, 0);

/// Reads the fd_sets of a call with `n` fds (after clamping) as `get_fd_set` copies them,
/// and walks them as `do_select` will; None if any word could not be read.
fn read_sets(ctx: &TracePointContext, n: u32) -> Option<SetScan> {
    let state = SET_WALK.get_ptr_mut(0)?;
    let words = SetScan::words(n);
    // SAFETY: this CPU's walk state; programs on syscall tracepoints run with preemption
    // off, so it is not shared.
    unsafe {
        (*state).sets = ENTER_SETS.map(|offset| field(ctx, offset));
        (*state).n = n;
        (*state).words = words;
        (*state).readable = 1;
        (*state).scan = SetScan::default();
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
        // SAFETY: the buffer row holds WORDS_PER_STEP words and bytes fits it.
        let read = unsafe {
            generated::bpf_probe_read_user(
                state.buffer[k].as_mut_ptr().cast(),
                bytes as u32,
                (set + u64::from(start) * 8) as *const c_void,
            )
        };
        if read != 0 {
            state.readable = 0;
            return 1;
        }
    }
    for i in 0..WORDS_PER_STEP {
        if i >= count {
            break;
        }
        let mut word = 0;
        for k in 0..3 {
            if state.sets[k] != 0 {
                word |= state.buffer[k][i];
            }
        }
        if start as usize + i + 1 == state.words as usize {
            word &= SetScan::last_word_mask(state.n);
        }
        state.scan.push(word);
    }
    0
}
