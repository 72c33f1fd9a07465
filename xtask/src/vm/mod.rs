//! `cargo xtask test --kernel VERSION…`: the privileged tests on Debian's kernels under
//! QEMU. Builds the test binaries on the host, fetches each kernel package
//! ([`kernel`]), boots it with the host's file system ([`guest`]), runs the chosen test
//! binaries there as root (a kernel the probe does not load on instead checks that the
//! auditor refuses it in one line), and prints a matrix: kernel × test binary, with the
//! time each took and, for a failure, where the guest's output is kept.

pub mod guest;
pub mod kernel;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::PathBuf,
    process::{Command, Stdio},
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::workspace_root;

/// What `--kernel` runs.
pub struct Options {
    pub kernels: Vec<String>,
    /// Test binaries (auditor/tests/NAME.rs) whose privileged tests run in each guest.
    pub tests: Vec<String>,
    pub timeout: Duration,
    /// Write the matrix into docs/guide.md's kernels section (when every row passed).
    pub guide: bool,
}

/// The page that keeps the matrix, and its markers around it.
const GUIDE: &str = "docs/guide.md";
const GUIDE_BEGIN: &str = "<!-- kernels:begin";
const GUIDE_END: &str = "<!-- kernels:end -->";

/// `guide` with the lines between the kernels markers replaced by `matrix`.
fn with_matrix(guide: &str, matrix: &str) -> anyhow::Result<String> {
    let begin = guide
        .find(GUIDE_BEGIN)
        .with_context(|| format!("{GUIDE} has no kernels:begin marker"))?;
    let body = begin
        + guide[begin..]
            .find('\n')
            .context("a line after the marker")?
        + 1;
    let end = guide
        .find(GUIDE_END)
        .with_context(|| format!("{GUIDE} has no kernels:end marker"))?;
    if end < body {
        bail!("{GUIDE}'s kernels markers are out of order");
    }
    Ok(format!("{}{matrix}{}", &guide[..body], &guide[end..]))
}

/// What the Debian packages the matrix boots need on the host.
pub const PACKAGES: [&str; 4] = ["qemu-system-x86", "busybox-static", "cpio", "xz-utils"];

/// The tests of one binary in one place, from libtest's lines.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Results {
    passed: Vec<String>,
    failed: Vec<String>,
}

impl Results {
    /// Reads `test NAME ... ok` / `... FAILED` lines; a test's own output on stderr may
    /// come between its name and its outcome, which then ends a later line. A
    /// `test result:` line that counts more failures than were named adds them unnamed.
    fn parse(output: &str) -> Results {
        let mut results = Results::default();
        let mut pending: Option<&str> = None;
        let mut summary_failed = 0;
        for line in output.lines() {
            if let Some(rest) = line.strip_prefix("test result: ") {
                summary_failed += rest
                    .split(';')
                    .find_map(|part| part.trim().strip_suffix(" failed"))
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                continue;
            }
            let (name, outcome) = match line
                .strip_prefix("test ")
                .and_then(|r| r.split_once(" ... "))
            {
                Some((name, rest)) => (Some(name), rest),
                None => (pending, line),
            };
            let Some(name) = name else {
                continue;
            };
            if outcome.ends_with("FAILED") {
                results.failed.push(name.to_string());
                pending = None;
            } else if outcome.ends_with("ok") {
                results.passed.push(name.to_string());
                pending = None;
            } else {
                pending = Some(name);
            }
        }
        while results.failed.len() < summary_failed {
            results
                .failed
                .push("(a test the output does not name)".into());
        }
        results
    }
}

/// One row of the matrix.
struct Row {
    kernel: String,
    took: Duration,
    /// Per test binary (or `refusal`): its results.
    results: BTreeMap<String, Results>,
    /// What went wrong beyond failed tests (a hang, a crash, a missing status).
    trouble: Option<String>,
    /// Where the guest's output is kept.
    output: Option<PathBuf>,
    /// How long the auditor took to load and attach the probe there.
    start: Option<Duration>,
}

impl Row {
    fn ok(&self) -> bool {
        self.trouble.is_none()
            && !self.results.is_empty()
            && self
                .results
                .values()
                .all(|r| r.failed.is_empty() && !r.passed.is_empty())
    }
}

/// The test binaries of the auditor package, by name, built for the host.
fn build_tests() -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let output = Command::new("cargo")
        .args([
            "test",
            "--no-run",
            "--package",
            "auditor",
            "--message-format=json",
        ])
        .current_dir(workspace_root())
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo test --no-run")?;
    if !output.status.success() {
        bail!("building the test binaries failed");
    }
    let mut binaries = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let kind_is_test = message["target"]["kind"]
            .as_array()
            .is_some_and(|kinds| kinds.iter().any(|k| k == "test"));
        if message["reason"] == "compiler-artifact"
            && kind_is_test
            && let (Some(name), Some(path)) = (
                message["target"]["name"].as_str(),
                message["executable"].as_str(),
            )
        {
            binaries.insert(name.to_string(), PathBuf::from(path));
        }
    }
    Ok(binaries)
}

/// Privileged tests the guests leave out: they check how the auditor handles its command,
/// the same on every kernel (the host runs them), and under TCG each of their sessions
/// costs a probe's start (11-21 s).
const NOT_IN_GUESTS: [&str; 1] = ["a_duration_ends_with_the_commands_status"];

/// libtest's arguments for the guests' runs: the privileged tests, one at a time.
fn guest_test_args() -> String {
    let mut args = String::from("--ignored --test-threads=1 --color never");
    for test in NOT_IN_GUESTS {
        let _ = write!(args, " --skip {test}");
    }
    args
}

/// The guest's script: each binary's privileged tests, one at a time, between markers.
fn test_script(binaries: &[(String, PathBuf)]) -> String {
    let package = workspace_root().join("auditor");
    let auditor = workspace_root().join("target/debug/auditor");
    let mut script = String::from("mount -t tracefs tracefs /sys/kernel/tracing\nexport CI=true\n");
    // The tests' fd counts assume the host's limits, not the guest init's 1024.
    let (soft, hard) = nofile_limits();
    let _ = writeln!(script, "ulimit -Hn {hard}; ulimit -Sn {soft}");
    let _ = writeln!(script, "cd '{}'", package.display());
    // The probe's start: load, verify and attach, around a command that does nothing.
    let _ = writeln!(
        script,
        "s=$(date +%s%N); '{}' trace -- true >/dev/null 2>&1; e=$(date +%s%N); \
         echo \"== start $(( (e - s) / 1000000 ))\"",
        auditor.display()
    );
    for (name, path) in binaries {
        let _ = writeln!(
            script,
            "echo '== binary {name}'; '{}' {}",
            path.display(),
            guest_test_args()
        );
    }
    script
}

/// This process's RLIMIT_NOFILE (soft, hard).
fn nofile_limits() -> (u64, u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 1024,
        rlim_max: 4096,
    };
    // SAFETY: getrlimit writes the struct it is given.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (limit.rlim_cur, limit.rlim_max)
}

/// The guest's script for a kernel the probe does not load on: the auditor's refusal.
fn refusal_script() -> String {
    let auditor = workspace_root().join("target/debug/auditor");
    format!(
        "mount -t tracefs tracefs /sys/kernel/tracing\n\
         '{}' trace --workload default > /tmp/refusal.out 2> /tmp/refusal.err; status=$?\n\
         lines=$(wc -l < /tmp/refusal.err)\n\
         echo \"== refusal status $status, $lines line(s) on stderr\"; cat /tmp/refusal.err\n\
         if [ $status = 1 ] && [ $lines = 1 ] && grep -q 'lacks the BPF helper' /tmp/refusal.err && \
         grep -q 'auditor strace' /tmp/refusal.err; then echo 'test refused_in_one_line ... ok'; \
         else echo 'test refused_in_one_line ... FAILED'; fi\n",
        auditor.display()
    )
}

/// Splits a guest's output at `== binary NAME` markers.
fn per_binary(output: &str) -> BTreeMap<String, Results> {
    let mut results = BTreeMap::new();
    let mut current = String::from("refusal");
    let mut text = String::new();
    for line in output.lines().chain(["== binary"]) {
        if let Some(name) = line.strip_prefix("== binary") {
            let parsed = Results::parse(&text);
            if parsed != Results::default() {
                results.insert(current.clone(), parsed);
            }
            current = name.trim().to_string();
            text.clear();
        } else {
            text.push_str(line);
            text.push('\n');
        }
    }
    results
}

fn start_of(output: &str) -> Option<Duration> {
    output
        .lines()
        .find_map(|line| line.strip_prefix("== start "))
        .and_then(|ms| ms.trim().parse().ok())
        .map(Duration::from_millis)
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    // Every name is checked before anything is built or fetched.
    let releases: Vec<Option<crate::releases::Release>> = options
        .kernels
        .iter()
        .map(|version| {
            (version != "host")
                .then(|| crate::releases::release(version))
                .transpose()
        })
        .collect::<anyhow::Result<_>>()?;
    let all = build_tests()?;
    let mut binaries = Vec::new();
    for name in &options.tests {
        let path = all
            .get(name)
            .with_context(|| format!("no test binary {name} (auditor/tests/{name}.rs)"))?;
        binaries.push((name.clone(), path.clone()));
    }
    let slots: Vec<Mutex<Option<Row>>> = releases.iter().map(|_| Mutex::new(None)).collect();
    let run_row = |index: usize, row: &dyn Fn() -> anyhow::Result<Row>| {
        let (release, start) = (releases[index], Instant::now());
        // A kernel that cannot be fetched or booted is a failed row, not the end.
        let row = row().unwrap_or_else(|error| Row {
            kernel: release.map_or("host".into(), |r| format!("{} ({})", r.version, r.suite)),
            took: start.elapsed(),
            results: BTreeMap::new(),
            trouble: Some(format!("{error:#}")),
            output: None,
            start: None,
        });
        println!("{}", row_line(&row));
        *slots[index].lock().expect("no worker panicked") = Some(row);
    };
    // The machine's own kernel first, alone.
    for index in (0..releases.len()).filter(|&index| releases[index].is_none()) {
        run_row(index, &|| host_row(&binaries));
    }
    // Every kernel is fetched first, one at a time (apt's lists); then the guests boot
    // GUESTS_AT_ONCE at a time, newest first (7.2's took 933 s, 6.1's and 6.12's 571–620 s):
    // a TCG guest emulates on one host thread, so two keep a 2-core machine busy and the
    // matrix takes about its longest pair, not the sum of its guests.
    let kernels: Vec<Option<anyhow::Result<kernel::Kernel>>> = releases
        .iter()
        .map(|release| release.map(kernel::fetch))
        .collect();
    let guests: Vec<usize> = (0..releases.len())
        .rev()
        .filter(|&index| releases[index].is_some())
        .collect();
    let (next, accel) = (AtomicUsize::new(0), Mutex::new(None));
    let at_once = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(GUESTS_AT_ONCE);
    std::thread::scope(|scope| {
        for _ in 0..at_once {
            scope.spawn(|| {
                while let Some(&index) = guests.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let (Some(release), Some(kernel)) = (releases[index], &kernels[index]) else {
                        continue;
                    };
                    run_row(index, &|| {
                        let kernel = kernel
                            .as_ref()
                            .map_err(|error| anyhow::anyhow!("{error:#}"))?;
                        guest_row(release, kernel, &binaries, &accel, options.timeout)
                    });
                }
            });
        }
    });
    let rows: Vec<Row> = slots
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .expect("no worker panicked")
                .expect("every row ran")
        })
        .collect();
    let matrix = render(&rows);
    println!("\n{matrix}");
    let kept = workspace_root().join("target/vm/matrix.md");
    std::fs::create_dir_all(kept.parent().expect("a parent"))?;
    std::fs::write(&kept, &matrix)?;
    println!("(kept in {})", kept.display());
    let failed: Vec<_> = rows
        .iter()
        .filter(|r| !r.ok())
        .map(|r| r.kernel.clone())
        .collect();
    let (passed, failures) = rows
        .iter()
        .flat_map(|r| r.results.values())
        .fold((0, 0), |(p, f), r| (p + r.passed.len(), f + r.failed.len()));
    println!("\nmatrix: {passed} passed, {failures} failed");
    if !failed.is_empty() {
        bail!("the tests failed on {}", failed.join(", "));
    }
    if options.guide {
        let path = workspace_root().join(GUIDE);
        let guide = std::fs::read_to_string(&path)?;
        std::fs::write(&path, with_matrix(&guide, &matrix)?)?;
        println!("wrote the matrix into {}", path.display());
    }
    Ok(())
}

/// Guests booted at once (at most one per CPU).
const GUESTS_AT_ONCE: usize = 2;

/// `binaries` (or the refusal check) in a guest of `release`, whose `kernel` is fetched;
/// the accelerator is decided at the first boot (the other guests wait for it).
fn guest_row(
    release: crate::releases::Release,
    kernel: &kernel::Kernel,
    binaries: &[(String, PathBuf)],
    accel: &Mutex<Option<guest::Accel>>,
    timeout: Duration,
) -> anyhow::Result<Row> {
    let start = Instant::now();
    let work = workspace_root().join("target/vm").join(release.suite);
    let accel = {
        let mut decided = accel.lock().expect("no worker panicked");
        match *decided {
            Some(accel) => accel,
            None => {
                let chosen = guest::choose_accel(kernel, &work)?;
                println!("vm: QEMU accelerator: {chosen:?} (decided by a test boot)");
                *decided.insert(chosen)
            }
        }
    };
    let script = if release.supported {
        test_script(binaries)
    } else {
        refusal_script()
    };
    println!("vm: booting {} ({}) ...", kernel.name, release.suite);
    let run = guest::boot(kernel, &script, &work, accel, timeout)?;
    let output = work.join("guest-output.log");
    std::fs::write(&output, &run.output)?;
    let trouble = match run.outcome {
        guest::Outcome::Exited(_) => None,
        guest::Outcome::TimedOut => Some(format!("killed after {} s", timeout.as_secs())),
        guest::Outcome::Crashed(why) => Some(format!("{why} ({})", run.console.display())),
    };
    let mut results = per_binary(&run.output);
    let expected: Vec<&str> = if release.supported {
        binaries.iter().map(|(name, _)| name.as_str()).collect()
    } else {
        vec!["refusal"]
    };
    // A binary that printed no test line (it crashed, or never started) failed.
    for name in expected {
        results.entry(name.to_string()).or_insert_with(|| Results {
            passed: Vec::new(),
            failed: vec!["(no test ran)".into()],
        });
    }
    Ok(Row {
        kernel: format!("{} ({})", kernel.name, release.suite),
        took: start.elapsed(),
        results,
        trouble,
        output: Some(output),
        start: start_of(&run.output),
    })
}

/// The same binaries on the machine's own kernel.
fn host_row(binaries: &[(String, PathBuf)]) -> anyhow::Result<Row> {
    let begun = Instant::now();
    let mut results = BTreeMap::new();
    let mut log = String::new();
    for (name, path) in binaries {
        let output = Command::new(path)
            .args(["--ignored", "--test-threads=1", "--color", "never"])
            .current_dir(workspace_root().join("auditor"))
            .env("CI", "true")
            .output()
            .with_context(|| format!("cannot run {}", path.display()))?;
        let text = String::from_utf8_lossy(&output.stdout);
        log.push_str(&text);
        log.push_str(&String::from_utf8_lossy(&output.stderr));
        results.insert(name.clone(), Results::parse(&text));
    }
    let auditor = workspace_root().join("target/debug/auditor");
    let started = Instant::now();
    let loaded = Command::new(&auditor)
        .args(["trace", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", auditor.display()))?;
    let start = loaded.success().then(|| started.elapsed());
    let output = workspace_root().join("target/vm/host-output.log");
    std::fs::create_dir_all(output.parent().expect("a parent"))?;
    std::fs::write(&output, log)?;
    let release = String::from_utf8_lossy(&Command::new("uname").arg("-r").output()?.stdout)
        .trim()
        .to_string();
    let row = Row {
        kernel: format!("{release} (this machine)"),
        took: begun.elapsed(),
        results,
        trouble: None,
        output: Some(output),
        start,
    };
    Ok(row)
}

fn row_line(row: &Row) -> String {
    format!(
        "vm: {}: {} in {} s",
        row.kernel,
        if row.ok() { "ok" } else { "FAILED" },
        row.took.as_secs()
    )
}

/// The matrix as Markdown: one row per kernel, one column per test binary.
fn render(rows: &[Row]) -> String {
    let mut columns: Vec<&String> = rows.iter().flat_map(|r| r.results.keys()).collect();
    columns.sort();
    columns.dedup();
    let mut out = String::from("| kernel | probe |");
    for column in &columns {
        let _ = write!(out, " {column} |");
    }
    out.push_str(" start | took |\n|---|---|");
    for _ in &columns {
        out.push_str("---|");
    }
    out.push_str("---|---|\n");
    for row in rows {
        let probe = if row.results.contains_key("refusal") {
            "refused in one line"
        } else if row.results.is_empty() {
            "-"
        } else {
            "loads"
        };
        let _ = write!(out, "| {} | {probe} |", row.kernel);
        for column in &columns {
            let cell = match row.results.get(*column) {
                Some(r) if r.failed.is_empty() => format!("{} passed", r.passed.len()),
                Some(r) => format!("{} passed, FAILED: {}", r.passed.len(), r.failed.join(", ")),
                None => "-".into(),
            };
            let _ = write!(out, " {cell} |");
        }
        let start = row
            .start
            .map_or("-".into(), |s| format!("{:.1} s", s.as_secs_f64()));
        let _ = writeln!(out, " {start} | {} s |", row.took.as_secs());
    }
    for row in rows.iter().filter(|r| !r.ok()) {
        let _ = writeln!(
            out,
            "\n{}: {}; the guest's output is in {}",
            row.kernel,
            row.trouble.as_deref().unwrap_or("tests failed"),
            row.output
                .as_ref()
                .map_or("-".into(), |p| p.display().to_string())
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_goes_between_the_markers() {
        let readme = "a\n<!-- kernels:begin (generated) -->\nold\n<!-- kernels:end -->\nb\n";
        assert_eq!(
            with_matrix(readme, "| new |\n").unwrap(),
            "a\n<!-- kernels:begin (generated) -->\n| new |\n<!-- kernels:end -->\nb\n"
        );
        assert!(with_matrix("no markers", "x").is_err());
    }

    #[test]
    fn results_per_binary() {
        let output = "== start 2500\n== binary trace\nrunning 2 tests\n\
                      test a ... ok\ntest b ... FAILED\n== binary session\ntest c ... ok\n";
        let results = per_binary(output);
        assert_eq!(results["trace"].passed, ["a"]);
        assert_eq!(results["trace"].failed, ["b"]);
        assert_eq!(results["session"].passed, ["c"]);
        assert_eq!(start_of(output), Some(Duration::from_millis(2500)));
        // Output on stderr between a test's name and its outcome.
        let interleaved = Results::parse(
            "test a ... workload: returned 71\nFAILED\ntest b ... ok\n\
             test result: FAILED. 1 passed; 1 failed; 0 ignored\n",
        );
        assert_eq!(
            (interleaved.passed, interleaved.failed),
            (vec!["b".to_string()], vec!["a".to_string()])
        );
        let unnamed = Results::parse("test result: FAILED. 0 passed; 2 failed; 0 ignored\n");
        assert_eq!(unnamed.failed.len(), 2);
        let refusal = per_binary("== refusal status 1\ntest refused_in_one_line ... ok\n");
        assert_eq!(refusal["refusal"].passed, ["refused_in_one_line"]);
    }
}
