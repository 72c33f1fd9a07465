//! The `auditor` command line: parses arguments and calls the library.

use std::{ffi::OsString, io::Write, process::ExitCode, time::Duration};

use anyhow::Context as _;

use auditor::{
    output::Output,
    report::{self, Format, Report},
    status,
    trace::{self, Target},
};
use clap::{Parser, Subcommand, ValueEnum};

/// Exit statuses, for `--help` after each command's examples; the README and the guide say
/// the same.
macro_rules! exit_statuses {
    () => {
        "Exit status:
  the command's  a command was started: its exit code, or 128 + N when signal N ended it
  0              the report was printed and everything was read
  1              the auditor could not do what was asked (the message says why)
  2              the command line was wrong
  3              the report was printed, but part of the strace input could not be read
  128 + N        signal N stopped the session before anything was counted"
    };
}

/// A command's examples, then the exit statuses.
macro_rules! examples {
    ($($line:literal),+ $(,)?) => {
        concat!("Examples:\n", $("  ", $line, "\n",)+ "\n", exit_statuses!())
    };
}

/// Checks kernel likely()/unlikely() hints against what real programs do.
#[derive(Parser)]
#[command(
    version,
    about,
    after_help = examples!(
        "auditor trace --site poll.fd_negative --format text -- ssh localhost true",
        "auditor strace --group-by program -- curl -s http://127.0.0.1:8000/",
        "auditor report --format annotated --kernel-src linux-7.2 a.json b.json",
    )
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Count catalogued kernel branches with the eBPF probe (needs root) and judge each hint.
    ///
    /// With no target, runs the bundled default workload.
    #[command(after_help = examples!(
        "auditor trace --format text -- ssh localhost true",
        "auditor trace --comm sshd --duration 60s --format json -o sshd.json",
        "auditor trace --propose select.fd_not_open=unlikely --site select.fd_not_open -- CMD",
    ))]
    Trace(TraceArgs),
    /// List the catalogue of branch sites: where each is, its hint, what it counts.
    #[command(after_help = examples!(
        "auditor sites",
        "auditor sites --kernel-src target/kernel-src/linux-source-7.2 --format json",
    ))]
    Sites(SitesArgs),
    /// Every likely()/unlikely() in the files of the readiness and fd paths of a kernel
    /// tree, with its status: measured (by which site), not yet, or not decidable (why).
    #[command(after_help = examples!(
        "auditor hints --kernel-src target/kernel-src/linux-source-7.2",
        "auditor hints --kernel-src linux --format markdown",
    ))]
    Hints(HintsArgs),
    /// Count by running strace on a command or processes: no privileges needed.
    ///
    /// Runs `strace -f -Y -qq -v -s 65536 -e trace=<the decoded syscalls>` with LANG=C and
    /// reads its output as it comes. Exits with the command's status, or 3 when part of
    /// strace's output could not be read.
    #[command(after_help = examples!(
        "auditor strace --format text -- python3 -m http.server",
        "auditor strace -p 1234 --duration 30s",
    ))]
    Strace(StraceArgs),
    /// Count from strace logs (`strace -f -o LOG CMD`; `-ff` files too), no privileges needed.
    ///
    /// Exits with 3 when part of a log could not be read (the report says which lines).
    #[command(after_help = examples!(
        "strace -f -o ssh.log ssh localhost true && auditor ingest ssh.log",
        "auditor ingest --format json -o ssh.json ssh.log",
    ))]
    Ingest(IngestArgs),
    /// Render saved JSON reports again (`--format json -o FILE`), merging several: counts
    /// add exactly and the verdicts are judged again on the sums.
    #[command(after_help = examples!(
        "auditor report --group-by host laptop.json server.json",
        "auditor report --format markdown --site poll.fd_negative fleet/*.json",
    ))]
    Report(ReportArgs),
    /// Write the manual pages (into DIR) or a shell's completions (to stdout), from this
    /// command line's own definition.
    #[command(hide = true)]
    Generate(GenerateArgs),
}

#[derive(clap::Args)]
struct GenerateArgs {
    #[arg(value_enum)]
    what: Generated,
    /// Where the manual pages go (`man`).
    #[arg(long, value_name = "DIR", required_if_eq("what", "man"))]
    out: Option<std::path::PathBuf>,
}

/// What `generate` writes.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Generated {
    /// auditor.1 and one page per command (auditor-trace.1, ...).
    Man,
    Bash,
    Zsh,
    Fish,
}

/// Writes the manual pages or a shell's completions.
fn run_generate(args: GenerateArgs) -> anyhow::Result<()> {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let shell = match args.what {
        Generated::Man => {
            let dir = args.out.context("--out DIR")?;
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            return clap_mangen::generate_to(command, &dir)
                .with_context(|| format!("writing the manual pages into {}", dir.display()));
        }
        Generated::Bash => clap_complete::Shell::Bash,
        Generated::Zsh => clap_complete::Shell::Zsh,
        Generated::Fish => clap_complete::Shell::Fish,
    };
    let mut stdout = std::io::stdout().lock();
    clap_complete::generate(shell, &mut command, "auditor", &mut stdout);
    Ok(stdout.flush()?)
}

#[derive(clap::Args)]
struct ReportArgs {
    /// Saved JSON reports; `-` reads one from standard input.
    #[arg(required = true, value_name = "REPORT")]
    reports: Vec<std::path::PathBuf>,
    /// Merge reports of another catalogue version or kernel release than the first's too
    /// (the notes say which).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    output: OutputArgs,
}

/// How a report is written.
#[derive(clap::Args)]
struct OutputArgs {
    /// Judge this hint instead of the catalogue's, as a patch would change it, e.g.
    /// `select.fd_not_open=unlikely`; repeatable.
    #[arg(long, value_name = "SITE=HINT")]
    propose: Vec<auditor::report::Proposal>,
    /// Show only this site (e.g. poll.fd_negative); repeatable. For a commit message.
    #[arg(long = "site", value_name = "SITE", value_parser = parse_site)]
    sites: Vec<auditor_common::Site>,
    /// Output format: `annotated` is the shape of the kernel's branch profiler
    /// (trace_stat/branch_annotated): correct, incorrect, % incorrect, function, file:line.
    #[arg(long, value_enum, default_value = "table")]
    format: FormatArg,
    /// Judge the hints this kernel source tree carries instead of the catalogue's, and show
    /// each site's file:line in it.
    #[arg(long, value_name = "DIR")]
    kernel_src: Option<std::path::PathBuf>,
    /// The order of the sites: by default the catalogue's, and the largest share against
    /// the hint first in `--format annotated` and the SVG.
    #[arg(long, value_enum, value_name = "ORDER")]
    sort: Option<SortArg>,
    /// Also show counts per process (pid, command name).
    #[arg(long)]
    per_process: bool,
    /// Give a verdict per program too (its processes and threads together, named as `ps`
    /// shows them), or per host or source of merged reports; the pooled verdict's notes
    /// say when one group decides it.
    #[arg(long, value_enum, value_name = "WHAT")]
    group_by: Option<GroupBy>,
    /// With --group-by: leave out a group's rows of fewer evaluations than N (a note says
    /// how many; the pooled rows count them).
    #[arg(long, value_name = "N", default_value_t = 0)]
    min_evaluations: u64,
    /// With --group-by: show only the K groups with the most evaluations (a note says how
    /// many more there were; the pooled rows count them).
    #[arg(long, value_name = "K")]
    top: Option<usize>,
    /// Colour the verdicts: on a terminal (`auto`, unless NO_COLOR is set), always, never.
    #[arg(long, value_enum, value_name = "WHEN", default_value = "auto")]
    color: ColorArg,
    /// Say TEXT for what was traced, instead of the command line (which can hold key paths
    /// or user@host), in every format.
    #[arg(long, value_name = "TEXT")]
    label: Option<String>,
    /// Also draw the report as a picture into FILE (SVG): per site, the rare arm's share
    /// with its 95% interval on a log axis, the 10% bar marked.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
    /// Keep every column in the tables. Without it, each site's condition goes below its
    /// table in Markdown and on a terminal too narrow for every column.
    #[arg(long)]
    wide: bool,
    /// Write the report to FILE: checked before the session starts, replaced whole when it
    /// ends (never written through a link, into a FIFO or device, or over an input); `-`
    /// is stdout. Without it, the report goes to stderr when a command is started (its
    /// output keeps stdout), else to stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<std::path::PathBuf>,
}

impl OutputArgs {
    /// The report's options, checked: a contradiction fails before any session starts.
    fn options(&self) -> anyhow::Result<report::Options> {
        let options = report::Options {
            proposals: self.propose.clone(),
            sites: self.sites.clone(),
            format: self.format.into(),
            per_process: self.per_process,
            group_by: self.group_by.map(|by| match by {
                GroupBy::Program => report::groups::GroupBy::Program,
                GroupBy::Host => report::groups::GroupBy::Host,
                GroupBy::Source => report::groups::GroupBy::Source,
            }),
            svg: self.svg.clone(),
            wide: self.wide,
            sort: self.sort.map(|sort| match sort {
                SortArg::Catalogue => report::Sort::Catalogue,
                SortArg::Miss => report::Sort::Miss,
                SortArg::Evaluations => report::Sort::Evaluations,
                SortArg::Line => report::Sort::Line,
            }),
            kernel_src: self.kernel_src.clone(),
            tree: None,
            label: self.label.clone(),
            colour: match self.color {
                ColorArg::Auto => report::colour::Colour::Auto,
                ColorArg::Always => report::colour::Colour::Always,
                ColorArg::Never => report::colour::Colour::Never,
            },
            group_limits: report::groups::Limits {
                min_evaluations: self.min_evaluations,
                top: self.top,
            },
        };
        Ok(options.validated()?)
    }

    /// The report's options, checked, and where the report and its SVG go, checked now so
    /// that a bad path fails before the session, not after it; never one of `inputs`.
    /// Without `-o`, the report goes where a started command does not write: stderr when
    /// one is started, else stdout.
    fn outputs(
        &self,
        starts_command: bool,
        inputs: &[std::path::PathBuf],
    ) -> anyhow::Result<Outputs> {
        let options = self.options()?;
        let report = match &self.output {
            Some(path) => Output::named(path, "-o", inputs)?,
            None if starts_command => Output::Stderr,
            None => Output::Stdout,
        };
        let svg = self
            .svg
            .as_deref()
            .map(|path| Output::named(path, "--svg", inputs))
            .transpose()?;
        if let (Output::File(report), Some(Output::File(svg))) = (&report, &svg)
            && report == svg
        {
            anyhow::bail!(
                "-o and --svg both name {}: give each its own file",
                svg.display()
            );
        }
        Ok(Outputs {
            options,
            report,
            svg,
        })
    }
}

/// How a report is shown, and where it and its picture go.
struct Outputs {
    options: report::Options,
    report: Output,
    svg: Option<Output>,
}

#[derive(clap::Args)]
struct StraceArgs {
    /// Attach to this running process; repeatable.
    #[arg(short, long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// Record each call's stack (strace -k) and name the code that took each rare arm
    /// (strace runs slower).
    #[arg(long)]
    stacks: bool,
    /// Stop after this long (e.g. 30s, 500ms, 1h30m): a started command gets SIGTERM,
    /// strace detaches from -p processes.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    #[command(flatten)]
    output: OutputArgs,
    /// The command to start and trace, with its children.
    #[arg(
        last = true,
        value_name = "CMD",
        conflicts_with = "pids",
        required_unless_present = "pids"
    )]
    command: Vec<OsString>,
}

#[derive(clap::Args)]
struct IngestArgs {
    /// strace output files; `-` reads standard input (pipes and FIFOs are read as they
    /// come).
    #[arg(required = true, value_name = "LOG")]
    logs: Vec<std::path::PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(clap::Args)]
struct SitesArgs {
    /// A kernel source tree: show the hint it carries at each site, and where it differs
    /// from the catalogue or the site cannot be found.
    #[arg(long, value_name = "DIR")]
    kernel_src: Option<std::path::PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: ListFormatArg,
}

#[derive(clap::Args)]
struct HintsArgs {
    /// The kernel source tree (fs/ and include/ are read).
    #[arg(long, value_name = "DIR")]
    kernel_src: std::path::PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: ListFormatArg,
}

/// The formats of the catalogue's and a tree's listings.
#[derive(Clone, Copy, ValueEnum)]
enum ListFormatArg {
    Table,
    Markdown,
    Json,
    /// For a mail reply.
    Text,
}

impl From<ListFormatArg> for Format {
    fn from(format: ListFormatArg) -> Format {
        match format {
            ListFormatArg::Table => Format::Table,
            ListFormatArg::Markdown => Format::Markdown,
            ListFormatArg::Json => Format::Json,
            ListFormatArg::Text => Format::Text,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ColorArg {
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, ValueEnum)]
enum SortArg {
    /// By kernel file, in catalogue order within a file.
    Catalogue,
    /// The largest share of evaluations against the hint first (branch_annotated's).
    Miss,
    /// The most evaluations first.
    Evaluations,
    /// By file and line (the tree's, with --kernel-src).
    Line,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum GroupBy {
    /// Per process name, as `ps` shows it.
    Program,
    /// Per host a run was taken on (of merged reports).
    Host,
    /// Per source that counted (of merged reports).
    Source,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Table,
    Markdown,
    Json,
    /// For a mail reply: plain ASCII, at most 72 columns.
    Text,
    /// As the kernel's branch profiler shows it (trace_stat/branch_annotated).
    Annotated,
}

impl From<FormatArg> for Format {
    fn from(format: FormatArg) -> Format {
        match format {
            FormatArg::Table => Format::Table,
            FormatArg::Markdown => Format::Markdown,
            FormatArg::Json => Format::Json,
            FormatArg::Text => Format::Text,
            FormatArg::Annotated => Format::Annotated,
        }
    }
}

#[derive(clap::Args)]
struct TraceArgs {
    /// Trace this running process (threads included); repeatable.
    #[arg(short, long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// Trace processes with this name, as `ps` and `pgrep` show it (the name of the
    /// process's main thread), with all their threads; repeatable.
    #[arg(long = "comm", value_name = "NAME")]
    comms: Vec<String>,
    /// Trace the threads that carry this name themselves (as `ps -L` shows it); repeatable.
    #[arg(long = "thread-comm", value_name = "NAME")]
    thread_comms: Vec<String>,
    /// Trace every process on the system but the auditor.
    #[arg(long, conflicts_with_all = ["pids", "comms", "thread_comms", "workload"])]
    all: bool,
    /// Run a bundled workload: `default`, or steps such as "poll:100:1024:64 select:10:-1"
    /// (`auditor-workload --help` lists them).
    #[arg(
        long,
        value_name = "NAME|STEPS",
        conflicts_with_all = ["pids", "comms", "thread_comms"]
    )]
    workload: Option<String>,
    /// Stop after this long (e.g. 30s, 500ms, 1h30m); a started command gets SIGTERM.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    #[command(flatten)]
    output: OutputArgs,
    /// The command to start and trace, with its children.
    #[arg(
        last = true,
        value_name = "CMD",
        conflicts_with_all = ["pids", "comms", "thread_comms", "all", "workload"]
    )]
    command: Vec<OsString>,
    /// Take the user stack of calls that go a site's rare way (against its hint, or the
    /// `--propose`d one; both ways at an unhinted site), sampled, and name the code behind
    /// them: the first frame outside the C library, with counts; whole stacks in JSON.
    #[arg(long)]
    stacks: bool,
    /// Attach the probe's programs with nothing to do (the benchmark's floor).
    #[arg(long, hide = true)]
    empty_programs: bool,
    /// Write each probe program's runs and run time in the session (the kernel's BPF run
    /// statistics, on for the session) to FILE as JSON (the probe bench's per-program view).
    #[arg(long, hide = true, value_name = "FILE")]
    program_runs: Option<std::path::PathBuf>,
    /// Serve the live counts for Prometheus at http://ADDRESS/metrics (OpenMetrics text):
    /// `ADDRESS:PORT`, or `PORT` for 127.0.0.1. The report still comes at the end.
    #[arg(long, value_name = "ADDRESS", value_parser = metrics_address)]
    metrics: Option<String>,
}

/// The longest `--duration`: a year; longer is surely a typo.
const LONGEST_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

fn parse_site(id: &str) -> Result<auditor_common::Site, String> {
    auditor_common::catalogue::SITES
        .iter()
        .find(|info| info.id == id)
        .map(|info| info.site)
        .ok_or_else(|| format!("`{id}` is not a site (see `auditor sites`)"))
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    // A bare number is seconds, as for timeout(1).
    let duration = match text.parse::<f64>() {
        Ok(seconds) => Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string()),
        Err(_) => humantime::parse_duration(text).map_err(|e| e.to_string()),
    }
    .map_err(|why| format!("`{text}` is not a duration ({why}; e.g. 30s, 500ms, 1h30m)"))?;
    if duration > LONGEST_DURATION {
        return Err(format!(
            "`{text}` is longer than the longest session ({})",
            humantime::format_duration(LONGEST_DURATION)
        ));
    }
    Ok(duration)
}

/// A `--metrics` address, checked as the command line is read (a usage error).
fn metrics_address(given: &str) -> Result<String, String> {
    auditor::metrics::server::parse(given)
        .map(|_| given.to_string())
        .map_err(|e| {
            let text = e.to_string();
            text.split_once(": ")
                .map_or(text.clone(), |(_, why)| why.to_string())
        })
}

fn run_trace(args: TraceArgs) -> anyhow::Result<ExitCode> {
    // A command and another target together are refused as the command line is read.
    let has_processes =
        !args.pids.is_empty() || !args.comms.is_empty() || !args.thread_comms.is_empty();
    let target = if !args.command.is_empty() {
        Target::Command(args.command)
    } else if args.all {
        Target::All
    } else if has_processes {
        Target::Processes {
            pids: args.pids,
            comms: args.comms,
            thread_comms: args.thread_comms,
        }
    } else {
        Target::Workload(args.workload.unwrap_or_else(|| "default".into()))
    };
    let options = trace::Options {
        target,
        duration: args.duration,
        status: true,
        empty_programs: args.empty_programs,
        program_runs: args.program_runs.is_some(),
        metrics: args.metrics.clone(),
        stacks: None,
    };
    let command = match &options.target {
        Target::Command(argv) => argv.first().map(|a| a.to_string_lossy().into_owned()),
        Target::Workload(_) => Some("the workload".into()),
        _ => None,
    };
    let outputs = args.output.outputs(command.is_some(), &[])?;
    let program_runs = args
        .program_runs
        .as_deref()
        .map(|path| auditor::output::Output::named(path, "--program-runs", &[]))
        .transpose()?;
    let options = trace::Options {
        // Stacks for the sites the report shows, of the arm their judged hint calls rare.
        stacks: args.stacks.then(|| {
            let shown = &outputs.options;
            auditor::stacks::Arms::of(|site| shown.shows(site).then(|| shown.hint(site)))
        }),
        ..options
    };
    let duration = options.duration;
    // As strace says "Process N attached": loading takes seconds, and without a command
    // nothing else tells when counting starts.
    let session = trace::trace_with(&options, || {
        if command.is_none() {
            match duration {
                Some(d) => auditor::say!(
                    "auditor: attached; counting for {}",
                    humantime::format_duration(d)
                ),
                None => auditor::say!("auditor: attached; counting until Ctrl-C"),
            }
        }
    })?;
    say_how_it_ended(command, session.command_status);
    if let (Some(output), Some(runs)) = (&program_runs, &session.program_runs) {
        output.write_with("program runs", |out| {
            serde_json::to_writer_pretty(&mut *out, runs)?;
            out.write_all(b"\n")
        })?;
    }
    let code = session.exit_code();
    // Stopped while the probe loaded, nothing was counted: one line, not a page of empty
    // tables; JSON still gets its report, whose note says the same, for scripts.
    if !session.attached && outputs.options.format != report::Format::Json {
        let why = session
            .observation
            .notes
            .last()
            .cloned()
            .unwrap_or_default();
        auditor::say!("auditor: {why} No report was written.");
        return Ok(ExitCode::from(code));
    }
    print_report(Report::of(&session.observation), outputs)?;
    Ok(ExitCode::from(code))
}

/// Says on stderr how a started command ended, unless it exited 0.
fn say_how_it_ended(command: Option<String>, ending: Option<status::Ending>) {
    if let (Some(command), Some(ending)) = (command, ending)
        && !ending.success()
    {
        auditor::say!(
            "auditor: {} {ending}",
            auditor::report::escape_text(&command)
        );
    }
}

/// Writes `report` as `outputs` asks, where they say.
fn print_report(report: Report, outputs: Outputs) -> anyhow::Result<()> {
    Ok(outputs
        .options
        .write(report, &outputs.report, outputs.svg.as_ref())?)
}

fn run_hints(args: HintsArgs) -> anyhow::Result<()> {
    auditor::kernel_src::check_tree(&args.kernel_src)?;
    let mut stdout = std::io::stdout().lock();
    let width = report::Width::of(&Output::Stdout);
    auditor::report::write_hints(args.format.into(), &args.kernel_src, width, &mut stdout)
        .and_then(|()| stdout.flush())
        .context("writing the hints")
}

fn run_sites(args: SitesArgs) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    if let Some(tree) = &args.kernel_src {
        auditor::kernel_src::check_tree(tree)?;
    }
    let width = report::Width::of(&Output::Stdout);
    let tree = args.kernel_src.as_deref();
    auditor::report::write_sites(args.format.into(), tree, width, &mut stdout)
        .and_then(|()| stdout.flush())
        .context("writing the catalogue")
}

/// Prints the report of a strace replay, with `notes` of the session; returns `code`, or
/// if that is success and anything was unreadable, [`status::PARTLY_UNREADABLE`].
fn report_replay(
    replay: &auditor::source::strace::replay::Replay,
    target: String,
    started: std::time::Instant,
    outputs: Outputs,
    (code, notes): (u8, Vec<String>),
) -> anyhow::Result<ExitCode> {
    let mut observation = replay.observe(target, started.elapsed());
    observation.notes.extend(notes);
    let report = Report::of(&observation);
    print_report(report, outputs)?;
    Ok(ExitCode::from(
        if code == status::SUCCESS && replay.unreadable() > 0 {
            status::PARTLY_UNREADABLE
        } else {
            code
        },
    ))
}

fn run_ingest(args: IngestArgs) -> anyhow::Result<ExitCode> {
    use auditor::source::strace::replay::Replay;
    let outputs = args.output.outputs(false, &args.logs)?;
    let started = std::time::Instant::now();
    let mut replay = Replay::default();
    replay.ingest_logs(&args.logs);
    // Nothing to count is one line, not a page of empty tables.
    if let Some(why) = replay.nothing_read() {
        anyhow::bail!("{why}");
    }
    let names: Vec<String> = args.logs.iter().map(|p| p.display().to_string()).collect();
    let target = format!("strace log {}", names.join(" "));
    report_replay(
        &replay,
        target,
        started,
        outputs,
        (status::SUCCESS, Vec::new()),
    )
}

fn run_strace(args: StraceArgs) -> anyhow::Result<ExitCode> {
    use auditor::source::strace::{replay::Replay, run};
    let (target, description) = match (args.command.is_empty(), args.pids.is_empty()) {
        (false, true) => {
            let shown = report::shell_quoted(&args.command);
            let description = format!("command `{shown}` under strace");
            (run::Target::Command(args.command), description)
        }
        (true, false) => {
            let shown: Vec<String> = args.pids.iter().map(|p| format!("pid {p}")).collect();
            let description = format!("{} under strace", shown.join(", "));
            (run::Target::Pids(args.pids), description)
        }
        _ => anyhow::bail!("give either a command after `--` or -p PID, not both or neither"),
    };
    let command = match &target {
        run::Target::Command(argv) => argv.first().map(|a| a.to_string_lossy().into_owned()),
        run::Target::Pids(_) => None,
    };
    let outputs = args.output.outputs(command.is_some(), &[])?;
    let started = std::time::Instant::now();
    let mut replay = Replay::default();
    let outcome = run::run(&target, args.stacks, args.duration, &mut replay)?;
    say_how_it_ended(command, outcome.command);
    let code = outcome.code();
    report_replay(
        &replay,
        description,
        started,
        outputs,
        (code, outcome.notes),
    )
}

fn run_report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let outputs = args.output.outputs(false, &args.reports)?;
    let loaded = auditor::report::saved::merge_files(&args.reports, args.force)?;
    print_report(Report::of_saved(&loaded), outputs)?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Sessions end with a report on SIGINT and SIGTERM, from their first moment.
    if matches!(cli.command, Command::Trace(_) | Command::Strace(_))
        && let Err(error) = auditor::session::catch_stop_signals()
    {
        auditor::say!("auditor: {error}");
        return ExitCode::from(status::FAILURE);
    }
    let result = match cli.command {
        Command::Trace(args) => run_trace(args),
        Command::Sites(args) => run_sites(args).map(|()| ExitCode::SUCCESS),
        Command::Hints(args) => run_hints(args).map(|()| ExitCode::SUCCESS),
        Command::Ingest(args) => run_ingest(args),
        Command::Strace(args) => run_strace(args),
        Command::Report(args) => run_report(args),
        Command::Generate(args) => run_generate(args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            // A closed pipe (`auditor trace | head`) is not a failure.
            let broken_pipe = |e: &(dyn std::error::Error + 'static)| {
                e.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
                    || e.downcast_ref::<auditor::output::OutputError>()
                        .is_some_and(auditor::output::OutputError::is_broken_pipe)
            };
            if error.chain().any(broken_pipe) {
                return ExitCode::SUCCESS;
            }
            auditor::say!("auditor: {error:#}");
            let usage = error.chain().any(|e| {
                e.downcast_ref::<report::OptionsError>()
                    .is_some_and(report::OptionsError::is_usage)
            });
            ExitCode::from(if usage {
                status::USAGE
            } else {
                status::FAILURE
            })
        }
    }
}

#[cfg(test)]
#[path = "../tests/common/doc_commands.rs"]
mod doc_commands;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("30sec"), Ok(Duration::from_secs(30)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
        // Out of range: an error, not a panic.
        for text in ["2e19", "1e400", "99999999999999999999s", "400days", "NaN"] {
            assert!(parse_duration(text).is_err(), "{text}");
        }
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// Every `auditor` command the README and docs/ show is one this parser takes.
    #[test]
    fn every_command_the_docs_show_parses() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let refused =
            doc_commands::refused(&root, "auditor", |words| match Cli::try_parse_from(words) {
                Err(error) if error.kind() != clap::error::ErrorKind::DisplayHelp => {
                    Err(error.render())
                }
                _ => Ok(()),
            });
        assert!(refused.is_empty(), "{}", refused.join("\n"));
    }
}
