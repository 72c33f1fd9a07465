//! The sentences a report's notes are made of: runs, how counts are taken, and what each
//! shown site's counts say (not measured, rare arms and who took them, how far a verdict
//! is from settling, undecided evaluations); and the words numbers are written with.

use auditor_common::catalogue::Hint;

use super::{SiteReport, saved};
use crate::{observation::counted, tally::Tally, verdict};

/// `Run 2: command `ssh …` on host h (kernel 6.18), ebpf, from 2026-12-01T09:00:00Z, 3.20 s.`
pub(super) fn run_note(index: usize, run: &saved::Run) -> String {
    format!(
        "Run {}: {} on host {} (kernel {}), {}, from {}, {:.2} s.",
        index + 1,
        run.traced,
        run.host,
        run.kernel_release,
        run.source,
        run.started_at,
        run.duration_seconds
    )
}

/// How the tally's counts were taken, whatever the source: before the sites' notes.
pub(super) fn tally_notes(tally: &Tally) -> Vec<String> {
    let mut notes = Vec::new();
    if tally.total_calls() > 0 {
        notes.push(
            "Counts are branch evaluations. A poll or select that sleeps rescans its entries on \
             every wake-up; the source counts one scan per call, so shares within a call are \
             exact and the number of scans is a lower bound."
                .to_string(),
        );
    }
    notes
}

/// Which hints a kernel tree given to judge by (`--kernel-src`) carries: where they differ
/// from the catalogue's, and the shown sites it does not have (judged on the catalogue's).
pub(super) fn tree_notes(
    tree: &crate::kernel_src::KernelTree,
    sites: &[SiteReport],
) -> Vec<String> {
    use crate::kernel_src::TreeHint;
    let name = tree.name();
    let mut notes = vec![format!(
        "Hints judged are those {name} carries, at the lines shown, instead of the catalogue's."
    )];
    let differ: Vec<String> = sites
        .iter()
        .filter_map(|s| {
            let tree = s.tree_hint()?;
            (tree != s.info.hint).then(|| {
                let catalogue = match s.info.hint {
                    Hint::None => "none".to_string(),
                    hint => format!("{} since {}", hint.name(), s.info.hint_since),
                };
                format!(
                    "{} ({} there; the catalogue: {catalogue})",
                    s.info.id,
                    tree.name()
                )
            })
        })
        .collect();
    if !differ.is_empty() {
        notes.push(format!(
            "The tree's hint differs from the catalogue's at {}.",
            differ.join(", ")
        ));
    }
    // One clause per reason (a file that cannot be read is the reason of all its sites).
    let mut missing: Vec<(&str, Vec<&str>)> = Vec::new();
    for site in sites {
        if let Some(TreeHint::NotFound { why }) = &site.tree {
            match missing.iter_mut().find(|(reason, _)| reason == why) {
                Some((_, ids)) => ids.push(site.info.id),
                None => missing.push((why, vec![site.info.id])),
            }
        }
    }
    if !missing.is_empty() {
        let clauses: Vec<String> = missing
            .iter()
            .map(|(why, ids)| format!("{} ({why})", ids.join(", ")))
            .collect();
        notes.push(format!(
            "Not found in {name}, so judged on the catalogue's hint: {}.",
            clauses.join("; ")
        ));
    }
    notes
}

/// Notes on the shown sites: which are not measured, which have undecided evaluations.
pub(super) fn site_notes(sites: &[SiteReport]) -> Vec<String> {
    let mut notes = Vec::new();
    let unmeasured: Vec<&str> = sites
        .iter()
        .filter(|s| !s.measured)
        .map(|s| s.info.id)
        .collect();
    if !unmeasured.is_empty() {
        notes.push(format!(
            "Not measured by this source (it cannot see what they depend on): {}.",
            unmeasured.join(", ")
        ));
    }
    notes.extend(absent_branch_notes(sites));
    for site in sites
        .iter()
        .filter(|s| s.measured && !s.rare_from.is_empty())
    {
        notes.push(rare_note(site));
    }
    // One note for every hinted site never reached: the same condition, the same remedy.
    let never: Vec<&SiteReport> = sites
        .iter()
        .filter(|s| s.measured && s.counts.total() == 0 && s.judged_hint() != Hint::None)
        .filter(|s| s.verdict.settles_from.is_some())
        .collect();
    if let Some(first) = never.first() {
        let ids: Vec<&str> = never.iter().map(|s| s.info.id).collect();
        notes.push(format!(
            "Never reached: {}; each holds at the {:.0}% bar from {} evaluations with none \
             against its hint.",
            ids.join(", "),
            verdict::HOLDS_BELOW * 100.0,
            first.verdict.settles_from.unwrap_or(0)
        ));
    }
    notes.extend(
        sites
            .iter()
            .filter(|s| s.counts.total() > 0)
            .filter_map(settling_note),
    );
    notes.extend(sites.iter().filter_map(costly_note));
    for site in sites
        .iter()
        .filter(|s| s.measured && s.counts.unreadable > 0)
    {
        notes.push(format!(
            "{}: {} not be decided (memory the source could not read, or a return value that \
             does not tell); verdict bounds count {} both ways.",
            site.info.id,
            counted(
                site.counts.unreadable,
                "evaluation could",
                "evaluations could"
            ),
            if site.counts.unreadable == 1 {
                "it"
            } else {
                "them"
            }
        ));
    }
    notes
}

/// What would settle a reached hinted site's unclear verdict, e.g. `poll.fd_negative:
/// unclear: 0 of 30 evaluations went against `unlikely` (up to 11.35%); with no more against
/// it, it holds at the 10% bar from 35 evaluations on.`
fn settling_note(site: &SiteReport) -> Option<String> {
    let hint = site.judged_hint();
    let settles_from = site.verdict.settles_from?;
    if hint == Hint::None || !site.measured {
        return None;
    }
    let bar = format!("{:.0}%", verdict::HOLDS_BELOW * 100.0);
    let against = site.rare_arm.of(&site.counts);
    let unreadable = match site.counts.unreadable {
        0 => String::new(),
        n => format!(", and {n} could not be decided"),
    };
    Some(format!(
        "{}: {}: {against} of {} went against `{}`{unreadable} (up to {}); with no more \
         against it, it holds at the {bar} bar from {settles_from} evaluations on.",
        site.info.id,
        site.verdict.kind.name(),
        counted(site.counts.total(), "evaluation", "evaluations"),
        hint.name(),
        percent(site.verdict.mispredicted_high)
    ))
}

/// By how much a costly hint misses: `poll.fd_negative: costly: 1149070 of 3533812
/// evaluations went against `unlikely`: at least 32.47%, 3.2 times the 10% a compiler
/// takes a hint to miss.`
fn costly_note(site: &SiteReport) -> Option<String> {
    if site.verdict.kind != verdict::VerdictKind::Costly || !site.measured {
        return None;
    }
    let hint = site.judged_hint();
    let low = site.verdict.mispredicted_low;
    Some(format!(
        "{}: costly: {} of {} went against `{}`: at least {}, {:.1} times the {:.0}% a \
         compiler takes a hint to miss (GCC's builtin-expect-probability).",
        site.info.id,
        site.rare_arm.of(&site.counts),
        counted(site.counts.total(), "evaluation", "evaluations"),
        hint.name(),
        percent(low),
        low / verdict::HOLDS_BELOW,
        verdict::HOLDS_BELOW * 100.0,
    ))
}

/// Who took a site's rare arm: the first few processes by evaluations, and how many more;
/// with stacks, the code that made those calls too.
pub(super) fn rare_note(site: &SiteReport) -> String {
    let hint = site.judged_hint();
    let why = match hint {
        Hint::None => "the minority".to_string(),
        hint => format!("against `{}`", hint.name()),
    };
    let processes = site.rare_from.iter().map(|r| {
        let name = match r.comm.as_str() {
            "" => format!("pid {}", r.pid),
            comm => format!("{comm} (pid {})", r.pid),
        };
        (name, r.evaluations)
    });
    let mut note = format!(
        "{}: its rare direction, {} ({why}), came from {}.",
        site.info.id,
        site.rare_arm.name(),
        first_few(processes, "process", "processes")
    );
    if !site.rare_callers.is_empty() {
        let with_stack: u64 = site.rare_callers.iter().map(|c| c.evaluations).sum();
        let callers = site
            .rare_callers
            .iter()
            .map(|c| (c.caller.clone(), c.evaluations));
        note.push_str(&format!(
            " Called from {} ({with_stack} of {} with a stack).",
            first_few(callers, "caller", "callers"),
            site.rare_arm.of(&site.counts)
        ));
    }
    note
}

/// `a: 7, b: 2, c: 1, and 2 more processes (3)`: the first few of a list sorted by
/// evaluations, and the rest in one sum.
fn first_few(mut items: impl Iterator<Item = (String, u64)>, one: &str, many: &str) -> String {
    const NAMED: usize = 3;
    let mut text: Vec<String> = items
        .by_ref()
        .take(NAMED)
        .map(|(name, evaluations)| format!("{name}: {evaluations}"))
        .collect();
    let (rest, evaluations) = items.fold((0, 0), |(n, sum), (_, e)| (n + 1, sum + e));
    if rest > 0 {
        let noun = if rest == 1 { one } else { many };
        text.push(format!("and {rest} more {noun} ({evaluations})"));
    }
    text.join(", ")
}

/// The bound of a verdict's interval that decides it: the upper one for a hint that holds
/// (a candidate), the lower one for one that is costly or wrong (no hint), both where the
/// interval straddles a bar: `<= 0.18%`, `>= 19.20%`, `9.30% .. 23.30%`.
pub fn deciding_bound(verdict: &verdict::Verdict) -> String {
    use verdict::VerdictKind::*;
    let (low, high) = (verdict.mispredicted_low, verdict.mispredicted_high);
    match verdict.kind {
        Costly | Wrong | NoHint => format!(">= {}", percent(low)),
        Unclear | NoData | NotMeasured => format!("{} .. {}", percent(low), percent(high)),
        Holds | Candidate => format!("<= {}", percent(high)),
    }
}

/// The catalogue's sites `note` names, by their ids standing as words of their own.
pub(super) fn sites_named(note: &str) -> Vec<&'static str> {
    let part_of_id = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    auditor_common::catalogue::SITES
        .iter()
        .map(|info| info.id)
        .filter(|id| {
            note.match_indices(id).any(|(at, _)| {
                let before = note[..at].chars().next_back();
                let after = note[at + id.len()..].chars().next();
                !before.is_some_and(part_of_id)
                    && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        })
        .collect()
}

/// `12.34%`, with tiny non-zero shares shown as such rather than as 0.00%.
pub fn percent(share: f64) -> String {
    if share > 0.0 && share < 0.0001 {
        "<0.01%".to_string()
    } else {
        format!("{:.2}%", share * 100.0)
    }
}

/// Sites whose branch the kernel of a probe run does not have, by the release that brought
/// it: one note each, naming the kernels and what they do instead.
fn absent_branch_notes(sites: &[SiteReport]) -> Vec<String> {
    let mut groups: Vec<(&SiteReport, Vec<&str>)> = Vec::new();
    for site in sites.iter().filter(|s| !s.absent_in_kernels.is_empty()) {
        match groups.iter_mut().find(|(first, _)| {
            first.info.branch_since == site.info.branch_since
                && first.info.branch_before == site.info.branch_before
                && first.absent_in_kernels == site.absent_in_kernels
        }) {
            Some((_, ids)) => ids.push(site.info.id),
            None => groups.push((site, vec![site.info.id])),
        }
    }
    groups
        .into_iter()
        .map(|(first, ids)| {
            format!(
                "Not branches kernel {} runs: {} (Linux {}; before it, {}). Their counts are \
                 what the model, the newest kernel's code, makes of these calls.",
                first.absent_in_kernels.join(", "),
                ids.join(", "),
                first.info.branch_since,
                first.info.branch_before
            )
        })
        .collect()
}
