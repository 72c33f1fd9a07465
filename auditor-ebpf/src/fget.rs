//! read, write, recvmsg and sendmsg: one lookup of their fd each, at entry, on the table
//! as it is then (poll's and select's lookups are their models'); and the test of the
//! file an fcntl finds.

use auditor_common::{
    Syscall,
    fd::{self, Lookup},
    syscalls::Family,
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{
    arg, tally,
    tally::Row,
    target::{self, Caller},
};

/// A syscall that looks its one fd up first thing.
fn single_lookup(syscall: Syscall, fd: u64, lookup: Lookup) {
    if let Some(caller) = target::current()
        && let Some(mut row) = Row::of_current(&caller)
    {
        // An unsigned int, as the syscalls take it.
        fd::single_lookup(&mut row, fd as u32, lookup, &caller.task);
        tally::call(syscall);
    }
}

/// The entries of read, write, recvmsg and sendmsg (the syscall table's `Family::Lookup`).
macro_rules! lookup_enters {
    ($($function:ident => $event:literal: $syscall:ident),* $(,)?) => {
        $(
            #[tracepoint(category = "syscalls", name = $event)]
            pub fn $function(ctx: TracePointContext) -> u32 {
                const LOOKUP: Lookup = match Syscall::$syscall.info().family {
                    Family::Lookup(lookup) => lookup,
                    _ => panic!("not a lookup"),
                };
                single_lookup(Syscall::$syscall, arg!(&ctx, $syscall, "fd"), LOOKUP);
                0
            }
        )*
    };
}

include!(concat!(env!("OUT_DIR"), "/programs/fget.rs"));

/// Every fcntl of a counted `caller` (its call is counted here; F_DUPFD's allocation is
/// followed in `alloc`). A function of its own: inlined, its row and F_DUPFD's record
/// shared one frame, which took the program's stack past the verifier's 512 bytes.
#[inline(never)]
pub fn fcntl_entry(caller: &Caller, fd: u32) {
    if let Some(mut row) = Row::of_current(caller) {
        fd::fcntl_path_only(&mut row, fd, &caller.task);
        tally::call(Syscall::Fcntl);
    }
}
