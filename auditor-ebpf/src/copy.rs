//! The table's copy (`dup_fd`): fork, vfork, clone and clone3 without CLONE_FILES, and
//! unshare with CLONE_FILES of a table shared with other tasks, copy the caller's fd
//! table, which past the 64 fds `files_struct` embeds allocates one of its own
//! (`alloc_fdtable`, the growth's tests: `auditor_common::fd::copy_table`). Entry reads how
//! many slots the copy needs (`task::copied_size`); exit learns from the return value
//! whether it ran.

use auditor_common::{
    ProcessKey, Syscall,
    fd::{self, CopyOutcome},
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{
    arg, args, exit_ret,
    in_flight::{self, Call, Kind},
    tally,
    tally::Row,
    target, task,
};

/// include/uapi/linux/sched.h.
const CLONE_FILES: u64 = 0x400;

/// Whether a call copies the table.
const NO_COPY: u32 = 0;
const COPIES: u32 = 1;
/// clone3's arguments could not be read: it may copy.
const MAY_COPY: u32 = 2;

/// A call that may copy the table, in flight.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingCopy {
    process: ProcessKey,
    syscall: Syscall,
    /// `NO_COPY`, `COPIES` or `MAY_COPY`.
    copies: u32,
    /// The slots the copy needs, 0 when they could not be read.
    open_files: u32,
}

impl Call for PendingCopy {
    const KIND: Kind = Kind::CopyTable;

    fn unfollowed(&self) {
        if let Some(mut row) = Row::by_key(&self.process) {
            model(&mut row, self, None);
            tally::call(self.syscall);
        }
    }
}

/// Notes a call of `syscall` that copies the table when `copies` says so (None: unknown).
fn enter(syscall: Syscall, copies: Option<bool>) {
    let Some(caller) = target::current() else {
        return;
    };
    let (copies, open_files) = match copies {
        Some(false) => (NO_COPY, None),
        Some(true) => (COPIES, task::copied_size(caller.task)),
        None => (MAY_COPY, task::copied_size(caller.task)),
    };
    in_flight::stash(
        &PendingCopy {
            process: caller.process.key,
            syscall,
            copies,
            open_files: open_files.unwrap_or(0),
        },
        &caller,
    );
}

/// The copy's tests, once the return value (None: unknown) says whether it ran.
fn model(row: &mut Row, pending: &PendingCopy, ret: Option<i64>) {
    if pending.copies == NO_COPY {
        return;
    }
    let open_files = (pending.open_files != 0).then_some(pending.open_files);
    let outcome = match ret {
        Some(ret) if ret >= 0 && pending.copies == COPIES => CopyOutcome::Copied,
        _ => CopyOutcome::Maybe,
    };
    fd::copy_table(row, open_files, task::nr_open(), outcome);
}

fn exit(ctx: &TracePointContext) {
    let Some((pending, slot)) = in_flight::take::<PendingCopy>() else {
        return;
    };
    let Some(mut row) = Row::of(&pending.process, slot) else {
        return;
    };
    model(&mut row, &pending, Some(exit_ret(ctx)));
    tally::call(pending.syscall);
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
        task::files_count(task::Task::current()).map(fd::table_shared)
    };
    enter(Syscall::Unshare, copies);
    0
}

/// The exits of the syscalls that may copy the table (`Family::CopyTable`).
macro_rules! copy_exits {
    ($($function:ident => $event:literal: $syscall:ident),* $(,)?) => {
        $(
            #[tracepoint(category = "syscalls", name = $event)]
            pub fn $function(ctx: TracePointContext) -> u32 {
                exit(&ctx);
                0
            }
        )*
    };
}

include!(concat!(env!("OUT_DIR"), "/programs/copy.rs"));
