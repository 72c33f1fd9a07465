//! The eBPF source: loads the probe embedded in this binary, points it at the target,
//! attaches it to its tracepoints, and reads its per-CPU counters into a tally.

use std::{
    os::fd::{AsFd, AsRawFd, BorrowedFd},
    time::Duration,
};

use auditor_common::{
    COMM_LEN, Counts, EXE_LEN, ProcessKey, SITE_COUNT, Site, SiteCounts, Syscall, TaskOffsets,
    Traced, UNATTRIBUTED_ROW, comm_match, failure, globals, maps, row_miss, slots, stacks,
    syscalls::SYSCALLS, traced,
};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuHashMap, Queue, RingBuf},
    programs::{ProgramError, TracePoint, trace_point::TracePointLinkId},
};

use crate::{
    Error,
    btf::{self, Btf},
    kernel,
    observation::{Observation, counted},
    stacks::{
        Arms,
        collect::{Collected, Collector},
    },
    tally::{Process, Tally},
    tracefs,
};

/// The probe, built by build.rs from `auditor-ebpf`; empty when it was built without the
/// eBPF toolchain.
static PROBE_ELF: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/auditor-probe"));

/// One program of the probe and the tracepoint it attaches to.
struct Program {
    name: String,
    category: &'static str,
    event: String,
    /// Only `--stacks` needs it (see `SyscallInfo::stacks_only`).
    stacks_only: bool,
}

/// The probe's programs besides those of the syscall table: the processes' lifetimes.
/// Attached first, so that the traced set follows forks and execs before any call is
/// counted.
const LIFETIME_PROGRAMS: [(&str, &str, &str); 4] = [
    ("process_fork", "sched", "sched_process_fork"),
    ("task_rename", "task", "task_rename"),
    ("process_exec", "sched", "sched_process_exec"),
    ("process_exit", "sched", "sched_process_exit"),
];

/// Every program of the probe and where it attaches: those above, then, for each syscall
/// of the table, `NAME_enter` on `syscalls:sys_enter_NAME` and `NAME_exit` on
/// `syscalls:sys_exit_NAME` as the table says it has them; for a shared exit, its
/// family's program (`Family::shared_exit`) on `syscalls:sys_exit_NAME`.
static PROGRAMS: std::sync::LazyLock<Vec<Program>> = std::sync::LazyLock::new(|| {
    let lifetimes = LIFETIME_PROGRAMS.map(|(name, category, event)| Program {
        name: name.to_string(),
        category,
        event: event.to_string(),
        stacks_only: false,
    });
    let syscalls = SYSCALLS.iter().flat_map(|info| {
        let ends = [("enter", info.enter), ("exit", info.exit)];
        ends.into_iter()
            .filter(|&(_, program)| program.exists())
            .map(|(end, program)| {
                let name = match info.family.shared_exit() {
                    Some(name) if program == auditor_common::syscalls::Program::Shared => {
                        name.to_string()
                    }
                    _ => format!("{}_{end}", info.name),
                };
                Program {
                    name,
                    category: "syscalls",
                    event: format!("sys_{end}_{}", info.name),
                    stacks_only: info.stacks_only(),
                }
            })
    });
    lifetimes.into_iter().chain(syscalls).collect()
});

/// Where the task state the probe reads lies in the running kernel's structs.
fn task_offsets(btf: &Result<Btf, String>) -> Result<TaskOffsets, String> {
    let btf = btf.as_ref().map_err(Clone::clone)?;
    let offset =
        |name: &str, member: &str| btf.member_offset(name, member).map_err(|e| e.to_string());
    // struct rlimit is two longs; RLIMIT_NOFILE is 7.
    const RLIMIT_NOFILE: u32 = 7;
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .ok_or("cannot read /proc/sys/fs/nr_open")?;
    Ok(TaskOffsets {
        task_files: offset("task_struct", "files")?,
        files_count: offset("files_struct", "count")?,
        files_fdt: offset("files_struct", "fdt")?,
        fdt_max_fds: offset("fdtable", "max_fds")?,
        files_next_fd: offset("files_struct", "next_fd")?,
        fdt_open_fds: offset("fdtable", "open_fds")?,
        fdt_fd: offset("fdtable", "fd")?,
        file_f_mode: offset("file", "f_mode")?,
        task_signal: offset("task_struct", "signal")?,
        signal_nofile: offset("signal_struct", "rlim")? + RLIMIT_NOFILE * 16,
        signal_live: offset("signal_struct", "live")?,
        task_group_leader: offset("task_struct", "group_leader")?,
        task_comm: offset("task_struct", "comm")?,
        task_tgid: offset("task_struct", "tgid")?,
        nr_open,
        known: 1,
    })
}

/// Which processes the probe counts.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Every process but the auditor.
    pub all: bool,
    /// Processes counted from the start (threads included).
    pub pids: Vec<u32>,
    /// Processes whose name (their thread-group leader's, as `ps` shows it) is one of these.
    pub comms: Vec<String>,
    /// Threads whose own name is one of these.
    pub thread_comms: Vec<String>,
    /// A process counted from its next exec on.
    pub exec_target: Option<u32>,
    /// Count the children of counted processes too.
    pub follow_forks: bool,
    /// Attach programs that do nothing (the floor the probe benchmark measures against).
    pub empty_programs: bool,
    /// Take the user stacks of calls that go these arms (`--stacks`).
    pub stacks: Option<Arms>,
}

/// Effective capabilities the probe needs: CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN.
fn missing_capabilities() -> Vec<&'static str> {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;
    let effective = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
        })
        .unwrap_or(0);
    let has = |cap: u32| effective & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) {
        return Vec::new();
    }
    [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|(cap, _)| !has(*cap))
        .map(|(_, name)| name)
        .collect()
}

fn comm_key(name: &str) -> [u8; COMM_LEN] {
    // The kernel keeps the first 15 bytes and a NUL.
    let mut key = [0u8; COMM_LEN];
    let bytes = name.as_bytes();
    let len = bytes.len().min(COMM_LEN - 1);
    key[..len].copy_from_slice(&bytes[..len]);
    key
}

fn comm_string(comm: &[u8; COMM_LEN]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(COMM_LEN);
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

fn map_error(map: &str, error: impl std::fmt::Display) -> Error {
    Error::Probe(format!("probe map {map}: {error}"))
}

/// The observation of a probe session: the probe decides every catalogued site.
pub fn observation(target: String, elapsed: Duration, tally: Tally) -> Observation {
    Observation {
        source: "ebpf",
        target,
        elapsed,
        tally,
        notes: Vec::new(),
        measured: |_| true,
    }
}

/// The processes that can have a row of counts: by slot, then by key.
const ROWS_CAPACITY: u32 = slots::FIRST_ROWS + maps::COUNTS_CAPACITY;

/// What the probe missed: runs the kernel skipped, counts with no row of their process
/// (`row_misses` says why).
fn missed_notes<'a>(
    tally: &'a Tally,
    row_misses: &[u64; row_miss::COUNT],
) -> impl Iterator<Item = String> + 'a {
    let skipped = (tally.missed_probe_runs() > 0).then(|| {
        format!(
            "The kernel skipped {} of the probe (another BPF program was running on the same \
             CPU): up to that many calls are missing from the counts.",
            counted(tally.missed_probe_runs(), "run", "runs")
        )
    });
    let [table_full, _, spill_full] = row_misses.map(|count| count > 0);
    let why = match (table_full, spill_full) {
        (true, false) => format!("the table of rows was full: {} rows", ROWS_CAPACITY),
        (false, true) => format!(
            "the kernel had no memory for their rows at the time, and the {} preallocated \
             rows for that were taken",
            slots::SPILL_ROWS
        ),
        (true, true) => format!(
            "the table of rows was full ({} rows), or the kernel had no memory for their \
             rows and the {} preallocated for that were taken",
            ROWS_CAPACITY,
            slots::SPILL_ROWS
        ),
        (false, false) => "no row of their process could be made".to_string(),
    };
    // One condition, one note: the sites it touched listed in it.
    let sites: Vec<String> = tally
        .unattributed()
        .map(|(site, counts)| format!("{} {}", site.info().id, counts.total()))
        .collect();
    let unattributed = (!sites.is_empty()).then(|| {
        format!(
            "Evaluations in the totals but not attributed to a process ({why}): {}.",
            sites.join(", ")
        )
    });
    skipped.into_iter().chain(unattributed)
}

/// What the report says of what the probe could not do, per `failure` kind.
fn failure_notes(failures: &[u64; failure::COUNT]) -> impl Iterator<Item = String> + '_ {
    // Each after "The probe could not", the count in place of `#`.
    const WHAT: [&str; failure::COUNT] = [
        "read # sched_process_fork records (children of traced processes it may not have followed)",
        "read # sched_process_exec records' old pid (a thread that exec'd may stay in the traced set)",
        "read # sched_process_exec records' file name (the program is not named in the rows)",
        "read # task_rename records (a process's calls may go under its old name)",
    ];
    failures
        .iter()
        .zip(WHAT)
        .filter(|(count, _)| **count > 0)
        .map(|(count, what)| {
            format!(
                "The probe could not {}.",
                what.replace('#', &count.to_string())
            )
        })
}

/// What the report says of the followed syscalls the running kernel does not have.
fn absent_note(absent: &[&str]) -> Option<String> {
    (!absent.is_empty()).then(|| {
        format!(
            "This kernel has no {} syscall (no tracepoint): no program can make such a call \
             here, so the sites they reach are counted from the other syscalls alone.",
            absent.join(", ")
        )
    })
}

/// Keeps a rejected program's whole verifier log in a new file of the temporary directory
/// (created there, never through a name someone else planted): where it lives, or why not.
fn keep_verifier_log(program: &str, log: &str) -> String {
    let kept = tempfile::Builder::new()
        .prefix(&format!("auditor-verifier-{program}-"))
        .suffix(".log")
        .tempfile()
        .and_then(|mut file| {
            std::io::Write::write_all(&mut file, log.as_bytes())?;
            file.keep().map_err(|e| e.error)
        });
    match kept {
        Ok((_, path)) => format!("its whole log is in {}", path.display()),
        Err(error) => format!("its whole log could not be kept: {error}"),
    }
}

/// The last lines of a verifier log: where it gave up and why.
fn log_tail(log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// What the kernel accounts to the probe's maps, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapMemory {
    pub maps: u32,
    /// Maps of one copy.
    pub shared: u64,
    /// Per-CPU maps, all their copies: this part grows with the CPUs.
    pub per_cpu_maps: u64,
}

/// A loaded and attached probe. Dropping it detaches everything.
pub struct Probe {
    ebpf: Ebpf,
    links: Vec<(&'static str, TracePointLinkId)>,
    /// Why the task state cannot be read on this kernel, if it cannot.
    task_state_error: Option<String>,
    /// The followed syscalls this kernel does not have (no tracepoint).
    absent: Vec<&'static str>,
    /// The names given with `--comm` and `--thread-comm`.
    names: Vec<String>,
    /// With `--stacks`: the thread reading them while the probe counts...
    collector: Option<Collector>,
    /// ... and what they came to once it stopped, with the probe's `stacks::stat` counters.
    collected: Option<(Collected, [u64; stacks::stat::COUNT as usize])>,
    /// Reads of records that failed, per `failure` kind, once it stopped.
    failures: [u64; failure::COUNT],
    /// The `row_miss` counters, read when the probe stops.
    row_misses: [u64; row_miss::COUNT],
}

impl Probe {
    /// Checks privileges and tracefs, loads the probe with `filter` and attaches it; fails
    /// with [`Error::Interrupted`] as soon as `stop` says so (loading takes seconds).
    pub fn attach(filter: &Filter, stop: &(dyn Fn() -> bool + Sync)) -> Result<Probe, Error> {
        if PROBE_ELF.is_empty() {
            return Err(Error::NoProbe);
        }
        let names = filter.comms.len() + filter.thread_comms.len();
        if names > maps::COMMS_CAPACITY as usize {
            return Err(Error::TooManyNames {
                given: names,
                limit: maps::COMMS_CAPACITY,
            });
        }
        if filter.pids.len() > maps::TRACED_CAPACITY as usize {
            return Err(Error::TooManyPids {
                given: filter.pids.len(),
                limit: maps::TRACED_CAPACITY,
            });
        }

        let missing = missing_capabilities();
        if !missing.is_empty() {
            return Err(Error::NotPrivileged(missing.join(" and ")));
        }
        let release = kernel::release();
        let btf = Btf::from_sys_fs().map_err(|e| format!("cannot read {}: {e}", btf::VMLINUX));
        let missing = kernel::missing_helpers(btf.as_ref().ok(), &release);
        if !missing.is_empty() {
            return Err(Error::KernelTooOld(kernel::refusal(&release, &missing)));
        }
        tracefs::ensure_mounted()?;
        let fork_child_pid = tracefs::field_offset("sched", "sched_process_fork", "child_pid")?;
        let exec_old_pid = tracefs::field_offset("sched", "sched_process_exec", "old_pid")?;
        let exec_filename = tracefs::field_offset("sched", "sched_process_exec", "filename")?;
        let rename_pid = tracefs::field_offset("task", "task_rename", "pid")?;
        // Declared `char newcomm[16]`: a name of another length would not fit the probe's.
        let rename_newcomm = tracefs::field_offset("task", "task_rename", "newcomm[16]")?;

        let flag = |on: bool| u32::from(on);
        let auditor_pid = std::process::id();
        let empty_programs = flag(filter.empty_programs);
        let open_flag_set = kernel::open_flag_set() as u32;
        let poll_syscall_nr = libc::SYS_poll as u32;
        let trace_all = flag(filter.all);
        let filter_comms = flag(names > 0);
        let filter_thread_comms = flag(!filter.thread_comms.is_empty());
        let follow_forks = flag(filter.follow_forks);
        let exec_target = filter.exec_target.unwrap_or(0);
        let record_offset =
            |offset: usize| u32::try_from(offset).map_err(|e| Error::Probe(e.to_string()));
        let fork_offset = record_offset(fork_child_pid)?;
        let exec_offset = record_offset(exec_old_pid)?;
        let filename_offset = record_offset(exec_filename)?;
        let rename_pid_offset = record_offset(rename_pid)?;
        let rename_newcomm_offset = record_offset(rename_newcomm)?;
        let stack_arms = filter.stacks.map_or([0; SITE_COUNT], |arms| arms.0);
        let stacks_on = flag(filter.stacks.is_some());
        let (task_offsets, task_state_error) = match task_offsets(&btf) {
            Ok(offsets) => (offsets, None),
            Err(why) => (TaskOffsets::default(), Some(why)),
        };
        let mut loader = EbpfLoader::new();
        // `maps::IN_FLIGHT` is task storage, which aya makes but has no type for: only the
        // probe uses it.
        loader.allow_unsupported_maps();
        if filter.stacks.is_none() {
            // SAFETY: sysconf without side effects.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u32;
            for name in maps::STACKS_ONLY {
                loader.map_max_entries(name, if name == maps::STACKS { page } else { 1 });
            }
        }
        let mut ebpf = loader
            .override_global(globals::AUDITOR_PID, &auditor_pid, true)
            .override_global(globals::EMPTY_PROGRAMS, &empty_programs, true)
            .override_global(globals::OPEN_FLAG_SET, &open_flag_set, true)
            .override_global(globals::POLL_SYSCALL_NR, &poll_syscall_nr, true)
            .override_global(globals::TRACE_ALL, &trace_all, true)
            .override_global(globals::FILTER_COMMS, &filter_comms, true)
            .override_global(globals::FILTER_THREAD_COMMS, &filter_thread_comms, true)
            .override_global(globals::FOLLOW_FORKS, &follow_forks, true)
            .override_global(globals::EXEC_TARGET, &exec_target, true)
            .override_global(globals::FORK_CHILD_PID_OFFSET, &fork_offset, true)
            .override_global(globals::EXEC_OLD_PID_OFFSET, &exec_offset, true)
            .override_global(globals::EXEC_FILENAME_OFFSET, &filename_offset, true)
            .override_global(globals::RENAME_PID_OFFSET, &rename_pid_offset, true)
            .override_global(globals::RENAME_NEWCOMM_OFFSET, &rename_newcomm_offset, true)
            .override_global(globals::TASK_OFFSETS, &task_offsets, true)
            .override_global(globals::STACK_ARMS, &stack_arms, true)
            .override_global(globals::STACKS_ON, &stacks_on, true)
            .load(PROBE_ELF)
            .map_err(|e| Error::Probe(format!("loading the probe: {e}")))?;

        {
            let mut traced_set: HashMap<_, u32, Traced> = HashMap::try_from(
                ebpf.map_mut(maps::TRACED)
                    .ok_or(Error::Probe(maps::TRACED.into()))?,
            )
            .map_err(|e| map_error(maps::TRACED, e))?;
            // The probe reads each one's name at its first counted call.
            let entry = Traced {
                comm: [0; COMM_LEN],
                flags: traced::COUNTED | traced::UNNAMED,
            };
            for &pid in &filter.pids {
                traced_set
                    .insert(pid, entry, 0)
                    .map_err(|e| map_error(maps::TRACED, e))?;
            }
        }
        {
            // Their slots in the probe's filter before `TRACED` (`maps::MAYBE_TRACED`).
            let mut slots = Box::new([0u8; maps::MAYBE_TRACED_SLOTS]);
            for &pid in &filter.pids {
                slots[maps::maybe_traced_slot(pid)] = 1;
            }
            let mut maybe_traced: Array<_, [u8; maps::MAYBE_TRACED_SLOTS]> = Array::try_from(
                ebpf.map_mut(maps::MAYBE_TRACED)
                    .ok_or(Error::Probe(maps::MAYBE_TRACED.into()))?,
            )
            .map_err(|e| map_error(maps::MAYBE_TRACED, e))?;
            maybe_traced
                .set(0, *slots, 0)
                .map_err(|e| map_error(maps::MAYBE_TRACED, e))?;
        }
        {
            // The unattributed row has its key before any program runs, and every other
            // slot is free.
            let mut keys: Array<_, ProcessKey> = Array::try_from(
                ebpf.map_mut(maps::ROW_KEYS)
                    .ok_or(Error::Probe(maps::ROW_KEYS.into()))?,
            )
            .map_err(|e| map_error(maps::ROW_KEYS, e))?;
            keys.set(slots::UNATTRIBUTED, UNATTRIBUTED_ROW, 0)
                .map_err(|e| map_error(maps::ROW_KEYS, e))?;
            for (name, free) in [
                (maps::FIRST_SLOTS, slots::FIRST),
                (maps::SPILL_SLOTS, slots::SPILL),
            ] {
                let mut queue: Queue<_, u32> =
                    Queue::try_from(ebpf.map_mut(name).ok_or(Error::Probe(name.into()))?)
                        .map_err(|e| map_error(name, e))?;
                for slot in free {
                    queue.push(slot, 0).map_err(|e| map_error(name, e))?;
                }
            }
        }
        {
            let mut comms: HashMap<_, [u8; COMM_LEN], u32> = HashMap::try_from(
                ebpf.map_mut(maps::COMMS)
                    .ok_or(Error::Probe(maps::COMMS.into()))?,
            )
            .map_err(|e| map_error(maps::COMMS, e))?;
            // One entry per name: a name given both ways matches both ways.
            let mut flags = std::collections::BTreeMap::new();
            let names = [
                (&filter.comms, comm_match::PROCESS),
                (&filter.thread_comms, comm_match::THREAD),
            ];
            for (names, how) in names {
                for name in names {
                    *flags.entry(comm_key(name)).or_insert(0) |= how;
                }
            }
            for (key, how) in flags {
                comms
                    .insert(key, how, 0)
                    .map_err(|e| map_error(maps::COMMS, e))?;
            }
        }

        // A syscall newer than the running kernel has no tracepoint: its programs are
        // neither verified nor attached, and the report names it.
        let absent: Vec<&'static str> = SYSCALLS
            .iter()
            .filter(|info| !tracefs::has_event("syscalls", &format!("sys_enter_{}", info.name)))
            .map(|info| info.name)
            .collect();
        // Without --stacks, the programs only it needs are not verified or attached either.
        let present = |program: &Program| {
            (program.category != "syscalls" || tracefs::has_event(program.category, &program.event))
                && (filter.stacks.is_some() || !program.stacks_only)
        };
        load_programs(&mut ebpf, &present, stop)?;
        let collector = match filter.stacks {
            Some(_) => {
                let map = ebpf
                    .take_map(maps::STACKS)
                    .ok_or_else(|| map_error(maps::STACKS, "missing"))?;
                let ring = RingBuf::try_from(map).map_err(|e| map_error(maps::STACKS, e))?;
                Some(Collector::start(ring))
            }
            None => None,
        };
        let mut links = Vec::new();
        for Program {
            name,
            category,
            event,
            ..
        } in PROGRAMS.iter().filter(|program| present(program))
        {
            if stop() {
                return Err(Error::Interrupted);
            }
            let name = name.as_str();
            let program = tracepoint(&mut ebpf, name)?;
            let link = program.attach(category, event).map_err(|e| {
                Error::Probe(format!("attaching {name} to {category}:{event}: {e}"))
            })?;
            links.push((name, link));
        }
        Ok(Probe {
            ebpf,
            links,
            task_state_error,
            absent,
            names: filter
                .comms
                .iter()
                .chain(&filter.thread_comms)
                .cloned()
                .collect(),
            collector,
            collected: None,
            failures: [0; failure::COUNT],
            row_misses: [0; row_miss::COUNT],
        })
    }

    /// What the report must say about this probe's view of the kernel.
    /// What the report must say of this probe's view, and of what it missed in `tally`
    /// (its counts, once it stopped).
    pub fn notes(&self, tally: &Tally) -> Vec<String> {
        self.task_state_error
            .iter()
            .map(|why| {
                format!(
                    "The task state cannot be read on this kernel ({why}): the sites that \
                     depend on the fd table are counted as unreadable, processes stay in the \
                     traced set after they exit (a reused pid would be counted), and --comm \
                     matches the calling thread's name, not its process's."
                )
            })
            .chain(absent_note(&self.absent))
            .chain(missed_notes(tally, &self.row_misses))
            .chain(failure_notes(&self.failures))
            .chain(
                self.collected
                    .iter()
                    .map(|(collected, counters)| collected.note(counters)),
            )
            .collect()
    }

    /// The memory the kernel accounts to the probe's maps as they are now (each map's
    /// `memlock` in /proc/self/fdinfo): this process holds no other BPF maps.
    pub fn map_memory(&self) -> Result<MapMemory, Error> {
        const PER_CPU_TYPES: [u32; 3] = [5, 6, 10]; // percpu hash, percpu array, LRU percpu hash
        let mut memory = MapMemory::default();
        let fds = std::fs::read_dir("/proc/self/fdinfo")
            .map_err(|e| Error::Probe(format!("reading /proc/self/fdinfo: {e}")))?;
        for fd in fds.flatten() {
            let Ok(info) = std::fs::read_to_string(fd.path()) else {
                continue;
            };
            let field = |name: &str| {
                info.lines()
                    .find_map(|line| line.strip_prefix(name))
                    .and_then(|value| value.trim().parse::<u64>().ok())
            };
            let (Some(kind), Some(bytes)) = (field("map_type:"), field("memlock:")) else {
                continue;
            };
            memory.maps += 1;
            if PER_CPU_TYPES.contains(&(kind as u32)) {
                memory.per_cpu_maps += bytes;
            } else {
                memory.shared += bytes;
            }
        }
        Ok(memory)
    }

    /// The names given with `--comm` or `--thread-comm` that no task has had so far.
    pub fn unmatched_names(&self) -> Result<Vec<String>, Error> {
        let map = self
            .ebpf
            .map(maps::COMMS)
            .ok_or_else(|| map_error(maps::COMMS, "missing"))?;
        let comms: HashMap<&MapData, [u8; COMM_LEN], u32> =
            HashMap::try_from(map).map_err(|e| map_error(maps::COMMS, e))?;
        let mut unmatched = Vec::new();
        for name in &self.names {
            let flags = comms
                .get(&comm_key(name), 0)
                .map_err(|e| map_error(maps::COMMS, e))?;
            if flags & comm_match::MATCHED == 0 {
                unmatched.push(name.clone());
            }
        }
        Ok(unmatched)
    }

    /// Stops counting at once (every program returns at its first test from here on, so
    /// the counts are final) and detaches every program. Closing a tracepoint's link waits
    /// out an RCU grace period in the kernel, one link after another under the kernel's
    /// event mutex (~40 ms each, 2 s for 53): a helper process that holds the links does
    /// that after this returns, so no one waits for it.
    pub fn detach(&mut self) -> Result<(), Error> {
        let mut stopped: Array<_, u32> = Array::try_from(
            self.ebpf
                .map_mut(maps::STOPPED)
                .ok_or_else(|| map_error(maps::STOPPED, "missing"))?,
        )
        .map_err(|e| map_error(maps::STOPPED, e))?;
        stopped
            .set(0, 1, 0)
            .map_err(|e| map_error(maps::STOPPED, e))?;
        let mut links = Vec::with_capacity(self.links.len());
        for (name, link) in self.links.drain(..) {
            let link = tracepoint(&mut self.ebpf, name)?
                .take_link(link)
                .map_err(|e| Error::Probe(format!("detaching {name}: {e}")))?;
            links.push(link);
        }
        close_links_in_background(links);
        self.failures = self.counters(maps::FAILURES)?;
        self.row_misses = self.counters(maps::ROW_MISSES)?;
        if let Some(collector) = self.collector.take() {
            let counters = self.counters(maps::STACK_STATS)?;
            self.collected = Some((collector.finish(), counters));
        }
        Ok(())
    }

    /// The probe's per-CPU u64 counters in map `name`, summed over the CPUs.
    fn counters<const N: usize>(&self, name: &str) -> Result<[u64; N], Error> {
        let map = self
            .ebpf
            .map(name)
            .ok_or_else(|| map_error(name, "missing"))?;
        let counters: PerCpuArray<_, u64> =
            PerCpuArray::try_from(map).map_err(|e| map_error(name, e))?;
        let mut sums = [0; N];
        for (index, sum) in sums.iter_mut().enumerate() {
            *sum = counters
                .get(&(index as u32), 0)
                .map_err(|e| map_error(name, e))?
                .iter()
                .sum();
        }
        Ok(sums)
    }

    /// The attached programs, each once (a shared exit has a link on each of its
    /// syscalls' tracepoints).
    fn attached(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::with_capacity(self.links.len());
        for &(name, _) in &self.links {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// How often each attached program ran and for how long in all, as the kernel counts
    /// while its run statistics are on ([`enable_run_statistics`]; zeros otherwise). A
    /// shared exit's runs are those of all its syscalls.
    pub fn program_runs(&self) -> Result<Vec<ProgramRuns>, Error> {
        let names = self.attached();
        let mut runs = Vec::with_capacity(names.len());
        for name in names {
            let info = self.program_info(name)?;
            runs.push(ProgramRuns {
                program: name,
                runs: info.run_cnt,
                run_time_ns: info.run_time_ns,
            });
        }
        Ok(runs)
    }

    /// The kernel's `bpf_prog_info` of the probe's program `name`.
    fn program_info(&self, name: &str) -> Result<aya_obj::generated::bpf_prog_info, Error> {
        let fd = self
            .ebpf
            .program(name)
            .ok_or_else(|| Error::Probe(format!("program {name} is missing from the probe")))?
            .fd()
            .map_err(|e| Error::Probe(format!("program {name}: {e}")))?;
        program_info(fd.as_fd())
            .map_err(|e| Error::Probe(format!("reading the statistics of {name}: {e}")))
    }

    /// Runs of the probe's programs that the kernel skipped because another BPF program
    /// was running on that CPU (`recursion_misses`): each may have lost a call's counts.
    fn missed_runs(&self) -> Result<u64, Error> {
        let mut total = 0;
        for name in self.attached() {
            total += self.program_info(name)?.recursion_misses;
        }
        Ok(total)
    }

    /// The counts so far, summed over CPUs.
    pub fn tally(&self) -> Result<Tally, Error> {
        let mut tally = Tally::default();
        tally.add_missed_probe_runs(self.missed_runs()?);
        let map = |name: &str| {
            self.ebpf
                .map(name)
                .ok_or_else(|| map_error(name, "missing"))
        };

        // A process's counts are in its row by slot or by key, and in its row of the spill
        // if the kernel could not allocate the one by key in time.
        let mut add_row = |key: ProcessKey, per_cpu: &[SiteCounts]| {
            for site in Site::ALL {
                let sum = site_sum(per_cpu.iter(), site);
                if key == UNATTRIBUTED_ROW {
                    tally.add_unattributed(site, &sum);
                } else if sum.total() > 0 {
                    tally.add(process(&key), site, &sum);
                }
            }
        };
        let keys: Array<&MapData, ProcessKey> =
            Array::try_from(map(maps::ROW_KEYS)?).map_err(|e| map_error(maps::ROW_KEYS, e))?;
        let rows: PerCpuArray<&MapData, SiteCounts> =
            PerCpuArray::try_from(map(maps::ROWS)?).map_err(|e| map_error(maps::ROWS, e))?;
        // A slot's key is written before any count goes to its row.
        for slot in 0..slots::COUNT {
            let key = keys
                .get(&slot, 0)
                .map_err(|e| map_error(maps::ROW_KEYS, e))?;
            if key != NO_KEY {
                let per_cpu = rows.get(&slot, 0).map_err(|e| map_error(maps::ROWS, e))?;
                add_row(key, &per_cpu);
            }
        }
        let by_key: PerCpuHashMap<&MapData, ProcessKey, SiteCounts> =
            PerCpuHashMap::try_from(map(maps::COUNTS)?).map_err(|e| map_error(maps::COUNTS, e))?;
        for entry in by_key.iter() {
            let (key, per_cpu) = entry.map_err(|e| map_error(maps::COUNTS, e))?;
            add_row(key, &per_cpu);
        }

        let calls: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(map(maps::CALLS)?).map_err(|e| map_error(maps::CALLS, e))?;
        for syscall in Syscall::ALL {
            let per_cpu = calls
                .get(&(syscall as u32), 0)
                .map_err(|e| map_error(maps::CALLS, e))?;
            tally.add_calls(syscall, per_cpu.iter().sum());
        }
        let exes: HashMap<&MapData, ProcessKey, [u8; EXE_LEN]> =
            HashMap::try_from(map(maps::EXES)?).map_err(|e| map_error(maps::EXES, e))?;
        for entry in exes.iter() {
            let (key, path) = entry.map_err(|e| map_error(maps::EXES, e))?;
            let end = path.iter().position(|&b| b == 0).unwrap_or(EXE_LEN);
            tally.set_exe(process(&key), &String::from_utf8_lossy(&path[..end]));
        }
        if let Some((collected, _)) = &self.collected {
            for ((site, frames), counts) in &collected.stacks {
                tally.add_call_stack(*site, frames, counts);
            }
        }
        Ok(tally)
    }
}

/// The key of a slot no process has taken.
const NO_KEY: ProcessKey = ProcessKey {
    pid: 0,
    comm: [0; COMM_LEN],
};

fn process(key: &ProcessKey) -> Process {
    Process {
        pid: key.pid,
        comm: comm_string(&key.comm),
    }
}

/// One site's counts summed over the CPUs' copies of a row.
fn site_sum<'a>(per_cpu: impl Iterator<Item = &'a SiteCounts>, site: Site) -> Counts {
    let mut sum = Counts::ZERO;
    per_cpu.for_each(|row| sum.add(&row.sites[site as usize]));
    sum
}

/// Whether the fd at `path` (a /proc/self/fd entry) holds a link to a tracepoint.
fn is_link(path: &std::path::Path) -> bool {
    std::fs::read_link(path).is_ok_and(|target| {
        let target = target.as_os_str().as_encoded_bytes();
        target == b"anon_inode:[perf_event]" || target == b"anon_inode:bpf_link"
    })
}

/// Drops `links` here, while a grandchild process that shares them closes them: it closes
/// its copies of every other fd (no pipe or file of the auditor's stays open), leaves the
/// terminal's session, waits until this process has let go of the links (EOF on a pipe),
/// and exits, the kernel closing the links as it does: the last holder of a link pays for
/// its detaching. Without a fork, the links are closed here, all at once.
fn close_links_in_background<T: Send>(links: Vec<T>) {
    let mut pipe = [0; 2];
    // SAFETY: a valid array for the two fds.
    let piped = unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } == 0;
    let [parted, letting_go] = pipe;
    let others: Vec<libc::c_int> = std::fs::read_dir("/proc/self/fd")
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| !is_link(&entry.path()))
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .filter(|&fd| fd != parted)
                .collect()
        })
        .unwrap_or_default();
    let fork = || {
        // SAFETY: between fork and _exit the children make raw syscalls only (no
        // allocation, no lock), as a child of a multi-threaded process must; `others` was
        // built before.
        match unsafe { libc::fork() } {
            // SAFETY: as above: raw syscalls only, then _exit.
            0 => unsafe {
                if libc::fork() == 0 {
                    libc::setsid();
                    for &fd in &others {
                        libc::close(fd);
                    }
                    let mut byte = 0u8;
                    while libc::read(parted, (&raw mut byte).cast(), 1) < 0 {}
                }
                libc::_exit(0)
            },
            -1 => None,
            child => Some(child),
        }
    };
    match piped.then(fork).flatten() {
        Some(child) => {
            // The child exits at once; the grandchild is the init process's to reap.
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
            drop(links);
            // SAFETY: closing the two pipe fds made above: the grandchild may go on.
            unsafe {
                libc::close(parted);
                libc::close(letting_go);
            }
        }
        None => std::thread::scope(|scope| {
            for link in links {
                scope.spawn(move || drop(link));
            }
        }),
    }
}

fn tracepoint<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut TracePoint, Error> {
    ebpf.program_mut(name)
        .ok_or_else(|| Error::Probe(format!("program {name} is missing from the probe")))?
        .try_into()
        .map_err(|e: ProgramError| Error::Probe(format!("program {name}: {e}")))
}

/// Loads every program, on as many threads as there are CPUs: the verifier's work is
/// CPU-bound, and most of a session's start.
fn load_programs(
    ebpf: &mut Ebpf,
    present: &dyn Fn(&Program) -> bool,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<(), Error> {
    let mut queue = Vec::new();
    for (name, program) in ebpf.programs_mut() {
        let mut attachments = PROGRAMS
            .iter()
            .filter(|known| known.name == name)
            .peekable();
        let Some(known) = attachments.peek() else {
            return Err(Error::Probe(format!(
                "program {name} has no tracepoint to attach to"
            )));
        };
        let name = known.name.as_str();
        // A shared exit is loaded when any of its tracepoints is there.
        if !attachments.any(present) {
            continue;
        }
        let program: &mut TracePoint = program
            .try_into()
            .map_err(|e: ProgramError| Error::Probe(format!("program {name}: {e}")))?;
        queue.push((name, program));
    }
    let queue = std::sync::Mutex::new(queue);
    let next = || queue.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let work = || -> Result<(), Error> {
        while let Some((name, program)) = next() {
            if stop() {
                return Err(Error::Interrupted);
            }
            if let Err(error) = program.load() {
                // The others need not be verified for nothing.
                while next().is_some() {}
                return Err(match error {
                    ProgramError::LoadError {
                        io_error,
                        verifier_log,
                    } => {
                        let log = verifier_log.to_string();
                        Error::Verifier {
                            program: name,
                            error: io_error.to_string(),
                            kept: keep_verifier_log(name, &log),
                            log: log_tail(&log, 25),
                        }
                    }
                    other => Error::Probe(format!("loading program {name}: {other}")),
                });
            }
        }
        Ok(())
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers).map(|_| scope.spawn(work)).collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("a loading thread does not panic"))
    })
}

/// One program's runs (see [`Probe::program_runs`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProgramRuns {
    pub program: &'static str,
    pub runs: u64,
    pub run_time_ns: u64,
}

/// Turns on the kernel's run statistics of BPF programs (`kernel.bpf_stats_enabled`) for
/// as long as the returned descriptor is open. They cost every BPF program of the machine
/// two clock reads per run: for measuring the probe, not for counting.
pub fn enable_run_statistics() -> Result<std::os::fd::OwnedFd, Error> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .map_err(|e| Error::Probe(format!("turning on BPF run statistics: {e}")))
}

/// The kernel's `bpf_prog_info` of the program behind `fd`, from `BPF_OBJ_GET_INFO_BY_FD`
/// (aya 0.14 does not expose `recursion_misses`; the run statistics come with it).
fn program_info(fd: BorrowedFd<'_>) -> std::io::Result<aya_obj::generated::bpf_prog_info> {
    use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};
    // SAFETY: both are plain C structs for which all-zero is a valid value.
    let (mut info, mut attr) = unsafe {
        (
            std::mem::zeroed::<bpf_prog_info>(),
            std::mem::zeroed::<bpf_attr>(),
        )
    };
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = std::mem::size_of::<bpf_prog_info>() as u32;
    attr.info.info = (&raw mut info) as u64;
    // SAFETY: attr names a valid fd and a buffer of info_len bytes that outlives the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_OBJ_GET_INFO_BY_FD as libc::c_int,
            &raw mut attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_without_a_row_make_one_note_for_all_their_sites() {
        let mut tally = Tally::default();
        tally.add_unattributed(Site::PollFdNegative, &Counts::new(3, 9, 0));
        tally.add_unattributed(Site::CloseOk, &Counts::new(2, 0, 0));
        let mut misses = [0; row_miss::COUNT];
        misses[row_miss::TABLE_FULL as usize] = 5;
        let notes: Vec<String> = missed_notes(&tally, &misses).collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("poll.fd_negative 12"), "{}", notes[0]);
        assert!(notes[0].contains("close.ok 2"), "{}", notes[0]);
        assert!(
            notes[0].contains("the table of rows was full"),
            "{}",
            notes[0]
        );
    }

    #[test]
    fn comm_keys_match_the_kernel() {
        assert_eq!(&comm_key("sshd")[..5], b"sshd\0");
        let long = comm_key("a-very-long-program-name");
        assert_eq!(long[15], 0);
        assert_eq!(comm_string(&long), "a-very-long-pro");
    }

    #[test]
    fn failed_reads_are_told() {
        let mut failures = [0; failure::COUNT];
        assert_eq!(failure_notes(&failures).count(), 0);
        failures[failure::FORK_CHILD as usize] = 2;
        let notes: Vec<String> = failure_notes(&failures).collect();
        assert_eq!(
            notes,
            [
                "The probe could not read 2 sched_process_fork records (children of traced \
              processes it may not have followed)."
            ]
        );
    }

    #[test]
    fn the_probe_has_the_programs_the_syscall_table_derives() {
        use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
        assert!(
            !PROBE_ELF.is_empty(),
            "built without the probe: run `cargo xtask setup`, then `cargo xtask test`"
        );
        let elf = object::File::parse(PROBE_ELF).unwrap();
        // Each program is a global function in its section `tracepoint/CATEGORY/EVENT`; a
        // shared exit, attached to several, in `tracepoint`.
        let mut found: Vec<String> = elf
            .symbols()
            .filter(|symbol| symbol.is_global() && symbol.kind() == object::SymbolKind::Text)
            .filter_map(|symbol| {
                let section = elf.section_by_index(symbol.section_index()?).ok()?;
                let attach = section.name().ok()?.strip_prefix("tracepoint")?;
                Some(format!("{} {attach}", symbol.name().ok()?))
            })
            .collect();
        let mut derived: Vec<String> = PROGRAMS
            .iter()
            .map(|p| {
                let shared = SYSCALLS
                    .iter()
                    .any(|info| info.family.shared_exit() == Some(p.name.as_str()));
                match shared {
                    true => format!("{} ", p.name),
                    false => format!("{} /{}/{}", p.name, p.category, p.event),
                }
            })
            .collect();
        found.sort();
        derived.sort();
        derived.dedup();
        assert_eq!(found, derived);
    }
}
