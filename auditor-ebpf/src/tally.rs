//! The probe's counters: a row of every site's counts per (process, name) in a per-CPU
//! hash, found once per call; preallocated rows for processes whose row the kernel could
//! not allocate in time; one row for counts that found no room anywhere; and calls per
//! syscall.

use crate::{failures::increment, stacks};
use auditor_common::{
    Counts, Evaluation, ProcessKey, SYSCALL_COUNT, Site, SiteCounts, Syscall, UNATTRIBUTED_ROW,
    catalogue::Recorder, maps, row_miss, stacks::RareSites,
};
use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST},
    macros::map,
    maps::{Array, PerCpuArray, PerCpuHashMap},
};

/// Rows are allocated as processes first make a counted call: a session that counts a few
/// processes holds a few rows, not the capacity.
#[map]
static COUNTS: PerCpuHashMap<ProcessKey, SiteCounts> =
    PerCpuHashMap::with_max_entries(maps::COUNTS_CAPACITY, BPF_F_NO_PREALLOC);

/// Rows of the processes whose row the kernel could not allocate in `COUNTS` when they
/// needed one: preallocated, so that a row is made whenever the table has room; and the
/// row of counts that found no row anywhere, `UNATTRIBUTED_ROW` (still exact per site,
/// only not per process).
#[map]
static SPILL: PerCpuHashMap<ProcessKey, SiteCounts> =
    PerCpuHashMap::with_max_entries(maps::SPILL_CAPACITY, 0);

/// Why calls' counts went elsewhere than their row in `COUNTS`, per `row_miss` kind.
#[map]
static ROW_MISSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(row_miss::COUNT as u32, 0);

/// A row of zeros to start a new row from: too large for the BPF stack.
#[map]
static ZERO_ROW: Array<SiteCounts> = Array::with_max_entries(1, 0);

/// Calls seen at exit, per followed syscall.
#[map]
static CALLS: PerCpuArray<u64> = PerCpuArray::with_max_entries(SYSCALL_COUNT as u32, 0);

/// What a map update returns when the map holds its maximum of entries.
const E2BIG: i32 = 7;

/// This CPU's copy of the row `process`'s counts go to (see [`Row::of`]).
#[inline(always)]
fn row_of(process: &ProcessKey) -> Option<*mut SiteCounts> {
    if let Some(counts) = COUNTS.get_ptr_mut(process) {
        return Some(counts);
    }
    // A new row holds zeros on every CPU. EEXIST means another CPU created it meanwhile.
    let zero = ZERO_ROW.get(0)?;
    let made = COUNTS.insert(process, zero, u64::from(BPF_NOEXIST));
    if let Some(counts) = COUNTS.get_ptr_mut(process) {
        return Some(counts);
    }
    let miss = if made == Err(-E2BIG) {
        row_miss::TABLE_FULL
    } else {
        // No memory for the row now; the next call tries again, and this one's counts go
        // to the process's preallocated row in the spill.
        if SPILL.get_ptr_mut(process).is_none() {
            let _ = SPILL.insert(process, zero, u64::from(BPF_NOEXIST));
        }
        if let Some(counts) = SPILL.get_ptr_mut(process) {
            increment(&ROW_MISSES, row_miss::SPILLED);
            return Some(counts);
        }
        row_miss::SPILL_FULL
    };
    increment(&ROW_MISSES, miss);
    SPILL.get_ptr_mut(UNATTRIBUTED_ROW)
}

/// This CPU's row of one process's counts, for the length of one program run.
pub struct Row {
    counts: *mut SiteCounts,
    process: ProcessKey,
    /// This CPU's evaluations of the call, with `--stacks` (else null): its stack is taken
    /// when the row is dropped, at the end of the program run, if they went the way
    /// `--stacks` asks for somewhere.
    rare_sites: *mut RareSites,
}

impl Drop for Row {
    fn drop(&mut self) {
        stacks::take_if_rare(self.rare_sites, &self.process);
    }
}

impl Row {
    /// The row of `process` (created on its first counted call); its row in the spill
    /// when the kernel could not allocate one; the unattributed row when the table (or
    /// the spill) is full. None only if the maps are missing, which cannot happen.
    pub fn of(process: &ProcessKey) -> Option<Row> {
        Some(Row {
            counts: row_of(process)?,
            process: *process,
            rare_sites: stacks::begin_call(),
        })
    }

    /// The counts of `site` in this row (checked: the verifier allows no panic path).
    fn site(&self, site: Site) -> Option<*mut Counts> {
        // SAFETY: this CPU's copy of a map value, valid for this program run.
        unsafe { (*self.counts).sites.get_mut(site as usize) }.map(|c| c as *mut Counts)
    }

    /// Adds one call's `counts` to `site` (and offers them a stack, with `--stacks`).
    #[inline(always)]
    fn add_counts(&self, site: Site, counts: &Counts) {
        if let Some(slot) = self.site(site) {
            // SAFETY: no other CPU writes this CPU's copy, and this program is not
            // re-entered on the same CPU: no other reference to it is live.
            unsafe { (*slot).add(counts) };
            // SAFETY: as above.
            stacks::note(self.rare_sites, site, counts, unsafe { &*slot });
        }
    }

    /// Adds one evaluation of `site` (nothing if it was not reached): one increment, and
    /// its counts built only to offer them a stack.
    #[inline(always)]
    fn add_one(&self, site: Site, evaluation: Evaluation) {
        if let Some(slot) = self.site(site) {
            // SAFETY: as in `record`.
            unsafe { (*slot).record(evaluation, 1) };
            if !self.rare_sites.is_null() {
                let counts = Counts::of(evaluation, 1);
                // SAFETY: as in `add_counts`.
                stacks::note(self.rare_sites, site, &counts, unsafe { &*slot });
            }
        }
    }
}

/// The model records into this CPU's row.
impl Recorder for Row {
    #[inline(always)]
    fn record(&mut self, site: Site, evaluation: Evaluation) {
        self.add_one(site, evaluation);
    }

    #[inline(always)]
    fn record_counts(&mut self, site: Site, counts: &Counts) {
        self.add_counts(site, counts);
    }
}

/// Counts one finished call of `syscall`.
pub fn call(syscall: Syscall) {
    increment(&CALLS, syscall as u32);
}
