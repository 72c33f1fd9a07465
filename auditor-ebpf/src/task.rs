//! The current task's fd table (`current->files`), read with offsets the loader took from
//! the running kernel's BTF. A read can fail (offsets unknown, a NULL pointer, a word
//! that cannot be read): callers count what they cannot decide as unreadable.

use auditor_common::{
    COMM_LEN, TaskOffsets,
    dup::DupTable,
    fd::{self, AllocStart, FdFile, TaskState},
};
use core::ffi::c_void;

use aya_ebpf::helpers::{
    bpf_get_current_pid_tgid, bpf_probe_read_kernel, generated::bpf_get_current_task_btf,
};

#[unsafe(no_mangle)]
static TASK_OFFSETS: TaskOffsets = TaskOffsets {
    task_files: 0,
    files_count: 0,
    files_fdt: 0,
    fdt_max_fds: 0,
    files_next_fd: 0,
    fdt_open_fds: 0,
    fdt_fd: 0,
    file_f_mode: 0,
    task_signal: 0,
    signal_nofile: 0,
    signal_live: 0,
    task_group_leader: 0,
    task_comm: 0,
    task_tgid: 0,
    nr_open: 0,
    known: 0,
};

fn offsets() -> Option<TaskOffsets> {
    // SAFETY: a valid static the loader patched before load; volatile so the zeros it was
    // built with are not folded in.
    let offsets = unsafe { core::ptr::read_volatile(&TASK_OFFSETS) };
    (offsets.known != 0).then_some(offsets)
}

/// A kernel object the current task leads to, as a BTF-typed pointer: the verifier checks
/// each load from it against the running kernel's types and makes it a load that cannot
/// fault (a bad address reads zero), with no helper call (a probe-read call costs more
/// than the rest of a small handler).
#[derive(Clone, Copy)]
struct Object(*const u8);

impl Object {
    fn current_task() -> Object {
        // SAFETY: the helper returns the current task_struct, typed from BTF.
        Object(unsafe { bpf_get_current_task_btf() }.cast())
    }

    /// The `T` at `offset` bytes in; offsets are read-only globals the verifier knows.
    fn load<T: Copy>(self, offset: u32) -> T {
        // SAFETY: a BTF-checked load (see the type's comment).
        unsafe { *self.0.add(offset as usize).cast::<T>() }
    }

    /// The object a pointer field at `offset` points to (None for NULL).
    fn follow(self, offset: u32) -> Option<Object> {
        let pointer: *const u8 = self.load(offset);
        (!pointer.is_null()).then_some(Object(pointer))
    }
}

/// The current task, asked of the kernel once per program run and handed to what needs it
/// (its id, its state, its registers): each `bpf_get_current_task_btf` is a helper call,
/// some 15 ns here (6.18's JIT does not inline it; docs/benchmarks.md).
#[derive(Clone, Copy)]
pub struct Task(Object);

impl Task {
    #[inline(always)]
    pub fn current() -> Task {
        Task(Object::current_task())
    }

    /// The task's address, which tells it from every other live task (a number: the
    /// verifier lets a privileged program keep it in a map and compare it).
    #[inline(always)]
    pub fn address(self) -> u64 {
        self.0.0 as u64
    }

    /// The task as the helpers that take a `struct task_struct *` want it.
    #[inline(always)]
    pub fn as_ptr<T>(self) -> *mut T {
        self.0.0.cast_mut().cast()
    }

    /// Its process's id, `task->tgid`: a load, where `bpf_get_current_pid_tgid` is a
    /// helper call; the helper when the offsets are unknown.
    #[inline(always)]
    pub fn tgid(self) -> u32 {
        // SAFETY: fields of a valid static the loader patched before load, read one at a
        // time (volatile, as in `offsets`) so that only these two are loaded.
        let (known, tgid) = unsafe {
            (
                core::ptr::read_volatile(&TASK_OFFSETS.known),
                core::ptr::read_volatile(&TASK_OFFSETS.task_tgid),
            )
        };
        if known != 0 {
            return self.0.load(tgid);
        }
        (bpf_get_current_pid_tgid() >> 32) as u32
    }
}

/// `task->files`.
fn files(offsets: &TaskOffsets, task: Task) -> Option<Object> {
    task.0.follow(offsets.task_files)
}

/// `atomic_read(&task->files->count)`: how many tasks share the fd table.
pub fn files_count(task: Task) -> Option<u32> {
    let offsets = offsets()?;
    Some(files(&offsets, task)?.load(offsets.files_count))
}

/// The current task as the model asks of it, where a program holds it already.
impl TaskState for Task {
    fn table_shared(&self) -> Option<bool> {
        files_count(*self).map(fd::table_shared)
    }

    fn fd_file(&self, fd: u32) -> Option<FdFile> {
        fd_file(*self, fd)
    }
}

/// The current task as the model asks of it, asked of the kernel only if the model asks
/// (an exit that holds no [`Task`], where most calls ask nothing of it).
pub struct Current;

impl TaskState for Current {
    fn table_shared(&self) -> Option<bool> {
        Task::current().table_shared()
    }

    fn fd_file(&self, fd: u32) -> Option<FdFile> {
        fd_file(Task::current(), fd)
    }
}

/// What `task`'s `fdt->fd[fd]` holds: no file, or one and whether it is O_PATH.
pub fn fd_file(task: Task, fd: u32) -> Option<FdFile> {
    let offsets = offsets()?;
    let fdt = fdtable(&offsets, files(&offsets, task)?)?;
    let max_fds: u32 = fdt.load(offsets.fdt_max_fds);
    if fd >= max_fds {
        return Some(FdFile::NotOpen);
    }
    let array: u64 = fdt.load(offsets.fdt_fd);
    let file = read_kernel::<u64>(array + u64::from(fd) * 8)?;
    if file == 0 {
        return Some(FdFile::NotOpen);
    }
    let mode = read_kernel::<u32>(file + u64::from(offsets.file_f_mode))?;
    Some(FdFile::Open {
        path_only: mode & fd::FMODE_PATH != 0,
    })
}

/// `atomic_read(&current->signal->live) == 0`: every task of the current thread group has
/// begun to exit (`do_exit` counts itself out before `sched_process_exit`).
pub fn group_dead() -> Option<bool> {
    let offsets = offsets()?;
    let signal = Object::current_task().follow(offsets.task_signal)?;
    Some(signal.load::<u32>(offsets.signal_live) == 0)
}

/// `current->group_leader->comm`: the process's name as `ps` shows it.
pub fn leader_comm() -> Option<[u8; COMM_LEN]> {
    let offsets = offsets()?;
    let leader = Object::current_task().follow(offsets.task_group_leader)?;
    // Two words: the verifier checks loads of at most eight bytes.
    let low: u64 = leader.load(offsets.task_comm);
    let high: u64 = leader.load(offsets.task_comm + 8);
    let mut comm = [0; COMM_LEN];
    comm[..8].copy_from_slice(&low.to_ne_bytes());
    comm[8..].copy_from_slice(&high.to_ne_bytes());
    Some(comm)
}

/// The current process's name as `ps` shows it: its leader's, or the calling thread's when
/// the task offsets are unknown.
pub fn process_comm() -> Option<[u8; COMM_LEN]> {
    leader_comm().or_else(|| aya_ebpf::helpers::bpf_get_current_comm().ok())
}

/// `files_fdtable(current->files)`.
fn fdtable(offsets: &TaskOffsets, files: Object) -> Option<Object> {
    files.follow(offsets.files_fdt)
}

/// `files_fdtable(task->files)->max_fds`.
pub fn max_fds(task: Task) -> Option<u32> {
    let offsets = offsets()?;
    let fdt = fdtable(&offsets, files(&offsets, task)?)?;
    Some(fdt.load(offsets.fdt_max_fds))
}

/// The `T` at a kernel `address` that is no BTF-typed object the verifier checks loads
/// from: a word at a variable index into a bitmap or the fd array (BTF loads are checked at
/// constant offsets only), a file's f_mode behind a pointer read from that array. Inlined:
/// a call of a BPF function costs some 15 ns here, its return going through the kernel's
/// return thunk (docs/benchmarks.md).
#[inline(always)]
fn read_kernel<T>(address: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel checks the address; a fault is an Err.
    unsafe { bpf_probe_read_kernel(address as *const T) }.ok()
}

/// The highest open fd's word, searched from the top of `open_fds`.
#[repr(C)]
struct LastWord {
    open_fds: u64,
    words: u32,
    /// The word's index plus one (0: none found yet).
    found: u32,
    failed: u32,
}

/// `sane_fdtable_size()` of `task`'s table: the slots a copy of it needs (None:
/// unreadable).
pub fn copied_size(task: Task) -> Option<u32> {
    let offsets = offsets()?;
    let fdt = fdtable(&offsets, files(&offsets, task)?)?;
    let max_fds: u32 = fdt.load(offsets.fdt_max_fds);
    if max_fds <= fd::NR_OPEN_DEFAULT {
        // A table of 64 fds at most needs no more.
        return Some(fd::NR_OPEN_DEFAULT);
    }
    let mut state = LastWord {
        open_fds: fdt.load(offsets.fdt_open_fds),
        words: max_fds / fd::BITS_PER_LONG,
        found: 0,
        failed: 0,
    };
    // SAFETY: last_word matches bpf_loop's callback signature; `state` outlives the loop.
    let done = unsafe {
        aya_ebpf::helpers::generated::bpf_loop(
            state.words,
            last_word as *mut c_void,
            (&raw mut state).cast(),
            0,
        )
    };
    if done < 0 || state.failed != 0 {
        return None;
    }
    let last = state
        .found
        .checked_sub(1)
        .map(|word| word * fd::BITS_PER_LONG);
    Some(fd::copied_size(last))
}

#[inline(never)]
extern "C" fn last_word(index: u32, context: *mut c_void) -> i64 {
    // SAFETY: the LastWord `copied_size` passed, on its stack for the loop.
    let state = unsafe { &mut *context.cast::<LastWord>() };
    let Some(word) = state.words.checked_sub(index + 1) else {
        return 1;
    };
    match read_kernel::<u64>(state.open_fds + u64::from(word) * 8) {
        None => {
            state.failed = 1;
            1
        }
        Some(0) => 0,
        Some(_) => {
            state.found = word + 1;
            1
        }
    }
}

/// fs.nr_open as the session found it (0 when the task offsets are unknown).
pub fn nr_open() -> u32 {
    offsets().map_or(0, |offsets| offsets.nr_open)
}

/// `task`'s fd table as `ksys_dup3` finds it for `oldfd`.
pub fn dup_table(task: Task, oldfd: u32) -> Option<DupTable> {
    let offsets = offsets()?;
    let fdt = fdtable(&offsets, files(&offsets, task)?)?;
    let max_fds: u32 = fdt.load(offsets.fdt_max_fds);
    let signal = task.0.follow(offsets.task_signal)?;
    let nofile: u64 = signal.load(offsets.signal_nofile);
    let oldfd_open = if oldfd < max_fds {
        let open_fds: u64 = fdt.load(offsets.fdt_open_fds);
        let word = read_kernel::<u64>(open_fds + u64::from(oldfd / 64) * 8)?;
        word >> (oldfd % 64) & 1
    } else {
        0
    };
    Some(DupTable {
        nofile,
        max_fds,
        nr_open: offsets.nr_open,
        oldfd_open: oldfd_open as u32,
        _pad: 0,
    })
}

/// `task`'s fd table as `alloc_fd(start, RLIMIT_NOFILE)` will find it.
pub fn alloc_start(task: Task, start: u32) -> Option<AllocStart> {
    let offsets = offsets()?;
    let files = files(&offsets, task)?;
    let fdt = fdtable(&offsets, files)?;
    let next_fd: u32 = files.load(offsets.files_next_fd);
    let max_fds: u32 = fdt.load(offsets.fdt_max_fds);
    let fd0 = if start > next_fd { start } else { next_fd };
    let signal = task.0.follow(offsets.task_signal)?;
    let end: u64 = signal.load(offsets.signal_nofile);
    let word = if fd0 < max_fds {
        let open_fds: u64 = fdt.load(offsets.fdt_open_fds);
        read_kernel::<u64>(open_fds + u64::from(fd0 / 64) * 8)?
    } else {
        0
    };
    Some(AllocStart {
        start,
        next_fd,
        max_fds,
        nr_open: offsets.nr_open,
        word,
        end,
    })
}
