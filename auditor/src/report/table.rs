//! Table renderers: a plain-text table for the terminal and a Markdown one for a patch.

use std::io::Write;

use tabled::{
    builder::Builder,
    settings::{
        Alignment, Format, Style, Width,
        object::{Columns, Segment},
    },
};

use super::{Layout, Report, SiteReport, SiteRow, escape_markdown_cell, escape_text, percent};
use crate::kernel_src::TreeHint;
use auditor_common::catalogue::{Hint, SiteInfo};

#[derive(Clone, Copy)]
pub(super) enum Flavour {
    Text,
    Markdown,
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
    styled_wrapped(builder, flavour, numeric, &[])
}

/// [`styled`], with the text of each `(column, width)` of `wrap` wrapped at word breaks
/// to `width` (after escaping, so that the line breaks stay line breaks).
fn styled_wrapped(
    builder: Builder,
    flavour: Flavour,
    numeric: &[usize],
    wrap: &[(usize, usize)],
) -> String {
    let mut table = builder.build();
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
    let heading = match flavour {
        Flavour::Text => "",
        Flavour::Markdown => "**",
    };
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

fn site_row(site: &SiteReport, wide: bool) -> Vec<String> {
    let verdict = &site.verdict;
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
    let interval = if site.taken_share.is_some() && site.measured {
        format!(
            "{} .. {}",
            percent(verdict.mispredicted_low),
            percent(verdict.mispredicted_high)
        )
    } else {
        "-".to_string()
    };
    let count = |n: u64| {
        if site.measured {
            n.to_string()
        } else {
            "-".to_string()
        }
    };
    let mut row = vec![
        site.info.id.to_string(),
        site.info.function.to_string(),
        site.info.condition.to_string(),
        hint,
        count(site.counts.taken),
        count(site.counts.not_taken),
        count(site.counts.unreadable),
        site.taken_share.map_or_else(|| "-".to_string(), percent),
        interval,
        verdict.label(),
    ];
    if !wide {
        for column in NARROW_DROPS {
            row.remove(column);
        }
    }
    row
}

/// The columns a site table drops when it is not wide, last first: the share taken (the
/// interval says more), the condition and the function (both go below the table).
const NARROW_DROPS: [usize; 3] = [7, 2, 1];

fn write(
    report: &Report,
    layout: Layout,
    flavour: Flavour,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let Layout { per_process, wide } = layout;
    let heading = match flavour {
        Flavour::Text => "",
        Flavour::Markdown => "**",
    };
    writeln!(out, "{}\n", header(report, flavour))?;

    let mut files: Vec<&str> = Vec::new();
    for site in &report.sites {
        if !files.contains(&site.info.file) {
            files.push(site.info.file);
        }
    }
    for file in files {
        let mut header = vec![
            "site",
            "function",
            "condition",
            "hint",
            "taken",
            "not taken",
            "unreadable",
            "taken %",
            "mispredicted (95%)",
            "verdict",
        ];
        let mut numeric = vec![4, 5, 6, 7];
        if !wide {
            for column in NARROW_DROPS {
                header.remove(column);
            }
            numeric = vec![2, 3, 4];
        }
        let mut sites = Builder::default();
        sites.push_record(header);
        let shown: Vec<&SiteReport> = report
            .sites
            .iter()
            .filter(|s| s.info.file == file)
            .collect();
        for site in &shown {
            sites.push_record(site_row(site, wide));
        }
        writeln!(out, "{heading}{file}{heading}\n")?;
        writeln!(out, "{}\n", styled(sites, flavour, &numeric))?;
        if !wide {
            for site in &shown {
                let condition = escaped(site.info.condition, Flavour::Text);
                let (id, function) = (site.info.id, site.info.function);
                writeln!(out, "- `{id}` ({function}) is taken when {condition}")?;
            }
            writeln!(out)?;
        }
    }

    if let Some(by) = report.grouped_by
        && !report.groups.is_empty()
    {
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
                    format!(
                        "{} .. {}",
                        percent(row.verdict.mispredicted_low),
                        percent(row.verdict.mispredicted_high)
                    ),
                    row.verdict.label(),
                ]);
            }
        }
        writeln!(out, "{heading}per {}{heading}\n", by.name())?;
        writeln!(out, "{}\n", styled(groups, flavour, &[1, 3, 4, 5]))?;
    }

    if per_process && !report.processes.is_empty() {
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
        writeln!(out, "{}", styled(processes, flavour, &[0, 4, 5, 6]))?;
    }

    if !report.notes.is_empty() {
        writeln!(out)?;
        for note in &report.notes {
            writeln!(out, "- {}", escape_text(note))?;
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
    writeln!(out, "{}", styled_wrapped(table, flavour, &[], wrap))?;
    writeln!(out)?;
    for line in hints_summary(hints) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}
