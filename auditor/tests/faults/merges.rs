//! Merges at the edges: sums at the top of u64, reports whose runs overlap in part, reports
//! with no runs, counts that make a verdict's search long. Each is refused with the file
//! named, or rendered promptly; nothing wraps.

use std::{
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use auditor_common::Counts;

use crate::common::{fixture, json_counts};

const AUDITOR: &str = env!("CARGO_BIN_EXE_auditor");

/// `auditor ARGS`, killed if it runs past 30 s (a merge that spins fails, not hangs). Its
/// output is read while it runs: a report larger than a pipe's buffer would block it.
fn auditor(args: &[&std::ffi::OsStr]) -> Output {
    let mut child = Command::new(AUDITOR)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).unwrap();
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("auditor {args:?} ran past 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn os(text: &str) -> &std::ffi::OsStr {
    text.as_ref()
}

/// The JSON report of `ingest LOG`, as a value to edit.
fn ingested(log: &str) -> serde_json::Value {
    let log = fixture(log);
    let output = auditor(&[
        "ingest".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        log.as_os_str(),
    ]);
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `report` saved in `dir` as `name`.
fn save(dir: &Path, name: &str, report: &serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(report).unwrap()).unwrap();
    path
}

/// `report` with one process row of `site` holding `counts` (taken, not taken) instead of
/// its own rows of that site.
fn with_row(mut report: serde_json::Value, site: &str, counts: (u64, u64)) -> serde_json::Value {
    let rows = report["processes"].as_array_mut().unwrap();
    rows.retain(|row| row["site"] != site);
    rows.push(serde_json::json!({
        "pid": 7, "comm": "edge", "site": site,
        "taken": counts.0, "not_taken": counts.1, "unreadable": 0,
    }));
    report
}

/// `auditor report FILES --format json`.
fn report(files: &[&Path]) -> Output {
    let mut args = vec![os("report")];
    args.extend(files.iter().map(|file| file.as_os_str()));
    args.extend([os("--format"), os("json")]);
    auditor(&args)
}

#[track_caller]
fn refused(output: &Output, says: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    for said in says {
        assert!(stderr.contains(said), "`{said}` not in {stderr}");
    }
    assert!(output.stdout.is_empty());
}

#[test]
fn sums_past_u64_are_refused_never_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let base = ingested("ssh.log");
    let near_top = save(
        dir.path(),
        "near-top.json",
        &with_row(base.clone(), "poll.fd_negative", (u64::MAX - 5, 0)),
    );
    let ten = save(
        dir.path(),
        "ten.json",
        &with_row(ingested("ssh.log"), "poll.fd_negative", (10, 0)),
    );
    let output = report(&[&near_top, &ten]);
    refused(
        &output,
        &["ten.json", "poll.fd_negative", "18446744073709551620"],
    );
    // Within one file: the arms fit, their total does not.
    let arms = save(
        dir.path(),
        "arms.json",
        &with_row(base.clone(), "close.ok", (u64::MAX, 1)),
    );
    refused(&report(&[&arms]), &["arms.json", "close.ok"]);
    // The calls too.
    let mut calls = base.clone();
    calls["calls"]["poll"] = u64::MAX.into();
    calls["calls"]["close"] = 1.into();
    let calls = save(dir.path(), "calls.json", &calls);
    refused(&report(&[&calls]), &["calls.json", "calls"]);
}

#[test]
fn counts_near_the_top_are_judged_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let half = u64::MAX / 2 - 1;
    let near_top = save(
        dir.path(),
        "near-top.json",
        &with_row(ingested("ssh.log"), "poll.fd_negative", (half, half)),
    );
    let started = Instant::now();
    let output = report(&[&near_top]);
    assert!(output.status.success(), "{output:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        json_counts(&json, "poll.fd_negative"),
        Counts::new(half, half, 0)
    );
}

#[test]
fn runs_read_twice_in_part_are_refused_and_no_runs_is_no_report() {
    let dir = tempfile::tempdir().unwrap();
    let a = save(dir.path(), "a.json", &ingested("ssh.log"));
    let b = save(dir.path(), "b.json", &ingested("python-asyncio.log"));
    let ab = dir.path().join("ab.json");
    let output = auditor(&[
        os("report"),
        a.as_os_str(),
        b.as_os_str(),
        os("--format"),
        os("json"),
        os("-o"),
        ab.as_os_str(),
    ]);
    assert!(output.status.success(), "{output:?}");
    // A, then A and B together: A's run would count twice.
    refused(
        &report(&[&a, &ab]),
        &[
            "ab.json holds runs already read from",
            "a.json",
            "strace log",
            "ssh.log",
        ],
    );
    // A and B together, then A: all of A's runs were read, so it is counted once.
    let output = report(&[&ab, &a]);
    assert!(output.status.success(), "{output:?}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        json["notes"].as_array().unwrap().iter().any(|note| note
            .as_str()
            .unwrap()
            .contains("holds only runs already read")),
        "{}",
        json["notes"]
    );
    // No runs: not a report a session saved, first on the line or not.
    let mut empty = ingested("ssh.log");
    empty["runs"] = serde_json::json!([]);
    let empty = save(dir.path(), "empty.json", &empty);
    for files in [[empty.as_path(), &a], [&a, &empty]] {
        refused(&report(&files), &["empty.json", "no runs"]);
    }
}

/// An input without end (a device of zeros, a pipe of white space) is refused at the bound
/// on a report's size: never read into memory whole.
#[test]
fn endless_inputs_are_refused_within_a_bound() {
    refused(
        &report(&[Path::new("/dev/zero")]),
        &["/dev/zero", "larger than the largest report"],
    );
    let mut child = Command::new(AUDITOR)
        .args(["report", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let spaces = vec![b' '; 1 << 20];
        while std::io::Write::write_all(&mut stdin, &spaces).is_ok() {}
    });
    let output = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    refused(
        &output,
        &["/dev/stdin", "larger than the largest report", "512 MiB"],
    );
}
