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
    Report, SiteReport, deciding_bound, escape_text, percent,
    table::{Flavour, header, styled},
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

pub fn write_annotated(report: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "{}\n", header(report, Flavour::Text))?;
    let (hinted, unhinted): (Vec<&SiteReport>, Vec<&SiteReport>) = report
        .sites
        .iter()
        .partition(|s| s.judged_hint() != Hint::None);

    let mut table = Builder::default();
    table.push_record([
        "correct",
        "incorrect",
        "unreadable",
        "% incorrect",
        "verdict",
        "hint",
        "function",
        "file:line",
        "site",
    ]);
    for site in &hinted {
        // The arm the hint calls rare is the incorrect one.
        let incorrect = site.rare_arm.of(&site.counts);
        let correct = match site.rare_arm {
            Arm::Taken => site.counts.not_taken,
            Arm::NotTaken => site.counts.taken,
        };
        table.push_record([
            count(site, correct),
            count(site, incorrect),
            count(site, site.counts.unreadable),
            site.miss_share().map_or_else(|| "-".to_string(), percent),
            verdict(site),
            site.hint_label(),
            site.location().2.to_string(),
            site.place(),
            site.info.id.to_string(),
        ]);
    }
    writeln!(out, "{}", styled(table, Flavour::Text, &[0, 1, 2, 3]))?;

    if !unhinted.is_empty() {
        writeln!(out, "\nUnhinted branches (a candidate deserves a hint):\n")?;
        let mut table = Builder::default();
        table.push_record([
            "taken",
            "not taken",
            "unreadable",
            "% minority",
            "verdict",
            "function",
            "file:line",
            "site",
        ]);
        for site in &unhinted {
            table.push_record([
                count(site, site.counts.taken),
                count(site, site.counts.not_taken),
                count(site, site.counts.unreadable),
                site.miss_share().map_or_else(|| "-".to_string(), percent),
                verdict(site),
                site.location().2.to_string(),
                site.place(),
                site.info.id.to_string(),
            ]);
        }
        writeln!(out, "{}", styled(table, Flavour::Text, &[0, 1, 2, 3]))?;
    }
    if report.sites.iter().any(|s| s.proposed_hint.is_some()) {
        writeln!(out, "(* a proposed hint, judged instead of the kernel's)")?;
    }
    if !report.notes.is_empty() {
        writeln!(out)?;
        for note in &report.notes {
            writeln!(out, "- {}", escape_text(note))?;
        }
    }
    Ok(())
}
