//! Outputs against bad paths, planted links and FIFOs, inputs named as outputs, a full disk
//! and a killed session: the report is never lost to its picture, the previous file is intact
//! on every failure, and nothing is written where it was not asked to be.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use crate::common::{fixture, require_privileges};

const AUDITOR: &str = env!("CARGO_BIN_EXE_auditor");

fn auditor(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(AUDITOR)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn os(text: &str) -> &std::ffi::OsStr {
    text.as_ref()
}

/// Asserts that `output` failed with status 1 and a message containing `says`.
#[track_caller]
fn refused(output: &Output, says: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(says), "{stderr}");
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A saved JSON report of the ssh fixture in `dir`.
fn saved(dir: &Path) -> PathBuf {
    let path = dir.join("saved.json");
    let log = fixture("ssh.log");
    let output = auditor(&[
        os("ingest"),
        os("--format"),
        os("json"),
        os("-o"),
        path.as_os_str(),
        log.as_os_str(),
    ]);
    assert!(output.status.success(), "{output:?}");
    path
}

#[test]
fn an_input_named_as_the_output_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let report = saved(dir.path());
    let before = std::fs::read(&report).unwrap();
    let output = auditor(&[
        os("report"),
        report.as_os_str(),
        os("-o"),
        report.as_os_str(),
    ]);
    refused(&output, "is also an input");
    assert_eq!(std::fs::read(&report).unwrap(), before);
    // The same through a hard link, and for a log.
    let log = dir.path().join("ssh.log");
    std::fs::copy(fixture("ssh.log"), &log).unwrap();
    let linked = dir.path().join("linked.log");
    std::fs::hard_link(&log, &linked).unwrap();
    let before = std::fs::read(&log).unwrap();
    let output = auditor(&[os("ingest"), log.as_os_str(), os("-o"), linked.as_os_str()]);
    refused(&output, "is also an input");
    assert_eq!(std::fs::read(&log).unwrap(), before);
}

#[test]
fn planted_links_and_fifos_are_refused_at_once() {
    crate::common::packages::require("fonts-dejavu-core");
    let dir = tempfile::tempdir().unwrap();
    let report = saved(dir.path());
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "root only").unwrap();
    let link = dir.path().join("planted.json");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let fifo = dir.path().join("fifo.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    for (flag, path, says) in [
        ("-o", &link, "symbolic link"),
        ("--svg", &link, "symbolic link"),
        ("-o", &fifo, "FIFO"),
        ("--svg", &fifo, "FIFO"),
    ] {
        let started = Instant::now();
        let output = auditor(&[os("report"), report.as_os_str(), os(flag), path.as_os_str()]);
        refused(&output, says);
        // No open of the FIFO, which would wait for a reader.
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root only");
}

#[test]
fn a_bad_svg_path_is_refused_before_anything_is_read_or_written() {
    crate::common::packages::require("fonts-dejavu-core");
    let dir = tempfile::tempdir().unwrap();
    let report = saved(dir.path());
    let out = dir.path().join("out.json");
    let missing = dir.path().join("no/such/dir/report.svg");
    let output = auditor(&[
        os("report"),
        report.as_os_str(),
        os("-o"),
        out.as_os_str(),
        os("--svg"),
        missing.as_os_str(),
    ]);
    refused(&output, "--svg");
    refused(&output, "cannot create files in");
    assert!(!out.exists());
    let output = auditor(&[
        os("report"),
        report.as_os_str(),
        os("-o"),
        out.as_os_str(),
        os("--svg"),
        out.as_os_str(),
    ]);
    refused(&output, "both name");
}

/// A tmpfs of `size` mounted on a new directory, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn of(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        SmallDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills what is left of it.
    fn fill(&self) {
        let _ = std::fs::write(self.path().join("filler"), vec![0u8; 1 << 20]);
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
#[ignore = "mounts a tmpfs: needs root (`cargo xtask test`)"]
fn a_full_disk_leaves_the_previous_report_and_never_costs_the_report_its_svg() {
    crate::common::packages::require("fonts-dejavu-core");
    require_privileges();
    let dir = tempfile::tempdir().unwrap();
    let report = saved(dir.path());
    let disk = SmallDisk::of("64k");
    // The previous report, then a disk with no room for the next.
    let previous = disk.path().join("report.json");
    std::fs::write(&previous, "previous").unwrap();
    disk.fill();
    let output = auditor(&[
        os("report"),
        report.as_os_str(),
        os("--format"),
        os("json"),
        os("-o"),
        previous.as_os_str(),
    ]);
    refused(&output, "No space left on device");
    refused(&output, "as it was");
    assert_eq!(std::fs::read_to_string(&previous).unwrap(), "previous");
    assert_eq!(listing(disk.path()), ["filler", "report.json"]);
    // The SVG on the full disk fails; the report, elsewhere, is written all the same.
    let svg = disk.path().join("report.svg");
    let out = dir.path().join("out.json");
    let output = auditor(&[
        os("report"),
        report.as_os_str(),
        os("--format"),
        os("json"),
        os("-o"),
        out.as_os_str(),
        os("--svg"),
        svg.as_os_str(),
    ]);
    refused(&output, "cannot write the SVG");
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert!(written["sites"].is_array());
    assert!(!svg.exists());
}

#[test]
fn a_killed_session_leaves_the_previous_report() {
    let dir = tempfile::tempdir().unwrap();
    let previous = dir.path().join("report.json");
    std::fs::write(&previous, "previous").unwrap();
    let mut session = Command::new(AUDITOR)
        .args(["strace", "-o"])
        .arg(&previous)
        .args(["--", "sleep", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    session.kill().unwrap();
    session.wait().unwrap();
    assert_eq!(std::fs::read_to_string(&previous).unwrap(), "previous");
    assert_eq!(listing(dir.path()), ["report.json"]);
}

/// A stderr that cannot be written is a failure of the report that goes there (status 1),
/// never a panic; a reader that goes away early is a quiet end.
#[test]
fn a_full_or_closed_stderr_is_an_exit_not_a_panic() {
    crate::common::packages::require("strace");
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    // The report of a started command goes to stderr.
    let status = Command::new(AUDITOR)
        .args(["strace", "--", "true"])
        .stdout(Stdio::null())
        .stderr(full())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
    // Diagnostics lost to a full stderr cost nothing: the report on stdout is written.
    let log = fixture("ssh.log");
    let output = Command::new(AUDITOR)
        .arg("ingest")
        .arg(&log)
        .args(["--format", "json"])
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(serde_json::from_slice::<serde_json::Value>(&output.stdout).is_ok());
    // `2>&1 | head -1` and `| head -1`: a quiet end, with no panic.
    for (args, to_stderr) in [(vec!["strace", "--", "true"], true), (vec!["sites"], false)] {
        let mut child = Command::new(AUDITOR)
            .args(&args)
            .stdout(if to_stderr {
                Stdio::null()
            } else {
                Stdio::piped()
            })
            .stderr(if to_stderr {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .spawn()
            .unwrap();
        let pipe: Box<dyn std::io::Read> = match to_stderr {
            true => Box::new(child.stderr.take().unwrap()),
            false => Box::new(child.stdout.take().unwrap()),
        };
        let mut first = [0u8; 1];
        std::io::Read::read_exact(&mut { pipe }, &mut first).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}");
    }
}
