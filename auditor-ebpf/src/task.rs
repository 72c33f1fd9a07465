//! The current task's fd table (`current->files`), read with offsets the loader took from
//! the running kernel's BTF. Every read can fail (offsets unknown, memory unreadable):
//! callers count what they cannot decide as unreadable.

use auditor_common::{COMM_LEN, TaskOffsets, fd::AllocStart};
use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};

#[unsafe(no_mangle)]
static TASK_OFFSETS: TaskOffsets = TaskOffsets {
    task_files: 0,
    files_count: 0,
    files_fdt: 0,
    fdt_max_fds: 0,
    files_next_fd: 0,
    fdt_open_fds: 0,
    task_signal: 0,
    signal_nofile: 0,
    signal_live: 0,
    task_group_leader: 0,
    task_comm: 0,
    nr_open: 0,
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

fn current_task() -> u64 {
    // SAFETY: the helper returns the current task_struct.
    unsafe { bpf_get_current_task() }
}

/// `current->files`.
fn files(offsets: &TaskOffsets) -> Option<u64> {
    read::<u64>(current_task() + u64::from(offsets.task_files)).filter(|&files| files != 0)
}

/// `atomic_read(&current->files->count)`: how many tasks share the fd table.
pub fn files_count() -> Option<u32> {
    let offsets = offsets()?;
    read::<u32>(files(&offsets)? + u64::from(offsets.files_count))
}

/// `atomic_read(&current->signal->live) == 0`: every task of the current thread group has
/// begun to exit (`do_exit` counts itself out before `sched_process_exit`).
pub fn group_dead() -> Option<bool> {
    let offsets = offsets()?;
    let signal = read::<u64>(current_task() + u64::from(offsets.task_signal))?;
    read::<u32>(signal + u64::from(offsets.signal_live)).map(|live| live == 0)
}

/// `current->group_leader->comm`: the process's name as `ps` shows it.
pub fn leader_comm() -> Option<[u8; COMM_LEN]> {
    let offsets = offsets()?;
    let leader = read::<u64>(current_task() + u64::from(offsets.task_group_leader))?;
    read::<[u8; COMM_LEN]>(leader + u64::from(offsets.task_comm))
}

/// The current process's name as `ps` shows it: its leader's, or the calling thread's when
/// the task offsets are unknown.
pub fn process_comm() -> Option<[u8; COMM_LEN]> {
    leader_comm().or_else(|| aya_ebpf::helpers::bpf_get_current_comm().ok())
}

/// `files_fdtable(current->files)`.
fn fdtable(offsets: &TaskOffsets, files: u64) -> Option<u64> {
    read::<u64>(files + u64::from(offsets.files_fdt)).filter(|&fdt| fdt != 0)
}

/// `files_fdtable(current->files)->max_fds`.
pub fn max_fds() -> Option<u32> {
    let offsets = offsets()?;
    let fdt = fdtable(&offsets, files(&offsets)?)?;
    read::<u32>(fdt + u64::from(offsets.fdt_max_fds))
}

/// The fd table as `alloc_fd(start, RLIMIT_NOFILE)` will find it.
pub fn alloc_start(start: u32) -> Option<AllocStart> {
    let offsets = offsets()?;
    let files = files(&offsets)?;
    let fdt = fdtable(&offsets, files)?;
    let next_fd = read::<u32>(files + u64::from(offsets.files_next_fd))?;
    let max_fds = read::<u32>(fdt + u64::from(offsets.fdt_max_fds))?;
    let fd0 = if start > next_fd { start } else { next_fd };
    let word = if fd0 < max_fds {
        let open_fds = read::<u64>(fdt + u64::from(offsets.fdt_open_fds))?;
        read::<u64>(open_fds + u64::from(fd0 / 64) * 8)?
    } else {
        0
    };
    let signal = read::<u64>(current_task() + u64::from(offsets.task_signal))?;
    let end = read::<u64>(signal + u64::from(offsets.signal_nofile))?;
    Some(AllocStart {
        start,
        next_fd,
        max_fds,
        nr_open: offsets.nr_open,
        word,
        end,
    })
}
