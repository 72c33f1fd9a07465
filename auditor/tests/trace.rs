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
        let session = trace_workload(steps);
        stop.store(true, Ordering::Relaxed);
        session
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

/// select.n_negative, select.n_clamped, select.bitmaps_on_heap, select.fd_not_open,
/// select.zero_timeout and select.word_empty, both ways each, and calls that cannot be
/// decided.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn select_sites_both_ways() {
    assert_workload_exact(
        "select:4:-1 select:3:70 select:2:70:-1 pselect6:5:70:5 pselect6:1:-1 \
         select:2:5000:0:100 pselect6:1:400 select-sparse:2:300 \
                 select-ebadf:6 select-efault:2:9 select-efault:1:-1",
    );
}

/// poll.nfds_over_rlimit, poll.entries_on_heap, poll.zero_timeout, poll.fd_negative and
/// poll.fd_not_open, both ways each.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn poll_sites_both_ways() {
    assert_workload_exact(
        "poll:3:20:2:1 ppoll:4:40:5:3:-1 poll:2:31:0:0:7 poll:1:0:0 ppoll:2:30:0:30 \
                 poll-einval:3 poll-efault:2:5",
    );
}

/// epoll.bad_args and epoll.zero_timeout, both ways each, through all three syscalls.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn epoll_sites_both_ways() {
    assert_workload_exact(
        "epoll_wait:3:4 epoll_pwait:2:1:-1 epoll_pwait2:2:8:5 epoll_pwait2:1:2 \
                 epoll_wait:2:0 epoll_pwait:1:-3 epoll-ebadf:3",
    );
}

/// fget.table_shared: lookups (poll entries, select fds) on a table of its own, then from a
/// second thread.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn fget_table_shared_both_ways() {
    assert_workload_exact(
        "poll:3:8:2 ppoll:1:5:0 select:2:10 thread poll:2:8:0:3 ppoll:1:4:4 pselect6:1:20",
    );
}

/// close.ok: closes that succeed, and closes of fds that are not open (EBADF, before the
/// branch). Its not-taken arm (an open fd whose close fails, e.g. a flush error on NFS)
/// cannot be driven on a local machine.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn close_ok_and_closes_that_never_reach_it() {
    assert_workload_exact("close:5:3");
}

/// Every allocation is followed: 21 through memfd_create, inotify_init1, timerfd_create,
/// signalfd4, epoll_create and pidfd_open add exactly 21 to fd.below_max (and their
/// evaluations of the other fd sites), with eventfd, signalfd, inotify_init,
/// fanotify_init, userfaultfd and pidfd_getfd too.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn every_kind_of_fd_allocation_is_followed() {
    assert_attached_exact(
        "wait memfd_create:4 inotify_init1:4 timerfd_create:3 signalfd4:4 epoll_create:3 \
         pidfd_open:3 eventfd:2 signalfd:1 inotify_init:1 fanotify_init:2 userfaultfd:2 \
         pidfd_getfd:3",
    );
}

/// The FD_PREPARE() sites, both ways where a call can take them: the steps of the strace
/// test of the same name in `ingest.rs` (opens that publish, fail after the fd, fail for
/// the fd; accepts with no connection; FD_PREPARE and FD_ADD users).
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn fd_prepare_sites_both_ways() {
    assert_attached_exact(
        "wait open:5 open-enoent:3 open-emfile:2 accept-eagain:4 eventfd:2 epoll_create:1 \
         userfaultfd:1 pidfd_getfd:2 memfd_create:3 signalfd4:1 inotify_init1:1 timerfd_create:1 \
         close:2:0",
    );
}

/// Errors on either side of the allocation, as the kernel orders them: accept4 of a TCP
/// socket that does not listen (the fd first, then EINVAL) and with a flag it refuses
/// (EINVAL, no fd); socketpair of a type AF_UNIX refuses (both fds, then EINVAL); openat2
/// with O_CREAT and RESOLVE_CACHED (EAGAIN from build_open_flags, no fd); open of an
/// empty name from pages not yet mapped, which the probe reads only at exit (ENOENT, no
/// fd).
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn errors_before_and_after_the_allocation() {
    assert_attached_exact(
        "wait accept-einval:3 accept-badflags:2 socketpair-badtype:2 openat2-cached:2 \
         open-unmapped:3 open:1",
    );
}

/// openat2.size_too_small, openat2.size_too_big and open.bad_flags, both ways each: opens
/// build_open_flags takes and refuses (O_CREAT | O_DIRECTORY), openat2 of sizes 24, 12,
/// 8192 and 32 (whose flags test is undecided: the kernel copies bytes the probe does
/// not read), and with a mode but no O_CREAT; refused calls allocate nothing.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn open_checks_both_ways() {
    assert_attached_exact(OPEN_CHECKS);
}

/// fchmodat.bad_flags both ways: chmod and fchmodat (no flags), fchmodat2 with flags it
/// takes and refuses; in a child too.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn fchmodat_flags_both_ways() {
    require_privileges();
    auditor::tracefs::ensure_mounted().unwrap();
    if auditor::tracefs::has_event("syscalls", "sys_enter_fchmodat2") {
        assert_workload_exact("chmod:3 fchmodat2:5:2 fork fchmodat2:2:1");
    } else {
        // Before 6.6 there is no fchmodat2: chmod alone reaches the test, never taken.
        eprintln!("this kernel has no fchmodat2: chmod alone");
        assert_workload_exact("chmod:3 fork chmod:2");
    }
}

/// fd.past_nr_open and fd.rounded_past_nr_open both ways, with fs.nr_open lowered to 1000
/// (no power of two) for the test: a table filled at 512 grows to 960, not 1024; one
/// filled at 970 cannot grow (cut to 960, too small: EMFILE); an fd of 1005 is past
/// fs.nr_open (EMFILE); and dup3.expand_failed taken, with the same growth's tests: a dup2
/// onto 970 (cut to 960) and onto 1005 (EBADF); and a fork's copy of the table of 576
/// fds (1024, cut to 960; a pid target's child is not followed).
/// RLIMIT_NOFILE is raised to 2048 so that the limit is not what refuses them.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn growth_past_fs_nr_open_both_ways() {
    require_privileges();
    common::raise_nofile(2048);
    let _lowered = common::NrOpenLowered::to(1000);
    assert_attached_exact(
        "wait dupfd:1:512 dupfd-emfile:1:970 dupfd-emfile:1:1005 dup2-emfile:3:970 \
         dup2-emfile:2:1005 fork",
    );
}

/// A fork copies the table (`dup_fd`): one whose open fds reach past the 64 it embeds is
/// allocated as a growth is (fd.rounded_past_nr_open and fd.fdtable_too_large not taken
/// here, taken past fs.nr_open in `growth_past_fs_nr_open_both_ways`), from a thread too;
/// the thread's clone3 shares the table and copies nothing; unshare(CLONE_FILES) copies a
/// shared one.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_forked_table_is_copied_as_it_grows() {
    assert_attached_exact("wait dupfd:1:100 fork");
    assert_attached_exact("wait dupfd:1:300 thread fork");
    // unshare(CLONE_FILES) copies only a shared table: not the first, the thread's.
    assert_attached_exact("wait dupfd:1:100 unshare-files thread unshare-files read:1");
}

/// epoll_ctl.watches_exhausted and epoll_ctl.too_many_paths: adds within the quota,
/// nested or not (neither taken), and the adds past 500 wake-up paths of depth 1 from one
/// eventfd (EINVAL: unreadable, as the return does not tell it from earlier tests').
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn epoll_ctl_sites_both_ways() {
    assert_attached_exact(EPOLL_CTL_STEPS);
}

/// The steps of the tests of epoll_ctl's sites (the strace one is in `ingest.rs`).
const EPOLL_CTL_STEPS: &str = "wait epoll_ctl:5 epoll-paths:502 epoll_ctl:2 epoll-paths:4";

/// fget.light_path_only, fget.rcu_no_file, fget.rcu_path_only, fdget_pos.file,
/// fdput.cloned, close.not_path_only and fcntl.path_only, both ways each: reads of open
/// fds, of O_PATH ones and of closed ones, with the table the process's own and then
/// shared with a thread; fcntl and close of O_PATH fds (and of others, in `close`).
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn fd_state_sites_both_ways() {
    assert_attached_exact(
        "wait read:2 opath:3 read-closed:2 close:2:1 thread read:3 opath:2 read-closed:4",
    );
}

/// The steps of the tests of the open checks (the strace one is in `ingest.rs`).
const OPEN_CHECKS: &str = "wait open:3 open-badflags:2 openat2:2:24 openat2:3:12 openat2:1:8192 \
                           openat2:1:32 openat2-badmode:2 openat2-emptypath:2";

/// dup2.same_fd and dup3.same_fd, both ways each: dup2 of an fd onto itself (returned at
/// once) and onto another (on to ksys_dup3, not taken there), dup3 onto itself (EINVAL),
/// onto another, and with a flag refused before the fds are compared; dup3.oldfd_not_open
/// both ways (dup2 of a closed fd) and dup3.expand_failed not taken; in a child too.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn dup_sites_both_ways() {
    assert_workload_exact(
        "dup2:7:3 dup3:9:4:2 dup2-closed:3 fork dup2:2:2 dup3:3:0:3 dup2-closed:1",
    );
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn undecidable_calls_are_counted_as_unreadable() {
    assert_workload_exact("poll-efault:4:100 select-efault:3:-1 select-efault:2:7 poll:2:8:1");
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

/// `--pid P` where P's main thread has exited and another thread runs on: P is still a
/// process, counted until its last thread ends.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn pid_target_whose_main_thread_exited_is_counted_until_its_last_thread_ends() {
    assert_attached_exact("leader-exit wait select:3:-1 poll:5:8:8 ppoll:2:4:1 close:0:2");
}

/// fd.below_max, fd.fast_path, fd.table_full and fd.emfile on a real sequence: 200 opens
/// (the table grows from 128 to 256 and 512), scattered closes, opens that refill the
/// holes, F_DUPFD above next_fd, dup, opens that fail after allocating, opens past
/// RLIMIT_NOFILE (EMFILE). The workload's own oracle
/// of the table gives the counts.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn fd_allocation_sequence_matches_the_model() {
    assert_attached_exact(
        "wait open:200 close-fd:70 close-fd:71 close-fd:130 close-fd:199 close-fd:260 open:6 \
         dupfd:2:300 dup:3 open-enoent:2 close:2:0 open-emfile:3 open:1 \
         accept-eagain:3 open:1 pipe:40 socketpair:2 close-fd:3 pipe:1",
    );
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
