//! Each traced thread's own state, in its task-local storage: its call in flight
//! (`in_flight`). The kernel makes a thread's state at its first followed call and frees
//! it with the task, so no program forgets threads, and finding it costs no hash lookup.

use crate::{rows::Counted, task::Task};
use auditor_common::maps;
use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, bpf_map_type},
    helpers::generated::bpf_task_storage_get,
    macros::btf_map,
};

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
    Close,
}

/// Room for the largest family record (`in_flight::stash` checks each at build time).
pub const RECORD_WORDS: usize =
    (maps::THREAD_STATE_BYTES - core::mem::size_of::<Decided>() - 8) / 8;

/// The thread's process as `target` last decided it (with its row's slot), and in which
/// generation of `TRACED`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Decided {
    pub process: Counted,
    pub generation: u64,
}

#[repr(C)]
pub struct Thread {
    pub decided: Decided,
    /// The call in flight: its family, the slot of its process's row (`rows`), and its
    /// record. The slot is kept here, not in the record: a record built on the stack and
    /// one read from here then lay out their fields alike, which the verifier needs to
    /// see their states as one (a slot in the record had it walk poll's exit twice).
    pub kind: Kind,
    pub slot: u32,
    pub record: [u64; RECORD_WORDS],
}

const _: () = assert!(core::mem::size_of::<Thread>() == maps::THREAD_STATE_BYTES);

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

#[btf_map]
static THREAD_STATE: TaskStorage<Thread> = TaskStorage {
    r#type: core::ptr::null(),
    key: core::ptr::null(),
    value: core::ptr::null(),
    max_entries: core::ptr::null(),
    map_flags: core::ptr::null(),
};

/// The state of the current `task`'s thread, made (zeroed) when `create` and it has none;
/// null when it has none, or the kernel had no memory for it. The program asks for the
/// task once and hands it on: that is a helper call (see "What a helper call costs" in
/// docs/benchmarks.md).
#[inline(always)]
pub fn of(task: Task, create: bool) -> *mut Thread {
    let flags = if create {
        u64::from(BPF_LOCAL_STORAGE_GET_F_CREATE)
    } else {
        0
    };
    // SAFETY: the map's definition and the current task, as `bpf_task_storage_get` takes
    // them. The pointer it returns is valid for this program run; only this thread's
    // programs use it, one at a time.
    unsafe {
        bpf_task_storage_get(
            core::ptr::from_ref(&THREAD_STATE).cast_mut().cast(),
            task.as_ptr(),
            core::ptr::null_mut(),
            flags,
        )
    }
    .cast()
}
