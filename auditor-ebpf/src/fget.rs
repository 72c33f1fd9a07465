//! `__fget_light`'s shared-table arm (`files->count > 1`), once per fd lookup: one for each
//! read, write, recvmsg and sendmsg, one for each non-negative pollfd entry of a scan.

use auditor_common::{Counts, Reached, Site, Syscall, fd};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{tally, tally::Row, target, task};

/// Records `lookups` fd lookups made if `reached`, with the table as it is now.
pub fn record_lookups(row: &Row, lookups: u64, reached: Reached) {
    if lookups == 0 {
        return;
    }
    // Only a reached lookup depends on the table: the rest need not read it.
    let shared = match reached {
        Reached::Yes => task::files_count().map(fd::table_shared),
        Reached::No | Reached::Unknown => None,
    };
    let mut counts = Counts::ZERO;
    counts.record(reached.evaluate(shared), lookups);
    row.record(Site::FgetTableShared, &counts);
}

/// A syscall that looks its one fd up first thing.
fn single_lookup(syscall: Syscall) {
    if let Some(row) = target::current().as_ref().and_then(Row::of) {
        record_lookups(&row, 1, Reached::Yes);
        tally::call(syscall);
    }
}

#[tracepoint(category = "syscalls", name = "sys_enter_read")]
pub fn read_enter(_ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Read);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_write")]
pub fn write_enter(_ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Write);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_recvmsg")]
pub fn recvmsg_enter(_ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Recvmsg);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_sendmsg")]
pub fn sendmsg_enter(_ctx: TracePointContext) -> u32 {
    single_lookup(Syscall::Sendmsg);
    0
}

/// Lookups of a poll scan: every entry `do_pollfd` did not skip as negative.
pub fn record_poll_lookups(row: &Row, fd_negative: &Counts) {
    record_lookups(row, fd_negative.not_taken, Reached::Yes);
    // Entries whose fd could not be read may have been looked up.
    record_lookups(row, fd_negative.unreadable, Reached::Unknown);
}
