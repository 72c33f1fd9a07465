//! The current task's fd table (`current->files`), read with offsets the loader took from
//! the running kernel's BTF. Every read can fail (offsets unknown, memory unreadable):
//! callers count what they cannot decide as unreadable.

use auditor_common::TaskOffsets;
use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};

#[unsafe(no_mangle)]
static TASK_OFFSETS: TaskOffsets = TaskOffsets {
    task_files: 0,
    files_count: 0,
    files_fdt: 0,
    fdt_max_fds: 0,
    known: 0,
};

fn offsets() -> Option<TaskOffsets> {
    // SAFETY: a valid static the loader patched before load; volatile so the zeros it was
    // built with are not folded in.
    let offsets = unsafe { core::ptr::read_volatile(&TASK_OFFSETS) };
    (offsets.known != 0).then_some(offsets)
}

fn read<T>(address: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel checks the address; a fault is an Err.
    unsafe { bpf_probe_read_kernel(address as *const T) }.ok()
}

/// `current->files`.
fn files(offsets: &TaskOffsets) -> Option<u64> {
    // SAFETY: the helper returns the current task_struct.
    let task = unsafe { bpf_get_current_task() };
    read::<u64>(task + u64::from(offsets.task_files)).filter(|&files| files != 0)
}

/// `atomic_read(&current->files->count)`: how many tasks share the fd table.
pub fn files_count() -> Option<u32> {
    let offsets = offsets()?;
    read::<u32>(files(&offsets)? + u64::from(offsets.files_count))
}

/// `files_fdtable(current->files)->max_fds`.
pub fn max_fds() -> Option<u32> {
    let offsets = offsets()?;
    let fdt = read::<u64>(files(&offsets)? + u64::from(offsets.files_fdt))?;
    read::<u32>(fdt + u64::from(offsets.fdt_max_fds))
}
