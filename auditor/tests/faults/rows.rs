//! A fork burst, checked row by row: every process the burst started has its own row with
//! its own counts, though the kernel's allocator for new rows runs dry in such a burst.

use std::{collections::BTreeSet, process::Command};

use crate::common::require_privileges;

/// Processes the burst starts, two alive at a time: under the table's 16 384 rows.
const CHILDREN: usize = 12_000;

/// When run with `AUDITOR_FORK_BURST=FILE` (by the test below, under the auditor): forks
/// the burst, each child opening and closing /dev/null once, and writes the children's
/// pids to FILE. Otherwise it does nothing.
#[test]
fn fork_burst() {
    let Some(file) = std::env::var_os("AUDITOR_FORK_BURST") else {
        return;
    };
    let mut pids = Vec::with_capacity(CHILDREN);
    let mut alive = 0;
    for _ in 0..CHILDREN {
        if alive == 2 {
            // SAFETY: waits for any child of this process.
            unsafe { libc::wait(std::ptr::null_mut()) };
            alive -= 1;
        }
        // SAFETY: the child calls only async-signal-safe functions, then _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: a NUL-terminated path; the child ends at once.
            unsafe {
                libc::close(libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY));
                libc::_exit(0);
            }
        }
        assert!(pid > 0, "fork failed");
        pids.push(pid.to_string());
        alive += 1;
    }
    for _ in 0..alive {
        // SAFETY: as above.
        unsafe { libc::wait(std::ptr::null_mut()) };
    }
    std::fs::write(file, pids.join("\n")).unwrap();
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn every_process_of_a_fork_burst_has_its_row() {
    require_privileges();
    let dir = tempfile::tempdir().unwrap();
    let pids_file = dir.path().join("pids");
    let report_file = dir.path().join("report.json");
    // The burst's own process reads the variable; the auditor passes it on.
    let status = Command::new(env!("CARGO_BIN_EXE_auditor"))
        .args(["trace", "--format", "json", "-o"])
        .arg(&report_file)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "rows::fork_burst", "--test-threads=1", "--quiet"])
        .env("AUDITOR_FORK_BURST", &pids_file)
        // The burst's own libtest lines are not this run's: `cargo xtask test` counts those.
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status:?}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_file).unwrap()).unwrap();
    let children: BTreeSet<u32> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .lines()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(children.len(), CHILDREN);
    // Each child's row: its one close, taken.
    let closes: BTreeSet<u32> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["site"] == "close.ok" && row["taken"] == 1)
        .filter_map(|row| row["pid"].as_u64().map(|pid| pid as u32))
        .filter(|pid| children.contains(pid))
        .collect();
    let missing: Vec<_> = children.difference(&closes).take(10).collect();
    assert!(
        missing.is_empty(),
        "{} of {CHILDREN} children have no row of their close (first: {missing:?}); notes: {}",
        children.len() - closes.len(),
        report["notes"]
    );
    assert_eq!(report["unattributed"], serde_json::json!([]));
}
