//! The probe's lowest layer of counters: reads that failed, per `auditor_common::failure`
//! kind, and the one way a per-CPU counter is added to, which every other module uses.

use auditor_common::failure;
use aya_ebpf::{macros::map, maps::PerCpuArray};

/// Reads that failed, per `auditor_common::failure` kind.
#[map]
static FAILURES: PerCpuArray<u64> = PerCpuArray::with_max_entries(failure::COUNT as u32, 0);

/// Counts a read of kind `failure` that failed.
pub fn failed(failure: u32) {
    increment(&FAILURES, failure);
}

/// Adds one to this CPU's counter `index` of `counters`.
pub fn increment(counters: &PerCpuArray<u64>, index: u32) {
    if let Some(slot) = counters.get_ptr_mut(index) {
        // SAFETY: this CPU's slot of a per-CPU array, not shared within a program run
        // (see `tally::Row::record`).
        unsafe { *slot += 1 }
    }
}
