//! Which processes are counted: the auditor's target, set by the loader through globals
//! and maps, and kept up to date from `sched` tracepoints (forks, execs, exits).
//!
//! `TRACED` holds thread-group ids (the kernel's "process") with the name their counts go
//! under, so that a counted call costs one lookup here and one for its row of counts. An
//! entry leaves when its thread group has exited, before the kernel can give the pid to
//! another process, so a reused pid is never counted as the target's.

use auditor_common::{
    COMM_LEN, EXE_LEN, ProcessKey, Traced, comm_match, failure, maps, slots, traced,
};
use aya_ebpf::{
    EbpfContext,
    bindings::BPF_F_NO_PREALLOC,
    macros::{map, tracepoint},
    maps::{Array, HashMap, PerCpuArray},
    programs::TracePointContext,
};

use crate::{
    rows::{self, Counted},
    task::{self, Task},
    thread::{self, Decided, Thread},
};

#[unsafe(no_mangle)]
static AUDITOR_PID: u32 = 0;
#[unsafe(no_mangle)]
static EMPTY_PROGRAMS: u32 = 0;
#[unsafe(no_mangle)]
static TRACE_ALL: u32 = 0;
#[unsafe(no_mangle)]
static FILTER_COMMS: u32 = 0;
#[unsafe(no_mangle)]
static FILTER_THREAD_COMMS: u32 = 0;
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
#[unsafe(no_mangle)]
static RENAME_PID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static RENAME_NEWCOMM_OFFSET: u32 = 0;

/// Process ids (tgids) whose syscalls are counted, and under which name; for a moment
/// after a clone, also the ids of new threads (see `process_fork`). With `--all` and
/// `--comm`, every process that made a followed call (`--comm` keeps the ones it did not
/// match too, so that their calls are not matched again).
#[map]
static TRACED: HashMap<u32, Traced> =
    HashMap::with_max_entries(maps::TRACED_CAPACITY, BPF_F_NO_PREALLOC);

/// The executable each traced process exec'd, by pid and its new name.
#[map]
static EXES: HashMap<ProcessKey, [u8; EXE_LEN]> =
    HashMap::with_max_entries(maps::EXES_CAPACITY, BPF_F_NO_PREALLOC);

/// Room to read an executable's path into: too large for the BPF stack.
#[map]
static EXE_SCRATCH: PerCpuArray<[u8; EXE_LEN]> = PerCpuArray::with_max_entries(1, 0);

/// See `maps::TRACED_GENERATION`.
#[map]
static TRACED_GENERATION: Array<u64> = Array::with_max_entries(1, 0);

/// `TRACED_GENERATION` now. Read before `TRACED` is: a change made meanwhile is followed
/// by a new generation, which makes what the reader decides from it stale at once.
fn generation() -> u64 {
    TRACED_GENERATION.get(0).map_or(0, |generation| {
        // SAFETY: a valid, aligned map value, which other CPUs write.
        unsafe { core::ptr::read_volatile(generation) }
    })
}

/// After a change to `TRACED`: a new generation, so that every thread's decided process
/// is decided again. The generation is the time of the change (this target has no atomic
/// add): any change after a reader read the generation is timed after that read, so the
/// value it leaves differs from the one the reader holds, whichever CPU writes last.
fn changed() {
    if let Some(generation) = TRACED_GENERATION.get_ptr_mut(0) {
        // SAFETY: a valid, aligned map value; a racing CPU writes a time as new.
        unsafe { core::ptr::write_volatile(generation, aya_ebpf::helpers::bpf_ktime_get_ns()) };
    }
}

/// See `maps::MAYBE_TRACED`: the loader sets the slots of the pids it enters in `TRACED`.
#[map]
static MAYBE_TRACED: Array<[u8; maps::MAYBE_TRACED_SLOTS]> = Array::with_max_entries(1, 0);

/// Set to 1 by the loader when the session stops: from then on every program returns at
/// its first test while the links are closed (which takes the kernel seconds).
#[map]
static STOPPED: Array<u32> = Array::with_max_entries(1, 0);

/// Whether the session has stopped counting.
pub fn stopped() -> bool {
    STOPPED.get(0).is_none_or(|stopped| *stopped != 0)
}

/// Command names whose processes are counted, with `comm_match` flags.
#[map]
static COMMS: HashMap<[u8; COMM_LEN], u32> = HashMap::with_max_entries(maps::COMMS_CAPACITY, 0);

/// Reads a load-time global; volatile so the compiler cannot fold the zero it was built with.
pub fn global(value: &u32) -> u32 {
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

/// A call of a counted process, as [`current`] found it: its process, and the calling
/// thread's state when it has one, so that an entry leaves its call in flight there
/// without a second lookup of the task's storage (a helper call: see "What a helper call
/// costs" in docs/benchmarks.md).
#[derive(Clone, Copy)]
pub struct Caller {
    pub process: Counted,
    /// Null when the thread has no state yet (`in_flight::stash` then makes it).
    pub thread: *mut Thread,
    /// The calling task, for what the entry reads of it (its fd table).
    pub task: Task,
}

/// The process making the current call, if its calls are counted: for a process of the
/// target, one lookup; for any other, one load (`may_count`). Inlined, as
/// [`current_of`]; the task is asked for once.
#[inline(always)]
pub fn current() -> Option<Caller> {
    let task = Task::current();
    if !may_count(task) {
        return None;
    }
    current_of(task)
}

/// [`current`] of the current `task`, in a program that found `may_count` of it
/// (`in_flight::may_hold`).
///
/// A thread of a counted process keeps its process in its own state, with the generation
/// of `TRACED` it was decided in: while no program has changed `TRACED` since, its calls
/// find their process there, without a lookup of `TRACED`, and with their row's slot.
///
/// Inlined, that way only: a call of a BPF function costs some 15 ns here (docs/
/// benchmarks.md), and every entry and poll's exit take it; the way of a decision anew
/// (`decided_anew`) stays a function of its own.
#[inline(always)]
pub fn current_of(task: Task) -> Option<Caller> {
    if empty_programs() || stopped() {
        return None;
    }
    let generation = generation();
    let pid = task.tgid();
    let thread = thread::of(task, false);
    if !thread.is_null() {
        // SAFETY: the thread's own state, valid for this program run (see `thread`).
        let decided = unsafe { (*thread).decided };
        if decided.generation == generation && decided.process.key.pid == pid {
            return Some(Caller {
                process: decided.process,
                thread,
                task,
            });
        }
    }
    decided_anew(task, pid, generation, thread)
}

/// The thread that last found its process on this CPU in [`counted_of`], and the decision
/// its state held.
#[repr(C)]
#[derive(Clone, Copy)]
struct LastCaller {
    /// The task's address; 0 for none.
    task: u64,
    decided: Decided,
}

/// Per CPU, the [`LastCaller`]: a thread polling call after call on one CPU, as an event
/// loop does, finds its process here with loads the JIT inlines, where its state takes a
/// helper call (`bpf_task_storage_get`). It holds a copy of what the thread's state held,
/// valid as that is: for the same generation of `TRACED` (a time, never the same twice)
/// and pid. A task at an address an exited one had is told apart by its pid, or is of
/// the same process.
#[map]
static LAST_CALLER: PerCpuArray<LastCaller> = PerCpuArray::with_max_entries(1, 0);

/// The process of the current `task`, if its calls are counted, for a program that needs
/// nothing else of the thread (poll's exit): [`current_of`], found first in this CPU's
/// [`LAST_CALLER`]. The entries need the thread's state anyway, to leave their call in
/// flight there, and do not look here.
#[inline(always)]
pub fn counted_of(task: Task) -> Option<Counted> {
    if empty_programs() || stopped() {
        return None;
    }
    let last = LAST_CALLER.get_ptr_mut(0);
    if let Some(last) = last {
        // SAFETY: this CPU's entry, not shared within a program run.
        let LastCaller {
            task: address,
            decided,
        } = unsafe { *last };
        if address == task.address()
            && decided.generation == generation()
            && decided.process.key.pid == task.tgid()
        {
            return Some(decided.process);
        }
    }
    let caller = current_of(task)?;
    if let Some(last) = last
        && !caller.thread.is_null()
    {
        // SAFETY: this CPU's entry, as above; the thread's own state, valid for this
        // program run (see `thread`).
        unsafe {
            *last = LastCaller {
                task: task.address(),
                decided: (*caller.thread).decided,
            }
        };
    }
    Some(caller.process)
}

/// [`current_of`] for a thread whose state holds no decision on `pid` in this
/// `generation` of `TRACED`: decided from the targets, and kept in its state when lasting.
#[inline(never)]
fn decided_anew(task: Task, pid: u32, generation: u64, thread: *mut Thread) -> Option<Caller> {
    let (key, lasting) = decide(pid)?;
    if !lasting {
        return Some(Caller {
            process: Counted {
                key,
                slot: slots::NONE,
            },
            thread,
            task,
        });
    }
    let process = Counted {
        key,
        slot: rows::first_slot(&key),
    };
    let thread = if thread.is_null() {
        thread::of(task, true)
    } else {
        thread
    };
    if !thread.is_null() {
        // SAFETY: as above.
        unsafe {
            (*thread).decided = Decided {
                process,
                generation,
            }
        };
    }
    Some(Caller {
        process,
        thread,
        task,
    })
}

/// Whether the process of the current `task` may be counted: false only when it surely is
/// not, from its slot in `MAYBE_TRACED` (the targets given by pid or command; with `--all`
/// or names every process may be).
#[inline(always)]
pub fn may_count(task: Task) -> bool {
    if global(&TRACE_ALL) != 0 || global(&FILTER_COMMS) != 0 {
        return true;
    }
    MAYBE_TRACED
        .get(0)
        .is_none_or(|slots| slots[maps::maybe_traced_slot(task.tgid())] != 0)
}

/// `current`'s verdict on the current process `pid`, decided from the targets: one lookup
/// for a process already seen. Lasting when it holds until `TRACED` changes (a verdict on
/// the thread's own name does not: threads rename freely).
fn decide(pid: u32) -> Option<(ProcessKey, bool)> {
    if pid == global(&AUDITOR_PID) {
        return None;
    }
    if let Some(entry) = TRACED.get_ptr_mut(pid) {
        // SAFETY: a pointer into the map's value, valid for this program run.
        let entry = unsafe { &mut *entry };
        if entry.flags & traced::UNNAMED != 0 {
            // Entered by the loader: its name is read once, by its first counted call.
            entry.comm = task::process_comm()?;
            entry.flags &= !traced::UNNAMED;
            changed();
        }
        if entry.flags & traced::COUNTED != 0 {
            let process = ProcessKey {
                pid,
                comm: entry.comm,
            };
            return Some((process, true));
        }
        return by_thread_name(pid, &entry.comm).map(|process| (process, false));
    }
    if global(&TRACE_ALL) != 0 {
        return enter_traced(pid, task::process_comm()?, traced::COUNTED)
            .map(|process| (process, true));
    }
    if global(&FILTER_COMMS) == 0 {
        return None;
    }
    // Without the task offsets the leader's name is unknown: the loader says so.
    let Ok(thread) = aya_ebpf::helpers::bpf_get_current_comm() else {
        return None;
    };
    let comm = task::leader_comm().unwrap_or(thread);
    if comm_matches(&comm, comm_match::PROCESS) {
        return enter_traced(pid, comm, traced::COUNTED | traced::BY_NAME)
            .map(|process| (process, true));
    }
    let _ = enter_traced(pid, comm, traced::BY_NAME);
    by_thread_name(pid, &comm).map(|process| (process, false))
}

/// Enters `pid` under `comm` with `flags`: the process to count if COUNTED (also when the
/// table is full: only this call then pays for the decision).
fn enter_traced(pid: u32, comm: [u8; COMM_LEN], flags: u32) -> Option<ProcessKey> {
    // Its slot first: a call that finds it set and the pid not yet in `TRACED` is one
    // made before the pid entered.
    if let Some(slots) = MAYBE_TRACED.get_ptr_mut(0) {
        // SAFETY: a pointer into the map's value, valid for this program run; a byte
        // store, which a racing CPU's cannot undo (both write 1).
        unsafe { (*slots)[maps::maybe_traced_slot(pid)] = 1 };
    }
    let _ = TRACED.insert(pid, Traced { comm, flags }, 0);
    changed();
    (flags & traced::COUNTED != 0).then_some(ProcessKey { pid, comm })
}

/// A call of a process `--comm` did not match, counted when its thread's own name is one
/// `--thread-comm` gives (a thread's name is read at each call: threads rename freely).
fn by_thread_name(pid: u32, comm: &[u8; COMM_LEN]) -> Option<ProcessKey> {
    if global(&FILTER_THREAD_COMMS) == 0 {
        return None;
    }
    let thread = aya_ebpf::helpers::bpf_get_current_comm().ok()?;
    comm_matches(&thread, comm_match::THREAD).then_some(ProcessKey { pid, comm: *comm })
}

/// Counts `pid` from now on; a full table only stops following new processes (the loader
/// sized it for the target).
fn trace_process(pid: u32, comm: [u8; COMM_LEN]) {
    let _ = enter_traced(pid, comm, traced::COUNTED);
}

/// `sched:sched_process_fork` runs in the parent before the child can run, so a child of a
/// traced process is traced from its first instruction. The record does not say whether
/// the child is a thread: a new thread's id is entered too, and leaves when it exits.
#[tracepoint(category = "sched", name = "sched_process_fork")]
pub fn process_fork(ctx: TracePointContext) -> u32 {
    if let Err(failure) = try_process_fork(&ctx) {
        crate::failures::failed(failure);
    }
    0
}

fn try_process_fork(ctx: &TracePointContext) -> Result<(), u32> {
    if empty_programs() || global(&FOLLOW_FORKS) == 0 {
        return Ok(());
    }
    // SAFETY: the value is copied out.
    let Some(parent) = (unsafe { TRACED.get(Task::current().tgid()) }).copied() else {
        return Ok(());
    };
    if parent.flags & traced::COUNTED == 0 {
        return Ok(());
    }
    let offset = global(&FORK_CHILD_PID_OFFSET) as usize;
    // SAFETY: the loader read the offset of child_pid from this kernel's format file.
    let child = unsafe { ctx.read_at::<u32>(offset) }.map_err(|_| failure::FORK_CHILD)?;
    // A child starts with the name of the thread that forked it.
    let comm = aya_ebpf::helpers::bpf_get_current_comm().map_err(|_| failure::FORK_CHILD)?;
    trace_process(child, comm);
    Ok(())
}

/// `sched:sched_process_exec` (the program is the crate root's, which also tells the
/// stacks): counting of a command the auditor starts begins when it execs, so nothing the
/// auditor's own code did in the child before exec is counted. A thread that execs takes
/// its leader's id: the id it had leaves the table. `exec_of` is set to the pid of the
/// traced process that exec'd (whose mappings changed), and left 0 when none did.
pub fn process_exec(ctx: &TracePointContext, exec_of: &mut u32) -> Result<(), u32> {
    if empty_programs() {
        return Ok(());
    }
    let tgid = ctx.tgid();
    let target = global(&EXEC_TARGET);
    if target != 0
        && tgid == target
        && let Some(comm) = task::process_comm()
    {
        trace_process(target, comm);
    }
    if let Some(caller) = current() {
        if note_exe(ctx, caller.process.key).is_none() {
            crate::failures::failed(failure::EXEC_FILENAME);
        }
        *exec_of = caller.process.key.pid;
    }
    let offset = global(&EXEC_OLD_PID_OFFSET) as usize;
    // SAFETY: the loader read the offset of old_pid from this kernel's format file.
    let old_pid = unsafe { ctx.read_at::<u32>(offset) }.map_err(|_| failure::EXEC_OLD_PID)?;
    if old_pid != tgid && TRACED.remove(old_pid).is_ok() {
        changed();
    }
    Ok(())
}

/// Remembers the path the current process exec'd (the record's `filename`), under its
/// pid and new name, for the report's per-process rows; None if it could not be read.
fn note_exe(ctx: &TracePointContext, process: ProcessKey) -> Option<()> {
    let offset = global(&EXEC_FILENAME_OFFSET) as usize;
    // SAFETY: the loader read the offset of the filename's __data_loc from this kernel's
    // format file: its low 16 bits are where the string lies in the record.
    let location = unsafe { ctx.read_at::<u32>(offset) }.ok()?;
    let path = EXE_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot of a per-CPU array; this program is not re-entered on it.
    let path = unsafe { &mut *path };
    let start = ctx.as_ptr() as usize + (location & 0xffff) as usize;
    // SAFETY: a bounded, checked read of the record's string.
    unsafe { aya_ebpf::helpers::bpf_probe_read_kernel_str_bytes(start as *const u8, path) }.ok()?;
    let _ = EXES.insert(process, path, 0);
    Some(())
}

/// `task:task_rename` (prctl PR_SET_NAME, a write to /proc/PID/comm, and every exec): a
/// counted process's calls go under its new name from now on; a process `--comm` decided
/// on is decided again at its next call.
#[tracepoint(category = "task", name = "task_rename")]
pub fn task_rename(ctx: TracePointContext) -> u32 {
    if let Err(failure) = try_task_rename(&ctx) {
        crate::failures::failed(failure);
    }
    0
}

fn try_task_rename(ctx: &TracePointContext) -> Result<(), u32> {
    if empty_programs() {
        return Ok(());
    }
    // SAFETY: the loader read both offsets from this kernel's format file.
    let pid = unsafe { ctx.read_at::<u32>(global(&RENAME_PID_OFFSET) as usize) }
        .map_err(|_| failure::RENAME)?;
    // Only a thread-group leader's name is its process's: threads have no entry but for
    // a moment after their clone, and renaming that one is harmless.
    let Some(entry) = TRACED.get_ptr_mut(pid) else {
        return Ok(());
    };
    // SAFETY: a pointer into the map's value, valid for this program run.
    let entry = unsafe { &mut *entry };
    if entry.flags & traced::BY_NAME != 0 {
        let _ = TRACED.remove(pid);
        changed();
        return Ok(());
    }
    let offset = global(&RENAME_NEWCOMM_OFFSET) as usize;
    // SAFETY: as above; a char[16], checked by the loader.
    let renamed = unsafe { ctx.read_at::<[u8; COMM_LEN]>(offset) };
    entry.comm = renamed.map_err(|_| failure::RENAME)?;
    changed();
    Ok(())
}

/// `sched:sched_process_exit` runs in each exiting task before its id is freed: a thread's
/// own id leaves the table, and the process's id once its last task is exiting.
#[tracepoint(category = "sched", name = "sched_process_exit")]
pub fn process_exit(ctx: TracePointContext) -> u32 {
    if empty_programs() {
        return 0;
    }
    let (tid, tgid) = (ctx.pid(), ctx.tgid());
    if tid != tgid && TRACED.remove(tid).is_ok() {
        changed();
    }
    // Only a traced process's exit reads the task; unknown (no task offsets): the entry
    // stays, and the loader says so in the report.
    // SAFETY: presence test only.
    if unsafe { TRACED.get(tgid) }.is_some() && task::group_dead() == Some(true) {
        let _ = TRACED.remove(tgid);
        changed();
    }
    0
}
