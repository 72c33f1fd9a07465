//! Reports: what a tally says about each site, ready for a renderer. Verdicts are computed
//! here once; renderers only format.

mod annotated;
pub mod colour;
mod escape;
mod fit;
pub mod groups;
mod json;
mod notes;
mod options;
pub mod saved;
pub mod svg;
mod table;
mod text;

use std::{collections::BTreeMap, io::Write};

use auditor_common::{
    Counts, Site,
    catalogue::{self, Hint, SiteInfo},
};
use serde::Serialize;

use crate::{
    kernel_src,
    observation::Observation,
    tally::Tally,
    verdict::{self, Arm, Verdict},
};

pub use crate::observation::counted;
pub use escape::{escape_ascii, escape_markdown_cell, escape_text, shell_quoted};
pub use json::{json_schema, write_json};
pub use notes::{deciding_bound, percent};
use notes::{run_note, site_notes, tally_notes, tree_notes};
pub use options::{Options, OptionsError, Width};
pub use table::{write_hints_table, write_markdown, write_sites_table, write_table};

/// The catalogue: every site's declaration, with where the probe decides it and, given a
/// kernel tree, the hint that tree carries.
///
/// On a terminal `width` wide, the table when it fits, else the text format.
pub fn write_sites(
    format: Format,
    kernel_src: Option<&std::path::Path>,
    width: Width,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let rows: Vec<SiteRow> = by_file()
        .into_iter()
        .map(|info| SiteRow {
            info,
            tree: kernel_src.map(|tree| kernel_src::tree_hint(tree, info)),
        })
        .collect();
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, &rows)?;
            writeln!(out)
        }
        Format::Text => text::write_sites_text(&rows, out),
        Format::Markdown => write_sites_table(&rows, true, out),
        Format::Table | Format::Annotated => table_or_text(
            width,
            &mut |table| write_sites_table(&rows, false, table),
            &mut |out| text::write_sites_text(&rows, out),
            out,
        ),
    }
}

/// Every hint of a tree's followed files and its status (`auditor hints`); on a terminal
/// `width` wide, the table when it fits, else the text format.
pub fn write_hints(
    format: Format,
    tree: &std::path::Path,
    width: Width,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let hints = kernel_src::hints(tree);
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, &hints)?;
            writeln!(out)
        }
        Format::Text => text::write_hints_text(&hints, out),
        Format::Markdown => write_hints_table(&hints, true, out),
        Format::Table | Format::Annotated => table_or_text(
            width,
            &mut |table| write_hints_table(&hints, false, table),
            &mut |out| text::write_hints_text(&hints, out),
            out,
        ),
    }
}

/// What `table` writes when it fits `width`, else what `text` writes (at most 72 columns).
fn table_or_text(
    width: Width,
    table: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    text: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let mut rendered = Vec::new();
    table(&mut rendered)?;
    match width.columns() {
        Some(columns) if fit::widest(&String::from_utf8_lossy(&rendered)) > columns => text(out),
        _ => out.write_all(&rendered),
    }
}

/// One row of the catalogue listing.
#[derive(Serialize)]
pub struct SiteRow {
    #[serde(flatten)]
    pub info: &'static SiteInfo,
    /// The hint a kernel tree carries, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<kernel_src::TreeHint>,
}

/// Version of the JSON report layout; bumped on any incompatible change (2: the runs a
/// report is of, and what re-reading it needs).
pub const JSON_VERSION: u32 = 2;

/// How tables are laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Rows per process too.
    pub per_process: bool,
    /// Which columns the tables keep.
    pub columns: Columns,
}

/// Which columns the tables keep, for where they go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Columns {
    /// Every column, however wide: a file, a pipe, `--wide`.
    #[default]
    Every,
    /// Each site's function and condition below its table: Markdown for a commit message.
    ConditionsBelow,
    /// As many as fit a terminal this many columns wide, each table narrowed on its own in
    /// a stated order ([`table::SITE_NARROWING`]) until its lines fit, the notes wrapped.
    Terminal(usize),
}

impl Columns {
    /// The width to fit, on a terminal.
    pub fn terminal_width(self) -> Option<usize> {
        match self {
            Columns::Terminal(width) => Some(width),
            Columns::Every | Columns::ConditionsBelow => None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Table,
    Markdown,
    Json,
    /// For a mail reply: plain ASCII, at most 72 columns.
    Text,
    /// In the shape of the kernel's branch profiler (`trace_stat/branch_annotated`).
    Annotated,
}

/// The order of a report's sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    /// By kernel file, in catalogue order within a file.
    Catalogue,
    /// The largest share of evaluations against the hint first, as branch_annotated;
    /// sites with nothing decided last.
    Miss,
    /// The most evaluations first.
    Evaluations,
    /// By file and line (the tree's, with `--kernel-src`).
    Line,
}

impl Sort {
    /// Whether `a` comes before `b`; ties go in catalogue order.
    pub fn compare(self, a: &SiteReport, b: &SiteReport) -> std::cmp::Ordering {
        let catalogue = |s: &SiteReport| catalogue_position(s.info.site);
        let first = match self {
            Sort::Catalogue => std::cmp::Ordering::Equal,
            Sort::Miss => {
                let share = |s: &SiteReport| s.miss_share().unwrap_or(-1.0);
                share(b)
                    .total_cmp(&share(a))
                    .then(b.rare_arm.of(&b.counts).cmp(&a.rare_arm.of(&a.counts)))
            }
            Sort::Evaluations => b.counts.total().cmp(&a.counts.total()),
            Sort::Line => {
                let (a_file, a_line, _) = a.location();
                let (b_file, b_line, _) = b.location();
                (a_file, a_line).cmp(&(b_file, b_line))
            }
        };
        first.then(catalogue(a).cmp(&catalogue(b)))
    }
}

/// The kernel releases of `runs`' probe runs (the probe sees the kernel it runs on; a log
/// does not say its kernel) that lack `info`'s branch.
fn absent_in_kernels(info: &SiteInfo, runs: &[saved::Run]) -> Vec<String> {
    let mut absent: Vec<String> = runs
        .iter()
        .filter(|run| run.source == "ebpf")
        .filter(|run| {
            auditor_common::catalogue::parse_release(&run.kernel_release)
                .is_some_and(|release| !info.branch_in(release))
        })
        .map(|run| run.kernel_release.clone())
        .collect();
    absent.sort();
    absent.dedup();
    absent
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SiteReport {
    #[serde(flatten)]
    pub info: &'static SiteInfo,
    /// Whether the source decides this site at all (false: its counts are not taken).
    pub measured: bool,
    #[serde(flatten)]
    pub counts: Counts,
    /// Share of decided evaluations that took the branch, if any were decided.
    pub taken_share: Option<f64>,
    /// A hint proposed for this site (`--propose`): the verdict judges it instead of the
    /// catalogue's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposed_hint: Option<Hint>,
    pub verdict: Verdict,
    /// The direction the (proposed) hint calls rare; for an unhinted site, the minority.
    pub rare_arm: Arm,
    /// The processes that took the rare arm, most evaluations first.
    pub rare_from: Vec<RareSource>,
    /// The code that made the calls of the rare arm, when the source saw their stacks
    /// (`strace -k`), most evaluations first.
    pub rare_callers: Vec<RareCaller>,
    /// The kernels of the report's probe runs whose code lacks the branch (older than
    /// `branch_since`): there its counts are the model's, not the kernel's.
    pub absent_in_kernels: Vec<String>,
    /// What the kernel tree the report is judged by (`--kernel-src`) says of the site: its
    /// hint, judged instead of the catalogue's, and where it is written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<kernel_src::TreeHint>,
}

impl SiteReport {
    /// The hint the site is judged on: a proposed one (`--propose`), else the one the
    /// given tree carries (`--kernel-src`), else the catalogue's.
    pub fn judged_hint(&self) -> Hint {
        self.proposed_hint
            .or_else(|| self.tree_hint())
            .unwrap_or(self.info.hint)
    }

    /// The judged hint's name, marked `*` when proposed.
    pub fn hint_label(&self) -> String {
        match self.proposed_hint {
            Some(hint) => format!("{}*", hint.name()),
            None => self.judged_hint().name().to_string(),
        }
    }

    /// `fs/select.c:867` where the given tree places the site, else its file.
    pub fn place(&self) -> String {
        match self.location() {
            (file, Some(line), _) => format!("{file}:{line}"),
            (file, None, _) => file.to_string(),
        }
    }

    /// The hint the given tree carries, when the site was found in it.
    pub fn tree_hint(&self) -> Option<Hint> {
        self.tree.as_ref()?.hint()
    }

    /// Where the branch is: the tree's file, line and function when the tree was given and
    /// has it, else the catalogue's file and function (no line).
    pub fn location(&self) -> (&str, Option<usize>, &str) {
        match &self.tree {
            Some(kernel_src::TreeHint::Found {
                file,
                line,
                function,
                ..
            }) => (file, Some(*line), function),
            _ => (self.info.file, None, self.info.function),
        }
    }

    /// The share of decided evaluations against the judged hint (for an unhinted site: in
    /// the minority direction), if any were decided.
    pub fn miss_share(&self) -> Option<f64> {
        let decided = self.counts.taken + self.counts.not_taken;
        (self.measured && decided > 0)
            .then(|| self.rare_arm.of(&self.counts) as f64 / decided as f64)
    }

    /// The verdict again, on the hint judged now (a site the source does not decide stays
    /// not measured).
    fn judge_again(&mut self) {
        let kind = self.verdict.kind;
        self.verdict = verdict::judge(self.judged_hint(), &self.counts);
        if kind == verdict::VerdictKind::NotMeasured {
            self.verdict.kind = kind;
        }
    }
}

/// Evaluations of a site's rare arm made by one piece of code.
#[derive(Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RareCaller {
    pub caller: String,
    pub evaluations: u64,
}

/// Counts of a site per calling code (`strace -k`).
#[derive(Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct CallerReport {
    pub site: String,
    pub caller: String,
    #[serde(flatten)]
    pub counts: Counts,
}

/// Counts of a site per whole call stack, innermost frame first (the probe's `--stacks`,
/// `strace -k`).
#[derive(Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StackReport {
    pub site: String,
    pub frames: Vec<crate::stacks::Frame>,
    #[serde(flatten)]
    pub counts: Counts,
}

/// A process's evaluations of a site's rare arm.
#[derive(Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RareSource {
    pub pid: u32,
    pub comm: String,
    pub evaluations: u64,
}

/// A hint to judge instead of the catalogue's, as a patch would change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposal {
    pub site: Site,
    pub hint: Hint,
}

impl std::str::FromStr for Proposal {
    type Err = String;

    /// `select.fd_not_open=unlikely`.
    fn from_str(text: &str) -> Result<Proposal, String> {
        let (id, hint) = text.split_once('=').ok_or_else(|| {
            format!("`{text}`: expected SITE=HINT, e.g. select.fd_not_open=unlikely")
        })?;
        let site = catalogue::SITES
            .iter()
            .find(|info| info.id == id)
            .ok_or_else(|| format!("`{id}` is not a site (see `auditor sites`)"))?
            .site;
        let hint = match hint {
            "likely" => Hint::Likely,
            "unlikely" => Hint::Unlikely,
            "none" => Hint::None,
            other => {
                return Err(format!(
                    "`{other}` is not a hint (likely, unlikely or none)"
                ));
            }
        };
        Ok(Proposal { site, hint })
    }
}

#[derive(Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ProcessReport {
    pub pid: u32,
    pub comm: String,
    /// The executable it ran, when the source saw it exec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    pub site: String,
    #[serde(flatten)]
    pub counts: Counts,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Report {
    pub version: u32,
    /// Where the counts came from (`ebpf`, `strace`; joined with `+` when merged).
    pub source: String,
    /// What was traced, as the user asked for it.
    pub target: String,
    pub duration_seconds: f64,
    /// The runs the counts are of, with where and how each was taken.
    pub runs: Vec<saved::Run>,
    /// Calls seen per syscall.
    pub calls: BTreeMap<String, u64>,
    /// One row per site, grouped by kernel file, in catalogue order within a file.
    pub sites: Vec<SiteReport>,
    /// One row per (process, site) with counts.
    pub processes: Vec<ProcessReport>,
    /// One row per (site, calling code), when the source saw stacks.
    pub callers: Vec<CallerReport>,
    /// One row per (site, call stack): the stacks the callers are the first frames of.
    pub stacks: Vec<StackReport>,
    /// Counts per site that are in the totals but in no process's row.
    pub unattributed: Vec<saved::SiteCounts>,
    /// Probe runs the kernel skipped; each may have lost a call.
    pub missed_probe_runs: u64,
    /// The source's own notes (kept to render a saved report again).
    pub source_notes: Vec<String>,
    /// With `--group-by`: what the groups are of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grouped_by: Option<groups::GroupBy>,
    /// Which groups' rows are shown (`--min-evaluations`, `--top`).
    #[serde(skip)]
    group_limits: groups::Limits,
    /// With `--group-by`: counts and verdicts per group.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<groups::GroupReport>,
    /// The process rows of each input (one for a session; one per file for merged
    /// reports), with its runs' hosts and sources: what `--group-by host|source` groups.
    #[serde(skip)]
    parts: Vec<Part>,
    /// The kernel tree whose hints are judged (`--kernel-src`), when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_src: Option<kernel_src::KernelTree>,
    /// What the reader must know to trust the numbers.
    pub notes: Vec<String>,
    /// The notes before the sites' own (the source's, how counts are taken); `notes` is
    /// made of these and the shown sites'.
    #[serde(skip)]
    leading_notes: Vec<String>,
}

fn taken_share(counts: &Counts) -> Option<f64> {
    let decided = counts.taken + counts.not_taken;
    (decided > 0).then(|| counts.taken as f64 / decided as f64)
}

/// The catalogue grouped by kernel file (files in order of first appearance).
/// Where `site` stands in [`by_file`]'s order, worked out once.
fn catalogue_position(site: Site) -> usize {
    static POSITIONS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    POSITIONS.get_or_init(|| {
        let mut positions = vec![0; catalogue::SITES.len()];
        for (position, info) in by_file().iter().enumerate() {
            positions[info.site as usize] = position;
        }
        positions
    })[site as usize]
}

fn by_file() -> Vec<&'static SiteInfo> {
    let mut files: Vec<&str> = Vec::new();
    for info in catalogue::SITES {
        if !files.contains(&info.file) {
            files.push(info.file);
        }
    }
    let mut sites = catalogue::SITES.to_vec();
    sites.sort_by_key(|info| files.iter().position(|f| *f == info.file));
    sites
}

impl Report {
    /// The report of what a source observed: a run on this machine that ends now.
    pub fn of(observation: &Observation) -> Report {
        let run = saved::Run::here(
            observation.source,
            observation.target.clone(),
            observation.elapsed,
        );
        Report::of_runs(vec![run], &observation.tally, observation.measured)
            .with_notes(observation.notes.clone())
    }

    /// A report of saved reports, read (and merged) again.
    pub fn of_saved(loaded: &saved::Loaded) -> Report {
        let mut report = Report::of_runs(loaded.runs.clone(), &loaded.tally, |site| {
            loaded.measured.contains(&site)
        })
        .with_notes(loaded.notes.clone());
        report.parts = loaded
            .parts
            .iter()
            .map(|(runs, tally)| Part::of(runs, tally))
            .collect();
        report
    }

    /// A report of `tally`, the counts of `runs`.
    pub fn of_runs(
        runs: Vec<saved::Run>,
        tally: &Tally,
        measured: impl Fn(Site) -> bool,
    ) -> Report {
        let mut sources: Vec<&str> = Vec::new();
        for run in &runs {
            if !sources.contains(&run.source.as_str()) {
                sources.push(&run.source);
            }
        }
        let source = sources.join("+");
        let target = match runs.as_slice() {
            [run] => run.traced.clone(),
            runs => format!("{} runs merged", runs.len()),
        };
        let duration_seconds = runs.iter().map(|r| r.duration_seconds).sum();
        let sites: Vec<SiteReport> = by_file()
            .into_iter()
            .map(|info| {
                let counts = tally.site_total(info.site);
                let measured = measured(info.site);
                let mut verdict = verdict::judge(info.hint, &counts);
                if !measured {
                    verdict.kind = verdict::VerdictKind::NotMeasured;
                }
                SiteReport {
                    info,
                    measured,
                    counts,
                    taken_share: if measured { taken_share(&counts) } else { None },
                    proposed_hint: None,
                    verdict,
                    rare_arm: verdict::rare_arm(info.hint, &counts),
                    rare_from: Vec::new(),
                    rare_callers: Vec::new(),
                    absent_in_kernels: absent_in_kernels(info, &runs),
                    tree: None,
                }
            })
            .collect();
        let processes = tally
            .per_process()
            .map(|(process, site, counts)| ProcessReport {
                pid: process.pid,
                comm: process.comm.clone(),
                exe: tally.exe(process).map(str::to_string),
                site: site.info().id.to_string(),
                counts: *counts,
            })
            .collect();
        let mut leading_notes = tally_notes(tally);
        if runs.len() > 1 {
            leading_notes.splice(
                0..0,
                runs.iter().enumerate().map(|(i, run)| run_note(i, run)),
            );
        }
        let mut report = Report {
            version: JSON_VERSION,
            source,
            target,
            duration_seconds,
            runs,
            calls: tally.calls().map(|(n, c)| (n.to_string(), c)).collect(),
            sites,
            processes,
            callers: tally
                .callers()
                .map(|(site, caller, counts)| CallerReport {
                    site: site.info().id.to_string(),
                    caller: caller.to_string(),
                    counts: *counts,
                })
                .collect(),
            stacks: tally
                .stacks()
                .map(|(site, frames, counts)| StackReport {
                    site: site.info().id.to_string(),
                    frames: frames.to_vec(),
                    counts: *counts,
                })
                .collect(),
            unattributed: tally
                .unattributed()
                .map(|(site, counts)| saved::SiteCounts {
                    site: site.info().id.to_string(),
                    counts: *counts,
                })
                .collect(),
            missed_probe_runs: tally.missed_probe_runs(),
            source_notes: Vec::new(),
            grouped_by: None,
            group_limits: groups::Limits::default(),
            groups: Vec::new(),
            parts: Vec::new(),
            kernel_src: None,
            notes: Vec::new(),
            leading_notes,
        };
        report.parts = vec![Part::of(&report.runs, tally)];
        report.refresh_rare_sources();
        report.refresh_notes();
        report
    }

    /// Works out, per site, which processes took the arm its hint calls rare.
    fn refresh_rare_sources(&mut self) {
        for site in &mut self.sites {
            let hint = site.judged_hint();
            site.rare_arm = verdict::rare_arm(hint, &site.counts);
            site.rare_from = self
                .processes
                .iter()
                .filter(|p| p.site == site.info.id && site.rare_arm.of(&p.counts) > 0)
                .map(|p| RareSource {
                    pid: p.pid,
                    comm: p.comm.clone(),
                    evaluations: site.rare_arm.of(&p.counts),
                })
                .collect();
            site.rare_from
                .sort_by_key(|r| (std::cmp::Reverse(r.evaluations), r.pid));
            site.rare_callers = self
                .callers
                .iter()
                .filter(|c| c.site == site.info.id && site.rare_arm.of(&c.counts) > 0)
                .map(|c| RareCaller {
                    caller: c.caller.clone(),
                    evaluations: site.rare_arm.of(&c.counts),
                })
                .collect();
            site.rare_callers.sort_by(|a, b| {
                b.evaluations
                    .cmp(&a.evaluations)
                    .then(a.caller.cmp(&b.caller))
            });
        }
    }

    /// Judges the hints a kernel tree carries instead of the catalogue's, and places each
    /// site in that tree (`--kernel-src`).
    pub fn with_tree(mut self, tree: &kernel_src::TreeHints) -> Report {
        self.kernel_src = Some(tree.tree.clone());
        for site in &mut self.sites {
            site.tree = tree.site(site.info.site).cloned();
            site.judge_again();
        }
        self.refresh_rare_sources();
        self.refresh_notes();
        self
    }

    /// Judges the proposed hints instead of the catalogue's (or the tree's) for their
    /// sites.
    pub fn with_proposals(mut self, proposals: &[Proposal]) -> Report {
        for proposal in proposals {
            if let Some(site) = self.sites.iter_mut().find(|s| s.info.site == proposal.site) {
                site.proposed_hint = Some(proposal.hint);
                site.judge_again();
            }
        }
        self.refresh_rare_sources();
        self.refresh_notes();
        self
    }

    /// Keeps only `sites` (all when empty), in their rows and per-process rows; the calls
    /// listed are those of the syscalls the kept sites count.
    pub fn only(mut self, sites: &[Site]) -> Report {
        if !sites.is_empty() {
            self.sites.retain(|s| sites.contains(&s.info.site));
            let ids: Vec<&str> = self.sites.iter().map(|s| s.info.id).collect();
            self.processes.retain(|p| ids.contains(&p.site.as_str()));
            self.callers.retain(|c| ids.contains(&c.site.as_str()));
            self.stacks.retain(|s| ids.contains(&s.site.as_str()));
            let counted: Vec<&str> = self
                .sites
                .iter()
                .flat_map(|s| s.info.syscalls.iter().map(|syscall| syscall.name()))
                .collect();
            self.calls
                .retain(|name, _| counted.contains(&name.as_str()));
            self.refresh_notes();
        }
        self
    }

    /// Puts the sites in `order`.
    pub fn sorted(mut self, order: Sort) -> Report {
        self.sites.sort_by(|a, b| order.compare(a, b));
        self
    }

    fn refresh_notes(&mut self) {
        let shown: Vec<&str> = self.sites.iter().map(|s| s.info.id).collect();
        self.groups = match self.grouped_by {
            None => Vec::new(),
            Some(groups::GroupBy::Program) => {
                let rows = self.processes.iter();
                let rows = rows.map(|p| (p.pid, p.comm.as_str(), p.site.as_str(), &p.counts));
                groups::groups(&self.sites, rows)
            }
            Some(by) => {
                let rows = self.parts.iter().flat_map(|part| {
                    let name = if by == groups::GroupBy::Host {
                        &part.hosts
                    } else {
                        &part.sources
                    };
                    part.rows
                        .iter()
                        .filter(|(_, site, _)| shown.contains(&site.as_str()))
                        .map(move |(pid, site, counts)| {
                            (*pid, name.as_str(), site.as_str(), counts)
                        })
                });
                groups::groups(&self.sites, rows)
            }
        };
        // A note that names sites is about them: with `--site`, one naming only sites not
        // shown is left out; one naming none is about the whole report.
        let mut notes: Vec<String> = self
            .leading_notes
            .iter()
            .filter(|note| {
                let named = notes::sites_named(note);
                named.is_empty() || named.iter().any(|id| shown.contains(id))
            })
            .cloned()
            .collect();
        if let Some(tree) = &self.kernel_src {
            notes.extend(tree_notes(tree, &self.sites));
        }
        notes.extend(site_notes(&self.sites));
        if let Some(by) = self.grouped_by {
            // Judged over every group; shown within the limits.
            notes.extend(groups::pooled_notes(&self.sites, by, &self.groups));
            let (shown, left_out) = self
                .group_limits
                .apply(by, std::mem::take(&mut self.groups));
            self.groups = shown;
            notes.extend(left_out);
        }
        self.notes = notes;
    }

    /// Gives every program (host, source) its own counts and verdicts (`--group-by`).
    pub fn grouped(self, by: Option<groups::GroupBy>) -> Report {
        self.grouped_within(by, groups::Limits::default())
    }

    /// Says `label` for what was traced (`--label`): a command line can hold key paths
    /// and user@host. A report of one run says it of that run too, so that its JSON does
    /// not keep the command line either.
    pub fn labelled(mut self, label: Option<&str>) -> Report {
        if let Some(label) = label {
            self.target = label.to_string();
            if let [run] = self.runs.as_mut_slice() {
                run.traced = label.to_string();
            }
        }
        self
    }

    /// [`Report::grouped`], its groups' rows shown within `limits`.
    pub fn grouped_within(mut self, by: Option<groups::GroupBy>, limits: groups::Limits) -> Report {
        self.grouped_by = by;
        self.group_limits = limits;
        self.refresh_notes();
        self
    }

    /// Adds the source's own notes (first: they qualify everything below them).
    fn with_notes(mut self, notes: Vec<String>) -> Report {
        self.source_notes.extend(notes.iter().cloned());
        self.leading_notes.splice(0..0, notes);
        self.refresh_notes();
        self
    }

    pub fn site(&self, site: Site) -> &SiteReport {
        self.sites
            .iter()
            .find(|s| s.info.site == site)
            .expect("every site has a row")
    }

    pub fn render(
        &self,
        format: Format,
        layout: Layout,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        match format {
            Format::Table => write_table(self, layout, out),
            Format::Markdown => write_markdown(self, layout, out),
            Format::Json => write_json(self, out),
            Format::Text => text::write_text(self, out),
            Format::Annotated => annotated::write_annotated(self, layout, out),
        }
    }
}

/// One input's process rows (pid, site id, counts), and the hosts and sources of its runs.
#[derive(Debug)]
struct Part {
    hosts: String,
    sources: String,
    rows: Vec<(u32, String, Counts)>,
}

impl Part {
    fn of(runs: &[saved::Run], tally: &Tally) -> Part {
        let joined = |field: fn(&saved::Run) -> &str| {
            let mut names: Vec<&str> = runs.iter().map(field).collect();
            names.sort_unstable();
            names.dedup();
            names.join("+")
        };
        Part {
            hosts: joined(|run| &run.host),
            sources: joined(|run| &run.source),
            rows: tally
                .per_process()
                .map(|(process, site, counts)| (process.pid, site.info().id.to_string(), *counts))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
