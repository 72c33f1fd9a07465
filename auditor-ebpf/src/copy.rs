//! The table's copy (`dup_fd`): fork, vfork, clone and clone3 without CLONE_FILES, and
//! unshare with CLONE_FILES of a table shared with other tasks, copy the caller's fd
//! table, which past the 64 fds `files_struct` embeds allocates one of its own
//! (`alloc_fdtable`, the growth's tests: `auditor_common::fd::copy_table`). Entry reads how
//! many slots the copy needs; exit learns from the return value whether it ran.

use core::ffi::c_void;

use auditor_common::{
    Syscall,
    fd::{self, CopyOutcome},
    prelude::{Prelude, Timeout},
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{Pending, arg, args, exit_ret, stash, take_pending, tally, tally::Row, target, task};

/// include/uapi/linux/sched.h.
const CLONE_FILES: u64 = 0x400;

/// Whether a call copies the table: what `Pending::count` holds for it.
const NO_COPY: u32 = 0;
const COPIES: u32 = 1;
/// clone3's arguments could not be read: it may copy.
const MAY_COPY: u32 = 2;

/// Notes a call of `syscall` that copies the table when `copies` says so (None: unknown).
fn enter(syscall: Syscall, copies: Option<bool>) {
    let Some(process) = target::current() else {
        return;
    };
    let (state, open_files) = match copies {
        Some(false) => (NO_COPY, None),
        Some(true) => (COPIES, task::copied_size()),
        None => (MAY_COPY, task::copied_size()),
    };
    // `arg`: the slots the copy needs, 0 when they could not be read.
    let pending = Pending::new(
        process,
        syscall,
        u64::from(open_files.unwrap_or(0)),
        state,
        Prelude::Passes,
        Timeout::Infinite,
    );
    if !stash(&pending)
        && let Some(mut row) = Row::of(&process)
    {
        // No room to follow the call to its exit: counted without its return value.
        model(&mut row, &pending, None);
        tally::call(syscall);
    }
}

/// The copy's tests, once the return value (None: unknown) says whether it ran.
fn model(row: &mut Row, pending: &Pending, ret: Option<i64>) {
    if pending.count == NO_COPY {
        return;
    }
    let open_files = (pending.arg != 0).then_some(pending.arg as u32);
    let outcome = match ret {
        Some(ret) if ret >= 0 && pending.count == COPIES => CopyOutcome::Copied,
        _ => CopyOutcome::Maybe,
    };
    fd::copy_table(row, open_files, task::nr_open(), outcome);
}

fn exit(ctx: &TracePointContext) {
    let Some(pending) = take_pending() else {
        return;
    };
    let Some(mut row) = Row::of(&pending.process) else {
        return;
    };
    model(&mut row, &pending, Some(exit_ret(ctx)));
    if let Some(syscall) = Syscall::ALL.get(pending.syscall as usize) {
        tally::call(*syscall);
    }
}

#[tracepoint(category = "syscalls", name = "sys_enter_fork")]
pub fn fork_enter(_ctx: TracePointContext) -> u32 {
    enter(Syscall::Fork, Some(true));
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_vfork")]
pub fn vfork_enter(_ctx: TracePointContext) -> u32 {
    enter(Syscall::Vfork, Some(true));
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_clone")]
pub fn clone_enter(ctx: TracePointContext) -> u32 {
    let flags = arg!(&ctx, Clone, "clone_flags");
    enter(Syscall::Clone, Some(flags & CLONE_FILES == 0));
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_clone3")]
pub fn clone3_enter(ctx: TracePointContext) -> u32 {
    // `struct clone_args` starts with its u64 flags.
    let flags = args::read_user::<u64>(arg!(&ctx, Clone3, "uargs"));
    enter(Syscall::Clone3, flags.map(|flags| flags & CLONE_FILES == 0));
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_unshare")]
pub fn unshare_enter(ctx: TracePointContext) -> u32 {
    // unshare_fd() copies only a table other tasks share.
    let copies = if arg!(&ctx, Unshare, "unshare_flags") & CLONE_FILES == 0 {
        Some(false)
    } else {
        task::files_count().map(fd::table_shared)
    };
    enter(Syscall::Unshare, copies);
    0
}

macro_rules! exits {
    ($($function:ident => $event:literal),* $(,)?) => {
        $(
            #[tracepoint(category = "syscalls", name = $event)]
            pub fn $function(ctx: TracePointContext) -> u32 {
                exit(&ctx);
                0
            }
        )*
    };
}

exits! {
    fork_exit => "sys_exit_fork",
    vfork_exit => "sys_exit_vfork",
    clone_exit => "sys_exit_clone",
    clone3_exit => "sys_exit_clone3",
    unshare_exit => "sys_exit_unshare",
}

/// The highest open fd's word, searched from the top of `open_fds`.
#[repr(C)]
struct LastWord {
    open_fds: u64,
    words: u32,
    /// The word's index plus one (0: none found yet).
    found: u32,
    failed: u32,
}

/// `sane_fdtable_size()` of the current table: the slots a copy needs (None: unreadable).
pub fn copied_size(open_fds: u64, max_fds: u32) -> Option<u32> {
    if max_fds <= fd::NR_OPEN_DEFAULT {
        // A table of 64 fds at most needs no more.
        return Some(fd::NR_OPEN_DEFAULT);
    }
    let mut state = LastWord {
        open_fds,
        words: max_fds / fd::BITS_PER_LONG,
        found: 0,
        failed: 0,
    };
    // SAFETY: last_word matches bpf_loop's callback signature; `state` outlives the loop.
    let done = unsafe {
        aya_ebpf::helpers::generated::bpf_loop(
            state.words,
            last_word as *mut c_void,
            (&raw mut state).cast(),
            0,
        )
    };
    if done < 0 || state.failed != 0 {
        return None;
    }
    let last = state
        .found
        .checked_sub(1)
        .map(|word| word * fd::BITS_PER_LONG);
    Some(fd::copied_size(last))
}

#[inline(never)]
extern "C" fn last_word(index: u32, context: *mut c_void) -> i64 {
    // SAFETY: the LastWord `copied_size` passed, on its stack for the loop.
    let state = unsafe { &mut *context.cast::<LastWord>() };
    let Some(word) = state.words.checked_sub(index + 1) else {
        return 1;
    };
    match task::read_word(state.open_fds + u64::from(word) * 8) {
        None => {
            state.failed = 1;
            1
        }
        Some(0) => 0,
        Some(_) => {
            state.found = word + 1;
            1
        }
    }
}
