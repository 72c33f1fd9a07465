//! Which processes are counted: the auditor's target, set by the loader through globals
//! and maps, and kept up to date from `sched` tracepoints (forks, execs, exits).
//!
//! `TRACED` holds thread-group ids (the kernel's "process"). An entry leaves when its
//! thread group has exited, before the kernel can give the pid to another process, so a
//! reused pid is never counted as the target's.

use auditor_common::{COMM_LEN, EXE_LEN, ExeKey, comm_match, maps};
use aya_ebpf::{
    EbpfContext,
    macros::{map, tracepoint},
    maps::{HashMap, PerCpuArray},
    programs::TracePointContext,
};

use crate::task;

#[unsafe(no_mangle)]
static AUDITOR_PID: u32 = 0;
#[unsafe(no_mangle)]
static EMPTY_PROGRAMS: u32 = 0;
#[unsafe(no_mangle)]
static TRACE_ALL: u32 = 0;
#[unsafe(no_mangle)]
static FILTER_COMMS: u32 = 0;
#[unsafe(no_mangle)]
static FOLLOW_FORKS: u32 = 0;
#[unsafe(no_mangle)]
static EXEC_TARGET: u32 = 0;
#[unsafe(no_mangle)]
static FORK_CHILD_PID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static EXEC_OLD_PID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static EXEC_FILENAME_OFFSET: u32 = 0;

/// Process ids (tgids) whose syscalls are counted; for a moment after a clone, also the
/// ids of new threads (see `process_fork`).
#[map]
static TRACED: HashMap<u32, u8> = HashMap::with_max_entries(maps::TRACED_CAPACITY, 0);

/// The executable each traced process exec'd, by pid and its new name.
#[map]
static EXES: HashMap<ExeKey, [u8; EXE_LEN]> = HashMap::with_max_entries(maps::EXES_CAPACITY, 0);

/// Room to read an executable's path into: too large for the BPF stack.
#[map]
static EXE_SCRATCH: PerCpuArray<[u8; EXE_LEN]> = PerCpuArray::with_max_entries(1, 0);

/// Command names whose processes are counted, with `comm_match` flags.
#[map]
static COMMS: HashMap<[u8; COMM_LEN], u32> = HashMap::with_max_entries(maps::COMMS_CAPACITY, 0);

/// Reads a load-time global; volatile so the compiler cannot fold the zero it was built with.
fn global(value: &u32) -> u32 {
    // SAFETY: a valid, aligned static that the loader patched before load.
    unsafe { core::ptr::read_volatile(value) }
}

/// Whether `comm` is a name the target gives with flag `how`; marks the entry matched.
fn comm_matches(comm: &[u8; COMM_LEN], how: u32) -> bool {
    let Some(flags) = COMMS.get_ptr_mut(comm) else {
        return false;
    };
    // SAFETY: a pointer into the map's value, valid for this program run.
    let value = unsafe { *flags };
    if value & how == 0 {
        return false;
    }
    if value & comm_match::MATCHED == 0 {
        // SAFETY: as above; a racing CPU writes the same bits.
        unsafe { *flags = value | comm_match::MATCHED };
    }
    true
}

/// Whether the programs were loaded to do nothing (the benchmark's floor). The global is
/// read-only data the verifier knows, so it prunes everything after this test.
pub fn empty_programs() -> bool {
    global(&EMPTY_PROGRAMS) != 0
}

/// Whether the current task's syscalls are counted.
pub fn is_traced() -> bool {
    if empty_programs() {
        return false;
    }
    let tgid = (aya_ebpf::helpers::bpf_get_current_pid_tgid() >> 32) as u32;
    if tgid == global(&AUDITOR_PID) {
        return false;
    }
    if global(&TRACE_ALL) != 0 {
        return true;
    }
    // SAFETY: the value is only tested for presence.
    if unsafe { TRACED.get(tgid) }.is_some() {
        return true;
    }
    if global(&FILTER_COMMS) == 0 {
        return false;
    }
    let Ok(thread) = aya_ebpf::helpers::bpf_get_current_comm() else {
        return false;
    };
    // Without the task offsets the leader's name is unknown: the loader says so.
    let process = task::leader_comm().unwrap_or(thread);
    comm_matches(&process, comm_match::PROCESS) || comm_matches(&thread, comm_match::THREAD)
}

fn trace_process(pid: u32) {
    // A full table only stops following new processes; the loader sized it for the target.
    let _ = TRACED.insert(pid, 1, 0);
}

/// `sched:sched_process_fork` runs in the parent before the child can run, so a child of a
/// traced process is traced from its first instruction. The record does not say whether
/// the child is a thread: a new thread's id is entered too, and leaves when it exits.
#[tracepoint(category = "sched", name = "sched_process_fork")]
pub fn process_fork(ctx: TracePointContext) -> u32 {
    if empty_programs() || global(&FOLLOW_FORKS) == 0 {
        return 0;
    }
    let parent = (aya_ebpf::helpers::bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: presence test only.
    if unsafe { TRACED.get(parent) }.is_none() {
        return 0;
    }
    let offset = global(&FORK_CHILD_PID_OFFSET) as usize;
    // SAFETY: the loader read the offset of child_pid from this kernel's format file.
    if let Ok(child) = unsafe { ctx.read_at::<u32>(offset) } {
        trace_process(child);
    }
    0
}

/// `sched:sched_process_exec`: counting of a command the auditor starts begins when it
/// execs, so nothing the auditor's own code did in the child before exec is counted. A
/// thread that execs takes its leader's id: the id it had leaves the table.
#[tracepoint(category = "sched", name = "sched_process_exec")]
pub fn process_exec(ctx: TracePointContext) -> u32 {
    if empty_programs() {
        return 0;
    }
    let tgid = ctx.tgid();
    let target = global(&EXEC_TARGET);
    if target != 0 && tgid == target {
        trace_process(target);
    }
    if is_traced() {
        note_exe(&ctx, tgid);
    }
    let offset = global(&EXEC_OLD_PID_OFFSET) as usize;
    // SAFETY: the loader read the offset of old_pid from this kernel's format file.
    if let Ok(old_pid) = unsafe { ctx.read_at::<u32>(offset) }
        && old_pid != tgid
    {
        let _ = TRACED.remove(old_pid);
    }
    0
}

/// Remembers the path the current process exec'd (the record's `filename`), under its
/// pid and new name, for the report's per-process rows.
fn note_exe(ctx: &TracePointContext, pid: u32) {
    let offset = global(&EXEC_FILENAME_OFFSET) as usize;
    // SAFETY: the loader read the offset of the filename's __data_loc from this kernel's
    // format file: its low 16 bits are where the string lies in the record.
    let Ok(location) = (unsafe { ctx.read_at::<u32>(offset) }) else {
        return;
    };
    let Some(path) = EXE_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot of a per-CPU array; this program is not re-entered on it.
    let path = unsafe { &mut *path };
    let start = ctx.as_ptr() as usize + (location & 0xffff) as usize;
    // SAFETY: a bounded, checked read of the record's string.
    if unsafe { aya_ebpf::helpers::bpf_probe_read_kernel_str_bytes(start as *const u8, path) }
        .is_err()
    {
        return;
    }
    let Some(comm) = task::process_comm() else {
        return;
    };
    let _ = EXES.insert(ExeKey { pid, comm }, path, 0);
}

/// `sched:sched_process_exit` runs in each exiting task before its id is freed: a thread's
/// own id leaves the table, and the process's id once its last task is exiting.
#[tracepoint(category = "sched", name = "sched_process_exit")]
pub fn process_exit(ctx: TracePointContext) -> u32 {
    if empty_programs() {
        return 0;
    }
    let (tid, tgid) = (ctx.pid(), ctx.tgid());
    if tid != tgid {
        let _ = TRACED.remove(tid);
    }
    // Only a traced process's exit reads the task; unknown (no task offsets): the entry
    // stays, and the loader says so in the report.
    // SAFETY: presence test only.
    if unsafe { TRACED.get(tgid) }.is_some() && task::group_dead() == Some(true) {
        let _ = TRACED.remove(tgid);
    }
    0
}
