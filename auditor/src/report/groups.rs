//! Verdicts per group: a pooled verdict can be decided by one program (one busy process
//! with fd = -1 entries turns `unlikely` into "wrong" for all), so each program (or host,
//! or source, of merged reports) gets its own counts and verdict per site, and the pooled
//! verdict's notes say when one group decides it. A program is a process name as `ps`
//! shows it, its threads rolled up into their process and its processes into the program.

use std::collections::BTreeMap;

use auditor_common::{Counts, catalogue::Hint};
use serde::Serialize;

use super::{SiteReport, counted};
use crate::verdict::{self, Verdict, VerdictKind};

/// What verdicts are given per, besides the pooled ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// A process name as `ps` shows it.
    Program,
    /// The host a run was taken on.
    Host,
    /// The source that counted (`ebpf`, `strace`).
    Source,
}

impl GroupBy {
    pub const fn name(self) -> &'static str {
        match self {
            GroupBy::Program => "program",
            GroupBy::Host => "host",
            GroupBy::Source => "source",
        }
    }
}

/// Which groups' rows a report shows (`--min-evaluations`, `--top`); the pooled rows
/// count every group whatever these leave out, and a note says what they left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Rows of a group with fewer evaluations of their site are left out.
    pub min_evaluations: u64,
    /// Only the groups with the most evaluations over the shown sites, this many.
    pub top: Option<usize>,
}

impl Limits {
    /// `groups` as these limits show them, and the note on what they left out.
    pub fn apply(
        self,
        by: GroupBy,
        groups: Vec<GroupReport>,
    ) -> (Vec<GroupReport>, Option<String>) {
        let evaluations =
            |sites: &[GroupSite]| -> u64 { sites.iter().map(|s| s.counts.total()).sum() };
        let (mut rows_left, mut evaluations_left) = (0u64, 0u64);
        let mut kept: Vec<GroupReport> = groups
            .into_iter()
            .filter_map(|mut group| {
                let (keep, drop): (Vec<GroupSite>, Vec<GroupSite>) = group
                    .sites
                    .into_iter()
                    .partition(|s| s.counts.total() >= self.min_evaluations);
                rows_left += drop.len() as u64;
                evaluations_left += evaluations(&drop);
                group.sites = keep;
                (!group.sites.is_empty()).then_some(group)
            })
            .collect();
        let mut groups_left = 0;
        if let Some(top) = self.top
            && kept.len() > top
        {
            // The busiest first, names breaking ties; then back in name order.
            kept.sort_by(|a, b| {
                evaluations(&b.sites)
                    .cmp(&evaluations(&a.sites))
                    .then_with(|| a.name.cmp(&b.name))
            });
            for group in kept.drain(top..) {
                groups_left += 1;
                rows_left += group.sites.len() as u64;
                evaluations_left += evaluations(&group.sites);
            }
            kept.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let mut why = Vec::new();
        if self.min_evaluations > 0 && rows_left > 0 {
            why.push(format!(
                "rows of fewer than {} evaluations",
                self.min_evaluations
            ));
        }
        if groups_left > 0 {
            why.push(format!(
                "{} past the {} with the most evaluations",
                counted(groups_left, by.name(), &format!("{}s", by.name())),
                self.top.unwrap_or(0)
            ));
        }
        let note = (rows_left > 0).then(|| {
            format!(
                "Per {}: {} left out ({}), {} in all; the pooled rows count them.",
                by.name(),
                counted(rows_left, "row", "rows"),
                why.join("; "),
                counted(evaluations_left, "evaluation", "evaluations"),
            )
        });
        (kept, note)
    }
}

/// One group's counts and verdicts.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct GroupReport {
    /// The program's name as `ps` shows it, the host, or the source.
    pub name: String,
    /// Its processes.
    pub pids: Vec<u32>,
    /// The sites it reached, in the report's order.
    pub sites: Vec<GroupSite>,
}

/// A group's counts of one site, and the verdict they give alone.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct GroupSite {
    pub id: &'static str,
    #[serde(flatten)]
    pub counts: Counts,
    pub verdict: Verdict,
}

/// The groups of `rows` (pid, group name, site id, counts), judged per site of `sites`.
pub fn groups<'a>(
    sites: &[SiteReport],
    rows: impl Iterator<Item = (u32, &'a str, &'a str, &'a Counts)>,
) -> Vec<GroupReport> {
    let mut by_name: BTreeMap<&str, (Vec<u32>, BTreeMap<&str, Counts>)> = BTreeMap::new();
    for (pid, comm, site, counts) in rows {
        let (pids, per_site) = by_name.entry(comm).or_default();
        if !pids.contains(&pid) {
            pids.push(pid);
        }
        per_site.entry(site).or_default().add(counts);
    }
    by_name
        .into_iter()
        .map(|(name, (mut pids, per_site))| {
            pids.sort_unstable();
            let sites = sites
                .iter()
                .filter(|site| site.measured)
                .filter_map(|site| {
                    let counts = *per_site.get(site.info.id)?;
                    Some(GroupSite {
                        id: site.info.id,
                        counts,
                        verdict: verdict::judge(site.judged_hint(), &counts),
                    })
                })
                .collect();
            GroupReport {
                name: name.to_string(),
                pids,
                sites,
            }
        })
        .collect()
}

/// Per hinted site reached by more than one group: how the groups' verdicts split, and
/// whether the one with the most rare evaluations decides the pooled verdict, e.g.
/// `poll.fd_negative: wrong pooled; per program: holds for 12, wrong for 1. Without
/// gnome-shell (973248 of the 975952 rare evaluations), it holds.`
pub fn pooled_notes(sites: &[SiteReport], by: GroupBy, groups: &[GroupReport]) -> Vec<String> {
    let mut notes = Vec::new();
    for site in sites
        .iter()
        .filter(|s| s.measured && s.judged_hint() != Hint::None)
    {
        let reached: Vec<(&str, &GroupSite)> = groups
            .iter()
            .filter_map(|g| {
                let row = g.sites.iter().find(|r| r.id == site.info.id)?;
                (row.counts.taken + row.counts.not_taken > 0).then_some((g.name.as_str(), row))
            })
            .collect();
        if reached.len() < 2 {
            continue;
        }
        let mut split: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, row) in &reached {
            *split.entry(row.verdict.kind.name()).or_default() += 1;
        }
        let split: Vec<String> = split
            .iter()
            .map(|(kind, n)| format!("{kind} for {n}"))
            .collect();
        let mut note = format!(
            "{}: {} pooled; per {}: {}.",
            site.info.id,
            site.verdict.kind.name(),
            by.name(),
            split.join(", ")
        );
        let rare = |row: &GroupSite| site.rare_arm.of(&row.counts);
        if let Some((top, row)) = reached.iter().max_by_key(|(_, row)| rare(row))
            && rare(row) > 0
        {
            let mut without = site.counts;
            without.taken -= row.counts.taken;
            without.not_taken -= row.counts.not_taken;
            without.unreadable -= row.counts.unreadable;
            let kind = verdict::judge(site.judged_hint(), &without).kind;
            if kind != site.verdict.kind && kind != VerdictKind::NoData {
                let verdict = match kind {
                    VerdictKind::Holds => "it holds".to_string(),
                    kind => format!("it is {}", kind.name()),
                };
                note.push_str(&format!(
                    " Without {top} ({} of the {}), {verdict}.",
                    rare(row),
                    counted(
                        site.rare_arm.of(&site.counts),
                        "rare evaluation",
                        "rare evaluations"
                    ),
                ));
            }
        }
        notes.push(note);
    }
    notes
}

#[cfg(test)]
mod tests {
    use auditor_common::Site;

    use crate::{
        report::Report,
        tally::{Process, Tally},
    };

    use super::*;

    /// One busy program turns a pooled `unlikely` into "wrong"; each of the others holds.
    #[test]
    fn one_program_that_decides_the_pooled_verdict_is_named() {
        let mut tally = Tally::default();
        let process = |pid, comm: &str| Process {
            pid,
            comm: comm.into(),
        };
        tally.add(
            process(7, "busy"),
            Site::PollFdNegative,
            &Counts::new(973_248, 2_704, 0),
        );
        for k in 0..12 {
            let name = format!("quiet{k:02}");
            tally.add(
                process(100 + k, &name),
                Site::PollFdNegative,
                &Counts::new(0, 500, 0),
            );
        }
        // Two processes of one program count as one program.
        tally.add(
            process(200, "quiet00"),
            Site::PollFdNegative,
            &Counts::new(1, 99, 0),
        );
        let report = Report::of(&crate::report::tests::observed(&tally, |_| true))
            .only(&[Site::PollFdNegative])
            .grouped(Some(GroupBy::Program));
        assert_eq!(report.groups.len(), 13);
        let quiet = &report.groups[1];
        assert_eq!(
            (quiet.name.as_str(), quiet.pids.as_slice()),
            ("quiet00", &[100, 200][..])
        );
        assert_eq!(quiet.sites[0].counts, Counts::new(1, 599, 0));
        assert_eq!(quiet.sites[0].verdict.kind, VerdictKind::Holds);
        assert_eq!(report.groups[0].sites[0].verdict.kind, VerdictKind::Wrong);
        assert!(
            report.notes.contains(
                &"poll.fd_negative: wrong pooled; per program: holds for 12, wrong for 1. \
                  Without busy (973248 of the 973249 rare evaluations), it holds."
                    .to_string()
            ),
            "{:?}",
            report.notes
        );
    }
}
