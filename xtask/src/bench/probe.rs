//! `cargo xtask bench probe` (as root): what each way of tracing costs a traced program
//! per call. The workload (`probe-bench`, raw syscalls, pinned to one CPU) times its own
//! loops, so attaching and detaching are not in those figures; they are measured apart,
//! as the time from starting a session to the first counted call and from the end of the
//! traced command (or Ctrl-C) to the auditor's exit.
//!
//! Configurations alternate within every repetition, so that all see the same machine,
//! and each traced run follows an untraced run of its own: the machine's speed moves
//! between two levels from one moment to the next (the untraced calls of one run by up
//! to a half), so a run takes each workload's fastest of several rounds, and each figure
//! is the median (and min) over repetitions of the ratio to the untraced run just before
//! it, and the added cost over the floor's added cost: the floor is the probe's own
//! programs on the same attach points, loaded to do nothing.

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::{
    median, programs,
    quiet::{self, BpfObjects},
};
use crate::{build, exec, fixtures, workspace_root};

#[derive(clap::Args)]
pub struct Options {
    /// Repetitions of every configuration (medians and mins are over these).
    #[arg(long, default_value_t = 7)]
    reps: usize,
    /// Seconds each workload loops for, in each round.
    #[arg(long, default_value_t = 0.25)]
    seconds: f64,
    /// Rounds of every workload in each run, each workload's fastest round kept. The
    /// machine's speed takes one of two levels for a while at a time (select of 1000 fds
    /// 12 or 18 µs a call), and which one a single round got decided a median of seven
    /// alone: two runs of the bench disagreed by up to 25%. Three rounds: select of 1000
    /// within 4% from one run to the next, against 60%.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The CPU the workload is pinned to (default: the last one); the two-thread workload
    /// also uses the next one.
    #[arg(long)]
    cpu: Option<usize>,
    /// Only these configurations (by name; default all that are installed).
    #[arg(long = "only", value_name = "CONFIG")]
    only: Vec<String>,
    /// Another auditor binary (an older build, say) to measure beside this one, as the
    /// `baseline` configuration (`auditor trace -- bench` and its start and stop) and the
    /// `baseline-strace` one (`auditor strace -- bench`).
    #[arg(long, value_name = "AUDITOR")]
    baseline: Option<PathBuf>,
    /// Only these workloads (by name; default all).
    #[arg(long = "workload", value_name = "WORKLOAD")]
    workloads: Vec<String>,
    /// Where the figures go as JSON.
    #[arg(long, default_value = "target/bench/probe.json")]
    json: PathBuf,
}

/// The workloads `probe-bench run` measures, in its order, with what each call is.
const WORKLOADS: [(&str, &str); 8] = [
    ("poll1", "poll, 1 fd, timeout 0"),
    (
        "pollneg",
        "poll, 2 fds, the first -1: a rare arm on every call",
    ),
    ("poll1024", "poll, 1024 fds (64 of them -1), timeout 0"),
    ("openclose", "openat + close of /dev/null"),
    ("openclose2", "openat + close, 2 threads (one table)"),
    ("select1000", "select, 1000 fds, timeout 0"),
    ("getppid", "getppid: a syscall no tracer here follows"),
    (
        "ioctl",
        "ioctl FIONREAD of /dev/null: a command the auditor does not count",
    ),
];

/// How the workload runs in one configuration.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Config {
    Untraced,
    Floor,
    Auditor,
    /// `auditor trace --stacks`.
    Stacks,
    Baseline,
    Untargeted,
    Bpftrace,
    Strace,
    /// Plain strace with one of the flags `auditor strace` adds.
    StraceWith(&'static str),
    StraceAsAuditor,
    /// strace with `auditor strace`'s flags writing its log to a file: what `strace -o LOG`
    /// costs before `auditor ingest LOG`.
    StraceLog,
    AuditorStrace,
    /// The `--baseline` auditor's `auditor strace`.
    BaselineStrace,
}

/// The flags `auditor strace` gives strace on a command (auditor/src/source/strace/run.rs)
/// besides `-f -o -e`.
const AUDITOR_STRACE_FLAGS: [&str; 6] = ["-Y", "-qq", "-v", "-s", "65536", "--seccomp-bpf"];

impl Config {
    /// strace, plain or with flags, or `auditor strace`.
    fn is_strace(self) -> bool {
        matches!(
            self,
            Config::Strace
                | Config::StraceWith(_)
                | Config::StraceAsAuditor
                | Config::StraceLog
                | Config::AuditorStrace
                | Config::BaselineStrace
        )
    }

    const ALL: [Config; 16] = [
        Config::Untraced,
        Config::Floor,
        Config::Auditor,
        Config::Stacks,
        Config::Baseline,
        Config::Untargeted,
        Config::Bpftrace,
        Config::Strace,
        Config::StraceWith("-Y"),
        Config::StraceWith("-v"),
        Config::StraceWith("-s 65536"),
        Config::StraceWith("--seccomp-bpf"),
        Config::StraceAsAuditor,
        Config::StraceLog,
        Config::AuditorStrace,
        Config::BaselineStrace,
    ];

    fn name(self) -> &'static str {
        match self {
            Config::Untraced => "untraced",
            Config::Floor => "floor",
            Config::Auditor => "auditor",
            Config::Stacks => "stacks",
            Config::Baseline => "baseline",
            Config::Untargeted => "untargeted",
            Config::Bpftrace => "bpftrace",
            Config::Strace => "strace",
            Config::StraceWith("-Y") => "strace -Y",
            Config::StraceWith("-v") => "strace -v",
            Config::StraceWith("-s 65536") => "strace -s 65536",
            Config::StraceWith(_) => "strace --seccomp-bpf",
            Config::StraceAsAuditor => "strace-flags",
            Config::StraceLog => "strace-log",
            Config::AuditorStrace => "auditor-strace",
            Config::BaselineStrace => "baseline-strace",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Config::Untraced => "no tracer",
            Config::Floor => {
                "auditor trace --empty-programs: the probe's attach points, programs pruned to a return"
            }
            Config::Auditor => "auditor trace -- bench",
            Config::Stacks => "auditor trace --stacks -- bench",
            Config::Baseline => "the --baseline auditor: auditor trace -- bench",
            Config::Untargeted => "auditor trace --pid OTHER: the bench is not a target",
            Config::Bpftrace => "bpftrace counting the bench's syscalls (enter and exit) by probe",
            Config::Strace => "strace -f -o /dev/null -e <auditor strace's set>",
            Config::StraceWith(_) => "the same with one more flag",
            Config::StraceAsAuditor => {
                "the same with auditor strace's -Y -qq -v -s 65536 --seccomp-bpf"
            }
            Config::StraceLog => "the same, writing its log to a file (strace -o LOG)",
            Config::AuditorStrace => "auditor strace -o /dev/null -- bench",
            Config::BaselineStrace => "the --baseline auditor: auditor strace -- bench",
        }
    }
}

/// The syscalls `auditor strace` traces (the fixtures' list and the execs).
fn strace_set() -> String {
    format!("{},execve", fixtures::traced())
}

struct Tools {
    auditor: PathBuf,
    baseline: Option<PathBuf>,
    bench: PathBuf,
    dir: PathBuf,
    /// The CPUs but the workload's, as taskset takes them (None on one CPU): strace and
    /// the auditor's strace reader run there, so that they never take the workload's CPU
    /// and one repetition's tracer sits where the next one's does.
    tracer_cpus: Option<String>,
}

impl Tools {
    fn bench_args(&self, options: &Options, cpu: usize) -> Vec<String> {
        let mut args = vec![
            self.bench.display().to_string(),
            "run".into(),
            "--cpu".into(),
            cpu.to_string(),
            "--seconds".into(),
            options.seconds.to_string(),
            "--rounds".into(),
            options.rounds.to_string(),
        ];
        if !options.workloads.is_empty() {
            args.extend(["--only".into(), options.workloads.join(",")]);
        }
        args
    }

    /// `line` run on the tracer's CPUs (the bench pins itself to its own).
    fn on_tracer_cpus(&self, line: Vec<String>) -> Vec<String> {
        match &self.tracer_cpus {
            Some(cpus) => ["taskset".to_string(), "-c".into(), cpus.clone()]
                .into_iter()
                .chain(line)
                .collect(),
            None => line,
        }
    }

    /// The command line that runs the bench under `config` (None: the untargeted one,
    /// which runs the bench untraced beside a session).
    fn command(&self, config: Config, bench: &[String]) -> Vec<String> {
        let auditor = self.auditor.display().to_string();
        let report = self.dir.join("auditor-report.json").display().to_string();
        let mut line: Vec<String> = match config {
            Config::Untraced | Config::Untargeted => vec![],
            Config::Floor => vec![auditor, "trace".into(), "--empty-programs".into()],
            Config::Auditor => vec![auditor, "trace".into(), "--format".into(), "json".into()],
            Config::Stacks => vec![
                auditor,
                "trace".into(),
                "--stacks".into(),
                "--format".into(),
                "json".into(),
            ],
            Config::Baseline => {
                let baseline = self.baseline.as_ref().expect("configured with a baseline");
                vec![baseline.display().to_string(), "trace".into()]
            }
            Config::Bpftrace => {
                let probes: Vec<String> = ["poll", "select", "openat", "close"]
                    .iter()
                    .flat_map(|s| {
                        ["enter", "exit"].map(|e| format!("tracepoint:syscalls:sys_{e}_{s}"))
                    })
                    .collect();
                let program = format!(
                    "{} /pid == cpid/ {{ @[probe] = count(); }}",
                    probes.join(",")
                );
                return vec![
                    "bpftrace".into(),
                    "-e".into(),
                    program,
                    "-c".into(),
                    bench.join(" "),
                ];
            }
            Config::Strace
            | Config::StraceWith(_)
            | Config::StraceAsAuditor
            | Config::StraceLog => {
                let flags: Vec<&str> = match config {
                    Config::StraceWith(flags) => flags.split(' ').collect(),
                    Config::StraceAsAuditor | Config::StraceLog => AUDITOR_STRACE_FLAGS.to_vec(),
                    _ => vec![],
                };
                let output = match config {
                    Config::StraceLog => self.dir.join("strace.log").display().to_string(),
                    _ => "/dev/null".into(),
                };
                self.on_tracer_cpus(
                    ["strace", "-f", "-o", &output, "-e"]
                        .into_iter()
                        .map(String::from)
                        .chain([strace_set()])
                        .chain(flags.into_iter().map(String::from))
                        .collect(),
                )
            }
            Config::AuditorStrace => self.on_tracer_cpus(vec![auditor, "strace".into()]),
            Config::BaselineStrace => {
                let baseline = self.baseline.as_ref().expect("configured with a baseline");
                self.on_tracer_cpus(vec![baseline.display().to_string(), "strace".into()])
            }
        };
        if matches!(
            config,
            Config::Floor
                | Config::Auditor
                | Config::Stacks
                | Config::Baseline
                | Config::AuditorStrace
                | Config::BaselineStrace
        ) {
            line.extend(["-o".into(), report]);
        }
        if !line.is_empty() {
            line.push("--".into());
        }
        line.extend(bench.iter().cloned());
        line
    }
}

/// Every CPU but `cpu` of `cpus`, as taskset's list; None when there is no other.
fn tracer_cpus(cpus: usize, cpu: usize) -> Option<String> {
    let others: Vec<String> = (0..cpus)
        .filter(|&c| c != cpu)
        .map(|c| c.to_string())
        .collect();
    (!others.is_empty()).then(|| others.join(","))
}

/// ns per call of each workload, from the bench's JSON lines among whatever else the
/// tracer printed on stdout.
fn workload_figures(stdout: &str) -> BTreeMap<String, f64> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|v| {
            Some((
                v["workload"].as_str()?.to_string(),
                v["ns_per_call"].as_f64()?,
            ))
        })
        .collect()
}

/// Runs of a strace configuration in one repetition. A ptraced call takes one of two
/// speeds for the whole life of a strace process, rounds or not (openat + close under
/// plain strace: 62 or 71-75 µs a call, four runs in seven slow in one bench and one in
/// the next); the fastest of three processes is stable.
const STRACE_RUNS: usize = 3;

/// Each workload's fastest figure of `runs` runs of `line`.
fn fastest_of(
    runs: usize,
    line: &[String],
    workloads: usize,
) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut fastest: BTreeMap<String, f64> = BTreeMap::new();
    for _ in 0..runs {
        for (workload, ns) in run_line(line, workloads)? {
            let best = fastest.entry(workload).or_insert(f64::INFINITY);
            *best = best.min(ns);
        }
    }
    Ok(fastest)
}

fn run_line(line: &[String], workloads: usize) -> anyhow::Result<BTreeMap<String, f64>> {
    let output = Command::new(&line[0])
        .args(&line[1..])
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running {}", line[0]))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}",
            line.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let figures = workload_figures(&String::from_utf8_lossy(&output.stdout));
    if figures.len() != workloads {
        bail!("{}: the bench printed {figures:?}", line.join(" "));
    }
    Ok(figures)
}

/// An auditor session on another process, attached (it says so on stderr).
struct Beside {
    session: Child,
    other: Child,
}

impl Beside {
    fn start(tools: &Tools) -> anyhow::Result<(Beside, Duration)> {
        let other = Command::new(&tools.bench).arg("idle").spawn()?;
        let started = Instant::now();
        let mut session = Command::new(&tools.auditor)
            .args(["trace", "--format", "json", "-o", "/dev/null", "--pid"])
            .arg(other.id().to_string())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = session.stderr.take().context("stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        loop {
            let Some(line) = lines.next() else {
                bail!("auditor trace --pid ended before attaching");
            };
            if line?.contains("attached") {
                break;
            }
        }
        let attached = started.elapsed();
        // Keep reading its stderr, so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok((Beside { session, other }, attached))
    }

    /// Ctrl-C to the session; how long it took to exit.
    fn stop(mut self) -> anyhow::Result<Duration> {
        let asked = Instant::now();
        signal(self.session.id(), libc::SIGINT);
        let status = self.session.wait()?;
        let took = asked.elapsed();
        let _ = self.other.kill();
        let _ = self.other.wait();
        if !status.success() {
            bail!("auditor trace --pid ended with {status}");
        }
        Ok(took)
    }
}

/// How long an earlier run's BPF objects may take to go before the bench gives up.
const TEARDOWN_LIMIT: Duration = Duration::from_secs(60);

/// The window before each run in which the machine's CPU use is measured.
const QUIET_WINDOW: Duration = Duration::from_millis(300);

/// Above this spread of the untraced calls' times over the repetitions (of their median),
/// the table says the ratios are uncertain.
const UNTRACED_SPREAD: f64 = 0.10;

/// Above this share of the CPUs' time used by other work, a run is on a busy machine.
const BUSY: f64 = 0.10;

/// Waits (up to 10 s) for a window in which other work used at most [`BUSY`] of the CPUs;
/// the share of the last window measured.
fn quiet_moment() -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let share = quiet::busy_share(QUIET_WINDOW);
        if share <= BUSY || Instant::now() >= deadline {
            return share;
        }
    }
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) on a child this process started and has not reaped.
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}

fn monotonic_ns() -> u128 {
    // SAFETY: a valid timespec for clock_gettime.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u128 * 1_000_000_000 + now.tv_nsec as u128
}

/// One session around `probe-bench stamp`: (start to its counted call, its end to exit).
fn stamped(tools: &Tools, prefix: &[String]) -> anyhow::Result<(Duration, Duration)> {
    let stamp = tools.dir.join("stamp");
    let _ = std::fs::remove_file(&stamp);
    let mut line = prefix.to_vec();
    line.extend([
        tools.bench.display().to_string(),
        "stamp".into(),
        stamp.display().to_string(),
    ]);
    let started = monotonic_ns();
    let output = Command::new(&line[0]).args(&line[1..]).output()?;
    let ended = monotonic_ns();
    if !output.status.success() {
        bail!(
            "{} failed: {}",
            line.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = std::fs::read_to_string(&stamp)?;
    let mut times = text.split_whitespace().map(|t| t.parse::<u128>());
    let (Some(Ok(before)), Some(Ok(after))) = (times.next(), times.next()) else {
        bail!("bad stamp {text:?}");
    };
    let ns = |n: u128| Duration::from_nanos(n as u64);
    Ok((ns(before - started), ns(ended - after)))
}

fn machine() -> Value {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let model = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("")
        .trim()
        .to_string();
    json!({
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "cpu_model": model,
    })
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the probe bench loads eBPF programs: run it as root");
    }
    // The references it measures beside the probe.
    crate::setup::ensure_packages(&["bpftrace", "strace"], "the probe bench's references")?;
    let auditor = build::run()?;
    exec(
        Command::new("cargo")
            .args([
                "build",
                "--release",
                "--package",
                "xtask",
                "--bin",
                "probe-bench",
            ])
            .current_dir(workspace_root()),
    )?;
    let dir = workspace_root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = options.cpu.unwrap_or(cpus - 1);
    let tools = Tools {
        auditor,
        baseline: options.baseline.clone(),
        bench: workspace_root().join("target/release/probe-bench"),
        dir,
        tracer_cpus: tracer_cpus(cpus, cpu),
    };
    let installed = |tool: &str| which::which(tool).is_ok();
    let configs: Vec<Config> = Config::ALL
        .into_iter()
        .filter(|c| {
            options.only.is_empty()
                || *c == Config::Untraced
                || options.only.iter().any(|o| o == c.name())
        })
        .filter(|c| match c {
            Config::Bpftrace => installed("bpftrace"),
            c if c.is_strace() => installed("strace"),
            Config::Baseline => options.baseline.is_some(),
            Config::BaselineStrace => options.baseline.is_some() && installed("strace"),
            _ => true,
        })
        .collect();
    let bench = tools.bench_args(options, cpu);
    let workloads: Vec<(&str, &str)> = WORKLOADS
        .into_iter()
        .filter(|(name, _)| {
            options.workloads.is_empty() || options.workloads.iter().any(|w| w == name)
        })
        .collect();
    if workloads.len()
        != options
            .workloads
            .len()
            .max(WORKLOADS.len() * usize::from(options.workloads.is_empty()))
    {
        bail!(
            "unknown workload among {:?}; known: {:?}",
            options.workloads,
            WORKLOADS.map(|w| w.0)
        );
    }
    // What is loaded before any session: each run waits until everything loaded since is
    // gone, so that none is measured inside an earlier session's teardown.
    let before = BpfObjects::now().context("listing the loaded BPF programs (bpf(2))")?;
    let mut teardowns = Vec::new();
    quiet::adopt_orphans()?;
    let mut settle = || -> anyhow::Result<()> {
        let programs = quiet::wait_for_teardown(&before, TEARDOWN_LIMIT)?;
        let exits = quiet::wait_for_children(TEARDOWN_LIMIT)?;
        teardowns.push(seconds(programs + exits));
        Ok(())
    };
    // figures[config][workload] = ns per call, one per repetition; beside[config][workload]
    // the untraced run's just before it.
    let mut figures: BTreeMap<&str, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    let mut beside: BTreeMap<&str, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    let record = |into: &mut BTreeMap<&str, BTreeMap<String, Vec<f64>>>,
                  config: Config,
                  result: BTreeMap<String, f64>| {
        for (workload, ns) in result {
            into.entry(config.name())
                .or_default()
                .entry(workload)
                .or_default()
                .push(ns);
        }
    };
    let (mut attach_beside, mut stop_beside) = (Vec::new(), Vec::new());
    let mut machine_by_rep = Vec::new();
    for rep in 0..options.reps {
        let load = quiet::load_average();
        let mut busiest: f64 = 0.0;
        for &config in &configs {
            if config != Config::Untraced {
                busiest = busiest.max(quiet_moment());
                let untraced = run_line(&bench, workloads.len())?;
                record(&mut beside, config, untraced);
            }
            busiest = busiest.max(quiet_moment());
            let result = if config == Config::Untargeted {
                let (beside, attached) = Beside::start(&tools)?;
                let result = run_line(&bench, workloads.len());
                stop_beside.push(seconds(beside.stop()?));
                attach_beside.push(seconds(attached));
                result?
            } else {
                let runs = if config.is_strace() { STRACE_RUNS } else { 1 };
                fastest_of(runs, &tools.command(config, &bench), workloads.len())?
            };
            settle()?;
            record(&mut figures, config, result);
        }
        eprintln!(
            "repetition {} of {}: load {load:.2} before it; other work used at most {:.0}% of \
             the CPUs before its runs{}",
            rep + 1,
            options.reps,
            busiest * 100.0,
            if busiest > BUSY { " (busy)" } else { "" }
        );
        machine_by_rep.push((load, busiest));
    }

    let mut sessions = BTreeMap::new();
    // A session of `binary` with `args`, its report thrown away, before the command.
    let session = |binary: &Path, args: &[&str]| -> Vec<String> {
        std::iter::once(binary.display().to_string())
            .chain(
                args.iter()
                    .chain(&["-o", "/dev/null", "--"])
                    .map(|a| a.to_string()),
            )
            .collect()
    };
    let mut prefixes: Vec<(&str, Vec<String>)> = vec![
        ("auditor trace", session(&tools.auditor, &["trace"])),
        (
            "auditor trace --stacks",
            session(&tools.auditor, &["trace", "--stacks"]),
        ),
        (
            "auditor trace --empty-programs",
            session(&tools.auditor, &["trace", "--empty-programs"]),
        ),
        ("auditor strace", session(&tools.auditor, &["strace"])),
    ];
    if let Some(baseline) = &options.baseline {
        prefixes.push(("baseline trace", session(baseline, &["trace"])));
    }
    for (name, prefix) in &prefixes {
        let (mut starts, mut stops) = (Vec::new(), Vec::new());
        for _ in 0..options.reps.min(5) {
            quiet_moment();
            let (start, stop) = stamped(&tools, prefix)?;
            settle()?;
            starts.push(seconds(start));
            stops.push(seconds(stop));
        }
        sessions.insert(*name, (starts, stops));
    }

    // Where the time goes, per workload: a pass of the auditor and one of the floor with
    // the run statistics on.
    let mut program_times = BTreeMap::new();
    for &(workload, _) in &workloads {
        let bench = [
            tools.bench.display().to_string(),
            "run".into(),
            "--cpu".into(),
            cpu.to_string(),
            "--seconds".into(),
            options.seconds.to_string(),
            "--only".into(),
            workload.into(),
        ];
        let mut pass = |flags: &[&str]| -> anyhow::Result<Vec<programs::ProgramTime>> {
            quiet_moment();
            let times = programs::pass(&tools.auditor, flags, &bench, &tools.dir)?;
            settle()?;
            Ok(times)
        };
        let auditor = pass(&[])?;
        let floor = pass(&["--empty-programs"])?;
        program_times.insert(workload, (auditor, floor));
    }

    let untraced = &figures["untraced"];
    let floor = figures.get("floor");
    let mut rows = Vec::new();
    println!(
        "probe bench: {} reps, {} s per workload, pinned to CPU {cpu}; ns per call, median (min); \
         ratio to the untraced run just before each and added cost over the floor's, medians of per-rep values; \
         each run's figure is a workload's fastest of {} rounds, a strace row's repetition \
         the fastest of {STRACE_RUNS} runs",
        options.reps, options.seconds, options.rounds
    );
    for &(workload, what) in &workloads {
        println!("\n{workload}: {what}");
        let base = &untraced[workload];
        // The same untraced calls from one repetition to the next: where the machine's
        // speed moves that much, so may every ratio.
        let (low, high) = base.iter().fold((f64::INFINITY, 0.0_f64), |(l, h), &ns| {
            (l.min(ns), h.max(ns))
        });
        let spread = (high - low) / median(base);
        if spread > UNTRACED_SPREAD {
            println!(
                "  untraced took {low:.0} to {high:.0} ns from one repetition to the next ({:.0}% \
                 of its median): the ratios are uncertain by about as much",
                spread * 100.0
            );
        }
        println!(
            "  {:<16} {:>18} {:>8} {:>12}",
            "config", "ns/call", "ratio", "added/floor"
        );
        // The untraced run just before `config`'s of each repetition.
        let base_of = |config: Config| -> &Vec<f64> {
            beside
                .get(config.name())
                .map_or(base, |runs| &runs[workload])
        };
        for &config in &configs {
            let ns = &figures[config.name()][workload];
            let ratios: Vec<f64> = ns.iter().zip(base_of(config)).map(|(n, b)| n / b).collect();
            let over_floor: Option<Vec<f64>> =
                floor.filter(|_| config != Config::Untraced).map(|floor| {
                    ns.iter()
                        .zip(base_of(config))
                        .zip(floor[workload].iter().zip(base_of(Config::Floor)))
                        .map(|((n, b), (f, fb))| (n - b) / (f - fb))
                        .collect()
                });
            let min = ns.iter().copied().fold(f64::INFINITY, f64::min);
            let over = over_floor.as_deref().map(median);
            println!(
                "  {:<16} {:>9.0} ({:>6.0}) {:>7.2}× {:>12}",
                config.name(),
                median(ns),
                min,
                median(&ratios),
                over.map_or(String::new(), |o| format!("{o:.1}")),
            );
            rows.push(json!({
                "workload": workload,
                "config": config.name(),
                "ns_per_call": ns,
                "untraced_before_ns": base_of(config),
                "median_ns": median(ns),
                "min_ns": min,
                "median_ratio": median(&ratios),
                "min_ratio": ratios.iter().copied().fold(f64::INFINITY, f64::min),
                "added_over_floor": over,
                "untraced_spread": spread,
            }));
        }
        if let Some((auditor, floor)) = program_times.get(workload) {
            print!("{}", programs::table(auditor, floor));
        }
    }
    let busy: Vec<String> = machine_by_rep
        .iter()
        .enumerate()
        .filter(|(_, (_, busiest))| *busiest > BUSY)
        .map(|(rep, (_, busiest))| format!("{} ({:.0}%)", rep + 1, busiest * 100.0))
        .collect();
    let loads: Vec<String> = machine_by_rep
        .iter()
        .map(|(load, _)| format!("{load:.2}"))
        .collect();
    println!(
        "\nmachine: load before each repetition {}; repetitions run on a busy machine (other \
         work above {:.0}% of the CPUs in the {} ms before a run): {}",
        loads.join(", "),
        BUSY * 100.0,
        QUIET_WINDOW.as_millis(),
        if busy.is_empty() {
            "none".to_string()
        } else {
            busy.join(", ")
        }
    );
    println!(
        "teardown: each run waited for the BPF programs and links of the one before to be \
         gone, and for its processes (the detaching helper, adopted) to exit: median {:.2} s, \
         at most {:.2} s",
        median(&teardowns),
        teardowns.iter().copied().fold(0.0, f64::max)
    );
    println!("\nsessions (medians of {}):", options.reps.min(5));
    let mut session_json = Vec::new();
    for (name, (starts, stops)) in &sessions {
        println!(
            "  {name:<32} start to first counted call {:.3} s, command's end to exit {:.3} s",
            median(starts),
            median(stops)
        );
        session_json.push(json!({"session": name, "start_s": starts, "stop_s": stops,
            "median_start_s": median(starts), "median_stop_s": median(stops)}));
    }
    if !attach_beside.is_empty() {
        println!(
            "  {:<32} start to attached {:.3} s, Ctrl-C to exit {:.3} s",
            "auditor trace --pid",
            median(&attach_beside),
            median(&stop_beside)
        );
        session_json.push(
            json!({"session": "auditor trace --pid", "start_s": attach_beside,
            "stop_s": stop_beside, "median_start_s": median(&attach_beside),
            "median_stop_s": median(&stop_beside)}),
        );
    }
    let configs_json: Vec<Value> = configs
        .iter()
        .map(|c| json!({"name": c.name(), "what": c.description()}))
        .collect();
    let report = json!({
        "machine": machine(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "reps": options.reps,
        "seconds_per_workload": options.seconds,
        "rounds": options.rounds,
        "cpu": cpu,
        "configs": configs_json,
        "workloads": workloads.iter().map(|(n, w)| json!({"name": n, "what": w})).collect::<Vec<_>>(),
        "results": rows,
        "sessions": session_json,
        "repetitions": machine_by_rep.iter().map(|(load, busiest)| json!({
            "load_average": load, "busy_share_before_runs": busiest, "busy": *busiest > BUSY,
        })).collect::<Vec<_>>(),
        "teardown_s": teardowns,
        "program_runs": program_times.iter().map(|(workload, (auditor, floor))| json!({
            "workload": workload,
            "auditor": programs::to_json(auditor),
            "floor": programs::to_json(floor),
        })).collect::<Vec<_>>(),
    });
    let path: &Path = &options.json;
    std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    println!("\nfigures written to {}", path.display());
    // strace-log's last log (a poll of 1024 fds writes 80 MB a second of it).
    let _ = std::fs::remove_file(tools.dir.join("strace.log"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracers_run_on_every_cpu_but_the_workloads() {
        assert_eq!(tracer_cpus(2, 1).as_deref(), Some("0"));
        assert_eq!(tracer_cpus(4, 1).as_deref(), Some("0,2,3"));
        assert_eq!(tracer_cpus(1, 0), None);
        let tools = Tools {
            auditor: "auditor".into(),
            baseline: None,
            bench: "probe-bench".into(),
            dir: "/tmp".into(),
            tracer_cpus: tracer_cpus(2, 1),
        };
        let line = tools.command(Config::AuditorStrace, &["probe-bench".into()]);
        assert_eq!(line[..4], ["taskset", "-c", "0", "auditor"]);
        let tools = Tools {
            baseline: Some("/old/auditor".into()),
            ..tools
        };
        let line = tools.command(Config::BaselineStrace, &["probe-bench".into()]);
        assert_eq!(line[..5], ["taskset", "-c", "0", "/old/auditor", "strace"]);
        assert_eq!(line[5..7], ["-o", "/tmp/auditor-report.json"]);
        let line = tools.command(Config::Strace, &["probe-bench".into()]);
        assert_eq!(
            line[..7],
            ["taskset", "-c", "0", "strace", "-f", "-o", "/dev/null"]
        );
        let line = tools.command(Config::StraceLog, &["probe-bench".into()]);
        assert_eq!(line[4..7], ["-f", "-o", "/tmp/strace.log"]);
        assert!(line.contains(&"--seccomp-bpf".to_string()), "{line:?}");
        // The probe's tracers run in the kernel, on the workload's CPU: not pinned.
        let line = tools.command(Config::Auditor, &["probe-bench".into()]);
        assert_eq!(line[0], "auditor");
    }
}
