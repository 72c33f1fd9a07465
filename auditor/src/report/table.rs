//! Table renderers: a plain-text table for the terminal and a Markdown one for a patch.

use std::io::Write;

use tabled::{
    builder::Builder,
    settings::{
        Alignment, Format, Style, Width,
        object::{Columns, Segment},
    },
};

use super::{
    Columns as Fit, Layout, Report, SiteReport, SiteRow, escape_markdown_cell, escape_text, fit,
    groups::GroupBy, percent,
};
use crate::kernel_src::TreeHint;
use auditor_common::catalogue::{Hint, SiteInfo};

#[derive(Clone, Copy)]
pub(super) enum Flavour {
    Text,
    Markdown,
}

impl Flavour {
    /// What goes around a heading: bold in Markdown, nothing in text.
    fn heading(self) -> &'static str {
        match self {
            Flavour::Text => "",
            Flavour::Markdown => "**",
        }
    }
}

pub fn write_table(report: &Report, layout: Layout, out: &mut dyn Write) -> std::io::Result<()> {
    write(report, layout, Flavour::Text, out)
}

pub fn write_markdown(report: &Report, layout: Layout, out: &mut dyn Write) -> std::io::Result<()> {
    write(report, layout, Flavour::Markdown, out)
}

/// Text for `flavour`, safe to print: cells and notes hold names from traced programs.
fn escaped(text: &str, flavour: Flavour) -> String {
    match flavour {
        Flavour::Text => escape_text(text).into_owned(),
        Flavour::Markdown => escape_markdown_cell(text),
    }
}

pub(super) fn styled(builder: Builder, flavour: Flavour, numeric: &[usize]) -> String {
    styled_wrapped(builder, flavour, numeric, &[], None)
}

/// [`styled`], its widest columns wrapped until the table fits `squeeze` when given.
pub(super) fn styled_fitting(
    builder: Builder,
    flavour: Flavour,
    numeric: &[usize],
    squeeze: Option<usize>,
) -> String {
    styled_wrapped(builder, flavour, numeric, &[], squeeze)
}

/// [`styled`], with the text of each `(column, width)` of `wrap` wrapped at word breaks
/// to `width` (after escaping, so that the line breaks stay line breaks).
fn styled_wrapped(
    builder: Builder,
    flavour: Flavour,
    numeric: &[usize],
    wrap: &[(usize, usize)],
    squeeze: Option<usize>,
) -> String {
    let records: Vec<Vec<String>> = builder.into();
    let render = |wrap: &[(usize, usize)]| {
        let mut table = Builder::from(records.clone()).build();
        table.modify(
            Segment::all(),
            Format::content(|cell| escaped(cell, flavour)),
        );
        match flavour {
            Flavour::Text => table.with(Style::psql()),
            Flavour::Markdown => table.with(Style::markdown()),
        };
        for &column in numeric {
            table.modify(Columns::one(column), Alignment::right());
        }
        for &(column, width) in wrap {
            table.modify(Columns::one(column), Width::wrap(width).keep_words(true));
        }
        // The last column's padding would end every line in spaces.
        let text = table.to_string();
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        lines.join("\n")
    };
    let text = render(wrap);
    match squeeze {
        Some(width) if fit::widest(&text) > width => {
            let excess = fit::widest(&text) - width;
            render(&squeezed(&records, excess))
        }
        _ => text,
    }
}

/// The widths that take `excess` columns off a table of `records`, the widest column first,
/// none narrower than its longest word: the cells wrap at words, and no word (a site's
/// name, a count) is ever broken. What still does not fit is as narrow as it goes.
fn squeezed(records: &[Vec<String>], excess: usize) -> Vec<(usize, usize)> {
    let columns = records.iter().map(Vec::len).max().unwrap_or(0);
    let measure = |column: usize, of: &dyn Fn(&str) -> usize| {
        records
            .iter()
            .filter_map(|record| record.get(column))
            .map(|cell| of(cell))
            .max()
            .unwrap_or(0)
    };
    let mut widths: Vec<usize> = (0..columns)
        .map(|c| {
            measure(c, &|cell| {
                cell.lines().map(|l| l.chars().count()).max().unwrap_or(0)
            })
        })
        .collect();
    let natural = widths.clone();
    let least: Vec<usize> = (0..columns)
        .map(|c| {
            measure(c, &|cell| {
                cell.split_whitespace()
                    .map(|word| word.chars().count())
                    .max()
                    .unwrap_or(0)
            })
        })
        .collect();
    for _ in 0..excess {
        let Some(widest) = (0..columns)
            .filter(|&c| widths[c] > least[c])
            .max_by_key(|&c| (widths[c], std::cmp::Reverse(c)))
        else {
            break;
        };
        widths[widest] -= 1;
    }
    (0..columns)
        .filter(|&c| widths[c] < natural[c])
        .map(|c| (c, widths[c]))
        .collect()
}

/// The catalogue as a table, one row per site.
pub fn write_sites_table(
    rows: &[SiteRow],
    markdown: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let with_tree = rows.iter().any(|row| row.tree.is_some());
    let mut table = Builder::default();
    let mut header = vec![
        "site",
        "file",
        "function",
        "condition",
        "hint",
        "unit",
        "syscalls",
        "probe decides at",
    ];
    if with_tree {
        header.extend(["tree hint", "tree vs catalogue"]);
    }
    table.push_record(header);
    for row in rows {
        let info = row.info;
        let decided = info.decided.name().to_string();
        let mut record = vec![
            info.id.to_string(),
            info.file.to_string(),
            info.function.to_string(),
            info.condition.to_string(),
            hint_text(info),
            info.unit.name().to_string(),
            info.syscalls
                .iter()
                .map(|syscall| syscall.name())
                .collect::<Vec<_>>()
                .join(", "),
            decided,
        ];
        match &row.tree {
            Some(TreeHint::Found {
                hint,
                file,
                line,
                function,
            }) => {
                let moved = if function == info.function {
                    String::new()
                } else {
                    format!(", in {function}")
                };
                record.push(format!("{} ({file}:{line}{moved})", hint.name()));
                record.push(
                    if *hint == info.hint {
                        "same"
                    } else {
                        "DIFFERS"
                    }
                    .to_string(),
                );
            }
            Some(TreeHint::NotFound { why }) => {
                record.push("-".to_string());
                record.push(format!("not found: {why}"));
            }
            None => {}
        }
        table.push_record(record);
    }
    let flavour = if markdown {
        Flavour::Markdown
    } else {
        Flavour::Text
    };
    writeln!(out, "{}", styled(table, flavour, &[]))?;
    writeln!(
        out,
        "\nAllocating fds, not followed (their allocations are not in fd.*):"
    )?;
    for (syscalls, why) in auditor_common::syscalls::NOT_FOLLOWED {
        writeln!(out, "- {syscalls}: {why}")?;
    }
    Ok(())
}

/// The line above the tables: what was traced, by what, for how long; the calls of the
/// shown sites' syscalls; the tree whose hints are judged.
pub(super) fn header(report: &Report, flavour: Flavour) -> String {
    let calls: Vec<String> = report
        .calls
        .iter()
        .map(|(name, calls)| format!("{name} {calls}"))
        .collect();
    let calls = if calls.is_empty() {
        "none".to_string()
    } else {
        calls.join(", ")
    };
    let heading = flavour.heading();
    let mut line = format!(
        "{heading}auditor{heading}: {} ({}, {:.2} s); calls: {calls}",
        escape_text(&report.target),
        report.source,
        report.duration_seconds
    );
    if let Some(tree) = &report.kernel_src {
        line.push_str(&format!(
            "; hints of {}",
            escaped(&tree.name(), Flavour::Text)
        ));
    }
    line
}

/// `unlikely (6.16)`, or `none`.
fn hint_text(info: &SiteInfo) -> String {
    match info.hint {
        Hint::None => "none".to_string(),
        hint => format!("{} ({})", hint.name(), info.hint_since),
    }
}

/// The columns of a site table.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SiteColumn {
    Site,
    Function,
    Condition,
    Hint,
    Taken,
    NotTaken,
    Unreadable,
    TakenShare,
    Interval,
    Verdict,
}

impl SiteColumn {
    const ALL: [SiteColumn; 10] = [
        SiteColumn::Site,
        SiteColumn::Function,
        SiteColumn::Condition,
        SiteColumn::Hint,
        SiteColumn::Taken,
        SiteColumn::NotTaken,
        SiteColumn::Unreadable,
        SiteColumn::TakenShare,
        SiteColumn::Interval,
        SiteColumn::Verdict,
    ];

    fn title(self) -> &'static str {
        match self {
            SiteColumn::Site => "site",
            SiteColumn::Function => "function",
            SiteColumn::Condition => "condition",
            SiteColumn::Hint => "hint",
            SiteColumn::Taken => "taken",
            SiteColumn::NotTaken => "not taken",
            SiteColumn::Unreadable => "unreadable",
            SiteColumn::TakenShare => "taken %",
            SiteColumn::Interval => "mispredicted (95%)",
            SiteColumn::Verdict => "verdict",
        }
    }

    fn numeric(self) -> bool {
        matches!(
            self,
            SiteColumn::Taken
                | SiteColumn::NotTaken
                | SiteColumn::Unreadable
                | SiteColumn::TakenShare
        )
    }

    /// The step of [`SITE_NARROWING`] from which the column is out of the table.
    fn leaves_at(self) -> Option<usize> {
        match self {
            SiteColumn::TakenShare => Some(1),
            SiteColumn::Function | SiteColumn::Condition => Some(2),
            SiteColumn::Taken | SiteColumn::NotTaken | SiteColumn::Unreadable => Some(4),
            SiteColumn::Interval => Some(5),
            SiteColumn::Site | SiteColumn::Hint | SiteColumn::Verdict => None,
        }
    }

    /// The columns of a site table at `step`.
    fn at(step: usize) -> Vec<SiteColumn> {
        SiteColumn::ALL
            .into_iter()
            .filter(|column| column.leaves_at().is_none_or(|leaves| step < leaves))
            .collect()
    }
}

/// How a site table narrows to fit a terminal, step by step, each keeping what the ones
/// before it did; the first step whose tables fit is shown, and the last one's rows wrap.
/// Nothing is lost: what leaves the table is said in a line per site below it.
pub const SITE_NARROWING: [&str; 5] = [
    "the share taken goes (the interval says more)",
    "each site's function and condition go below the table",
    "the hint's kernel release goes below",
    "the counts go below",
    "the interval goes below",
];

/// The step at which the site tables keep their conditions below them (a commit message).
pub(super) const CONDITIONS_BELOW: usize = 2;

/// `unlikely (6.16)`, `likely (line 869)`, `unlikely (proposed)`, with the kernels that
/// lack the site.
fn full_hint(site: &SiteReport) -> String {
    let mut hint = match (site.proposed_hint, site.tree_hint(), site.location()) {
        (Some(hint), _, _) => format!("{} (proposed)", hint.name()),
        (None, Some(hint), (_, Some(line), _)) => format!("{} (line {line})", hint.name()),
        _ => hint_text(site.info),
    };
    if !site.absent_in_kernels.is_empty() {
        // The notes say what those kernels do instead.
        let releases: Vec<String> = site
            .absent_in_kernels
            .iter()
            .filter_map(|kernel| auditor_common::catalogue::parse_release(kernel))
            .map(|(major, minor)| format!("{major}.{minor}"))
            .collect();
        hint.push_str(&format!(", not in {}", releases.join("/")));
    }
    hint
}

/// `0.00% .. 20.39%`, or `-` where nothing was decided.
fn interval(site: &SiteReport) -> String {
    if site.taken_share.is_some() && site.measured {
        format!(
            "{} .. {}",
            percent(site.verdict.mispredicted_low),
            percent(site.verdict.mispredicted_high)
        )
    } else {
        "-".to_string()
    }
}

fn site_cell(site: &SiteReport, column: SiteColumn, step: usize) -> String {
    let count = |n: u64| {
        if site.measured {
            n.to_string()
        } else {
            "-".to_string()
        }
    };
    match column {
        SiteColumn::Site => site.info.id.to_string(),
        SiteColumn::Function => site.info.function.to_string(),
        SiteColumn::Condition => site.info.condition.to_string(),
        SiteColumn::Hint if step >= 3 => site.hint_label(),
        SiteColumn::Hint => full_hint(site),
        SiteColumn::Taken => count(site.counts.taken),
        SiteColumn::NotTaken => count(site.counts.not_taken),
        SiteColumn::Unreadable => count(site.counts.unreadable),
        SiteColumn::TakenShare => site.taken_share.map_or_else(|| "-".to_string(), percent),
        SiteColumn::Interval => interval(site),
        SiteColumn::Verdict => site.verdict.label(),
    }
}

/// What the table at `step` leaves out of `site`'s row, said in words.
fn site_below(site: &SiteReport, step: usize) -> String {
    let condition = escaped(site.info.condition, Flavour::Text);
    let (id, function) = (site.info.id, site.info.function);
    let mut line = format!("- `{id}` ({function}) is taken when {condition}");
    if step >= 3 {
        line.push_str(&format!("; hint {}", full_hint(site)));
    }
    if step >= 4 && site.measured {
        let counts = &site.counts;
        line.push_str(&format!(
            "; {} taken, {} not taken, {} unreadable",
            counts.taken, counts.not_taken, counts.unreadable
        ));
    }
    if step >= 5 && site.taken_share.is_some() && site.measured {
        line.push_str(&format!("; mispredicted {} (95%)", interval(site)));
    }
    line
}

/// The site tables, a table per kernel file, at `step` of [`SITE_NARROWING`]; on a
/// terminal `width` wide, the lines below wrap to it and the last step's rows are wrapped
/// to fit it.
fn site_sections(report: &Report, step: usize, flavour: Flavour, width: Option<usize>) -> String {
    let heading = flavour.heading();
    let columns = SiteColumn::at(step);
    let numeric: Vec<usize> = (0..columns.len())
        .filter(|&index| columns[index].numeric())
        .collect();
    let squeeze = width.filter(|_| step == SITE_NARROWING.len());
    let mut files: Vec<&str> = Vec::new();
    for site in &report.sites {
        if !files.contains(&site.info.file) {
            files.push(site.info.file);
        }
    }
    let mut out = String::new();
    for file in files {
        let shown: Vec<&SiteReport> = report
            .sites
            .iter()
            .filter(|s| s.info.file == file)
            .collect();
        let mut sites = Builder::default();
        sites.push_record(columns.iter().map(|column| column.title()));
        for site in &shown {
            sites.push_record(columns.iter().map(|&column| site_cell(site, column, step)));
        }
        out.push_str(&format!("{heading}{file}{heading}\n\n"));
        out.push_str(&styled_fitting(sites, flavour, &numeric, squeeze));
        out.push_str("\n\n");
        if step >= CONDITIONS_BELOW {
            for site in &shown {
                out.push_str(&paragraph(&site_below(site, step), width, "  "));
                out.push('\n');
            }
            out.push('\n');
        }
    }
    out
}

/// `text` wrapped at words to `width` with `indent` after its first line, or as it is.
pub(super) fn paragraph(text: &str, width: Option<usize>, indent: &str) -> String {
    match width {
        Some(width) => fit::wrapped(text, width, indent),
        None => text.to_string(),
    }
}

/// How the tables of groups and processes narrow to fit a terminal: first each group (or
/// process) gets a table of its own under a heading, then the intervals go below.
const GROUP_NARROWING: usize = 2;

fn group_sections(
    report: &Report,
    by: GroupBy,
    step: usize,
    flavour: Flavour,
    width: Option<usize>,
) -> String {
    let heading = flavour.heading();
    let squeeze = width.filter(|_| step == GROUP_NARROWING);
    let mut out = format!("{heading}per {}{heading}\n\n", by.name());
    let interval = |row: &super::groups::GroupSite| {
        format!(
            "{} .. {}",
            percent(row.verdict.mispredicted_low),
            percent(row.verdict.mispredicted_high)
        )
    };
    if step == 0 {
        let mut groups = Builder::default();
        groups.push_record([
            by.name(),
            "processes",
            "site",
            "taken",
            "not taken",
            "unreadable",
            "mispredicted (95%)",
            "verdict",
        ]);
        for group in &report.groups {
            for row in &group.sites {
                groups.push_record([
                    group.name.clone(),
                    group.pids.len().to_string(),
                    row.id.to_string(),
                    row.counts.taken.to_string(),
                    row.counts.not_taken.to_string(),
                    row.counts.unreadable.to_string(),
                    interval(row),
                    row.verdict.label(),
                ]);
            }
        }
        out.push_str(&styled(groups, flavour, &[1, 3, 4, 5]));
        out.push_str("\n\n");
        return out;
    }
    for group in &report.groups {
        let processes = match group.pids.len() {
            1 => format!("pid {}", group.pids[0]),
            n => format!("{n} processes"),
        };
        let title = format!("{} ({processes}):", escape_text(&group.name));
        out.push_str(&paragraph(&title, width, "  "));
        out.push_str("\n\n");
        let mut table = Builder::default();
        let mut header = vec!["site", "taken", "not taken", "unreadable"];
        if step < 2 {
            header.push("mispredicted (95%)");
        }
        header.push("verdict");
        table.push_record(header);
        for row in &group.sites {
            let mut record = vec![
                row.id.to_string(),
                row.counts.taken.to_string(),
                row.counts.not_taken.to_string(),
                row.counts.unreadable.to_string(),
            ];
            if step < 2 {
                record.push(interval(row));
            }
            record.push(row.verdict.label());
            table.push_record(record);
        }
        out.push_str(&styled_fitting(table, flavour, &[1, 2, 3], squeeze));
        out.push_str("\n\n");
        if step >= 2 {
            for row in &group.sites {
                let line = format!("- `{}`: mispredicted {} (95%)", row.id, interval(row));
                out.push_str(&paragraph(&line, width, "  "));
                out.push('\n');
            }
            out.push('\n');
        }
    }
    out
}

/// The rows per process; on a terminal too narrow for them, a table per process under a
/// heading with its comm and executable.
fn process_sections(
    report: &Report,
    step: usize,
    flavour: Flavour,
    width: Option<usize>,
) -> String {
    let mut out = String::new();
    if step == 0 {
        let mut processes = Builder::default();
        processes.push_record([
            "pid",
            "comm",
            "exe",
            "site",
            "taken",
            "not taken",
            "unreadable",
        ]);
        for row in &report.processes {
            processes.push_record([
                row.pid.to_string(),
                row.comm.clone(),
                row.exe.clone().unwrap_or_else(|| "-".into()),
                row.site.clone(),
                row.counts.taken.to_string(),
                row.counts.not_taken.to_string(),
                row.counts.unreadable.to_string(),
            ]);
        }
        out.push_str(&styled(processes, flavour, &[0, 4, 5, 6]));
        out.push('\n');
        return out;
    }
    let mut pids: Vec<u32> = Vec::new();
    for row in &report.processes {
        if !pids.contains(&row.pid) {
            pids.push(row.pid);
        }
    }
    for pid in pids {
        let rows: Vec<_> = report.processes.iter().filter(|r| r.pid == pid).collect();
        let first = rows[0];
        let exe = first.exe.as_deref().unwrap_or("-");
        let title = format!(
            "pid {pid} {} ({}):",
            escape_text(&first.comm),
            escape_text(exe)
        );
        out.push_str(&paragraph(&title, width, "  "));
        out.push_str("\n\n");
        let mut table = Builder::default();
        table.push_record(["site", "taken", "not taken", "unreadable"]);
        for row in rows {
            table.push_record([
                row.site.clone(),
                row.counts.taken.to_string(),
                row.counts.not_taken.to_string(),
                row.counts.unreadable.to_string(),
            ]);
        }
        out.push_str(&styled_fitting(table, flavour, &[1, 2, 3], width));
        out.push_str("\n\n");
    }
    out
}

fn write(
    report: &Report,
    layout: Layout,
    flavour: Flavour,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let Layout {
        per_process,
        columns,
    } = layout;
    // On a terminal: its width, to which every part is fitted on its own.
    let width = columns.terminal_width();
    // `below`: the step of a table that keeps its conditions below it (a commit message).
    let fitted = |last: usize, below: usize, render: &dyn Fn(usize) -> String| match columns {
        Fit::Every => render(0),
        Fit::ConditionsBelow => render(below),
        Fit::Terminal(width) => fit::first_fitting(width, last, render),
    };
    writeln!(
        out,
        "{}\n",
        paragraph(&header(report, flavour), width, "  ")
    )?;
    let sites = fitted(SITE_NARROWING.len(), CONDITIONS_BELOW, &|step| {
        site_sections(report, step, flavour, width)
    });
    write!(out, "{sites}")?;

    if let Some(by) = report.grouped_by
        && !report.groups.is_empty()
    {
        let groups = fitted(GROUP_NARROWING, 0, &|step| {
            group_sections(report, by, step, flavour, width)
        });
        write!(out, "{groups}")?;
    }

    if per_process && !report.processes.is_empty() {
        let processes = fitted(1, 0, &|step| process_sections(report, step, flavour, width));
        write!(out, "{processes}")?;
    }

    if !report.notes.is_empty() {
        writeln!(out)?;
        for note in &report.notes {
            let note = format!("- {}", escape_text(note));
            writeln!(out, "{}", paragraph(&note, width, "  "))?;
        }
    }
    Ok(())
}

/// Every hint of a tree's followed files as a table, one row per hint call, with the
/// totals and what the catalogue names that the tree lacks below it.
/// The lines after a tree's hints: how many of each status, the share measured, and what
/// the catalogue names that the tree lacks.
pub(super) fn hints_summary(hints: &crate::kernel_src::Hints) -> Vec<String> {
    let summary = &hints.summary;
    let mut lines = vec![format!(
        "{} hints in {}: {} measured, {} not yet, {} not decidable, {} unclassified.",
        summary.hints,
        hints.files.join(", "),
        summary.measured,
        summary.not_yet,
        summary.not_decidable,
        summary.unclassified
    )];
    if let Some(share) = summary.measured_of_decidable {
        lines.push(format!(
            "Measured: {} of the {} decidable ({share:.1}%).",
            summary.measured,
            summary.measured + summary.not_yet
        ));
    }
    if !hints.missing.is_empty() {
        lines.push(String::new());
        lines.push("In the catalogue or its classification, not in this tree:".to_string());
        for missing in &hints.missing {
            lines.push(format!(
                "- {} ({}): {}",
                missing.what, missing.file, missing.why
            ));
        }
    }
    lines
}

pub fn write_hints_table(
    hints: &crate::kernel_src::Hints,
    markdown: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let flavour = if markdown {
        Flavour::Markdown
    } else {
        Flavour::Text
    };
    let mut table = Builder::default();
    table.push_record([
        "file:line",
        "function",
        "hint",
        "condition",
        "status",
        "site or why",
    ]);
    for row in &hints.hints {
        table.push_record([
            format!("{}:{}", row.file, row.line),
            row.function.clone(),
            row.hint.name().to_string(),
            row.condition.clone(),
            row.status.name().to_string(),
            match (row.sites.is_empty(), row.why) {
                (false, _) => row.sites.join(", "),
                (true, Some(why)) => why.to_string(),
                (true, None) => "no site or classification names it".to_string(),
            },
        ]);
    }
    // Conditions and reasons wrap in a terminal; a Markdown cell is one line.
    let wrap: &[(usize, usize)] = if markdown { &[] } else { &[(3, 40), (5, 64)] };
    writeln!(out, "{}", styled_wrapped(table, flavour, &[], wrap, None))?;
    writeln!(out)?;
    for line in hints_summary(hints) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}
