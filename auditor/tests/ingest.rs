//! The strace source: `auditor ingest` on strace logs and `auditor strace` running strace.
//! The counts of a workload run under strace equal the workload's hand-worked expectations
//! for every site a log can decide, and what cannot be read is reported. Needs no
//! privileges (strace is on the machine image).

#[allow(dead_code, reason = "each test crate uses part of the helpers")]
mod common;

use std::process::Command;

use auditor::workload::{self, Expected};
use auditor_common::{Counts, Site};
use common::{WORKLOAD, json_counts, json_report, json_site, loader_counted, loader_libraries};

const AUDITOR: &str = env!("CARGO_BIN_EXE_auditor");

/// The sites a log decides (the others need the task's fd table).
fn logged(site: Site) -> bool {
    auditor::source::strace::replay::decides(site)
}

fn strace(steps: &str, log: &std::path::Path) {
    let status = Command::new("strace")
        .args(["-f", "-v", "-s", "65536", "-o"])
        .arg(log)
        .arg(WORKLOAD)
        .args(steps.split_whitespace())
        .status()
        .expect("strace is installed");
    assert!(status.success());
}

const STEPS: &str = "poll:3:40:4:2 ppoll:2:5:1:1:3 select:2:-1 pselect6:2:70 select-ebadf:1 \
                     epoll_wait:2:1 epoll_pwait:1:0 close:2:1 poll-efault:1:3 fork poll:1:8:2";

/// The JSON report of `auditor ingest` on a log of workload `steps` under strace.
fn ingested(steps: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("workload.log");
    strace(steps, &log);
    json_report(&[
        "ingest".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        log.as_ref(),
    ])
}

/// [`ingested`], whose counts must be exactly those of the steps.
fn logged_report(steps: &str) -> serde_json::Value {
    let report = ingested(steps);
    assert_exact_from_strace(&report, steps);
    report
}

#[test]
fn a_workload_log_gives_the_exact_counts() {
    common::packages::require("strace");
    logged_report(STEPS);
}

/// dup2.same_fd and dup3.same_fd, both ways each, from a log: the calls strace prints
/// decide both sites (as the probe's test of the same steps in `trace.rs`).
#[test]
fn dup_sites_both_ways_from_a_log() {
    common::packages::require("strace");
    let report = logged_report("dup2:7:3 dup3:9:4:2 fork dup2:2:2 dup3:3:0:3");
    // 7 + 2 + the set-up's 64 dup2 calls; 3 + 2 onto the same fd.
    assert_eq!(json_counts(&report, "dup2.same_fd"), Counts::new(5, 68, 0));
    // 9 + 3 dup3 calls, 5 refused for their flags first; 4 onto the same fd; and every
    // dup2 of two fds.
    assert_eq!(
        json_counts(&report, "dup3.same_fd"),
        Counts::new(4, 3 + 68, 0)
    );
    // Every dup of two fds found oldfd open and grew no table past fs.nr_open.
    assert_eq!(
        json_counts(&report, "dup3.oldfd_not_open"),
        Counts::new(0, 71, 0)
    );
}

/// epoll_ctl's sites from a log: the steps of `trace.rs`'s test.
#[test]
#[ignore = "attaching needs ptrace rights over another process: run `cargo xtask test` as root"]
fn epoll_ctl_sites_from_a_log() {
    common::packages::require("strace");
    let report =
        assert_attached_log_exact("wait epoll_ctl:5 epoll-paths:502 epoll_ctl:2 epoll-paths:4");
    // 5 + 502 + 2 + 4 adds not nested, 500 + 4 nested ones within the limit, 2 refused for
    // their paths (unreadable).
    assert_eq!(
        json_counts(&report, "epoll_ctl.watches_exhausted"),
        Counts::new(0, 1017, 2)
    );
    assert_eq!(
        json_counts(&report, "epoll_ctl.too_many_paths"),
        Counts::new(0, 1017, 2)
    );
}

/// A dup2 of a closed fd fails with EBADF, which a log cannot tell from the limit's or
/// the growth's: unreadable at both of ksys_dup3's later tests (the probe, reading the
/// table, decides them: `trace.rs`).
#[test]
fn a_dup2_of_a_closed_fd_is_unreadable_from_a_log() {
    common::packages::require("strace");
    let report = ingested("dup2-closed:3");
    assert_eq!(
        json_counts(&report, "dup3.oldfd_not_open"),
        Counts::new(0, 64, 3)
    );
    assert_eq!(
        json_counts(&report, "dup3.expand_failed"),
        Counts::new(0, 64, 3)
    );
}

/// The JSON report of `auditor strace OPTIONS -- WORKLOAD STEPS`.
fn strace_report(options: &[&str]) -> serde_json::Value {
    let mut args: Vec<&std::ffi::OsStr> = vec!["strace".as_ref()];
    args.extend(options.iter().map(std::ffi::OsStr::new));
    args.extend(["--format", "json", "--", WORKLOAD].map(std::ffi::OsStr::new));
    args.extend(STEPS.split_whitespace().map(std::ffi::OsStr::new));
    json_report(&args)
}

#[test]
fn auditor_strace_runs_strace_and_counts_the_same() {
    common::packages::require("strace");
    assert_exact_from_strace(&strace_report(&[]), STEPS);
}

#[test]
fn auditor_strace_with_stacks_names_the_code_that_took_the_rare_arm() {
    common::packages::require("strace");
    let report = strace_report(&["--stacks"]);
    // Stacks change no count.
    assert_exact_from_strace(&report, STEPS);
    // Every fd = -1 entry was polled by the workload's own code.
    let site = json_site(&report, "poll.fd_negative");
    let callers = site["rare_callers"].as_array().unwrap();
    assert_eq!(callers.len(), 1, "{callers:?}");
    assert!(
        callers[0]["caller"]
            .as_str()
            .unwrap()
            .starts_with("auditor-workload("),
        "{callers:?}"
    );
    assert_eq!(callers[0]["evaluations"], site["taken"]);
}

/// Every site a log decides has exactly the counts of workload `steps` in `report`.
fn assert_exact_from_strace(report: &serde_json::Value, steps: &str) {
    assert_eq!(report["source"], "strace");
    let mut expected = workload::expected(&workload::parse(steps).unwrap());
    // The dynamic loader's closes and set-up's own, after exec.
    let mut loader = Expected::default();
    loader.closes(loader_libraries() + 2, false);
    expected.push(loader);
    // The dynamic loader's opens depend on the environment (see `loader_counted`).
    for site in Site::ALL
        .into_iter()
        .filter(|&site| logged(site) && !loader_counted(site))
    {
        let mut want = Counts::ZERO;
        expected.iter().for_each(|e| want.add(&e.site(site)));
        let id = site.info().id;
        let got = json_counts(report, id);
        assert_eq!(got, want, "{id}");
    }
}
#[test]
fn unreadable_lines_are_named_and_set_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("bad.log");
    std::fs::write(
        &log,
        "close(3) = 0\n\u{1}\u{2} binary garbage\r\npoll([{fd=3, events=POLLIN}], 1, 0) = 1 ([{fd=3, revents=POLLIN}])\nppoll([{fd=3, eve",
    )
    .unwrap();
    let output = Command::new(AUDITOR)
        .arg("ingest")
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(auditor::status::PARTLY_UNREADABLE.into())
    );
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("bad.log:2: no syscall name"), "{text}");
    assert!(
        text.contains("bad.log:4: the argument list does not close"),
        "{text}"
    );
    // What was read is still counted.
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("close.ok") && l.contains("|     1 |")),
        "{text}"
    );
}

#[test]
fn a_missing_strace_is_a_clear_error() {
    let output = Command::new(AUDITOR)
        .args(["strace", "--", "true"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("strace is not installed"), "{stderr}");
}

/// The JSON report of `auditor strace -p PID` on the workload running `steps` (which
/// start with `wait`), attached once its set-up is over; the counts must be exactly those
/// of the steps, for every site a log decides, fd allocations included.
fn assert_attached_log_exact(steps: &str) -> serde_json::Value {
    use std::io::Write;
    common::require_privileges();
    let mut child = Command::new(WORKLOAD)
        .args(steps.split_whitespace())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Attach once set-up is over: blocked in the read of `wait` (syscall 0).
    let blocked = || {
        std::fs::read_to_string(format!("/proc/{pid}/syscall")).is_ok_and(|s| s.starts_with("0 "))
    };
    while !blocked() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let max_fds = common::fd_table_size(format!("/proc/{pid}").as_ref());
    let auditor = Command::new(AUDITOR)
        .args(["strace", "--format", "json", "-p", &pid.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Let the workload go once strace traces it.
    common::wait_until_traced(pid);
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
    let output = auditor.wait_with_output().unwrap();
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let expected =
        workload::expected_on_table(&workload::parse(steps).unwrap(), max_fds, common::nr_open());
    for site in Site::ALL.into_iter().filter(|&site| logged(site)) {
        let mut want = Counts::ZERO;
        expected.iter().for_each(|e| want.add(&e.site(site)));
        let id = site.info().id;
        assert_eq!(json_counts(&report, id), want, "{id}");
    }
    report
}

/// Every family's cases (`workload::cases`), each counted exactly from strace on every
/// site a log decides: run under strace from its exec, or attached to with `auditor
/// strace -p` after its set-up where it starts with `wait`; but the cases whose counts a
/// log cannot give (`Case::not_in_log`, tested on their own here).
#[test]
#[ignore = "attaching needs ptrace rights over another process: run `cargo xtask test` as root"]
fn every_case_is_counted_exactly_from_strace() {
    common::packages::require("strace");
    common::run_cases(|case| {
        if !case.not_in_log.is_empty() {
            eprintln!("not from a log: {}", case.not_in_log);
        } else if case.attached() {
            assert_attached_log_exact(case.steps);
        } else {
            logged_report(case.steps);
        }
    });
}

#[test]
#[ignore = "attaching needs ptrace rights over another process: run `cargo xtask test` as root"]
fn auditor_strace_attaches_to_a_pid() {
    common::packages::require("strace");
    assert_attached_log_exact("wait poll:3:10:2:1 select:2:-1 close:1:1");
}

/// fchmodat.bad_flags from a log: chmod and fchmodat, never taken (they pass no flags);
/// strace 6.1 does not know fchmodat2, and the report says its calls are not counted.
#[test]
fn fchmodat_flags_from_a_log() {
    common::packages::require("strace");
    let report = ingested("chmod:3 fchmodat2:5:2 fork chmod:1");
    assert_eq!(
        json_counts(&report, "fchmodat.bad_flags"),
        Counts::new(0, 8, 0)
    );
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("fchmodat.bad_flags: the calls of fchmodat2 are not counted"),
        "{notes}"
    );
}

/// openat2.size_too_small, openat2.size_too_big and open.bad_flags, both ways each, from
/// a log: the steps of the allocation family's case `open checks` but 7.2's O_EMPTYPATH.
#[test]
#[ignore = "attaching needs ptrace rights over another process: run `cargo xtask test` as root"]
fn open_checks_both_ways_from_a_log() {
    common::packages::require("strace");
    let report = assert_attached_log_exact(
        "wait open:3 open-badflags:2 openat2:2:24 openat2:3:12 openat2:1:8192 openat2:1:32 \
         openat2-badmode:2",
    );
    assert_eq!(
        json_counts(&report, "openat2.size_too_small"),
        Counts::new(3, 6, 0)
    );
    assert_eq!(
        json_counts(&report, "openat2.size_too_big"),
        Counts::new(1, 5, 0)
    );
    // 3 opens and 2 refused; openat2 of 24 bytes twice, of 32 once (undecided), with a
    // mode twice (refused).
    assert_eq!(json_counts(&report, "open.bad_flags"), Counts::new(4, 5, 1));
}

/// The FD_PREPARE() sites, both ways where a call can take them, from a log: opens that
/// publish their fd, opens of a missing path (the file fails after the fd), opens past
/// RLIMIT_NOFILE (the fd fails), accepts with no connection, FD_PREPARE users (eventfd,
/// epoll_create, userfaultfd, pidfd_getfd) and FD_ADD ones (memfd_create, signalfd4,
/// inotify_init1, timerfd_create); the probe's test of the same kind is in `trace.rs`.
#[test]
#[ignore = "attaching needs ptrace rights over another process: run `cargo xtask test` as root"]
fn fd_prepare_sites_both_ways_from_a_log() {
    common::packages::require("strace");
    let report = assert_attached_log_exact(
        "wait open:5 open-enoent:3 open-emfile:2 accept-eagain:4 eventfd:2 epoll_create:1 \
         userfaultfd:1 pidfd_getfd:2 memfd_create:3 signalfd4:1 inotify_init1:1 timerfd_create:1 \
         close:2:0",
    );
    // 5 + 2 (close's opens) + 3 + 2 opens, 4 accepts, 6 FD_PREPARE users, 6 FD_ADD ones:
    // 28 allocations, 2 without an fd, 7 with an fd and no file.
    assert_eq!(
        json_counts(&report, "fd_prepare.fd_ok"),
        Counts::new(26, 2, 0)
    );
    assert_eq!(
        json_counts(&report, "fd_prepare.file_failed"),
        Counts::new(7, 19, 0)
    );
    assert_eq!(
        json_counts(&report, "fd_prepare.unpublished_fd"),
        Counts::new(7, 21, 0)
    );
    assert_eq!(json_counts(&report, "fd_add.ok"), Counts::new(13, 9, 0));
}

/// As the probe's test of the same name in `trace.rs`, from a log (which shows no
/// socketpair): accept4's EINVAL after the fd and before it, openat2's EAGAIN before it,
/// open's ENOENT for an empty name before it.
#[test]
#[ignore = "attaching needs ptrace rights over another process: run `cargo xtask test` as root"]
fn errors_before_and_after_the_allocation_from_a_log() {
    common::packages::require("strace");
    let report = assert_attached_log_exact(
        "wait accept-einval:3 accept-badflags:2 openat2-cached:2 open-unmapped:3",
    );
    // The three accepts of a socket that does not listen allocated an fd; the two with a
    // flag refused did not.
    assert_eq!(
        json_counts(&report, "fd_prepare.file_failed"),
        Counts::new(3, 0, 0)
    );
    // openat2's flags are refused; the empty names' opens pass the flags' test.
    assert_eq!(json_counts(&report, "open.bad_flags"), Counts::new(2, 3, 0));
}

/// `auditor ingest ARGS` with `stdin`: its exit status and JSON report.
fn ingest_json(
    args: &[&std::ffi::OsStr],
    stdin: std::process::Stdio,
) -> (Option<i32>, serde_json::Value) {
    let output = Command::new(AUDITOR)
        .args(["ingest", "--format", "json"])
        .args(args)
        .stdin(stdin)
        .output()
        .unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&output.stderr));
    });
    (output.status.code(), report)
}

/// What two reports counted: calls and sites.
fn counted(report: &serde_json::Value) -> (serde_json::Value, serde_json::Value) {
    (report["calls"].clone(), report["sites"].clone())
}

/// Standard input (`-`, `/dev/stdin`), a pipe and a FIFO are read to their end, as the
/// file is.
#[test]
fn logs_from_stdin_pipes_and_fifos_are_read_whole() {
    use std::process::Stdio;
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/http-server-curl.log");
    let (code, from_file) = ingest_json(&[fixture.as_os_str()], Stdio::null());
    assert_eq!(code, Some(0));
    assert!(from_file["calls"]["poll"].as_u64().unwrap() > 0);
    let file = || Stdio::from(std::fs::File::open(&fixture).unwrap());
    for name in ["-", "/dev/stdin"] {
        let (code, report) = ingest_json(&[name.as_ref()], file());
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(counted(&report), counted(&from_file), "{name}");
    }
    // A pipe, written while it is read.
    let mut cat = Command::new("cat")
        .arg(&fixture)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = Stdio::from(cat.stdout.take().unwrap());
    let (code, report) = ingest_json(&["/dev/stdin".as_ref()], pipe);
    assert!(cat.wait().unwrap().success());
    assert_eq!(code, Some(0));
    assert_eq!(counted(&report), counted(&from_file), "a pipe");
    // A FIFO, its writer blocked until the auditor opens it.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("log.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let writer = {
        let (fifo, fixture) = (fifo.clone(), fixture.clone());
        std::thread::spawn(move || std::fs::write(fifo, std::fs::read(fixture).unwrap()))
    };
    let (code, report) = ingest_json(&[fifo.as_os_str()], Stdio::null());
    writer.join().unwrap().unwrap();
    assert_eq!(code, Some(0));
    assert_eq!(counted(&report), counted(&from_file), "a FIFO");
}

/// A log that cannot be read is named with why; the others still count.
#[test]
fn a_file_that_cannot_be_read_is_named_and_the_rest_is_counted() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ssh.log");
    let (_, alone) = ingest_json(&[fixture.as_os_str()], std::process::Stdio::null());
    let (code, report) = ingest_json(
        &[
            "/nonexistent/a.log".as_ref(),
            fixture.as_os_str(),
            "/".as_ref(),
        ],
        std::process::Stdio::null(),
    );
    assert_eq!(code, Some(auditor::status::PARTLY_UNREADABLE.into()));
    assert_eq!(counted(&report), counted(&alone));
    common::assert_note(&report, |n| {
        n == "/nonexistent/a.log could not be read (No such file or directory (os error 2)): nothing of it is counted."
    });
    common::assert_note(&report, |n| n.contains("/:1: read error: Is a directory"));
}

/// Process names come from the traced programs: control characters reach no terminal,
/// and a `|` does not split a Markdown cell.
#[test]
fn names_from_traced_programs_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("names.log");
    std::fs::write(
        &log,
        "100<evil\u{1b}]0;pwned\u{7}> poll([{fd=-1}], 1, 0) = 0 (Timeout)\n\
         101<a|b> poll([{fd=-1}], 1, 0) = 0 (Timeout)\n",
    )
    .unwrap();
    for format in ["table", "markdown"] {
        let output = Command::new(AUDITOR)
            .args(["ingest", "--per-process", "--format", format])
            .arg(&log)
            .output()
            .unwrap();
        assert!(output.status.success());
        let text = String::from_utf8(output.stdout).unwrap();
        assert!(
            !text.contains(['\u{1b}', '\u{7}']),
            "{format}: a control character came through:\n{text:?}"
        );
        assert!(
            text.contains("evil\\u{1b}]0;pwned\\u{7}"),
            "{format}:\n{text}"
        );
        let names = if format == "markdown" { "a\\|b" } else { "a|b" };
        assert!(
            text.lines()
                .any(|line| line.contains(names) && line.contains("poll.fd_negative")),
            "{format}:\n{text}"
        );
    }
}
