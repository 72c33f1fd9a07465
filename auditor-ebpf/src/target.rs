//! Which processes are counted: the auditor's target, set by the loader through globals
//! and maps, and kept up to date from `sched` tracepoints (forks, execs).

use auditor_common::COMM_LEN;
use aya_ebpf::{
    EbpfContext,
    macros::{map, tracepoint},
    maps::HashMap,
    programs::TracePointContext,
};

#[unsafe(no_mangle)]
static AUDITOR_PID: u32 = 0;
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

/// Process ids (tgids) whose syscalls are counted.
#[map]
static TRACED: HashMap<u32, u8> = HashMap::with_max_entries(65_536, 0);

/// Command names whose processes are counted.
#[map]
static COMMS: HashMap<[u8; COMM_LEN], u8> = HashMap::with_max_entries(64, 0);

/// Reads a load-time global; volatile so the compiler cannot fold the zero it was built with.
fn global(value: &u32) -> u32 {
    // SAFETY: a valid, aligned static that the loader patched before load.
    unsafe { core::ptr::read_volatile(value) }
}

/// Whether the current task's syscalls are counted.
pub fn is_traced() -> bool {
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
    if global(&FILTER_COMMS) != 0
        && let Ok(comm) = aya_ebpf::helpers::bpf_get_current_comm()
    {
        // SAFETY: as above.
        return unsafe { COMMS.get(comm) }.is_some();
    }
    false
}

fn trace_process(pid: u32) {
    // A full table only stops following new processes; the loader sized it for the target.
    let _ = TRACED.insert(pid, 1, 0);
}

/// `sched:sched_process_fork` runs in the parent before the child can run, so a child of a
/// traced process is traced from its first instruction. Threads share their tgid and need
/// no entry; inserting one for them is harmless.
#[tracepoint(category = "sched", name = "sched_process_fork")]
pub fn process_fork(ctx: TracePointContext) -> u32 {
    if global(&FOLLOW_FORKS) == 0 {
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
/// execs, so nothing the auditor's own code did in the child before exec is counted.
#[tracepoint(category = "sched", name = "sched_process_exec")]
pub fn process_exec(ctx: TracePointContext) -> u32 {
    let target = global(&EXEC_TARGET);
    if target != 0 && ctx.tgid() == target {
        trace_process(target);
    }
    0
}
