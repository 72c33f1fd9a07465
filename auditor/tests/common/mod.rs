//! Helpers of the privileged tests: the privilege check, the workload binary, and the
//! exact comparison of a session's counts with a workload's expected ones.

pub mod packages;

use std::{collections::BTreeMap, ffi::OsString};

use auditor::{
    tally::Tally,
    workload::{
        self, Expected,
        cases::{Case, Setup},
    },
};
use auditor_common::{Counts, SITE_COUNT, Site, Syscall, catalogue::Unit};

pub const WORKLOAD: &str = env!("CARGO_BIN_EXE_auditor-workload");
/// The workload's command name as the kernel keeps it (15 bytes).
pub const WORKLOAD_COMM: &str = "auditor-workloa";

/// Privileged tests are `#[ignore]`d so that a plain `cargo test` does not run them;
/// `cargo xtask test` includes them as root. Run without privileges, they fail loudly.
pub fn require_privileges() {
    let root = nix::unistd::geteuid().is_root();
    assert!(
        root,
        "this test loads the eBPF probe and needs root and tracefs: run `cargo xtask test` as root"
    );
}

/// The command line that runs `steps` with the bundled workload.
pub fn workload_command(steps: &str) -> Vec<OsString> {
    let mut argv = vec![OsString::from(WORKLOAD)];
    argv.extend(steps.split_whitespace().map(OsString::from));
    argv
}

/// The sites the dynamic loader's opens reach: those counted per fd allocation (`fd.*`,
/// `fd_prepare.*`) and per open (`open.bad_flags`). After exec the loader allocates on
/// the table the workload inherited and opens as many files as the environment makes it
/// look for (each directory of `LD_LIBRARY_PATH`, which `cargo test` sets), which a test
/// cannot know; so exec'd workloads are checked on everything else, and attached ones on
/// these too.
pub fn loader_counted(site: Site) -> bool {
    let syscalls = site.info().syscalls;
    // The set-up's fcntl calls test which of fds 0-2 the workload inherited open.
    site.info().unit == Unit::Allocation
        || syscalls.contains(&Syscall::Openat)
        || syscalls == [Syscall::Fcntl]
}

/// Counts per pid and site, from a tally; every row must be the workload's.
fn per_pid(tally: &Tally) -> BTreeMap<u32, [Counts; SITE_COUNT]> {
    let mut rows: BTreeMap<u32, [Counts; SITE_COUNT]> = BTreeMap::new();
    for (process, site, counts) in tally.per_process() {
        assert_eq!(
            process.comm, WORKLOAD_COMM,
            "pid {} is not the workload",
            process.pid
        );
        rows.entry(process.pid)
            .or_insert([Counts::ZERO; SITE_COUNT])[site as usize]
            .add(counts);
    }
    rows
}

/// How the workload process began: exec'd while traced, or attached to afterwards.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Exec,
    /// Attached to while blocked in the read of a first `wait` step: that read began
    /// before the probe and is not counted. Its fd table then had `max_fds` slots, and
    /// fs.nr_open was `nr_open`.
    Attached {
        max_fds: u32,
        nr_open: u32,
    },
}

/// `sysctl fs.nr_open` now.
pub fn nr_open() -> u32 {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// fs.nr_open set for a test, restored when dropped.
pub struct NrOpenSet(u32);

impl NrOpenSet {
    pub fn to(value: u32) -> NrOpenSet {
        let saved = nr_open();
        std::fs::write("/proc/sys/fs/nr_open", value.to_string())
            .expect("fs.nr_open can be written (as root)");
        NrOpenSet(saved)
    }
}

impl Drop for NrOpenSet {
    fn drop(&mut self) {
        std::fs::write("/proc/sys/fs/nr_open", self.0.to_string()).unwrap();
    }
}

/// Raises this process's soft RLIMIT_NOFILE to at least `fds` (its children inherit it).
pub fn raise_nofile(fds: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert!(
        hard >= fds,
        "the hard RLIMIT_NOFILE ({hard}) is below {fds}"
    );
    setrlimit(Resource::RLIMIT_NOFILE, soft.max(fds), hard).unwrap();
}

/// Commands a `--duration 1s` session ends, with the status the auditor exits with and
/// whether the command outlives the grace and is left running (said in a note): one that
/// SIGTERM ends, one that exits 7 on it, one that ignores it (its output elsewhere: a
/// command left running holds the pipes it inherited).
const DURATION_ENDINGS: [(&str, i32, bool); 3] = [
    ("exec sleep 60", 128 + 15, false),
    ("trap 'exit 7' TERM; while :; do sleep 0.1; done", 7, false),
    (
        "exec >/dev/null 2>&1; trap '' TERM; sleep 6",
        128 + 15,
        true,
    ),
];

/// The note of a command left running after a `--duration`.
const LEFT_RUNNING: &str = "was sent SIGTERM and was still running";

/// Runs `auditor SOURCE --duration 1s -- sh -c SCRIPT` for each of [`DURATION_ENDINGS`]:
/// it exits with the status given, says whether the command was left running, and ends
/// within `limit` (the source's start, the second, the grace: never the command's 6 or
/// 60 s).
pub fn assert_duration_endings(source: &str, limit: std::time::Duration) {
    for (script, code, left_running) in DURATION_ENDINGS {
        let started = start(&[
            source,
            "--format",
            "json",
            "--duration",
            "1s",
            "--",
            "sh",
            "-c",
            script,
        ]);
        let pid = started.child.id();
        let begun = std::time::Instant::now();
        let (got, report, _) = ended(started);
        let took = begun.elapsed();
        assert_eq!(got, Some(code), "{script}: {report}");
        assert!(took < limit, "{script}: {took:?}");
        let said = json_notes(&report)
            .iter()
            .any(|note| note.contains(LEFT_RUNNING));
        assert_eq!(said, left_running, "{script} (auditor {pid}): {report}");
    }
}

/// The machine as a case needs it, while this lives; this process's RLIMIT_NOFILE back as
/// it was when dropped.
pub struct Prepared {
    nr_open: Option<NrOpenSet>,
    nofile: (u64, u64),
}

impl Drop for Prepared {
    fn drop(&mut self) {
        use nix::sys::resource::{Resource, setrlimit};
        // fs.nr_open first: a hard limit past it cannot be set.
        drop(self.nr_open.take());
        let (soft, hard) = self.nofile;
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    }
}

/// `CAP_SYS_RESOURCE` (include/uapi/linux/capability.h): raising a hard rlimit.
const CAP_SYS_RESOURCE: u32 = 24;

/// Whether this process has capability `bit` in its effective set (/proc/self/status).
fn has_capability(bit: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let hex = status
                .lines()
                .find_map(|line| line.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1 << bit) != 0)
}

/// Sets the machine up as `case` needs it; None (said on stderr) where this kernel lacks
/// the tracepoint it needs, or this process the capability it needs (CAP_SYS_RESOURCE, to
/// raise the hard RLIMIT_NOFILE: root in a container may lack it; the guests have it, so
/// the case must run there).
pub fn prepare(case: &Case) -> Option<Prepared> {
    if let Some(event) = case.needs_event {
        auditor::tracefs::ensure_mounted().unwrap();
        if !auditor::tracefs::has_event("syscalls", event) {
            eprintln!("case `{}` left out: this kernel has no {event}", case.name);
            return None;
        }
    }
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let nofile = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let nr_open = match case.setup {
        Setup::Nothing => None,
        Setup::NrOpen {
            nr_open: wanted,
            nofile: wanted_nofile,
        } if wanted_nofile > nofile.1 => {
            // Past the hard limit only with CAP_SYS_RESOURCE (this machine's root may lack
            // it; a guest's has it), and only up to fs.nr_open: that first.
            let set = NrOpenSet::to(wanted);
            if let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, wanted_nofile, wanted_nofile) {
                assert!(
                    !has_capability(CAP_SYS_RESOURCE),
                    "case `{}`: RLIMIT_NOFILE cannot be raised to {wanted_nofile} with \
                     CAP_SYS_RESOURCE: {error}",
                    case.name
                );
                eprintln!(
                    "case `{}` left out: RLIMIT_NOFILE cannot be raised to {wanted_nofile} \
                     here ({error}: raising the hard limit takes CAP_SYS_RESOURCE)",
                    case.name
                );
                return None;
            }
            Some(set)
        }
        Setup::NrOpen {
            nr_open: wanted,
            nofile: wanted_nofile,
        } => {
            raise_nofile(wanted_nofile);
            Some(NrOpenSet::to(wanted))
        }
    };
    Some(Prepared { nr_open, nofile })
}

/// Runs `run` on every case of every family (`workload::cases`), set up as each needs, and
/// fails naming every case that failed (each failure's own message is above it).
pub fn run_cases(run: impl Fn(&Case)) {
    let mut failed = Vec::new();
    for case in workload::cases::all() {
        let Some(_prepared) = prepare(case) else {
            continue;
        };
        eprintln!("case `{}`: {}", case.name, case.steps);
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(case))).is_err() {
            failed.push(case.name);
        }
    }
    assert!(failed.is_empty(), "cases not counted exactly: {failed:?}");
}

/// Shared libraries the dynamic loader loads for the workload after exec, before its code
/// runs (as `ldd` lists them): for each it reads the ELF header once and closes the file,
/// and it closes ld.so.cache.
pub fn loader_libraries() -> u64 {
    let output = std::process::Command::new("ldd")
        .arg(WORKLOAD)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.contains("=> /"))
        .count() as u64
}

/// `counts` less `less`.
fn counts_without(counts: &mut Counts, less: &Counts) {
    counts.taken -= less.taken;
    counts.not_taken -= less.not_taken;
    counts.unreadable -= less.unreadable;
}

/// Asserts that `tally` holds exactly the counts of workload `steps` started as `first`:
/// per process (children in pid order), per site, and calls per syscall.
pub fn assert_exact(tally: &Tally, steps: &str, first: u32, start: Start) {
    let parsed = workload::parse(steps).unwrap();
    let mut expected: Vec<Expected> = match start {
        Start::Exec => workload::expected(&parsed),
        Start::Attached { max_fds, nr_open } => {
            workload::expected_on_table(&parsed, max_fds, nr_open)
        }
    };
    if start == Start::Exec {
        let libraries = loader_libraries();
        let first = &mut expected[0];
        // The loader's closes (each library and ld.so.cache) and set-up's own close, and
        // its reads of each library.
        first.closes(libraries + 2, false);
        first.reads(libraries, false);
    } else {
        assert!(
            steps.starts_with("wait") || steps.starts_with("leader-exit wait"),
            "an attached workload waits first"
        );
        // The first wait's read, on a table the process had alone.
        let mut read = Expected::default();
        read.reads(1, false);
        let first = &mut expected[0];
        for (site, counts) in first.sites.iter_mut().zip(&read.sites) {
            counts_without(site, counts);
        }
        first.calls[Syscall::Read] -= 1;
        // `leader-exit` made its thread (a clone3) before the attach.
        if steps.starts_with("leader-exit") {
            first.calls[Syscall::Clone3] -= 1;
        }
    }
    let mut rows = per_pid(tally);
    let skipped: Vec<Site> = Site::ALL
        .into_iter()
        .filter(|&site| start == Start::Exec && loader_counted(site))
        .collect();
    for site in &skipped {
        rows.values_mut()
            .for_each(|row| row[*site as usize] = Counts::ZERO);
        expected
            .iter_mut()
            .for_each(|e| e.sites[*site as usize] = Counts::ZERO);
    }
    let counted = |e: &Expected| e.sites.iter().any(|c| c.total() > 0);
    let mut pids: Vec<u32> = rows.keys().copied().filter(|&p| p != first).collect();
    pids.sort_unstable();
    pids.insert(0, first);
    let expected_rows: Vec<&Expected> = expected.iter().filter(|e| counted(e)).collect();
    assert_eq!(
        rows.len(),
        expected_rows.len(),
        "processes with counts: {rows:?}"
    );
    for (pid, expected) in pids.iter().zip(expected_rows) {
        assert_eq!(rows.get(pid), Some(&expected.sites), "pid {pid}");
    }
    for site in Site::ALL.into_iter().filter(|site| !skipped.contains(site)) {
        let mut total = Counts::ZERO;
        expected.iter().for_each(|e| total.add(&e.site(site)));
        assert_eq!(tally.site_total(site), total, "{site:?}");
    }
    assert_eq!(tally.unattributed().count(), 0);
    assert_eq!(tally.missed_probe_runs(), 0);
    let calls: BTreeMap<&str, u64> = tally.calls().collect();
    for syscall in Syscall::ALL {
        if start == Start::Exec && auditor_common::syscalls::ALLOCATING.contains(&syscall) {
            continue;
        }
        let want: u64 = expected.iter().map(|e| e.calls(syscall)).sum();
        assert_eq!(
            calls.get(syscall.name()).copied().unwrap_or(0),
            want,
            "{} calls",
            syscall.name()
        );
    }
}

/// Runs `auditor ARGS` and returns its JSON report; the run must succeed.
pub fn json_report(args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
    let (code, report, _) = ended(start(&args));
    assert_eq!(code, Some(0), "{report}");
    report
}

/// An auditor started by [`start`], its report going to a file of its own.
pub struct Started {
    pub child: std::process::Child,
    dir: tempfile::TempDir,
}

impl Started {
    /// Where `-o` writes the report.
    pub fn report_path(&self) -> std::path::PathBuf {
        self.dir.path().join("report")
    }
}

/// Starts `auditor ARGS` with `-o FILE` given right after the subcommand.
pub fn start(args: &[&str]) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_auditor"))
        .arg(args[0])
        .arg("-o")
        .arg(dir.path().join("report"))
        .args(&args[1..])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    Started { child, dir }
}
/// The row of site `id` in a JSON report.
pub fn json_site<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap()
}

/// The counts of site `id` in a JSON report.
pub fn json_counts(report: &serde_json::Value, id: &str) -> Counts {
    let row = json_site(report, id);
    let count = |key: &str| row[key].as_u64().unwrap();
    Counts::new(count("taken"), count("not_taken"), count("unreadable"))
}

/// The size of the fd table (FDSize) of the live task at `task` (`/proc/PID` or
/// `/proc/PID/task/TID`), which it may have inherited larger than it needs.
pub fn fd_table_size(task: &std::path::Path) -> u32 {
    let status = std::fs::read_to_string(task.join("status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("FDSize:"))
        .and_then(|size| size.trim().parse().ok())
        .unwrap()
}

/// Waits until a tracer (strace) is attached to `pid`: TracerPid in its status.
pub fn wait_until_traced(pid: u32) {
    let traced = || {
        std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
            status
                .lines()
                .any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0"))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !traced() {
        assert!(
            std::time::Instant::now() < deadline,
            "strace never attached"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Waits for an auditor with `--format json` to end: its exit status, JSON report and how
/// long it took to end.
pub fn ended(started: Started) -> (Option<i32>, serde_json::Value, std::time::Duration) {
    let begun = std::time::Instant::now();
    let output = started.child.wait_with_output().unwrap();
    let took = begun.elapsed();
    let text = std::fs::read(started.dir.path().join("report")).unwrap_or_default();
    let report = serde_json::from_slice(&text).unwrap_or_else(|e| {
        panic!(
            "no report ({e}); stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), report, took)
}

/// The notes of a JSON report.
/// Asserts that some note of a JSON report passes `test`, showing them all if none does.
#[track_caller]
pub fn assert_note(report: &serde_json::Value, test: impl Fn(&str) -> bool) {
    let notes = json_notes(report);
    assert!(notes.iter().any(|n| test(n)), "{notes:?}");
}

pub fn json_notes(report: &serde_json::Value) -> Vec<&str> {
    report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

/// The fixture file `name` (in the repository's fixtures/).
pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(name)
}

/// An auditor session with `--metrics` on an ephemeral loopback port and `options`,
/// tracing the workload `steps`, its JSON report going to `report`; and the address it
/// serves on.
pub fn session_with_metrics(
    options: &[&str],
    steps: &[&str],
    report: &std::path::Path,
) -> (std::process::Child, String) {
    use std::io::BufRead as _;
    let mut auditor = std::process::Command::new(env!("CARGO_BIN_EXE_auditor"))
        .args(["trace", "--metrics", "127.0.0.1:0", "--format", "json"])
        .args(options)
        .arg("-o")
        .arg(report)
        .args(["--", WORKLOAD])
        .args(steps)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(auditor.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix("auditor: metrics at http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no address in `{line}`"))
        .to_string();
    (auditor, address)
}
