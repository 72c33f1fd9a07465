//! The text renderer: what a reviewer pastes into a mail reply. Plain ASCII, no line over
//! 72 columns: a paragraph on what was traced, a line per site with its rare evaluations
//! and verdict, the programs behind each rare arm, and (with `--group-by`) the verdicts per
//! program, host or source.

use std::io::Write;

use super::{Report, SiteReport, deciding_bound, escape_ascii};
use crate::verdict::Verdict;
use auditor_common::catalogue::{Hint, Unit};

/// The widest line.
pub const WIDTH: usize = 72;

/// `text` wrapped to [`WIDTH`], each line after the first indented by `indent`.
fn wrapped(text: &str, indent: &str) -> String {
    super::fit::wrapped(&escape_ascii(text), WIDTH, indent)
}

/// `entries`, `calls`: the unit of `count` evaluations.
fn units(unit: Unit, count: u64) -> &'static str {
    let (one, many) = match unit {
        Unit::Call => ("call", "calls"),
        Unit::PollfdEntry => ("entry", "entries"),
        Unit::FdSetWord => ("word", "words"),
        Unit::Allocation => ("allocation", "allocations"),
        Unit::FdLookup => ("lookup", "lookups"),
        Unit::FdtableAllocation => ("fdtable allocation", "fdtable allocations"),
        Unit::TableCopy => ("table copy", "table copies"),
    };
    if count == 1 { one } else { many }
}

/// `0 of 2176 entries (<= 0.18%)`: the evaluations against the hint (the minority,
/// unhinted) and the bound of their share that decides `verdict`: the upper one for a
/// hint that holds (a candidate), the lower one for one that is costly or wrong (no hint),
/// both where the interval straddles a bar.
fn evidence(site: &SiteReport, counts: &auditor_common::Counts, verdict: &Verdict) -> String {
    let rare = site.rare_arm.of(counts);
    let total = counts.total();
    let bound = deciding_bound(verdict);
    let mut text = format!(
        "{rare} of {total} {} ({bound})",
        units(site.info.unit, total)
    );
    if counts.unreadable > 0 {
        text.push_str(&format!(", {} unreadable", counts.unreadable));
    }
    text
}

/// One site's line, `indent` in: its name, the hint when given, the verdict (padded to
/// `verdict_width`, so that the verdicts make a column and never wrap), then the evidence,
/// which wraps at words below when the line does not fit.
fn site_line(
    indent: &str,
    (id, id_width): (&str, usize),
    hint: Option<&str>,
    (verdict, verdict_width): (&str, usize),
    evidence: &str,
) -> String {
    let hint = hint.map(|hint| format!("{hint:8}  ")).unwrap_or_default();
    let line = format!("{indent}{id:id_width$}  {hint}{verdict:verdict_width$}  {evidence}");
    wrapped(&line, &format!("{indent}    "))
}

pub fn write_text(report: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    let hosts: Vec<String> = report
        .runs
        .iter()
        .map(|run| format!("Linux {} on {}", run.kernel_release, run.host))
        .fold(Vec::new(), |mut all, host| {
            if !all.contains(&host) {
                all.push(host);
            }
            all
        });
    let paragraph = format!(
        "Traced: {}, for {:.1} s, on {}, counted by {}.",
        report.target,
        report.duration_seconds,
        hosts.join(" and "),
        report.source
    );
    writeln!(out, "{}", wrapped(&paragraph, ""))?;
    if report.runs.len() > 1 {
        for run in &report.runs {
            let line = format!(
                "- {} ({}, {:.1} s)",
                run.traced, run.source, run.duration_seconds
            );
            writeln!(out, "{}", wrapped(&line, "  "))?;
        }
    }
    writeln!(out)?;

    let measured: Vec<&SiteReport> = report
        .sites
        .iter()
        .filter(|s| s.measured && s.counts.total() > 0)
        .collect();
    let id_width = measured.iter().map(|s| s.info.id.len()).max().unwrap_or(0);
    let verdict_width = measured
        .iter()
        .map(|s| s.verdict.label().len())
        .chain(
            report
                .groups
                .iter()
                .flat_map(|group| group.sites.iter().map(|row| row.verdict.label().len())),
        )
        .max()
        .unwrap_or(0);
    for site in &measured {
        let mut line = site_line(
            "",
            (site.info.id, id_width),
            Some(&site.hint_label()),
            (&site.verdict.label(), verdict_width),
            &evidence(site, &site.counts, &site.verdict),
        );
        // With a tree given, where the branch is in it, on a line of its own.
        if let (_, Some(_), function) = site.location() {
            line.push_str(&format!("\n    at {} in {function}()", site.place()));
        }
        writeln!(out, "{line}")?;
    }
    if report.sites.iter().any(|s| s.proposed_hint.is_some()) {
        writeln!(out, "(* a proposed hint, judged instead of the kernel's)")?;
    }
    let ids = |keep: &dyn Fn(&SiteReport) -> bool| -> Vec<&str> {
        report
            .sites
            .iter()
            .filter(|s| keep(s))
            .map(|s| s.info.id)
            .collect()
    };
    let never = ids(&|s| s.measured && s.counts.total() == 0);
    if !never.is_empty() {
        writeln!(
            out,
            "{}",
            wrapped(&format!("Never reached: {}.", never.join(", ")), "  ")
        )?;
    }
    let unmeasured = ids(&|s| !s.measured);
    if !unmeasured.is_empty() {
        let line = format!("Not seen by this source: {}.", unmeasured.join(", "));
        writeln!(out, "{}", wrapped(&line, "  "))?;
    }

    if let Some(by) = report.grouped_by
        && !report.groups.is_empty()
    {
        writeln!(out, "\nPer {}:", by.name())?;
        for group in &report.groups {
            let processes = match group.pids.len() {
                1 => format!("pid {}", group.pids[0]),
                n => format!("{n} processes"),
            };
            writeln!(
                out,
                "{}",
                wrapped(&format!("{} ({processes})", group.name), "  ")
            )?;
            // The hinted sites: what a hint patch is judged on.
            for row in &group.sites {
                let Some(site) = report.sites.iter().find(|s| s.info.id == row.id) else {
                    continue;
                };
                if site.judged_hint() == Hint::None {
                    continue;
                }
                let evidence = evidence(site, &row.counts, &row.verdict);
                let id = (row.id, id_width);
                let verdict = (row.verdict.label(), verdict_width);
                let line = site_line("  ", id, None, (&verdict.0, verdict.1), &evidence);
                writeln!(out, "{line}")?;
            }
        }
    }
    // The notes every format carries (the rare arms' processes, what would settle a
    // verdict, by how much a hint is costly, what the source could not see), at words.
    if !report.notes.is_empty() {
        writeln!(out, "\nNotes:")?;
        for note in &report.notes {
            writeln!(out, "{}", wrapped(&format!("- {note}"), "  "))?;
        }
    }
    Ok(())
}

/// `auditor sites --format text`: each site as a short paragraph, at most 72 columns.
pub fn write_sites_text(rows: &[super::SiteRow], out: &mut dyn Write) -> std::io::Result<()> {
    use crate::kernel_src::TreeHint;
    for row in rows {
        let info = row.info;
        let hint = match info.hint {
            Hint::None => "no hint".to_string(),
            hint => format!("{} since {}", hint.name(), info.hint_since),
        };
        let syscalls: Vec<&str> = info.syscalls.iter().map(|s| s.name()).collect();
        writeln!(out, "{}", wrapped(&format!("{}: {hint}", info.id), "    "))?;
        let lines = [
            format!(
                "    {} in {}: taken when {}.",
                info.function, info.file, info.condition
            ),
            format!(
                "    Counted per {} of {}; the probe decides at {}.",
                info.unit.name().replace('_', " "),
                syscalls.join(", "),
                info.decided.name().replace('_', " ")
            ),
        ];
        for line in lines {
            writeln!(out, "{}", wrapped(&line, "    "))?;
        }
        if let Some(tree) = &row.tree {
            let line = match tree {
                TreeHint::Found {
                    hint: found,
                    file,
                    line,
                    ..
                } => format!(
                    "    The tree: {} at {file}:{line}{}.",
                    found.name(),
                    if *found == info.hint {
                        ""
                    } else {
                        ", which DIFFERS"
                    }
                ),
                TreeHint::NotFound { why } => format!("    The tree: not found ({why})."),
            };
            writeln!(out, "{}", wrapped(&line, "    "))?;
        }
    }
    writeln!(
        out,
        "\nAllocating fds, not followed (their allocations are not in fd.*):"
    )?;
    for (syscalls, why) in auditor_common::syscalls::NOT_FOLLOWED {
        writeln!(out, "{}", wrapped(&format!("- {syscalls}: {why}"), "  "))?;
    }
    Ok(())
}

/// `auditor hints --format text`: each hint of the tree on a line of its own with what
/// measures it below, at most 72 columns, then the summary.
pub fn write_hints_text(
    hints: &crate::kernel_src::Hints,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    for row in &hints.hints {
        let head = format!(
            "{}:{} {}: {}({})",
            row.file,
            row.line,
            row.function,
            row.hint.name(),
            row.condition
        );
        writeln!(out, "{}", wrapped(&head, "    "))?;
        let what = match (row.sites.is_empty(), row.why) {
            (false, _) => format!("    {} by {}", row.status.name(), row.sites.join(", ")),
            (true, Some(why)) => format!("    {}: {why}", row.status.name()),
            (true, None) => format!(
                "    {}: no site or classification names it",
                row.status.name()
            ),
        };
        writeln!(out, "{}", wrapped(&what, "      "))?;
    }
    writeln!(out)?;
    for line in super::table::hints_summary(hints) {
        let indent = if line.starts_with("- ") { "  " } else { "" };
        writeln!(out, "{}", wrapped(&line, indent))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_fit_and_stay_ascii() {
        assert_eq!(
            escape_ascii("curl \u{1b}[2J ünï"),
            "curl \\u{1b}[2J \\u{fc}n\\u{ef}"
        );
        let line = site_line(
            "",
            ("epoll_ctl.watches_exhausted", 27),
            Some("unlikely"),
            ("candidate: unlikely", 19),
            "973248 of 975952 entries (<= 99.77%)",
        );
        assert!(line.lines().all(|l| l.len() <= WIDTH), "{line}");
        // The verdict stays on the site's line; the evidence wraps below it.
        let first = line.lines().next().unwrap();
        assert!(first.contains("candidate: unlikely"), "{line}");
        assert!(line.lines().nth(1).unwrap().starts_with("    "), "{line}");
    }
}
