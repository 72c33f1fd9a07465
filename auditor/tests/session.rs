//! Privileged tests of a session's edges: which processes are counted (a reused pid, names
//! of processes and threads), signals at any moment, and exit statuses. They need root and
//! tracefs: `cargo xtask test` runs them (CI runs as root).

#[allow(dead_code, reason = "each test crate uses part of the helpers")]
mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use auditor::{
    tally::Tally,
    trace::{self, Options, Target},
};
use auditor_common::{Counts, Site};
use common::{WORKLOAD, WORKLOAD_COMM, require_privileges};

const AUDITOR: &str = env!("CARGO_BIN_EXE_auditor");

/// Waits for `path` to hold a number, written by a traced shell (once the probe is loaded:
/// seconds, or a minute on an emulated machine).
fn read_pid(path: &std::path::Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs the workload `steps` as pid `pid`, which has exited: the kernel gives out the
/// pid after the one in `ns_last_pid`. Returns false when other processes took it first
/// every time.
fn run_workload_as(pid: u32, steps: &str) -> bool {
    for _ in 0..100 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
        let mut child = Command::new(WORKLOAD).args([steps]).spawn().unwrap();
        let got = child.id();
        assert!(child.wait().unwrap().success());
        if got == pid {
            return true;
        }
    }
    false
}

/// Counts of `site` in `tally`'s rows of processes named `comm`.
fn site_of(tally: &Tally, comm: &str, site: Site) -> Counts {
    let mut total = Counts::ZERO;
    for (process, row_site, counts) in tally.per_process() {
        if process.comm == comm && row_site == site {
            total.add(counts);
        }
    }
    total
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_pid_reused_by_another_process_is_not_counted() {
    require_privileges();
    let dir = tempfile::tempdir().unwrap();
    let (inner, outer) = (dir.path().join("inner"), dir.path().join("outer"));
    // A traced child that exits at once, and a parent that lives on.
    let script = format!(
        "sh -c 'echo $$ > {}'; echo $$ > {}; exec sleep 60",
        inner.display(),
        outer.display()
    );
    let target = Target::Command(vec!["sh".into(), "-c".into(), script.into()]);
    let options = Options {
        target,
        duration: Some(Duration::from_secs(60)),
        status: false,
        empty_programs: false,
        program_runs: false,
        stacks: None,
        metrics: None,
    };
    let (session, reused) = std::thread::scope(|scope| {
        let stranger = scope.spawn(|| {
            let (child, parent) = (read_pid(&inner), read_pid(&outer));
            // The child is gone (its parent went on); an unrelated process gets its pid
            // and polls 1000 times with fd = -1.
            let reused = run_workload_as(child, "poll:1000:1:1");
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(parent as i32),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap();
            reused
        });
        let session = trace::trace(&options).unwrap();
        (session, stranger.join().unwrap())
    });
    assert!(reused, "the kernel never gave the exited child's pid again");
    assert_eq!(
        site_of(
            &session.observation.tally,
            WORKLOAD_COMM,
            Site::PollFdNegative
        ),
        Counts::ZERO,
        "the stranger was counted"
    );
    assert_eq!(
        session.observation.tally.site_total(Site::PollFdNegative),
        Counts::ZERO
    );
}

/// Traces by name while workload `steps` runs, and ends the session with SIGTERM.
fn trace_by_name(comms: &[&str], thread_comms: &[&str], steps: &str) -> trace::Session {
    let names = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
    let target = Target::Processes {
        pids: vec![],
        comms: names(comms),
        thread_comms: names(thread_comms),
    };
    let options = Options {
        target,
        duration: None,
        status: false,
        empty_programs: false,
        program_runs: false,
        stacks: None,
        metrics: None,
    };
    trace::trace_with(&options, || {
        let mut child = Command::new(WORKLOAD)
            .args(steps.split_whitespace())
            .spawn()
            .unwrap();
        assert!(child.wait().unwrap().success());
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).unwrap();
    })
    .unwrap()
}

/// `--comm` matches a process by its name as `ps` shows it (the main thread's), with every
/// thread whatever their own names; `--thread-comm` matches a thread's own name; a name
/// that never ran gets a warning.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn names_match_processes_as_ps_shows_them_and_threads_when_asked() {
    require_privileges();
    let steps = "select:2:-1 thread name:auditor-worker poll:4:10:10 select:1:-1";
    let worker = "auditor-worker";

    let session = trace_by_name(&["auditor-workload", "no-such-program"], &[], steps);
    let both = |session: &trace::Session, comm: &str| {
        (
            site_of(&session.observation.tally, comm, Site::SelectNNegative),
            site_of(&session.observation.tally, comm, Site::PollFdNegative),
        )
    };
    // Every thread counts, under the process's name as ps shows it.
    assert_eq!(
        both(&session, WORKLOAD_COMM),
        (Counts::new(3, 0, 0), Counts::new(40, 0, 0))
    );
    assert_eq!(both(&session, worker), (Counts::ZERO, Counts::ZERO));
    let warnings: Vec<&String> = session
        .observation
        .notes
        .iter()
        .filter(|n| n.starts_with("Warning"))
        .collect();
    assert_eq!(
        warnings,
        ["Warning: no process named `no-such-program` ran during the session."]
    );

    // Only the renamed thread's calls, still under its process's name.
    let session = trace_by_name(&[], &[worker], steps);
    assert_eq!(
        both(&session, WORKLOAD_COMM),
        (Counts::new(1, 0, 0), Counts::new(40, 0, 0))
    );
    assert!(
        session
            .observation
            .notes
            .iter()
            .all(|n| !n.starts_with("Warning"))
    );
}

/// A process that renames itself (prctl PR_SET_NAME, as exec does) is counted under its
/// new name from its next call: `--comm` decides again on every rename, and a started
/// command's calls go to one row per name.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_renamed_process_is_counted_under_its_new_name() {
    require_privileges();
    let renamed = "auditor-renamed";
    let steps = format!("select:2:-1 name:{renamed} poll:4:10:10 name:{WORKLOAD_COMM} select:1:-1");
    let both = |session: &trace::Session, comm: &str| {
        (
            site_of(&session.observation.tally, comm, Site::SelectNNegative),
            site_of(&session.observation.tally, comm, Site::PollFdNegative),
        )
    };
    let (three_selects, forty_entries) = (Counts::new(3, 0, 0), Counts::new(40, 0, 0));

    // Counted while it has the name, not while it has another.
    let session = trace_by_name(&[WORKLOAD_COMM], &[], &steps);
    assert_eq!(both(&session, WORKLOAD_COMM), (three_selects, Counts::ZERO));
    assert_eq!(both(&session, renamed), (Counts::ZERO, Counts::ZERO));
    let session = trace_by_name(&[renamed], &[], &steps);
    assert_eq!(both(&session, WORKLOAD_COMM), (Counts::ZERO, Counts::ZERO));
    assert_eq!(both(&session, renamed), (Counts::ZERO, forty_entries));

    // A started command: every call, under the name it had when it made it.
    let options = Options {
        target: Target::Command(
            std::iter::once(WORKLOAD.into())
                .chain(steps.split_whitespace().map(Into::into))
                .collect(),
        ),
        duration: None,
        status: false,
        empty_programs: false,
        program_runs: false,
        stacks: None,
        metrics: None,
    };
    let session = trace::trace(&options).unwrap();
    assert_eq!(both(&session, WORKLOAD_COMM), (three_selects, Counts::ZERO));
    assert_eq!(both(&session, renamed), (Counts::ZERO, forty_entries));
}

/// Starts `auditor ARGS`, sends it `signal` after `delay`, and returns its exit status,
/// JSON report and how long it took to end after the signal.
/// Whether `pid` has a handler for `signal` (its SigCgt mask in /proc/PID/status).
fn catches(pid: nix::unistd::Pid, signal: nix::sys::signal::Signal) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal as i32 - 1)) != 0)
}

/// Starts `auditor ARGS` and sends it `signal` `delay` after its handler is in place.
fn signal_after(
    args: &[&str],
    signal: nix::sys::signal::Signal,
    delay: Duration,
) -> common::Started {
    let started = common::start(args);
    let pid = nix::unistd::Pid::from_raw(started.child.id() as i32);
    // The moments count from the auditor's first instructions, once its handler is in
    // place: before, the process is still being exec'd (slow on an emulated machine) and
    // a signal's default action is all there is.
    let handling = Instant::now();
    while !catches(pid, signal) {
        assert!(
            handling.elapsed() < Duration::from_secs(20),
            "the auditor never handled {signal}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(delay);
    nix::sys::signal::kill(pid, signal).unwrap();
    started
}

fn signalled(
    args: &[&str],
    signal: nix::sys::signal::Signal,
    delay: Duration,
) -> (Option<i32>, serde_json::Value, Duration) {
    common::ended(signal_after(args, signal, delay))
}

/// Ctrl-C while the probe loads, in a format for people: one line on stderr with the
/// status, and no page of empty tables (nor a report file) for a session that counted
/// nothing.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_signal_while_the_probe_loads_is_one_line() {
    use nix::sys::signal::Signal;
    require_privileges();
    let started = signal_after(
        &["trace", "--", "sleep", "60"],
        Signal::SIGINT,
        Duration::from_millis(30),
    );
    let report = started.report_path();
    let output = started.child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr,
        "auditor: Stopped by SIGINT while the probe was being loaded: nothing was counted. \
         The command was not started. No report was written.\n"
    );
    assert!(!report.exists());
}

/// SIGINT or SIGTERM sent to the auditor alone, at any moment of a session (while the probe
/// loads, while it counts), ends it with a report; the command gets the signal too, and
/// the auditor exits with the command's status (128 + the signal), or with 128 + the
/// signal when the command never started.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_signal_at_any_moment_ends_the_session_with_a_report() {
    use nix::sys::signal::Signal;
    require_privileges();
    let args = [
        "trace",
        "--format",
        "json",
        "--duration",
        "60s",
        "--",
        "sleep",
        "60",
    ];
    for (millis, signal) in [
        (30, Signal::SIGTERM),
        (150, Signal::SIGINT),
        (600, Signal::SIGTERM),
        (1500, Signal::SIGINT),
        (4000, Signal::SIGTERM),
    ] {
        let delay = Duration::from_millis(millis);
        let (code, report, took) = signalled(&args, signal, delay);
        assert_eq!(code, Some(128 + signal as i32), "{signal} at {delay:?}");
        assert!(
            took < Duration::from_secs(20),
            "{signal} at {delay:?}: ended {took:?} later"
        );
        let notes = report["notes"].as_array().unwrap();
        let before_attach = notes.iter().any(|n| {
            n.as_str()
                .unwrap()
                .contains("while the probe was being loaded: nothing was counted")
        });
        // Counted calls only once attached; never both. Right after the attach the
        // command may die of the signal before its first call, so a moment there counts
        // neither. The first moment is before the attach everywhere (under QEMU the
        // load takes seconds, so no later moment is sure to be after it).
        let calls = report["calls"].as_object().unwrap();
        assert!(
            !before_attach || calls.is_empty(),
            "{signal} at {delay:?}: {:?}",
            report["calls"]
        );
        if millis == 30 {
            assert!(
                before_attach,
                "{signal} at {delay:?}: {:?}",
                report["notes"]
            );
        }
    }
}

/// A `--duration` that runs out sends the command SIGTERM and waits for it (2 s at most):
/// the auditor exits with the command's status, as `auditor strace` does; a command that
/// outlives the session is named in the notes.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_duration_ends_with_the_commands_status() {
    require_privileges();
    // The probe's start (1 s here, 26 s on 7.2 under TCG), the second, the grace.
    common::assert_duration_endings("trace", Duration::from_secs(60));
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn the_auditor_exits_with_the_commands_status() {
    require_privileges();
    for (script, code, words) in [
        ("exit 0", 0, None),
        ("exit 3", 3, Some("auditor: sh exited with status 3")),
        (
            "kill -SEGV $$",
            139,
            Some("auditor: sh was killed by SIGSEGV"),
        ),
    ] {
        let output = Command::new(AUDITOR)
            .args(["trace", "--format", "json", "--", "sh", "-c", script])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{script}: {stderr}");
        assert!(
            words.is_none_or(|words| stderr.contains(words)),
            "{script}: {stderr}"
        );
        // The report is on stderr, after the words; the command's output keeps stdout.
        assert!(output.stdout.is_empty());
        let report = &stderr[stderr.find('{').unwrap()..];
        let _: serde_json::Value = serde_json::from_str(report).unwrap();
    }
}

/// A user with the probe's capabilities but not root: tracefs is mounted, and the error
/// says it cannot be read (not that it is missing).
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_tracefs_this_user_cannot_read_is_named_as_such() {
    require_privileges();
    common::packages::require("util-linux");
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args([
            "--inh-caps=+bpf,+perfmon",
            "--ambient-caps=+bpf,+perfmon",
            AUDITOR,
        ])
        .args(["trace", "--workload", "select:1:-1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tracefs is mounted at /sys/kernel/tracing, but this user cannot read it"),
        "{stderr}"
    );
}

/// The probe names the executable each process exec'd in its per-process rows.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn per_process_rows_name_the_executable() {
    require_privileges();
    let script = format!("{WORKLOAD} poll:2:4:1; true");
    let report = common::json_report(&[
        "trace".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--per-process".as_ref(),
        "--".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        script.as_ref(),
    ]);
    let rows = report["processes"].as_array().unwrap();
    let workload: Vec<&serde_json::Value> =
        rows.iter().filter(|r| r["comm"] == WORKLOAD_COMM).collect();
    assert!(!workload.is_empty(), "{rows:?}");
    assert!(
        workload.iter().all(|r| r["exe"] == WORKLOAD),
        "{workload:?}"
    );
    assert!(
        rows.iter()
            .filter(|r| r["comm"] == "sh")
            .all(|r| r["exe"].as_str().is_some_and(|exe| exe.ends_with("/sh"))),
        "{rows:?}"
    );
}
