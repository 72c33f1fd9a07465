//! The call in flight of each thread: what its entry program leaves for its exit program.
//!
//! A thread is in one syscall at a time, so one record per thread holds every family's
//! call: a tag (`Kind`) and the family's own `#[repr(C)]` record, in the thread's
//! task-local storage. The kernel frees it with the task, so no program forgets threads;
//! and the exit of a task that never had a followed call (every untraced process of the
//! machine) finds no storage at once, where a hash map by thread id costs a lookup.
//!
//! A family's record implements [`Call`]: its tag, and what its call counts when it
//! cannot be followed to its exit (no memory for the record), written once for all
//! families in [`stash`].

use auditor_common::maps;
use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, bpf_map_type},
    helpers::generated::{bpf_get_current_task_btf, bpf_task_storage_get},
    macros::btf_map,
};

use crate::target;

/// Which family's record a thread's call in flight holds.
#[repr(u32)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No call in flight: the exit of the last one took it.
    None = 0,
    Poll,
    Select,
    EpollWait,
    EpollCtl,
    CopyTable,
    Alloc,
    Dup,
    AddFd,
    Mapping,
}

/// A family's record of a call in flight.
pub trait Call: Copy {
    const KIND: Kind;
    /// Counts what the call may reach when there is no room to follow it to its exit:
    /// without its return value, each branch the return decides is undecided.
    fn unfollowed(&self);
}

/// Room for the largest family record (a build-time check in [`stash`] keeps it so).
const RECORD_WORDS: usize = (maps::IN_FLIGHT_VALUE_BYTES - 8) / 8;

#[repr(C)]
struct InFlight {
    kind: Kind,
    _pad: u32,
    record: [u64; RECORD_WORDS],
}

const _: () = assert!(core::mem::size_of::<InFlight>() == maps::IN_FLIGHT_VALUE_BYTES);

/// A task-local storage map, laid out as libbpf's and aya's loaders read a BTF map
/// definition (aya-ebpf 0.2 has none for task storage): the kernel requires the BTF of its
/// key (an int) and value, and `BPF_F_NO_PREALLOC`.
#[repr(C)]
struct TaskStorage<V> {
    r#type: *const [i32; bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const V,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are placeholders the loader reads from BTF; never dereferenced.
unsafe impl<V> Sync for TaskStorage<V> {}

/// Each thread's call in flight.
#[btf_map]
static IN_FLIGHT: TaskStorage<InFlight> = TaskStorage {
    r#type: core::ptr::null(),
    key: core::ptr::null(),
    value: core::ptr::null(),
    max_entries: core::ptr::null(),
    map_flags: core::ptr::null(),
};

/// This thread's record, made (zeroed) when `create` and it has none.
#[inline(always)]
fn current(create: bool) -> *mut InFlight {
    let flags = if create {
        u64::from(BPF_LOCAL_STORAGE_GET_F_CREATE)
    } else {
        0
    };
    // SAFETY: helpers given the map's definition and the current task, as the kernel
    // requires of `bpf_task_storage_get`.
    unsafe {
        bpf_task_storage_get(
            core::ptr::from_ref(&IN_FLIGHT).cast_mut().cast(),
            bpf_get_current_task_btf(),
            core::ptr::null_mut(),
            flags,
        )
    }
    .cast()
}

/// Leaves `call` for this thread's exit program; counts it as unfollowed when there is no
/// memory for it.
#[inline(always)]
pub fn stash<C: Call>(call: &C) {
    const {
        assert!(core::mem::size_of::<C>() <= RECORD_WORDS * 8);
        assert!(core::mem::align_of::<C>() <= 8);
    }
    let slot = current(true);
    if slot.is_null() {
        call.unfollowed();
        return;
    }
    // SAFETY: the thread's own storage, valid for this program run; only this thread's
    // programs use it, one at a time. The record fits (checked above).
    unsafe {
        (*slot).kind = C::KIND;
        core::ptr::addr_of_mut!((*slot).record)
            .cast::<C>()
            .write(*call);
    }
}

/// Whether this thread's entry program left a call of family `kind` (left in place): a
/// program hands over to a shared exit only then, so that the exits of untraced tasks
/// cost no tail call.
#[inline(always)]
pub fn holds(kind: Kind) -> bool {
    if target::empty_programs() {
        return false;
    }
    let slot = current(false);
    // SAFETY: as in `stash`.
    !slot.is_null() && unsafe { (*slot).kind } == kind
}

/// What this thread's entry program left, if it followed a call of `C`'s family; the
/// record is taken (a second exit finds none).
#[inline(always)]
pub fn take<C: Call>() -> Option<C> {
    if target::empty_programs() || target::stopped() {
        return None;
    }
    let slot = current(false);
    if slot.is_null() {
        return None;
    }
    // SAFETY: as in `stash`; the tag says the record is a `C`.
    unsafe {
        if (*slot).kind != C::KIND {
            return None;
        }
        (*slot).kind = Kind::None;
        Some(core::ptr::addr_of!((*slot).record).cast::<C>().read())
    }
}
