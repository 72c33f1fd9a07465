//! The annotated view (`--format annotated`): the report in the shape of the kernel's own
//! branch profiler, `trace_stat/branch_annotated` (correct, incorrect, % incorrect,
//! function, file, line, the largest share first), each hinted site's taken and not-taken
//! evaluations turned into correct and incorrect by the hint it is judged on, with its
//! verdict and the bound that decides it. Unhinted sites follow in a table of their own, as
//! the kernel keeps them out of branch_annotated too.

use std::io::Write;

use auditor_common::catalogue::Hint;
use tabled::builder::Builder;

use super::{
    Layout, Report, SiteReport, deciding_bound, escape_text, fit, percent,
    table::{Flavour, header, paragraph, styled_fitting},
};
use crate::verdict::{Arm, VerdictKind};

/// The verdict with the bound that decides it: `costly (>= 19.20%)`.
fn verdict(site: &SiteReport) -> String {
    match site.verdict.kind {
        VerdictKind::NotMeasured | VerdictKind::NoData => site.verdict.label(),
        _ => format!(
            "{} ({})",
            site.verdict.label(),
            deciding_bound(&site.verdict)
        ),
    }
}

/// A count, or `-` where the source does not decide the site.
fn count(site: &SiteReport, n: u64) -> String {
    if site.measured {
        n.to_string()
    } else {
        "-".to_string()
    }
}

/// How the annotated tables narrow to fit a terminal, step by step: first each site's
/// function and file:line go below the tables, then its counts, then the bound that
/// decides its verdict.
const NARROWING: usize = 3;

pub fn write_annotated(
    report: &Report,
    layout: Layout,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let width = layout.columns.terminal_width();
    writeln!(
        out,
        "{}
",
        paragraph(&header(report, Flavour::Text), width, "  ")
    )?;
    let tables = match width {
        Some(width) => {
            fit::first_fitting(width, NARROWING, |step| tables(report, step, Some(width)))
        }
        None => tables(report, 0, None),
    };
    write!(out, "{tables}")?;
    if report.sites.iter().any(|s| s.proposed_hint.is_some()) {
        writeln!(out, "(* a proposed hint, judged instead of the kernel's)")?;
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

/// What a row at `step` leaves out, said below the table: `- \`poll.fd_negative\` in
/// do_pollfd() at fs/select.c:869; 12 correct, 3 incorrect, 0 unreadable`.
fn below(site: &SiteReport, step: usize, counts: (&str, &str)) -> String {
    let (function, place) = (site.location().2, site.place());
    let mut line = format!("- `{}` in {function}() at {place}", site.info.id);
    if step >= 2 && site.measured {
        let (first, second) = counts;
        let (a, b) = first_and_second(site);
        line.push_str(&format!(
            "; {a} {first}, {b} {second}, {} unreadable",
            site.counts.unreadable
        ));
    }
    if step >= 3 && verdict(site) != site.verdict.label() {
        line.push_str(&format!(
            "; {}: {}",
            site.verdict.label(),
            deciding_bound(&site.verdict)
        ));
    }
    line
}

/// A hinted site's correct and incorrect evaluations (the arm the hint calls rare is the
/// incorrect one); an unhinted one's taken and not taken.
fn first_and_second(site: &SiteReport) -> (u64, u64) {
    if site.judged_hint() == Hint::None {
        return (site.counts.taken, site.counts.not_taken);
    }
    let incorrect = site.rare_arm.of(&site.counts);
    let correct = match site.rare_arm {
        Arm::Taken => site.counts.not_taken,
        Arm::NotTaken => site.counts.taken,
    };
    (correct, incorrect)
}

/// The tables of hinted and of unhinted sites at `step` of the narrowing, the last
/// step's squeezed to `width`.
fn tables(report: &Report, step: usize, width: Option<usize>) -> String {
    let (hinted, unhinted): (Vec<&SiteReport>, Vec<&SiteReport>) = report
        .sites
        .iter()
        .partition(|s| s.judged_hint() != Hint::None);
    let squeeze = width.filter(|_| step == NARROWING);
    let mut out = String::new();
    let parts = [
        (hinted, ["correct", "incorrect", "% incorrect"], None),
        (
            unhinted,
            ["taken", "not taken", "% minority"],
            Some("\nUnhinted branches (a candidate deserves a hint):\n\n"),
        ),
    ];
    for (sites, [first, second, share], title) in parts {
        if sites.is_empty() {
            continue;
        }
        out.push_str(title.unwrap_or_default());
        let mut header = Vec::new();
        if step < 2 {
            header.extend([first, second, "unreadable"]);
        }
        header.extend([share, "verdict"]);
        if title.is_none() {
            header.push("hint");
        }
        if step < 1 {
            header.extend(["function", "file:line"]);
        }
        header.push("site");
        let numeric: Vec<usize> = (0..if step < 2 { 4 } else { 1 }).collect();
        let mut table = Builder::default();
        table.push_record(header);
        for site in &sites {
            let (a, b) = first_and_second(site);
            let mut row = Vec::new();
            if step < 2 {
                row.extend([
                    count(site, a),
                    count(site, b),
                    count(site, site.counts.unreadable),
                ]);
            }
            row.push(site.miss_share().map_or_else(|| "-".to_string(), percent));
            row.push(if step < 3 {
                verdict(site)
            } else {
                site.verdict.label()
            });
            if title.is_none() {
                row.push(site.hint_label());
            }
            if step < 1 {
                row.extend([site.location().2.to_string(), site.place()]);
            }
            row.push(site.info.id.to_string());
            table.push_record(row);
        }
        out.push_str(&styled_fitting(table, Flavour::Text, &numeric, squeeze));
        out.push('\n');
        if step >= 1 {
            out.push('\n');
            for site in &sites {
                let line = below(site, step, (first, second));
                out.push_str(&paragraph(&line, width, "  "));
                out.push('\n');
            }
        }
    }
    out
}
