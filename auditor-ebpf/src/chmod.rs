//! chmod, fchmodat and fchmodat2: `auditor_common::chmod`'s model at entry.

use auditor_common::{Syscall, chmod};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{tally, tally::Row, target};

/// `do_fchmodat(..., flags)` for a call of `syscall`.
fn do_fchmodat(syscall: Syscall, flags: u32) {
    if let Some(mut row) = target::current().as_ref().and_then(Row::of_current) {
        chmod::do_fchmodat(&mut row, flags);
        tally::call(syscall);
    }
}

/// The entries of chmod, fchmodat and fchmodat2 (`Family::Chmod`): `do_fchmodat`'s flags
/// are the `flags` argument of the syscalls that take one, else 0.
macro_rules! chmod_enters {
    ($($function:ident => $event:literal: $syscall:ident),* $(,)?) => {
        $(
            #[tracepoint(category = "syscalls", name = $event)]
            pub fn $function(ctx: TracePointContext) -> u32 {
                const FLAGS: Option<usize> = Syscall::$syscall.find_arg("flags");
                let flags = match FLAGS {
                    // An unsigned int, as the syscall takes it.
                    Some(index) => {
                        crate::enter_record::<{ Syscall::$syscall.arity() }>(&ctx).args[index]
                            as u32
                    }
                    None => 0,
                };
                do_fchmodat(Syscall::$syscall, flags);
                0
            }
        )*
    };
}

include!(concat!(env!("OUT_DIR"), "/programs/chmod.rs"));
