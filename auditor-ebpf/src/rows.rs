//! Where a counted process's row of counts is: a preallocated slot of `ROWS`, which the
//! process keeps for the session and its threads keep in their state, or (past the first
//! slots) its row in `tally`'s hash by key. A slot is found by index, without hashing the
//! 20-byte key at every call.

use auditor_common::{ProcessKey, SiteCounts, slots};
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{Array, HashMap, PerCpuArray, Queue},
};

/// The preallocated rows, per CPU, by slot (`auditor_common::slots`).
#[map]
static ROWS: PerCpuArray<SiteCounts> = PerCpuArray::with_max_entries(slots::COUNT, 0);

/// The key of each slot's row, written before the slot is published in `ROW_SLOTS`: a
/// row that has counts has its key.
#[map]
static ROW_KEYS: Array<ProcessKey> = Array::with_max_entries(slots::COUNT, 0);

/// The slot of each process that has one.
#[map]
static ROW_SLOTS: HashMap<ProcessKey, u32> = HashMap::with_max_entries(slots::COUNT, 0);

/// The free slots of `slots::FIRST` and of `slots::SPILL` (the loader fills them).
#[map]
static FIRST_SLOTS: Queue<u32> = Queue::with_max_entries(slots::FIRST.end, 0);
#[map]
static SPILL_SLOTS: Queue<u32> = Queue::with_max_entries(slots::SPILL.end, 0);

const _: () = assert!(slots::FIRST.end <= slots::SPILL.start && slots::SPILL.end == slots::COUNT);

/// A counted process: the key of its counts, and the slot of its row in `ROWS`
/// (`slots::NONE`: its row is found by key).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Counted {
    pub key: ProcessKey,
    pub slot: u32,
}

/// This CPU's row in `slot` (None for `slots::NONE`).
#[inline(always)]
pub fn row(slot: u32) -> Option<*mut SiteCounts> {
    ROWS.get_ptr_mut(slot)
}

/// The slot `process` counts in from now on: the one it has, or a free one of
/// `slots::FIRST`; `slots::NONE` when those are taken.
pub fn first_slot(process: &ProcessKey) -> u32 {
    slot_from(&FIRST_SLOTS, process).unwrap_or(slots::NONE)
}

/// The slot `process` counts in while the kernel cannot allocate its row by key: the one
/// it has, or a free one of `slots::SPILL`.
pub fn spill_slot(process: &ProcessKey) -> Option<u32> {
    slot_from(&SPILL_SLOTS, process)
}

/// `process`'s slot, taken from `free` if it has none.
#[inline(never)]
fn slot_from(free: &Queue<u32>, process: &ProcessKey) -> Option<u32> {
    // SAFETY: the value is copied out.
    if let Some(&slot) = unsafe { ROW_SLOTS.get(process) } {
        return Some(slot);
    }
    let slot = free.pop().ok().flatten()?;
    if let Some(key) = ROW_KEYS.get_ptr_mut(slot) {
        // SAFETY: a map value, valid for this program run; no program reads a slot's key,
        // and no other CPU writes it until the slot is published below (or freed again).
        unsafe { *key = *process };
    }
    if ROW_SLOTS
        .insert(process, slot, u64::from(BPF_NOEXIST))
        .is_ok()
    {
        return Some(slot);
    }
    // Another CPU gave the process a slot meanwhile: this one goes back.
    let _ = free.push(slot, 0);
    // SAFETY: as above.
    unsafe { ROW_SLOTS.get(process) }.copied()
}
