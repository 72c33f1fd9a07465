//! close: its entry reads the file its fd names, before the close takes it from the table;
//! its exit runs `auditor_common::close` on the return value and that file's test, so that
//! a close finds its row of counts once and its process once.

use auditor_common::{
    ProcessKey, Syscall, close,
    fd::{self, FdFile},
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{
    arg, exit_ret,
    in_flight::{self, Call, Kind},
    tally,
    tally::Row,
    target, task,
};

/// A close in flight: whose, and what its fd named at entry.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingClose {
    process: ProcessKey,
    /// The file, as `FdFile::to_u32` writes it.
    file: u32,
}

impl PendingClose {
    // Inlined: on close's exit's way (see `task::read_kernel`).
    #[inline(always)]
    fn record(&self, row: &mut Row) {
        fd::close_flush(row, FdFile::from_u32(self.file));
    }
}

impl Call for PendingClose {
    const KIND: Kind = Kind::Close;

    fn unfollowed(&self) {
        if let Some(mut row) = Row::by_key(&self.process) {
            self.record(&mut row);
            close::close_unreturned(&mut row);
            tally::call(Syscall::Close);
        }
    }
}

#[tracepoint(category = "syscalls", name = "sys_enter_close")]
pub fn close_enter(ctx: TracePointContext) -> u32 {
    if let Some(caller) = target::current() {
        let fd = arg!(&ctx, Close, "fd") as u32;
        in_flight::stash(
            &PendingClose {
                process: caller.process.key,
                file: FdFile::to_u32(task::fd_file(caller.task, fd)),
            },
            &caller,
        );
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_close")]
pub fn close_exit(ctx: TracePointContext) -> u32 {
    if let Some((pending, slot)) = in_flight::take::<PendingClose>()
        && let Some(mut row) = Row::of(&pending.process, slot)
    {
        pending.record(&mut row);
        close::close(&mut row, exit_ret(&ctx));
        tally::call(Syscall::Close);
    }
    0
}
