//! The probe's counters: a row of every site's counts per (process, name), found once per
//! call: by slot for the processes that keep one (`rows`), else by key in a per-CPU hash;
//! rows of the spill for processes whose row the kernel could not allocate in time; one
//! row for counts that found no room anywhere; and calls per syscall.

use crate::{failures::increment, rows, stacks, target::Caller};
use auditor_common::{
    Counts, Evaluation, ProcessKey, SYSCALL_COUNT, Site, SiteCounts, Syscall, catalogue::Recorder,
    maps, row_miss, slots, stacks::RareSites,
};
use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST},
    macros::map,
    maps::{Array, PerCpuArray, PerCpuHashMap},
};

/// The rows of processes that have no slot, allocated as they first make a counted call:
/// a session that counts many processes holds their rows, not the capacity.
#[map]
static COUNTS: PerCpuHashMap<ProcessKey, SiteCounts> =
    PerCpuHashMap::with_max_entries(maps::COUNTS_CAPACITY, BPF_F_NO_PREALLOC);

/// Why calls' counts went elsewhere than their process's own row, per `row_miss` kind.
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

/// This CPU's copy of the row `key`'s counts go to when it has none in a slot (see
/// [`Row::of`]). A row is a value of `rows::ROWS` or of `COUNTS`, and of no third map: the
/// verifier walks the rest of every program once for each map a row may come from.
#[inline(always)]
fn row_by_key(key: &ProcessKey) -> Option<*mut SiteCounts> {
    if let Some(counts) = COUNTS.get_ptr_mut(key) {
        return Some(counts);
    }
    // A new row holds zeros on every CPU. EEXIST means another CPU created it meanwhile.
    let zero = ZERO_ROW.get(0)?;
    let made = COUNTS.insert(key, zero, u64::from(BPF_NOEXIST));
    if let Some(counts) = COUNTS.get_ptr_mut(key) {
        return Some(counts);
    }
    let miss = if made == Err(-E2BIG) {
        row_miss::TABLE_FULL
    } else if let Some(slot) = rows::spill_slot(key) {
        // No memory for the row now; the next call tries again, and this one's counts go
        // to the process's row in the spill.
        increment(&ROW_MISSES, row_miss::SPILLED);
        return rows::row(slot);
    } else {
        row_miss::SPILL_FULL
    };
    increment(&ROW_MISSES, miss);
    rows::row(slots::UNATTRIBUTED)
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
    /// The row of `process`: in `slot`, or by key (created on its first counted call);
    /// its row in the spill when the kernel could not allocate one; the unattributed row
    /// when the table (or the spill) is full. None only if the maps are missing, which
    /// cannot happen.
    ///
    /// A row found in its slot is found inline, the rest in [`Row::by_lookup`]: a call of
    /// a BPF function costs some 15 ns here (docs/benchmarks.md).
    #[inline(always)]
    pub fn of(process: &ProcessKey, slot: u32) -> Option<Row> {
        match rows::row(slot) {
            Some(counts) => Some(Row::with_counts(process, counts)),
            None => Row::by_lookup(process),
        }
    }

    #[inline(always)]
    fn with_counts(process: &ProcessKey, counts: *mut SiteCounts) -> Row {
        Row {
            counts,
            process: *process,
            rare_sites: stacks::begin_call(),
        }
    }

    /// [`Row::of`] for a process whose row is in no slot: by key.
    #[inline(never)]
    fn by_lookup(process: &ProcessKey) -> Option<Row> {
        Some(Row::with_counts(process, row_by_key(process)?))
    }

    /// The row of the process `target::current` found.
    pub fn of_current(caller: &Caller) -> Option<Row> {
        Row::of(&caller.process.key, caller.process.slot)
    }

    /// The row of `process` by key, for a call whose slot was not kept (one not followed
    /// to its exit): the user side adds the rows of a process up.
    pub fn by_key(process: &ProcessKey) -> Option<Row> {
        Row::of(process, slots::NONE)
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
