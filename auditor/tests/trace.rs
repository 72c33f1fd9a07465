//! Privileged end-to-end tests: the probe against workloads that issue exactly known
//! syscalls. They need root and tracefs: `cargo xtask test` runs them (CI runs as root).

#[allow(dead_code, reason = "each test crate uses part of the helpers")]
mod common;

use std::{
    io::Write,
    process::{Command, Stdio},
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use auditor::{
    Error,
    trace::{self, Options, Target},
};
use common::{Start, WORKLOAD, assert_exact, require_privileges, workload_command};

fn options(target: Target) -> Options {
    Options {
        target,
        duration: None,
        status: false,
        empty_programs: false,
        program_runs: false,
        stacks: None,
        metrics: None,
    }
}

/// Traces workload `steps` from its exec and checks every count exactly.
fn assert_workload_exact(steps: &str) {
    require_privileges();
    let session = trace_workload(steps);
    assert_command_exact(&session, steps);
}

/// The started workload's counts in `session` are exactly what `steps` make.
fn assert_command_exact(session: &trace::Session, steps: &str) {
    let pid = session.command_pid.unwrap();
    assert_exact(&session.observation.tally, steps, pid, Start::Exec);
}

fn trace_workload(steps: &str) -> trace::Session {
    let session = trace::trace(&options(Target::Command(workload_command(steps)))).unwrap();
    assert_eq!(
        session.command_status,
        Some(auditor::status::Ending::Exited(0)),
        "the workload failed"
    );
    session
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn mixed_workload_is_counted_exactly_per_process() {
    require_privileges();
    let steps = "poll:50:1024:17 select:10:-1 pselect6:25:5 fork poll:20:64:3 ppoll:7:31:31";
    // The auditor's own polls (this test process) and an unrelated process's polls run
    // meanwhile; neither may be counted.
    let stop = AtomicBool::new(false);
    let mut unrelated = Command::new(WORKLOAD)
        .args(["poll:20000:16:8"])
        .spawn()
        .unwrap();
    let session = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let mut fds = [libc::pollfd {
                    fd: -1,
                    events: 0,
                    revents: 0,
                }];
                // SAFETY: one valid entry.
                unsafe { libc::poll(fds.as_mut_ptr(), 1, 1) };
            }
        });
        // Stops the poller however the session ends: a panic in it (a probe the kernel
        // refuses) would otherwise leave the scope waiting for the poller for ever.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        trace_workload(steps)
    });
    assert!(unrelated.wait().unwrap().success());
    assert_command_exact(&session, steps);
}

/// The workload `cargo xtask run` audits (the README quotes its counts at 80 columns).
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn the_default_workload_is_counted_exactly() {
    assert_workload_exact(auditor::workload::DEFAULT);
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn poll_arrays_of_every_size_are_counted_whole() {
    // Around the kernel's stack array (30 entries), its kmalloc chunks (510) and the
    // probe's own 256-entry reads.
    assert_workload_exact(
        "poll:3:1:1 poll:3:30:0 ppoll:3:31:31 poll:3:255:1 poll:3:256:2 poll:3:257:3 \
                 poll:3:510:5 ppoll:3:511:100 poll:3:1024:1 ppoll:3:4096:4095 poll:1:16000:7",
    );
}

/// Every family's cases (`workload::cases`: together they take every site both ways, as
/// the oracle checks), each counted exactly by the probe: from its exec, or attached to
/// after its set-up where it starts with `wait` (fd allocations are then exact too).
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn every_case_is_counted_exactly() {
    require_privileges();
    common::run_cases(|case| {
        if case.attached() {
            assert_attached_exact(case.steps);
        } else {
            assert_workload_exact(case.steps);
        }
    });
}

/// Traces workload `steps` (which must start with `wait`) by pid, attached after its
/// set-up, and checks every count exactly, fd allocations included.
fn assert_attached_exact(steps: &str) {
    require_privileges();
    let mut child = Command::new(WORKLOAD)
        .args(steps.split_whitespace())
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    // Attach only once set-up is over: every live thread of the workload is blocked in
    // the read of `wait` (syscall 0 in its /proc/PID/task/TID/syscall); a main thread
    // that exited (`leader-exit`) is a zombie until the process ends.
    let live_threads = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|dir| {
                dir.filter_map(|entry| Some(entry.ok()?.path()))
                    .filter(|task| {
                        std::fs::read_to_string(task.join("stat"))
                            .is_ok_and(|stat| !stat.rsplit_once(") ").unwrap().1.starts_with('Z'))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let blocked_in_read = || {
        let threads = live_threads();
        !threads.is_empty()
            && threads.iter().all(|task| {
                std::fs::read_to_string(task.join("syscall")).is_ok_and(|s| s.starts_with("0 "))
            })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !blocked_in_read() {
        assert!(
            std::time::Instant::now() < deadline,
            "the workload never waited"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let max_fds = common::fd_table_size(&live_threads()[0]);
    let nr_open = common::nr_open();
    let target = Target::Processes {
        pids: vec![pid],
        comms: vec![],
        thread_comms: vec![],
    };
    // The session ends by itself when the process's last thread exits (long before this).
    let limit = Duration::from_secs(60);
    let mut options = options(target);
    options.duration = Some(limit);
    let session = trace::trace_with(&options, || stdin.write_all(b"go\n").unwrap()).unwrap();
    assert!(
        session.observation.elapsed < limit,
        "the session did not end with the process"
    );
    assert!(child.wait().unwrap().success());
    assert_exact(
        &session.observation.tally,
        steps,
        pid,
        Start::Attached { max_fds, nr_open },
    );
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn pid_target_counts_its_threads_and_ends_with_it() {
    assert_attached_exact("wait select:3:-1 thread poll:5:64:8 pselect6:4:9");
}

/// A poll already waiting when the session attaches is counted whole at its exit: poll is
/// decided there alone, from the registers the task entered the kernel with.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_poll_waiting_when_the_session_attaches_is_counted_whole() {
    require_privileges();
    common::packages::require("python3");
    // One poll of stdin with no timeout, then the interpreter's exit (which polls no more).
    let script = "import select; p = select.poll(); p.register(0, select.POLLIN); p.poll()";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let in_poll = || {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .is_ok_and(|call| call.starts_with(&format!("{} ", libc::SYS_poll)))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !in_poll() {
        assert!(std::time::Instant::now() < deadline, "python never polled");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut stdin = child.stdin.take().unwrap();
    let mut options = options(Target::Processes {
        pids: vec![pid],
        comms: vec![],
        thread_comms: vec![],
    });
    options.duration = Some(Duration::from_secs(60));
    let session = trace::trace_with(&options, || stdin.write_all(b"x").unwrap()).unwrap();
    assert!(child.wait().unwrap().success());
    let tally = &session.observation.tally;
    let polls: Vec<_> = tally.calls().filter(|(name, _)| *name == "poll").collect();
    assert_eq!(polls, [("poll", 1)]);
    use auditor_common::{Counts, Site};
    for (site, counts) in [
        (Site::PollNfdsOverRlimit, Counts::new(0, 1, 0)),
        (Site::PollEntriesOnHeap, Counts::new(0, 1, 0)),
        // No timeout: it waited.
        (Site::PollZeroTimeout, Counts::new(0, 1, 0)),
        (Site::PollFdNegative, Counts::new(0, 1, 0)),
        (Site::PollFdNotOpen, Counts::new(0, 1, 0)),
    ] {
        assert_eq!(tally.site_total(site), counts, "{site:?}");
    }
}

/// `--pid P` where P's main thread has exited and another thread runs on: P is still a
/// process, counted until its last thread ends.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn pid_target_whose_main_thread_exited_is_counted_until_its_last_thread_ends() {
    assert_attached_exact("leader-exit wait select:3:-1 poll:5:8:8 ppoll:2:4:1 close:0:2");
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn comm_target_counts_processes_by_name_until_signalled() {
    require_privileges();
    let steps = "select:6:-1 poll:4:10:10";
    let mut pid = 0;
    let target = Target::Processes {
        pids: vec![],
        // The kernel keeps 15 bytes of a name; a longer one matches on those.
        comms: vec!["auditor-workload".into()],
        thread_comms: vec![],
    };
    let session = trace::trace_with(&options(target), || {
        let mut child = Command::new(WORKLOAD)
            .args(steps.split_whitespace())
            .spawn()
            .unwrap();
        pid = child.id();
        assert!(child.wait().unwrap().success());
        // SIGTERM ends a session that has no end of its own and still reports.
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).unwrap();
    })
    .unwrap();
    assert_exact(&session.observation.tally, steps, pid, Start::Exec);
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn duration_ends_a_session_and_stops_the_command() {
    require_privileges();
    let mut target = options(Target::Command(workload_command("sleep:10000 select:1:-1")));
    target.duration = Some(Duration::from_millis(300));
    let session = trace::trace(&target).unwrap();
    // The workload slept the whole time and was sent SIGTERM: nothing but the dynamic
    // loader's and set-up's calls was counted (how many opens depends on the loader's
    // search path; set-up tests which fds are open with fcntl).
    let calls: Vec<(&str, u64)> = session.observation.tally.calls().collect();
    assert!(
        calls
            .iter()
            .all(|(name, _)| ["close", "read", "openat", "dup2", "fcntl"].contains(name)),
        "{calls:?}"
    );
    assert!(session.observation.elapsed >= Duration::from_millis(300));
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_command_that_cannot_run_is_a_clear_error() {
    require_privileges();
    let error = trace::trace(&options(Target::Command(vec![
        "/nonexistent/program".into(),
    ])))
    .unwrap_err();
    assert!(
        matches!(&error, Error::Spawn { why, .. } if why.contains("No such file")),
        "{error}"
    );
}

#[test]
fn a_missing_pid_is_a_clear_error() {
    // pid_max is at most 2^22: this pid cannot exist.
    let target = Target::Processes {
        pids: vec![1 << 23],
        comms: vec![],
        thread_comms: vec![],
    };
    let error = trace::trace(&options(target)).unwrap_err();
    assert!(
        matches!(error, Error::NoSuchProcess(pid) if pid == 1 << 23),
        "{error}"
    );
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn tracefs_is_mounted_when_missing() {
    require_privileges();
    let events = std::path::Path::new(auditor::tracefs::MOUNT_POINT).join("events");
    if events.is_dir() {
        nix::mount::umount2(
            auditor::tracefs::MOUNT_POINT,
            nix::mount::MntFlags::MNT_DETACH,
        )
        .unwrap();
    }
    assert!(!events.is_dir());
    let steps = "poll:2:4:1";
    let session = trace_workload(steps);
    assert!(events.is_dir());
    assert_command_exact(&session, steps);
}

/// The cross-check: one workload traced by the probe and by strace at once gives identical
/// counts, per process (pid and command name) and per site, for every site a log can decide.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn probe_and_strace_agree_on_one_run() {
    use auditor::source::strace::replay::{self, Replay};
    require_privileges();
    let steps = "poll:3:40:4:2 ppoll:2:5:1:1:3 select:2:-1 pselect6:2:70 select-ebadf:1 \
                 epoll_wait:2:1 epoll_pwait:1:0 epoll-ebadf:1 close:2:1 dup2:3:1 dup3:4:1:1 \
                 fork poll:1:8:2 select:1:10 thread poll:2:5:1 close:1:0 dup2:2:1";
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cross.log");
    let mut argv: Vec<std::ffi::OsString> = ["strace", "-f", "-Y", "-v", "-s", "65536", "-o"]
        .iter()
        .map(Into::into)
        .collect();
    argv.push(log.clone().into());
    argv.extend(workload_command(steps));
    let session = trace::trace(&options(Target::Command(argv))).unwrap();

    let mut logged = Replay::default();
    logged.ingest("cross.log", std::fs::File::open(&log).unwrap(), None);
    assert_eq!(logged.unreadable(), 0, "{:?}", logged.notes());
    let from_log = logged.tally();

    // Per process of the log, every site a log decides. The probe also sees strace's own
    // calls and those its child makes before exec, which strace does not trace: only the
    // workload's program counts (by the name both sources give it).
    let per_process = |tally: &auditor::tally::Tally| {
        let mut rows = std::collections::BTreeMap::new();
        for (process, site, counts) in tally.per_process() {
            if replay::decides(site) && process.comm == common::WORKLOAD_COMM {
                let row: &mut auditor_common::Counts = rows
                    .entry((process.pid, process.comm.clone(), site))
                    .or_default();
                row.add(counts);
            }
        }
        rows
    };
    let logged_rows = per_process(&from_log);
    let pids: std::collections::BTreeSet<u32> =
        logged_rows.keys().map(|(pid, _, _)| *pid).collect();
    // The child's thread counts for the child, as the probe counts it.
    assert_eq!(pids.len(), 2, "the workload and its child: {pids:?}");
    let probed_rows: std::collections::BTreeMap<_, _> = per_process(&session.observation.tally)
        .into_iter()
        .filter(|((pid, _, _), _)| pids.contains(pid))
        .collect();
    type Rows =
        std::collections::BTreeMap<(u32, String, auditor_common::Site), auditor_common::Counts>;
    let nonzero = |rows: Rows| {
        rows.into_iter()
            .filter(|(_, c)| c.total() > 0)
            .collect::<Vec<_>>()
    };
    let (probed, logged) = (nonzero(probed_rows), nonzero(logged_rows));
    let differences: Vec<String> = probed
        .iter()
        .filter(|row| !logged.contains(row))
        .map(|row| format!("probe {row:?}"))
        .chain(
            logged
                .iter()
                .filter(|row| !probed.contains(row))
                .map(|row| format!("log {row:?}")),
        )
        .collect();
    assert!(differences.is_empty(), "{differences:#?}");
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn all_processes_but_the_auditor() {
    require_privileges();
    let steps = "poll:4:16:3 select:2:-1";
    let mut pid = 0;
    let target = options(Target::All);
    let session = trace::trace_with(&target, || {
        // The auditor's own poll (this process) must not count.
        let mut fds = [libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        }];
        // SAFETY: one valid entry.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
        let mut child = Command::new(WORKLOAD)
            .args(steps.split_whitespace())
            .spawn()
            .unwrap();
        pid = child.id();
        assert!(child.wait().unwrap().success());
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).unwrap();
    })
    .unwrap();
    let me = std::process::id();
    assert!(
        session
            .observation
            .tally
            .per_process()
            .all(|(process, _, _)| process.pid != me)
    );
    // The workload's own rows, after its exec, are exact (other processes ran too).
    let expected = auditor::workload::expected(&auditor::workload::parse(steps).unwrap());
    for site in [
        auditor_common::Site::PollFdNegative,
        auditor_common::Site::SelectNNegative,
    ] {
        let mut got = auditor_common::Counts::ZERO;
        for (process, row_site, counts) in session.observation.tally.per_process() {
            if process.pid == pid && process.comm == common::WORKLOAD_COMM && row_site == site {
                got.add(counts);
            }
        }
        assert_eq!(got, expected[0].site(site), "{site:?}");
    }
}

/// The probe reads each syscall's record as `SysEnter<N>` / `SysExit`, its arguments by the
/// names the syscall table gives them: every one of them lies where this kernel's format
/// files put it, and the table names every argument the record has.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn the_syscall_records_are_laid_out_as_the_format_files_say() {
    use auditor::tracefs;
    use auditor_common::syscalls::{SYSCALLS, SysEnter, SysExit};
    require_privileges();
    tracefs::ensure_mounted().unwrap();
    let args_start = std::mem::offset_of!(SysEnter<1>, args);
    // A syscall newer than the running kernel has no records to check.
    let present = |info: &&auditor_common::syscalls::SyscallInfo| {
        let present = tracefs::has_event("syscalls", &format!("sys_enter_{}", info.name));
        if !present {
            eprintln!("this kernel has no {} syscall", info.name);
        }
        present
    };
    for info in SYSCALLS
        .iter()
        .filter(|info| info.enter.exists())
        .filter(present)
    {
        let event = format!("sys_enter_{}", info.name);
        for (index, name) in info.args.iter().enumerate() {
            let offset = tracefs::field_offset("syscalls", &event, name).unwrap();
            assert_eq!(offset, args_start + 8 * index, "{event} {name}");
        }
        let format = std::fs::read_to_string(format!(
            "{}/events/syscalls/{event}/format",
            tracefs::MOUNT_POINT
        ))
        .unwrap();
        // The common fields, `__syscall_nr`, then the arguments; 7.2 adds copies of user
        // buffers after them (`__data_loc` fields), which the probe does not read.
        let fields: Vec<&str> = format
            .lines()
            .filter(|l| l.trim().starts_with("field:"))
            .collect();
        let values = fields.iter().filter(|l| !l.contains("__data_loc")).count();
        assert_eq!(values, 5 + info.args.len(), "{event}: {format}");
        assert!(
            fields[values..].iter().all(|l| l.contains("__data_loc")),
            "{event}: user-buffer copies come after the arguments: {format}"
        );
    }
    for info in SYSCALLS
        .iter()
        .filter(|info| info.exit.exists())
        .filter(present)
    {
        let event = format!("sys_exit_{}", info.name);
        let offset = tracefs::field_offset("syscalls", &event, "ret").unwrap();
        assert_eq!(offset, std::mem::offset_of!(SysExit, ret), "{event}");
    }
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn program_runs_are_the_kernels_run_statistics_of_the_session() {
    require_privileges();
    let steps = "poll:300:1:0";
    let session = trace::trace(&Options {
        program_runs: true,
        ..options(Target::Command(workload_command(steps)))
    })
    .unwrap();
    let runs = session.program_runs.expect("asked for");
    let of = |name: &str| runs.iter().find(|r| r.program == name).unwrap();
    // The workload's own polls, and whatever else polled or ppolled meanwhile: poll is
    // decided at its exit alone, in the exit poll and ppoll share (listed once).
    assert!(runs.iter().all(|r| r.program != "poll_enter"), "{runs:?}");
    assert_eq!(runs.iter().filter(|r| r.program == "polls_exit").count(), 1);
    let poll = of("polls_exit");
    assert!(poll.runs >= 300, "{poll:?}");
    assert!(poll.run_time_ns > 0, "{poll:?}");
    // Without the option the statistics are neither turned on nor read.
    assert!(trace_workload("poll:1:1:0").program_runs.is_none());
}
