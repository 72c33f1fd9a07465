//! The kernel's own count as the oracle. `cargo xtask oracle-kernel` builds (once, under
//! `target/oracle/`) Debian's 7.2 source with `CONFIG_PROFILE_ANNOTATED_BRANCHES`, from
//! `make allnoconfig` and the options declared in `xtask/oracle/kernel.config`.
//! `cargo xtask test --oracle` boots it under QEMU and, for each workload, compares the
//! kernel's correct/incorrect count of every hinted site's own `likely()`/`unlikely()`
//! (`trace_stat/branch_annotated`) with the auditor's count of the same run, exactly; the
//! result goes to `docs/oracle.md`.
//!
//! The window: the auditor traces `oracle-window`, which reads branch_annotated, runs the
//! workload, waits for every process of it, and reads again. Everything the kernel counts
//! between the readings is a traced process's, but for the window's own few calls (fork,
//! wait4, pread) and the auditor's (wait4 and nanosleep, on no site's path); the auditor
//! counts the window's whole life. Both are the same whatever the workload, so a run of
//! `:` is subtracted from each side.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::{
    apt, build, exec,
    vm::{
        guest::{self, Outcome},
        kernel::Kernel,
    },
    workspace_root,
};

/// The release built: Debian's `linux-source-VERSION`, from the suite that carries it.
const VERSION: &str = "7.2";

/// What the kernel's build needs of Debian: kconfig's parser (flex, bison), bc for its
/// constants, libelf for objtool, pahole for BTF, cpio for the in-kernel headers.
const BUILD_PACKAGES: [&str; 6] = ["flex", "bison", "bc", "libelf-dev", "dwarves", "cpio"];

/// The programs the real workloads run (the guest runs the host's): sshd and ssh, curl
/// beside python's http.server, OpenBSD's nc (`-N`), git.
const WORKLOAD_PACKAGES: [&str; 5] = [
    "openssh-server",
    "openssh-client",
    "curl",
    "netcat-openbsd",
    "git",
];

/// Where the oracle's tree, build and views live.
fn dir() -> PathBuf {
    workspace_root().join("target/oracle")
}

fn tree() -> PathBuf {
    dir().join(format!("linux-source-{VERSION}"))
}

#[derive(clap::Args)]
pub struct Options {
    /// Parallel jobs of the kernel's build.
    #[arg(long, default_value_t = std::thread::available_parallelism().map_or(2, usize::from))]
    jobs: usize,
}

/// `cargo xtask oracle-kernel`.
pub fn run(options: &Options) -> anyhow::Result<()> {
    let kernel = kernel(options.jobs)?;
    println!("{}: {}", kernel.name, kernel.vmlinuz.display());
    Ok(())
}

/// The full source tree, fetched once through an apt state of its own.
fn fetch_tree() -> anyhow::Result<PathBuf> {
    let tree = tree();
    if tree.join("Makefile").is_file() {
        return Ok(tree);
    }
    let apt_dir = dir().join("apt");
    let package = format!("linux-source-{VERSION}");
    let suite = apt::Suite::update(&apt_dir, crate::releases::release(VERSION)?.suite)?;
    let deb = suite
        .download(std::slice::from_ref(&package), &apt_dir)?
        .pop()
        .context("apt-get download left no .deb")?;
    let unpacked = apt_dir.join("unpacked");
    std::fs::create_dir_all(&unpacked)?;
    exec(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
    let tarball = unpacked.join("usr/src").join(format!("{package}.tar.xz"));
    exec(
        Command::new("tar")
            .arg("xf")
            .arg(&tarball)
            .arg("-C")
            .arg(dir()),
    )?;
    std::fs::remove_dir_all(&unpacked)?;
    Ok(tree)
}

/// The lines of the config fragment that set an option (`CONFIG_X=y`).
fn wanted_options(fragment: &str) -> Vec<&str> {
    fragment
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("CONFIG_"))
        .collect()
}

/// The fragment's options that the generated `.config` does not hold as written.
fn missing_options<'a>(fragment: &'a str, config: &str) -> Vec<&'a str> {
    wanted_options(fragment)
        .into_iter()
        .filter(|wanted| !config.lines().any(|line| line.trim() == *wanted))
        .collect()
}

/// Configures (when the fragment changed) and builds the oracle kernel: make is
/// incremental, so a second run only checks.
pub fn kernel(jobs: usize) -> anyhow::Result<Kernel> {
    crate::setup::ensure_packages(&BUILD_PACKAGES, "building the oracle's kernel")?;
    let tree = fetch_tree()?;
    let build = dir().join("build");
    std::fs::create_dir_all(&build)?;
    let fragment_path = workspace_root().join("xtask/oracle/kernel.config");
    let fragment = std::fs::read_to_string(&fragment_path)
        .with_context(|| format!("cannot read {}", fragment_path.display()))?;
    let stamp = build.join(".oracle-fragment");
    let config = build.join(".config");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(fragment.as_str())
        || !config.is_file()
    {
        exec(
            Command::new("make")
                .current_dir(&tree)
                .arg(format!("O={}", build.display()))
                .arg("ARCH=x86_64")
                .arg(format!("KCONFIG_ALLCONFIG={}", fragment_path.display()))
                .arg("allnoconfig")
                .stdout(std::process::Stdio::null()),
        )?;
        let written = std::fs::read_to_string(&config)?;
        let missing = missing_options(&fragment, &written);
        if !missing.is_empty() {
            bail!(
                "{}: kconfig dropped {} (a dependency is missing from the fragment)",
                fragment_path.display(),
                missing.join(", ")
            );
        }
        std::fs::write(&stamp, &fragment)?;
    }
    let start = Instant::now();
    exec(
        Command::new("make")
            .current_dir(&build)
            .arg(format!("-j{jobs}"))
            .arg("bzImage")
            .stdout(std::process::Stdio::null()),
    )?;
    println!(
        "the oracle kernel's build took {}",
        humantime::format_duration(Duration::from_secs(start.elapsed().as_secs()))
    );
    Ok(Kernel {
        name: format!("{VERSION} (oracle build, PROFILE_ANNOTATED_BRANCHES)"),
        vmlinuz: build.join("arch/x86/boot/bzImage"),
        modules: Vec::new(),
    })
}

/// One workload of the comparison: a name and a shell script run in the window.
struct Workload {
    name: &'static str,
    /// Shell set-up before the session (outside the window).
    before: &'static str,
    script: String,
}

/// Steps of `auditor-workload` that drive both arms of the sites they reach.
const STEPS: [(&str, &str); 5] = [
    ("steps-default", "default"),
    (
        "steps-fds",
        "open:5 open-enoent:3 open-emfile:2 open-badflags:2 openat2:2:24 openat2:3:12 \
         openat2-badmode:2 openat2-emptypath:2 accept-eagain:4 pipe:2 socketpair:1 dup:3 \
         dupfd:2:100 close:4:1 close-fd:70 memfd_create:2 signalfd4:2 inotify_init1:2 \
         timerfd_create:2 eventfd:2 epoll_create:2 pidfd_open:2 userfaultfd:1 pidfd_getfd:2 \
         accept-einval:3 accept-badflags:2 socketpair-badtype:2 openat2-cached:2 open-unmapped:3",
    ),
    (
        "steps-lookups",
        "read:2 opath:3 read-closed:2 close:2:1 dup2:7:3 dup3:9:4:2 dup2-closed:3 chmod:3 \
         fchmodat2:5:2 fork thread read:3 opath:2 read-closed:4 dup2:2:2",
    ),
    (
        "steps-readiness",
        "select:30:40 select:3:-1 select:2:5000:0:100 pselect6:4:9 select-sparse:2:300 \
         poll:5:64:8 ppoll:2:4:1 poll-einval:2 epoll_wait:3:8 epoll_pwait:2:0:-1 \
         epoll_pwait2:2:4:10 epoll-ebadf:2 epoll_ctl:5 epoll-paths:502 epoll_ctl:2",
    ),
    (
        "steps-growth",
        "dupfd:1:512 dupfd-emfile:1:970 dupfd-emfile:1:1005 dup2-emfile:3:970 dup2-emfile:2:1005 \
         addfd:3 addfd-emfile:2:1005 addfd-emfile:1:970",
    ),
];

/// A throwaway sshd on 127.0.0.1, keys made before the window.
const SSH_BEFORE: &str = "mkdir -p /run/sshd /tmp/ssh && ssh-keygen -q -t ed25519 -N '' -f /tmp/ssh/host \
    && ssh-keygen -q -t ed25519 -N '' -f /tmp/ssh/id && cp /tmp/ssh/id.pub /tmp/ssh/authorized_keys \
    && printf 'ListenAddress 127.0.0.1\\nPort 2222\\nHostKey /tmp/ssh/host\\nPidFile /tmp/ssh/pid\\n\
AuthorizedKeysFile /tmp/ssh/authorized_keys\\nStrictModes no\\nUsePAM no\\n\
PermitRootLogin prohibit-password\\nPasswordAuthentication no\\n' > /tmp/ssh/config";

const SSH: &str = "/usr/sbin/sshd -D -f /tmp/ssh/config & sshd=$!; \
    for i in $(seq 100); do [ -s /tmp/ssh/pid ] && break; sleep 0.1; done; \
    ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o LogLevel=ERROR -i /tmp/ssh/id -p 2222 root@127.0.0.1 'ls / >/dev/null; echo ok'; \
    sleep 1; kill $sshd; wait";

const HTTP_CURL: &str = "python3 -m http.server 8767 --bind 127.0.0.1 >/dev/null 2>&1 & server=$!; \
    for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:8767/ && break; sleep 0.2; done; \
    for i in 1 2 3; do curl -s http://127.0.0.1:8767/ >/dev/null; done; kill $server; wait";

const NC: &str = "nc -l 127.0.0.1 9999 >/dev/null & listener=$!; sleep 1; \
    head -c 100000 /dev/zero | nc -N 127.0.0.1 9999; wait $listener";

const GIT: &str = "rm -rf /tmp/repo && git init -q /tmp/repo && cd /tmp/repo && \
    for i in 1 2 3 4 5; do echo $i > f$i; done && git add . && \
    git -c user.name=o -c user.email=o@example.org commit -qm one && git log --oneline >/dev/null && \
    git status --short >/dev/null && git gc -q";

fn workloads(workload_binary: &Path) -> Vec<Workload> {
    let mut workloads = vec![Workload {
        name: "baseline",
        before: "",
        script: ":".into(),
    }];
    for (name, steps) in STEPS {
        let before = if name == "steps-growth" {
            // fs.nr_open at 1000 (no power of two), the limit above it: the growth's
            // rounding and refusals (as the workload cases `growth past fs.nr_open` and
            // `seccomp's ADDFD`).
            "sysctl -qw fs.nr_open=1000; ulimit -n 2048"
        } else {
            "sysctl -qw fs.nr_open=1048576"
        };
        workloads.push(Workload {
            name,
            before,
            script: format!("{} {steps}", workload_binary.display()),
        });
    }
    for (name, before, script) in [
        ("ssh", SSH_BEFORE, SSH),
        ("http.server+curl", "", HTTP_CURL),
        ("nc", "", NC),
        (
            "python-asyncio",
            "",
            "python3 /work/main/fixtures/programs/asyncio_echo.py",
        ),
        ("git", "", GIT),
    ] {
        workloads.push(Workload {
            name,
            before,
            script: script.into(),
        });
    }
    workloads
}

/// Single-quoted for sh.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The guest's script: each workload in a session of its own, its files in /tmp/out.
fn guest_script(auditor: &Path, window: &Path, workloads: &[Workload]) -> String {
    let mut script = String::from(
        "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp\n\
         mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing\n\
         cd /tmp\n",
    );
    for (index, workload) in workloads.iter().enumerate() {
        let file = format!("/tmp/out/{index}");
        writeln!(
            script,
            "( {before}\n  {auditor} trace --format json -o {file}.json -- {window} {file} {body} \
             > {file}.stdout 2> {file}.stderr; echo $? > {file}.status )",
            before = if workload.before.is_empty() {
                ":"
            } else {
                workload.before
            },
            auditor = auditor.display(),
            window = window.display(),
            body = quoted(&workload.script),
        )
        .expect("a String");
    }
    script
}

/// One entry of branch_annotated: where the hint is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    function: String,
    file: String,
    line: u32,
}

/// Correct and incorrect predictions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcomes {
    correct: u64,
    incorrect: u64,
}

/// `branch_annotated`'s rows (` correct incorrect % function file line`, correct written
/// `N/CONSTANT` for a hint whose condition was a compile-time constant), summed per entry
/// (an inline helper's hint has one row per file it was compiled into).
fn parse_annotated(text: &str) -> anyhow::Result<BTreeMap<Entry, (Outcomes, u32)>> {
    let mut entries: BTreeMap<Entry, (Outcomes, u32)> = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(first) = fields.first() else {
            continue;
        };
        if *first == "correct" || first.starts_with('-') {
            continue;
        }
        let [correct, incorrect, _percent, function, file, line_number] = fields[..] else {
            bail!("branch_annotated:{}: not six fields: {line:?}", number + 1);
        };
        let correct = correct.split('/').next().unwrap_or(correct);
        let parse = |field: &str| {
            field
                .parse::<u64>()
                .with_context(|| format!("branch_annotated:{}: {field:?} is no count", number + 1))
        };
        let entry = Entry {
            function: function.to_string(),
            file: file.to_string(),
            line: line_number
                .parse()
                .with_context(|| format!("branch_annotated:{}: no line", number + 1))?,
        };
        let slot = entries.entry(entry).or_default();
        slot.0.correct += parse(correct)?;
        slot.0.incorrect += parse(incorrect)?;
        slot.1 += 1;
    }
    Ok(entries)
}

/// What the kernel counted between two readings, per entry.
fn difference(
    before: &BTreeMap<Entry, (Outcomes, u32)>,
    after: &BTreeMap<Entry, (Outcomes, u32)>,
) -> BTreeMap<Entry, Outcomes> {
    after
        .iter()
        .map(|(entry, (outcomes, _))| {
            let earlier = before.get(entry).map(|(o, _)| *o).unwrap_or_default();
            (
                entry.clone(),
                Outcomes {
                    correct: outcomes.correct.saturating_sub(earlier.correct),
                    incorrect: outcomes.incorrect.saturating_sub(earlier.incorrect),
                },
            )
        })
        .collect()
}

/// The hinted sites whose `likely()`/`unlikely()` the kernel also evaluates on paths the
/// site does not count, and which: there the kernel's count holds the auditor's, arm by
/// arm, and is compared so (`kernel >= auditor`). Each is a finding of this comparison.
const REACHED_BEYOND: [(&str, &str); 11] = [
    (
        "poll.fd_negative",
        "do_poll() tests every entry on each pass: a call that sleeps makes two or more, \
         the auditor counts each call's entries once",
    ),
    (
        "fget.table_shared",
        "__fget_light(): every fdget() of every syscall (fstat, lseek, mmap, ioctl, ...) \
         and each pass of poll and select",
    ),
    (
        "fget.light_path_only",
        "__fget_light(): every fdget() of every syscall, the site counts read, write, \
         recvmsg and sendmsg",
    ),
    (
        "fdput.cloned",
        "fdput(): every fdget() of every syscall, the site counts read, write, recvmsg and \
         sendmsg",
    ),
    (
        "fget.rcu_no_file",
        "__fget_files_rcu(): every fget() (mmap, fstat, epoll_ctl, the fd lookups of \
         exec and splice, ...)",
    ),
    (
        "fget.rcu_path_only",
        "__fget_files_rcu(): every fget(), as fget.rcu_no_file",
    ),
    (
        "fdget_pos.file",
        "fdget_pos(): lseek, getdents64, pread's and readv's kin as well as read and write",
    ),
    (
        "close.not_path_only",
        "filp_close(): close_range(), exec's close-on-exec and the table's closing at exit \
         as well as close()",
    ),
    (
        "fd.fdtable_too_large",
        "alloc_fdtable(): also the copies of fd.copy_outgrows_embedded's paths not followed",
    ),
    (
        "fd.rounded_past_nr_open",
        "alloc_fdtable(): also the copies of fd.copy_outgrows_embedded's paths not followed",
    ),
    (
        "fd.copy_outgrows_embedded",
        "dup_fd(): also exec of a process whose table is shared (unshare_files()) and \
         close_range(CLOSE_RANGE_UNSHARE), which the model does not follow yet",
    ),
];

/// A hinted site and the branch_annotated entries at its line of the oracle's tree.
struct HintedSite {
    id: String,
    hint: String,
    place: String,
    /// The entries at (file, line): one row is the site's own; several are one inline
    /// helper compiled into several files (or one macro line reached by several
    /// functions).
    entries: Vec<Entry>,
    rows: u32,
    /// Why the kernel evaluates the hint beyond what the site counts.
    beyond: Option<&'static str>,
}

impl HintedSite {
    /// Whether the site is compared exactly: its hint has one row, reached only where
    /// the site counts it.
    fn exact(&self) -> bool {
        self.rows == 1 && self.beyond.is_none()
    }
}

/// The catalogue's sites as the oracle's tree carries them (`auditor sites --kernel-src
/// --format json`), matched with branch_annotated's entries (file names cut to 20 bytes,
/// as the kernel prints them).
fn hinted_sites(sites: &Value, entries: &BTreeMap<Entry, (Outcomes, u32)>) -> Vec<HintedSite> {
    let mut hinted = Vec::new();
    for site in sites.as_array().into_iter().flatten() {
        let tree = &site["tree"];
        let hint = tree["hint"].as_str().unwrap_or("none");
        if tree["status"] != "found" || !matches!(hint, "likely" | "unlikely") {
            continue;
        }
        let file = tree["file"].as_str().unwrap_or("");
        let line = tree["line"].as_u64().unwrap_or(0) as u32;
        let base: String = file
            .rsplit('/')
            .next()
            .unwrap_or(file)
            .chars()
            .take(20)
            .collect();
        let at_line: Vec<(&Entry, u32)> = entries
            .iter()
            .filter(|(entry, _)| entry.file == base && entry.line == line)
            .map(|(entry, (_, rows))| (entry, *rows))
            .collect();
        let id = site["id"].as_str().unwrap_or("?").to_string();
        let beyond = REACHED_BEYOND
            .iter()
            .find(|(site, _)| *site == id)
            .map(|(_, why)| *why);
        hinted.push(HintedSite {
            id,
            hint: hint.to_string(),
            place: format!("{file}:{line}"),
            entries: at_line.iter().map(|(entry, _)| (*entry).clone()).collect(),
            rows: at_line.iter().map(|(_, rows)| rows).sum(),
            beyond,
        });
    }
    hinted
}

/// The auditor's counts per site of a saved JSON report: taken, not taken, unreadable.
fn auditor_counts(report: &Value) -> BTreeMap<String, [u64; 3]> {
    report["sites"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|site| {
            (
                site["id"].as_str().unwrap_or("?").to_string(),
                ["taken", "not_taken", "unreadable"].map(|key| site[key].as_u64().unwrap_or(0)),
            )
        })
        .collect()
}

/// One workload's readings: the kernel's difference and the auditor's counts.
struct Reading {
    kernel: BTreeMap<Entry, Outcomes>,
    auditor: BTreeMap<String, [u64; 3]>,
    /// The reads of branch_annotated of one pass (both passes took as many).
    reads: u32,
}

fn read_workload(out: &Path, index: usize) -> anyhow::Result<Reading> {
    let file = |suffix: &str| out.join(format!("{index}.{suffix}"));
    let status = std::fs::read_to_string(file("status")).unwrap_or_default();
    let stderr = std::fs::read_to_string(file("stderr")).unwrap_or_default();
    if status.trim() != "0" {
        bail!(
            "its session exited with {:?}: {}",
            status.trim(),
            stderr.trim()
        );
    }
    let read = |suffix: &str| -> anyhow::Result<BTreeMap<Entry, (Outcomes, u32)>> {
        parse_annotated(&std::fs::read_to_string(file(suffix))?)
    };
    let report: Value = serde_json::from_slice(&std::fs::read(file("json"))?)?;
    // A row is read by the same call of both passes only if the rows before it kept their
    // width: then the window holds one whole pass of reads for every row.
    let lengths =
        ["before", "after"].map(|suffix| std::fs::metadata(file(suffix)).map(|m| m.len()));
    let reads: Vec<u32> = std::fs::read_to_string(file("reads"))?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let [before_length, after_length] = lengths;
    if before_length? != after_length? || reads.len() != 2 || reads[0] != reads[1] {
        bail!(
            "branch_annotated changed its width between the readings (a count grew past 8 \
             digits?): {:?} reads",
            reads
        );
    }
    Ok(Reading {
        kernel: difference(&read("before")?, &read("after")?),
        auditor: auditor_counts(&report),
        reads: reads[0],
    })
}

/// The kernel's outcomes as the auditor's arms: taken, not taken.
fn as_arms(hint: &str, outcomes: Outcomes) -> [u64; 2] {
    if hint == "likely" {
        [outcomes.correct, outcomes.incorrect]
    } else {
        [outcomes.incorrect, outcomes.correct]
    }
}

/// One site on one workload, net of the baseline run.
#[derive(Debug, PartialEq, Eq)]
enum Comparison {
    Exact([i64; 2]),
    /// The auditor's decided counts are within the kernel's, which holds as many more as
    /// the auditor counted unreadable (an exact site) or any more (a site reached beyond).
    Within {
        kernel: [i64; 2],
        auditor: [i64; 3],
    },
    Differs {
        kernel: [i64; 2],
        auditor: [i64; 3],
    },
}

impl Comparison {
    /// Whether the comparison holds for `site`.
    fn holds(&self) -> bool {
        !matches!(self, Comparison::Differs { .. })
    }
}

fn net(value: u64, baseline: u64) -> i64 {
    value as i64 - baseline as i64
}

fn compare(site: &HintedSite, run: &Reading, baseline: &Reading) -> Comparison {
    let sum = |reading: &Reading| {
        site.entries.iter().fold(Outcomes::default(), |sum, entry| {
            let o = reading.kernel.get(entry).copied().unwrap_or_default();
            Outcomes {
                correct: sum.correct + o.correct,
                incorrect: sum.incorrect + o.incorrect,
            }
        })
    };
    let [kt, kn] = as_arms(&site.hint, sum(run));
    let [bt, bn] = as_arms(&site.hint, sum(baseline));
    let kernel = [net(kt, bt), net(kn, bn)];
    let counted = |reading: &Reading| reading.auditor.get(&site.id).copied().unwrap_or_default();
    let (a, b) = (counted(run), counted(baseline));
    let auditor = [net(a[0], b[0]), net(a[1], b[1]), net(a[2], b[2])];
    let more = [kernel[0] - auditor[0], kernel[1] - auditor[1]];
    let within = more[0] >= 0 && more[1] >= 0;
    if more == [0, 0] && auditor[2] == 0 {
        Comparison::Exact(kernel)
    } else if within && (site.beyond.is_some() || more[0] + more[1] == auditor[2]) {
        Comparison::Within { kernel, auditor }
    } else {
        Comparison::Differs { kernel, auditor }
    }
}

/// `cargo xtask test --oracle`: the comparison, into docs/oracle.md; fails on a
/// difference at a site with an entry of its own.
pub fn test(timeout: Duration, reuse_run: bool) -> anyhow::Result<()> {
    let kernel = kernel(std::thread::available_parallelism().map_or(2, usize::from))?;
    crate::setup::ensure_packages(&WORKLOAD_PACKAGES, "the oracle's real workloads")?;
    let auditor = build::run()?;
    exec(Command::new("cargo").current_dir(workspace_root()).args([
        "build",
        "--release",
        "-q",
        "-p",
        "xtask",
        "--bin",
        "oracle-window",
    ]))?;
    let release = workspace_root().join("target/release");
    let window = release.join("oracle-window");
    let workload_binary = release.join("auditor-workload");
    let views = dir().join("views");
    std::fs::create_dir_all(&views)?;
    for (view, file) in [("sites", "sites.json"), ("hints", "hints.json")] {
        let output = Command::new(&auditor)
            .args([view, "--format", "json", "--kernel-src"])
            .arg(tree())
            .output()?;
        if !output.status.success() {
            bail!(
                "auditor {view} --kernel-src: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::fs::write(views.join(file), &output.stdout)?;
    }
    let sites: Value = serde_json::from_slice(&std::fs::read(views.join("sites.json"))?)?;
    let workloads = workloads(&workload_binary);
    let work = dir().join("run");
    let wall_file = work.join("wall-seconds");
    if !reuse_run {
        let accel = guest::choose_accel(&kernel, &work)?;
        let start = Instant::now();
        let run = guest::boot(
            &kernel,
            &guest_script(&auditor, &window, &workloads),
            &work,
            accel,
            timeout,
        )?;
        std::fs::write(&wall_file, start.elapsed().as_secs().to_string())?;
        match run.outcome {
            Outcome::Exited(0) => {}
            Outcome::Exited(status) => bail!("the guest's script exited with {status}"),
            Outcome::TimedOut => bail!(
                "the guest ran past {}: see {}",
                humantime::format_duration(timeout),
                run.console.display()
            ),
            Outcome::Crashed(why) => bail!("{why}: see {}", run.console.display()),
        }
    }
    let wall = Duration::from_secs(
        std::fs::read_to_string(&wall_file)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0),
    );
    let out = work.join("out");
    let mut readings = Vec::new();
    let mut failed = Vec::new();
    for (index, workload) in workloads.iter().enumerate() {
        match read_workload(&out, index) {
            Ok(reading) => readings.push((workload, reading)),
            Err(error) if index > 0 => failed.push(format!("{}: {error:#}", workload.name)),
            Err(error) => return Err(error.context("the baseline run")),
        }
    }
    let (ran, readings): (Vec<&Workload>, Vec<Reading>) = readings.into_iter().unzip();
    if let Some((index, _)) = readings
        .iter()
        .enumerate()
        .find(|(_, reading)| reading.reads != readings[0].reads)
    {
        bail!(
            "workload {} read branch_annotated in {} calls, the baseline in {}: the window's \
             own reads do not cancel",
            ran[index].name,
            readings[index].reads,
            readings[0].reads
        );
    }
    let before = parse_annotated(&std::fs::read_to_string(out.join("0.before"))?)?;
    let hinted = hinted_sites(&sites, &before);
    let document = render(&kernel, &hinted, &ran, &readings, &failed, wall);
    let docs = workspace_root().join("docs/oracle.md");
    std::fs::write(&docs, &document)?;
    print!("{document}");
    let differing: Vec<&str> = hinted
        .iter()
        .filter(|site| site.rows == 1)
        .filter(|site| {
            readings[1..]
                .iter()
                .any(|r| !compare(site, r, &readings[0]).holds())
        })
        .map(|site| site.id.as_str())
        .collect();
    if !failed.is_empty() {
        bail!("workloads failed in the guest:\n{}", failed.join("\n"));
    }
    if !differing.is_empty() {
        bail!(
            "the auditor's counts differ from the kernel's at {} (see docs/oracle.md)",
            differing.join(", ")
        );
    }
    Ok(())
}

fn cell(comparison: &Comparison) -> String {
    match comparison {
        Comparison::Exact([0, 0]) => "·".into(),
        Comparison::Exact([taken, not_taken]) => format!("{taken} / {not_taken}"),
        Comparison::Within { kernel, auditor } | Comparison::Differs { kernel, auditor } => {
            let unreadable = match auditor[2] {
                0 => String::new(),
                n => format!(" + {n} unreadable"),
            };
            let text = format!(
                "kernel {} / {}, auditor {} / {}{unreadable}",
                kernel[0], kernel[1], auditor[0], auditor[1]
            );
            if comparison.holds() {
                text
            } else {
                format!("**{text}**")
            }
        }
    }
}

fn render(
    kernel: &Kernel,
    hinted: &[HintedSite],
    workloads: &[&Workload],
    readings: &[Reading],
    failed: &[String],
    wall: Duration,
) -> String {
    let mut doc = String::new();
    let _ = writeln!(
        doc,
        "# The kernel's own count against the auditor's\n\n\
         Written by `cargo xtask test --oracle` (see `xtask/src/oracle.rs`). Kernel: {}, \
         built from Debian's `linux-source-{VERSION}` with `xtask/oracle/kernel.config`, \
         booted under QEMU ({} s for every workload). Each cell is one workload's \
         taken / not taken of the site, net of a run of `:` in the same window; `·` is \
         exact and zero. Exact cells show one count: the kernel's and the auditor's \
         agree.\n",
        kernel.name,
        wall.as_secs()
    );
    for failure in failed {
        let _ = writeln!(doc, "Failed, so not compared: {failure}\n");
    }
    let names: Vec<&str> = workloads[1..].iter().map(|w| w.name).collect();
    let header = |doc: &mut String, title: &str, text: &str, why: bool| {
        let _ = writeln!(doc, "## {title}\n\n{text}\n");
        let _ = writeln!(
            doc,
            "| site | hint | at | {}{} |",
            names.join(" | "),
            if why { " | why" } else { "" }
        );
        let _ = writeln!(
            doc,
            "|---|---|---|{}{}",
            "---|".repeat(names.len()),
            if why { "---|" } else { "" }
        );
    };
    let row = |doc: &mut String, site: &HintedSite, why: Option<String>| {
        let cells: Vec<String> = readings[1..]
            .iter()
            .map(|reading| cell(&compare(site, reading, &readings[0])))
            .collect();
        let _ = write!(
            doc,
            "| {} | {} | {} | {}",
            site.id,
            site.hint,
            site.place,
            cells.join(" | ")
        );
        match why {
            Some(why) => {
                let _ = writeln!(doc, " | {why} |");
            }
            None => {
                let _ = writeln!(doc, " |");
            }
        }
    };
    header(
        &mut doc,
        "Sites compared exactly",
        "The hint has one row in branch_annotated and the kernel evaluates it only where \
         the site counts it: the counts must be equal (where the auditor counted some \
         unreadable, the kernel's surplus must be exactly those).",
        false,
    );
    for site in hinted.iter().filter(|site| site.exact()) {
        row(&mut doc, site, None);
    }
    doc.push('\n');
    header(
        &mut doc,
        "Sites the kernel also reaches elsewhere",
        "One row, but the kernel evaluates the hint on paths the site does not count: the \
         auditor's counts must be within the kernel's, arm by arm.",
        true,
    );
    for site in hinted
        .iter()
        .filter(|site| site.rows == 1 && site.beyond.is_some())
    {
        row(&mut doc, site, site.beyond.map(str::to_string));
    }
    doc.push('\n');
    header(
        &mut doc,
        "Sites whose hint has no row of its own",
        "The hint is in an inline helper (one row per file it is compiled into, shared by \
         every caller: the cells compare the sum of its rows, exact where only the site's \
         syscalls reach the helper) or in a macro (counted where it is expanded, in the \
         caller's file and line: the cells show the auditor's count alone). Listed, not \
         failed on.",
        true,
    );
    for site in hinted.iter().filter(|site| site.rows > 1) {
        let mut functions: Vec<&str> = site.entries.iter().map(|e| e.function.as_str()).collect();
        functions.dedup();
        let why = format!(
            "{} rows at this line ({}), one per file the helper is compiled into",
            site.rows,
            functions.join(", ")
        );
        row(&mut doc, site, Some(why));
    }
    for site in hinted.iter().filter(|site| site.rows == 0) {
        let cells: Vec<String> = readings[1..]
            .iter()
            .map(|reading| {
                let count = |r: &Reading| r.auditor.get(&site.id).copied().unwrap_or_default();
                let (run, base) = (count(reading), count(&readings[0]));
                format!(
                    "auditor {} / {}",
                    net(run[0], base[0]),
                    net(run[1], base[1])
                )
            })
            .collect();
        let _ = writeln!(
            doc,
            "| {} | {} | {} | {} | no row at this line: a macro's hint, counted where the \
             macro is expanded |",
            site.id,
            site.hint,
            site.place,
            cells.join(" | ")
        );
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANNOTATED: &str = " correct incorrect  %        Function                  File              Line\n \
         ------- ---------  -        --------                  ----              ----\n\
         \x20      10        2  16 do_pollfd                      select.c             866\n\
         \x20    5/3         0   0 fd_empty                       file.h               50\n\
         \x20       1        1  50 fd_empty                       file.h               50\n";

    #[test]
    fn branch_annotated_rows_are_summed_per_entry() {
        let entries = parse_annotated(ANNOTATED).unwrap();
        let poll = Entry {
            function: "do_pollfd".into(),
            file: "select.c".into(),
            line: 866,
        };
        assert_eq!(
            entries[&poll],
            (
                Outcomes {
                    correct: 10,
                    incorrect: 2
                },
                1
            )
        );
        let helper = Entry {
            function: "fd_empty".into(),
            file: "file.h".into(),
            line: 50,
        };
        assert_eq!(entries[&helper].0.correct, 6);
        assert_eq!(entries[&helper].1, 2);
        assert!(parse_annotated("1 2 3\n").is_err());
    }

    #[test]
    fn a_site_is_compared_net_of_the_baseline() {
        let entry = Entry {
            function: "do_pollfd".into(),
            file: "select.c".into(),
            line: 866,
        };
        let site = HintedSite {
            id: "poll.fd_negative".into(),
            hint: "unlikely".into(),
            place: "fs/select.c:866".into(),
            entries: vec![entry.clone()],
            rows: 1,
            beyond: None,
        };
        let reading = |correct, incorrect, taken, not_taken| Reading {
            kernel: [(entry.clone(), Outcomes { correct, incorrect })].into(),
            auditor: [("poll.fd_negative".to_string(), [taken, not_taken, 0])].into(),
            reads: 1,
        };
        let baseline = reading(3, 0, 0, 5);
        // unlikely: incorrect is taken.
        assert_eq!(
            compare(&site, &reading(13, 4, 4, 15), &baseline),
            Comparison::Exact([4, 10])
        );
        assert_eq!(
            compare(&site, &reading(13, 4, 4, 16), &baseline),
            Comparison::Differs {
                kernel: [4, 10],
                auditor: [4, 11, 0]
            }
        );
        // Two unreadable that the kernel decided one each way: within.
        let unreadable = Reading {
            auditor: [("poll.fd_negative".to_string(), [3, 14, 2])].into(),
            ..reading(13, 4, 0, 0)
        };
        assert!(matches!(
            compare(&site, &unreadable, &baseline),
            Comparison::Within { .. }
        ));
    }

    #[test]
    fn the_fragment_is_checked_line_by_line() {
        let fragment = "# a comment\nCONFIG_A=y\nCONFIG_B=y\n";
        assert_eq!(
            missing_options(fragment, "CONFIG_A=y\n# CONFIG_B is not set\n"),
            ["CONFIG_B=y"]
        );
        assert!(missing_options(fragment, "CONFIG_B=y\nCONFIG_A=y\n").is_empty());
        assert_eq!(quoted("it's"), "'it'\\''s'");
    }
}
