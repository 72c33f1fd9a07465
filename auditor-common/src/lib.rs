//! What the probe and the user side must agree on: the catalogue of branch sites, the
//! syscall table, the model of the kernel path that decides each site (predicates, and the
//! order the kernel evaluates them in), and the `#[repr(C)]` records the probe's maps hold.
//!
//! The model lives here once. The probe runs it on what it reads in the kernel; the strace
//! source runs it on what strace printed. They cannot disagree about what a branch means
//! or when the kernel gets to it.
//!
//! Built for the probe, the model's functions are inlined into the programs
//! (`#[cfg_attr(target_arch = "bpf", inline(always))]`): as BPF subprograms they made
//! frames that 6.1's verifier refused (a chain of calls past its 512 bytes of stack, and
//! reads of stack slots a frame had not written yet, which only newer verifiers allow).
#![no_std]

#[cfg(feature = "user")]
extern crate alloc;

pub mod addfd;
pub mod catalogue;
pub mod chmod;
pub mod close;
pub mod dup;
pub mod epoll;
pub mod fd;
pub mod open;
pub mod poll;
pub mod prelude;
pub mod select;
pub mod stacks;
pub mod syscalls;

pub use catalogue::{SITE_COUNT, Site};
pub use syscalls::{SYSCALL_COUNT, Syscall};

/// Length of a task's command name, as in the kernel (`TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;

/// Linux errno values the predicates compare return values against (x86_64, asm-generic).
pub mod errno {
    pub const EPERM: i64 = 1;
    pub const ESRCH: i64 = 3;
    pub const EINTR: i64 = 4;
    pub const EBADF: i64 = 9;
    pub const EBUSY: i64 = 16;
    pub const ENOENT: i64 = 2;
    pub const EACCES: i64 = 13;
    pub const ENFILE: i64 = 23;
    pub const EMFILE: i64 = 24;
    pub const ENAMETOOLONG: i64 = 36;
    pub const EAFNOSUPPORT: i64 = 97;
    pub const ENOMEM: i64 = 12;
    pub const EFAULT: i64 = 14;
    pub const EINVAL: i64 = 22;
    pub const ENOSPC: i64 = 28;
    /// Kernel-internal restart codes: visible at the `sys_exit` tracepoint, which fires before
    /// signal delivery turns them into `EINTR` or a restart.
    pub const ERESTARTSYS: i64 = 512;
    pub const ERESTARTNOINTR: i64 = 513;
    pub const ERESTARTNOHAND: i64 = 514;
    pub const ERESTART_RESTARTBLOCK: i64 = 516;
}

/// Whether the kernel got to a branch, as far as the observer can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reached {
    Yes,
    No,
    /// The return value does not tell (e.g. EFAULT from a copy before or after it).
    Unknown,
}

impl Reached {
    /// The evaluation of a branch reached this way, taken as `taken` says (`None`: what
    /// decides it could not be read).
    pub const fn evaluate(self, taken: Option<bool>) -> Evaluation {
        match (self, taken) {
            (Reached::No, _) => Evaluation::NotReached,
            (Reached::Unknown, _) | (Reached::Yes, None) => Evaluation::Undecided,
            (Reached::Yes, Some(taken)) => Evaluation::from_taken(taken),
        }
    }
}

/// Whether `do_select` / `do_poll` scanned, from the return value: both return only after a
/// scan, with a count or a restart code when a signal came (poll turns `-ERESTARTNOHAND`
/// into `-ERESTART_RESTARTBLOCK`, ppoll and pselect6 may turn it into `-EINTR`). EFAULT
/// comes from copies before the scan or after it.
pub const fn scan_reached(ret: i64) -> Reached {
    if ret >= 0
        || ret == -errno::EINTR
        || ret == -errno::ERESTARTNOHAND
        || ret == -errno::ERESTART_RESTARTBLOCK
    {
        Reached::Yes
    } else if ret == -errno::EFAULT {
        Reached::Unknown
    } else {
        Reached::No
    }
}

/// The return value the model is given for a call the observer could not follow to its
/// exit (with a prelude of `Prelude::Unknown`): EFAULT, which each entry point may return
/// before or after any of its branches, so every branch the call may reach is undecided.
pub const UNFOLLOWED_RETURN: i64 = -errno::EFAULT;

/// How one evaluation of a branch went, as far as the observer can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evaluation {
    /// The kernel never got to the branch (an earlier check failed): nothing to count.
    NotReached,
    Taken,
    NotTaken,
    /// The branch may have run, but what decides it could not be read.
    Undecided,
}

impl Evaluation {
    /// `Taken` or `NotTaken` from a predicate's value.
    pub const fn from_taken(taken: bool) -> Evaluation {
        if taken {
            Evaluation::Taken
        } else {
            Evaluation::NotTaken
        }
    }

    /// As [`Evaluation::from_taken`], `Undecided` for a value the observer could not read.
    pub const fn from_known(taken: Option<bool>) -> Evaluation {
        match taken {
            Some(taken) => Evaluation::from_taken(taken),
            None => Evaluation::Undecided,
        }
    }
}

/// Counts of one site's evaluations. `unreadable` counts evaluations whose direction the
/// observer could not decide; they are never dropped or guessed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "user",
    derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)
)]
pub struct Counts {
    pub taken: u64,
    pub not_taken: u64,
    pub unreadable: u64,
}

impl Counts {
    pub const ZERO: Counts = Counts::new(0, 0, 0);

    pub const fn new(taken: u64, not_taken: u64, unreadable: u64) -> Counts {
        Counts {
            taken,
            not_taken,
            unreadable,
        }
    }

    /// `n` evaluations that went as `evaluation` says.
    pub fn of(evaluation: Evaluation, n: u64) -> Counts {
        let mut counts = Counts::ZERO;
        counts.record(evaluation, n);
        counts
    }

    /// Adds `n` evaluations that went as `evaluation` says.
    pub fn record(&mut self, evaluation: Evaluation, n: u64) {
        match evaluation {
            Evaluation::NotReached => {}
            Evaluation::Taken => self.taken += n,
            Evaluation::NotTaken => self.not_taken += n,
            Evaluation::Undecided => self.unreadable += n,
        }
    }

    pub fn add(&mut self, other: &Counts) {
        self.taken += other.taken;
        self.not_taken += other.not_taken;
        self.unreadable += other.unreadable;
    }

    pub const fn total(&self) -> u64 {
        self.taken + self.not_taken + self.unreadable
    }
}

/// Every site's counts of one process: the value of the probe's per-process counters, so
/// that a call finds all of its sites with one map lookup.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteCounts {
    /// Indexed by [`Site`] discriminant.
    pub sites: [Counts; SITE_COUNT],
}

impl SiteCounts {
    pub const ZERO: SiteCounts = SiteCounts {
        sites: [Counts::ZERO; SITE_COUNT],
    };
}

/// A process in a traced set entry (`maps::TRACED`): the name its counts go under.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traced {
    /// The process's name as `ps` shows it (its thread-group leader's), kept up to date
    /// from `task:task_rename`; meaningless with `traced::UNNAMED`.
    pub comm: [u8; COMM_LEN],
    /// `traced` flags.
    pub flags: u32,
}

/// Flags of a [`Traced`] entry.
pub mod traced {
    /// The process's calls are counted (without it: a process `--comm` did not match).
    pub const COUNTED: u32 = 1;
    /// Decided by the process's name: a rename decides again.
    pub const BY_NAME: u32 = 2;
    /// The name is not known yet (a pid the loader entered): the probe reads it.
    pub const UNNAMED: u32 = 4;
}

/// Longest executable path the probe keeps (with its NUL); a longer one is cut.
pub const EXE_LEN: usize = 256;

/// A process by id and name (as `ps` shows it): the key of its counts in `maps::COUNTS`
/// (a process that execs shows each program it ran separately) and of its executable in
/// `maps::EXES`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessKey {
    pub pid: u32,
    pub comm: [u8; COMM_LEN],
}

/// The key of the row of counts that found no row of their process (the table was full,
/// or the spill): no process has this pid. The loader writes it as the key of
/// `slots::UNATTRIBUTED` before the probe attaches.
pub const UNATTRIBUTED_ROW: ProcessKey = ProcessKey {
    pid: u32::MAX,
    comm: [0; COMM_LEN],
};

/// The preallocated rows of counts in `maps::ROWS`, by slot. A process keeps its slot for
/// the session (`maps::ROW_SLOTS`), and its threads keep it in their state with their
/// decided process, so that a call finds its row by index, without hashing a key.
pub mod slots {
    use core::ops::Range;

    /// The row of counts that found no row of their process ([`crate::UNATTRIBUTED_ROW`]).
    pub const UNATTRIBUTED: u32 = 0;
    /// The rows of the first processes the probe decides to count, from their first
    /// counted call; later processes have their rows in `maps::COUNTS`.
    pub const FIRST: Range<u32> = 1..1 + FIRST_ROWS;
    pub const FIRST_ROWS: u32 = 256;
    /// The rows of the processes whose row in `maps::COUNTS` the kernel could not allocate
    /// when they needed it (its allocator for per-CPU values refills later, so a burst of
    /// new processes can drain it).
    pub const SPILL: Range<u32> = FIRST.end..FIRST.end + SPILL_ROWS;
    pub const SPILL_ROWS: u32 = 1024;
    /// Entries of `maps::ROWS` and `maps::ROW_KEYS`.
    pub const COUNT: u32 = SPILL.end;
    /// No slot: the process's row is in `maps::COUNTS`, by key.
    pub const NONE: u32 = u32::MAX;
}

/// Names of the probe's load-time globals, set by the loader with `override_global`.
pub mod globals {
    /// u32: the auditor's own process id, never counted.
    pub const AUDITOR_PID: &str = "AUDITOR_PID";
    /// u32: 1 to load every program with nothing to do: the verifier prunes each to a bare
    /// return, the cost of the attach points alone (the probe benchmark's floor).
    pub const EMPTY_PROGRAMS: &str = "EMPTY_PROGRAMS";
    /// u32: 1 to count every process but the auditor's own.
    pub const TRACE_ALL: &str = "TRACE_ALL";
    /// u32: poll's number on this machine (`__NR_poll`): the shared exit of poll and ppoll
    /// tells poll's calls, which have no entry program, by it.
    pub const POLL_SYSCALL_NR: &str = "POLL_SYSCALL_NR";
    /// u32: the [`crate::open::FlagSet`] of the running kernel's `build_open_flags()`.
    pub const OPEN_FLAG_SET: &str = "OPEN_FLAG_SET";
    /// u32: 1 when the comm filter map has entries.
    pub const FILTER_COMMS: &str = "FILTER_COMMS";
    /// u32: 1 when some of them are thread names (`--thread-comm`).
    pub const FILTER_THREAD_COMMS: &str = "FILTER_THREAD_COMMS";
    /// u32: 1 to add the children of traced processes to the traced set.
    pub const FOLLOW_FORKS: &str = "FOLLOW_FORKS";
    /// u32: a process id that becomes traced when it execs (0: none).
    pub const EXEC_TARGET: &str = "EXEC_TARGET";
    /// u32: offset of `child_pid` in the `sched_process_fork` record on this kernel.
    pub const FORK_CHILD_PID_OFFSET: &str = "FORK_CHILD_PID_OFFSET";
    /// u32: offset of `old_pid` in the `sched_process_exec` record on this kernel.
    pub const EXEC_OLD_PID_OFFSET: &str = "EXEC_OLD_PID_OFFSET";
    /// u32: offset of `filename` (a `__data_loc`) in the `sched_process_exec` record.
    pub const EXEC_FILENAME_OFFSET: &str = "EXEC_FILENAME_OFFSET";
    /// u32: offsets of `pid` and `newcomm` (char[16]) in the `task_rename` record.
    pub const RENAME_PID_OFFSET: &str = "RENAME_PID_OFFSET";
    pub const RENAME_NEWCOMM_OFFSET: &str = "RENAME_NEWCOMM_OFFSET";
    /// [`crate::TaskOffsets`]: where the task state the probe reads lies in this kernel's
    /// structs, from its BTF (all zero: unknown, and the sites that need it undecided).
    pub const TASK_OFFSETS: &str = "TASK_OFFSETS";
    /// [u32; SITE_COUNT]: per site, the `stacks::arms` that take a stack (`--stacks`);
    /// all 0 without it.
    pub const STACK_ARMS: &str = "STACK_ARMS";
    /// u32: 1 with `--stacks` (execs and mappings of code are then told to the user side).
    pub const STACKS_ON: &str = "STACKS_ON";
}

/// Offsets (bytes) of the task state the probe reads, from the running kernel's BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskOffsets {
    /// `task_struct.files`.
    pub task_files: u32,
    /// `files_struct.count`.
    pub files_count: u32,
    /// `files_struct.fdt`.
    pub files_fdt: u32,
    /// `fdtable.max_fds`.
    pub fdt_max_fds: u32,
    /// `files_struct.next_fd`.
    pub files_next_fd: u32,
    /// `fdtable.open_fds`.
    pub fdt_open_fds: u32,
    /// `fdtable.fd`: the array of `struct file *`.
    pub fdt_fd: u32,
    /// `file.f_mode`.
    pub file_f_mode: u32,
    /// `task_struct.signal`.
    pub task_signal: u32,
    /// `signal_struct.rlim[RLIMIT_NOFILE].rlim_cur`.
    pub signal_nofile: u32,
    /// `signal_struct.live`: the thread group's tasks that have not begun to exit.
    pub signal_live: u32,
    /// `task_struct.group_leader`.
    pub task_group_leader: u32,
    /// `task_struct.comm`.
    pub task_comm: u32,
    /// `task_struct.tgid`: the process id, read with a load where
    /// `bpf_get_current_pid_tgid` costs a helper call.
    pub task_tgid: u32,
    /// Not an offset: `sysctl fs.nr_open`, the largest fd table.
    pub nr_open: u32,
    /// 1 when the offsets above were found.
    pub known: u32,
}

/// Reads of tracepoint records that failed in the probe, by kind: per-CPU u64 counters in
/// `maps::FAILURES`, counted where the read failed, so that the report tells what the
/// probe may have missed instead of taking a value it did not read. (The syscall records
/// are read with loads the verifier checks, which cannot fail; the sched and task records
/// are read at offsets the loader finds at run time, with a helper that can.)
pub mod failure {
    /// `sched_process_fork`'s `child_pid` (or the forking thread's name).
    pub const FORK_CHILD: u32 = 0;
    /// `sched_process_exec`'s `old_pid`.
    pub const EXEC_OLD_PID: u32 = 1;
    /// `sched_process_exec`'s `filename`.
    pub const EXEC_FILENAME: u32 = 2;
    /// `task_rename`'s `pid` or `newcomm`.
    pub const RENAME: u32 = 3;
    pub const COUNT: usize = 4;
}

/// Why a call's counts went elsewhere than its process's row in `maps::COUNTS`, per kind:
/// indexes of the per-CPU counters `maps::ROW_MISSES` (one per call).
pub mod row_miss {
    /// The table was full (`maps::COUNTS_CAPACITY` rows): the counts went unattributed.
    pub const TABLE_FULL: u32 = 0;
    /// The kernel had no memory for a new row at that moment: the counts went to the
    /// process's row in `crate::slots::SPILL`.
    pub const SPILLED: u32 = 1;
    /// As `SPILLED`, with every spill slot taken: the counts went unattributed.
    pub const SPILL_FULL: u32 = 2;
    pub const COUNT: usize = 3;
}

/// Names of the probe's maps, as the loader looks them up.
pub mod maps {
    pub const COUNTS: &str = "COUNTS";
    /// The preallocated rows of counts, per CPU, by [`crate::slots`] slot.
    pub const ROWS: &str = "ROWS";
    /// The key of each slot's row in `ROWS` (zeros: a slot not taken).
    pub const ROW_KEYS: &str = "ROW_KEYS";
    /// The slot of each process that has one, by key (preallocated: a process whose row
    /// the allocator could not make needs it then).
    pub const ROW_SLOTS: &str = "ROW_SLOTS";
    /// The free slots of `slots::FIRST` and of `slots::SPILL`: queues the loader fills, from
    /// which the probe takes a slot (a pop is atomic, where this target has no atomic add).
    pub const FIRST_SLOTS: &str = "FIRST_SLOTS";
    pub const SPILL_SLOTS: &str = "SPILL_SLOTS";
    /// Per-CPU u64 counters, indexed by `row_miss`.
    pub const ROW_MISSES: &str = "ROW_MISSES";
    pub const CALLS: &str = "CALLS";
    pub const TRACED: &str = "TRACED";
    pub const COMMS: &str = "COMMS";
    /// One u32: 1 once the session has stopped counting.
    pub const STOPPED: &str = "STOPPED";
    /// Per-CPU u64 counters, indexed by `failure`.
    pub const FAILURES: &str = "FAILURES";
    /// The executable each traced process exec'd, by [`crate::ProcessKey`].
    pub const EXES: &str = "EXES";
    /// Entries of `EXES`: exec'd programs remembered in a session.
    pub const EXES_CAPACITY: u32 = 8192;
    /// Entries of `COUNTS`: (process, name) rows of a session, each `SiteCounts` per CPU,
    /// allocated as they come.
    pub const COUNTS_CAPACITY: u32 = 16_384;
    /// Each traced thread's call in flight, in its task-local storage (no capacity: the
    /// kernel makes a thread's at its first followed call and frees it with the task).
    pub const THREAD_STATE: &str = "THREAD_STATE";
    /// The size of a thread's value in `THREAD_STATE`: its process as last decided (a
    /// `ProcessKey` and the generation of `TRACED` it was decided in), a tag and the
    /// largest family record of a call in flight.
    pub const THREAD_STATE_BYTES: usize = 144;
    /// `TRACED`'s generation: the time of its last change by a program, written after the
    /// change; a thread's process decided in the current generation is what `TRACED` says.
    pub const TRACED_GENERATION: &str = "TRACED_GENERATION";
    /// One array of bytes, a slot per pid modulo its length ([`maybe_traced_slot`]), set
    /// when a pid enters `TRACED` and never cleared in a session: a clear slot proves a
    /// process untraced without a lookup of `TRACED`.
    pub const MAYBE_TRACED: &str = "MAYBE_TRACED";
    /// The length of `MAYBE_TRACED` (a power of two).
    pub const MAYBE_TRACED_SLOTS: usize = 65_536;
    /// The slot of process `pid` in `MAYBE_TRACED`.
    pub const fn maybe_traced_slot(pid: u32) -> usize {
        pid as usize & (MAYBE_TRACED_SLOTS - 1)
    }
    /// Entries of `TRACED`: processes followed at once.
    pub const TRACED_CAPACITY: u32 = 65_536;
    /// The ring buffer of `stacks::StackSample`s and `stacks::MappingEvent`s.
    pub const STACKS: &str = "STACKS";
    /// Per-CPU u64 counters, indexed by `stacks::stat`.
    pub const STACK_STATS: &str = "STACK_STATS";
    /// Entries of the probe's sampling counts (per process and set of rare sites).
    pub const SAMPLED_CAPACITY: u32 = 65_536;
    /// The probe's sampling counts, per process and set of rare sites (`--stacks` only).
    pub const SAMPLED: &str = "SAMPLED";
    /// The maps only `--stacks` uses: without it the loader makes each as small as the
    /// kernel allows (one entry, one page of ring buffer), since their sizes are memory
    /// fixed for the session whether used or not.
    pub const STACKS_ONLY: [&str; 2] = [STACKS, SAMPLED];
    /// Entries of `COMMS`: names given with `--comm` and `--thread-comm` together.
    pub const COMMS_CAPACITY: u32 = 64;
}

/// Flags of a `COMMS` entry (its value, a u32).
pub mod comm_match {
    /// Match the process's name: its thread-group leader's, as `ps` and `pgrep` show it.
    pub const PROCESS: u32 = 1;
    /// Match the name of the thread making the call.
    pub const THREAD: u32 = 2;
    /// Set by the probe once a task matched the name.
    pub const MATCHED: u32 = 4;
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] integers and byte arrays with no padding; every bit pattern
    // is a valid value.
    unsafe impl aya::Pod for super::Counts {}
    // SAFETY: as above (Counts only).
    unsafe impl aya::Pod for super::SiteCounts {}
    // SAFETY: as above ([u8; 16], u32: no padding).
    unsafe impl aya::Pod for super::Traced {}
    // SAFETY: as above (u32, [u8; 16]: no padding).
    unsafe impl aya::Pod for super::ProcessKey {}
    // SAFETY: thirteen u32, no padding.
    unsafe impl aya::Pod for super::TaskOffsets {}
}
