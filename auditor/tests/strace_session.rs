//! `auditor strace` sessions at their edges: a signal sent to the auditor alone, a
//! duration, and exit statuses that say whether strace ran the command at all.

#[allow(dead_code, reason = "each test crate uses part of the helpers")]
mod common;

use std::{
    process::{Child, Command},
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

const AUDITOR: &str = env!("CARGO_BIN_EXE_auditor");

/// A process for strace to attach to, and the poll loop it runs.
fn sleeper() -> Child {
    Command::new(common::WORKLOAD)
        .args(["poll:100000:1:1:0:10"])
        .spawn()
        .unwrap()
}

#[test]
fn a_signal_to_the_auditor_alone_ends_the_command_and_the_session() {
    common::packages::require("strace");
    let child = common::start(&[
        "strace",
        "--format",
        "json",
        "--",
        common::WORKLOAD,
        "poll:100000:1:1:0:10",
    ]);
    std::thread::sleep(Duration::from_millis(800));
    kill(Pid::from_raw(child.child.id() as i32), Signal::SIGTERM).unwrap();
    let (code, report, took) = common::ended(child);
    // The command got SIGTERM, strace said so, and the auditor passes it on.
    assert_eq!(code, Some(128 + libc::SIGTERM));
    assert!(took < Duration::from_secs(20), "{took:?}");
    let polls = report["calls"]["poll"].as_u64().unwrap();
    assert!(polls > 0, "{report}");
    // Every poll had its one fd = -1 entry: the report holds all that strace logged.
    assert_eq!(
        common::json_counts(&report, "poll.fd_negative"),
        auditor_common::Counts::new(polls, 0, 0)
    );
}

#[test]
#[ignore = "attaching needs ptrace rights over another process: run `cargo xtask test` as root"]
fn a_signal_to_the_auditor_alone_detaches_from_pids_and_reports() {
    common::packages::require("strace");
    common::require_privileges();
    let mut target = sleeper();
    let pid = target.id();
    let child = common::start(&["strace", "--format", "json", "-p", &pid.to_string()]);
    common::wait_until_traced(pid);
    std::thread::sleep(Duration::from_millis(300));
    kill(Pid::from_raw(child.child.id() as i32), Signal::SIGINT).unwrap();
    let (code, report, took) = common::ended(child);
    assert_eq!(code, Some(0), "{report}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(report["calls"]["poll"].as_u64().unwrap() > 0, "{report}");
    // strace detached: the process runs on, untraced.
    assert_eq!(target.try_wait().unwrap(), None);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("TracerPid:\t0\n"), "{status}");
    target.kill().unwrap();
    target.wait().unwrap();
}

#[test]
#[ignore = "attaching needs ptrace rights over another process: run `cargo xtask test` as root"]
fn a_duration_ends_an_strace_session() {
    common::packages::require("strace");
    common::require_privileges();
    let mut target = sleeper();
    let pid = target.id().to_string();
    let started = Instant::now();
    let child = common::start(&[
        "strace",
        "--format",
        "json",
        "--duration",
        "700ms",
        "-p",
        &pid,
    ]);
    let (code, report, _) = common::ended(child);
    assert_eq!(code, Some(0), "{report}");
    assert!(started.elapsed() >= Duration::from_millis(700));
    assert!(report["calls"]["poll"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(
        target.try_wait().unwrap(),
        None,
        "the process was left running"
    );
    target.kill().unwrap();
    target.wait().unwrap();
}

/// A planned `--duration` stop ends a started command as `auditor trace` does: with the
/// command's status once it ends, and where it ignores the SIGTERM for longer than the
/// grace, the command is left running, the report says so and the auditor exits 143.
#[test]
fn a_duration_ends_a_started_command_with_its_status() {
    common::packages::require("strace");
    common::assert_duration_endings("strace", Duration::from_secs(5));
}

/// strace's own failures are the auditor's failures (status 1, with strace's message);
/// once strace ran the command, the command's status is the auditor's.
#[test]
fn exit_statuses_say_whether_strace_ran_the_command() {
    common::packages::require("strace");
    let run = |args: &[&str]| {
        let output = Command::new(AUDITOR).args(args).output().unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["strace", "--", "/nonexistent/program"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("strace did not start it"), "{stderr}");
    // pid_max is at most 2^22.
    let (code, stderr) = run(&["strace", "-p", "8388608"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("no process with pid 8388608"), "{stderr}");
    let (code, stderr) = run(&["strace", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("auditor: sh exited with status 3"),
        "{stderr}"
    );
    let (code, stderr) = run(&["strace", "--", "sh", "-c", "kill -SEGV $$"]);
    assert_eq!(code, Some(128 + libc::SIGSEGV), "{stderr}");
    assert!(stderr.contains("was killed by SIGSEGV"), "{stderr}");
    // A usage error has clap's status, which no report shares.
    let (code, _) = run(&["strace", "--no-such-option"]);
    assert_eq!(code, Some(i32::from(auditor::status::USAGE)));
}

/// The report never shares a stream with the traced command's output: stderr when a
/// command is started, the file with `-o`.
#[test]
fn the_report_does_not_share_the_commands_stdout() {
    common::packages::require("strace");
    let script = ["--", "sh", "-c", "echo from-the-command"];
    let output = Command::new(AUDITOR)
        .args(["strace", "--format", "json"])
        .args(script)
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(output.stdout, b"from-the-command\n");
    let report: serde_json::Value = serde_json::from_slice(&output.stderr).unwrap();
    assert_eq!(report["version"], auditor::report::JSON_VERSION);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.json");
    let output = Command::new(AUDITOR)
        .args(["strace", "--format", "json", "-o"])
        .arg(&file)
        .args(script)
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(output.stdout, b"from-the-command\n");
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let _: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    // A path that cannot be created fails before anything runs.
    let output = Command::new(AUDITOR)
        .args(["strace", "-o", "/nonexistent/dir/report.json"])
        .args(script)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty(), "the command ran");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "-o /nonexistent/dir/report.json: cannot create files in /nonexistent/dir: No such \
             file or directory"
        ),
        "{stderr}"
    );
}

/// Per-process rows name the executable each process ran (from its execve).
#[test]
fn per_process_rows_name_the_executable() {
    common::packages::require("strace");
    let report = common::json_report(&[
        "strace".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--per-process".as_ref(),
        "--".as_ref(),
        common::WORKLOAD.as_ref(),
        "poll:2:4:1".as_ref(),
    ]);
    let rows = report["processes"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        assert_eq!(row["comm"], common::WORKLOAD_COMM);
        assert_eq!(row["exe"], common::WORKLOAD, "{row}");
    }
}
