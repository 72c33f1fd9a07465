//! The probe's counters: per (process, command, site) in a per-CPU hash, per site when that
//! hash is full, and calls per syscall.

use auditor_common::{CountKey, Counts, Evaluation, SITE_COUNT, SYSCALL_COUNT, Site, Syscall};
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{PerCpuArray, PerCpuHashMap},
};

#[map]
static COUNTS: PerCpuHashMap<CountKey, Counts> = PerCpuHashMap::with_max_entries(16_384, 0);

/// Counts that found no room in `COUNTS`: still exact per site, only not per process.
#[map]
static UNATTRIBUTED: PerCpuArray<Counts> = PerCpuArray::with_max_entries(SITE_COUNT as u32, 0);

/// Calls seen at exit, per followed syscall.
#[map]
static CALLS: PerCpuArray<u64> = PerCpuArray::with_max_entries(SYSCALL_COUNT as u32, 0);

fn add(slot: *mut Counts, counts: &Counts) {
    // SAFETY: slot points into this CPU's copy of a map value; no other CPU writes it and
    // this program is not re-entered on the same CPU.
    unsafe { (*slot).add(counts) }
}

/// Adds `counts` to the current process's row for `site`.
pub fn record(site: Site, counts: &Counts) {
    if counts.total() == 0 {
        return;
    }
    let key = CountKey {
        pid: (aya_ebpf::helpers::bpf_get_current_pid_tgid() >> 32) as u32,
        site: site as u32,
        // The process's name, so that its threads share one row whatever their own names.
        comm: crate::task::process_comm().unwrap_or([0; 16]),
    };
    if let Some(slot) = COUNTS.get_ptr_mut(key) {
        add(slot, counts);
        return;
    }
    // A new row holds this CPU's counts and zero for the others. EEXIST means another CPU
    // created it meanwhile: add to our slot of that row.
    if COUNTS.insert(key, counts, u64::from(BPF_NOEXIST)).is_ok() {
        return;
    }
    if let Some(slot) = COUNTS.get_ptr_mut(key) {
        add(slot, counts);
    } else if let Some(slot) = UNATTRIBUTED.get_ptr_mut(site as u32) {
        add(slot, counts);
    }
}

/// Adds one evaluation of `site` (nothing if it was not reached).
pub fn record_one(site: Site, evaluation: Evaluation) {
    let mut counts = Counts::ZERO;
    counts.record(evaluation, 1);
    record(site, &counts);
}

/// Counts one finished call of `syscall`.
pub fn call(syscall: Syscall) {
    if let Some(slot) = CALLS.get_ptr_mut(syscall as u32) {
        // SAFETY: this CPU's slot of a per-CPU array; see `add`.
        unsafe { *slot += 1 }
    }
}
