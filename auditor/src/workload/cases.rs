//! The cases that drive the catalogue's sites both ways: each family of steps declares its
//! own (`CASES` in its module); the probe's exact tests (`tests/trace.rs`) and the strace
//! source's (`tests/ingest.rs`) run every one of them, and a test here checks with the
//! hand-worked oracle that together they take every site both ways, but the ones whose
//! catalogue row says why one arm cannot be driven (`SiteInfo::one_armed`).

use auditor_common::{Counts, SITE_COUNT, Site};

pub use super::steps::{Case, Setup};
use super::{
    Layout,
    drive::expected_on_table,
    expected::{DEFAULT_NR_OPEN, Expected},
    parse,
};

/// What the oracle says each process of `case` must count, with the fd table the steps'
/// own layout makes and fs.nr_open at Linux's default (or the case's).
pub fn expected(case: &Case) -> Vec<Expected> {
    let steps = parse(case.steps).expect("a case's steps parse");
    let max_fds = Layout::of(&steps).max_fds();
    expected_on_table(&steps, max_fds, case.nr_open(DEFAULT_NR_OPEN))
}

/// Every family's cases.
pub fn all() -> impl Iterator<Item = &'static Case> {
    super::steps::CASES.into_iter().flatten()
}

/// What the cases count together, per site, by the oracle.
pub fn counted() -> [Counts; SITE_COUNT] {
    let mut sites = [Counts::ZERO; SITE_COUNT];
    for process in all().flat_map(expected) {
        for site in Site::ALL {
            sites[site as usize].add(&process.site(site));
        }
    }
    sites
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every site is taken and not taken by some case, or its row says why one arm cannot
    /// be driven; and a row that says so is right (its other arm is never taken).
    #[test]
    fn every_site_is_driven_both_ways_by_the_cases() {
        let counted = counted();
        let mut wrong = Vec::new();
        for site in Site::ALL {
            let info = site.info();
            let counts = counted[site as usize];
            let both_ways = counts.taken > 0 && counts.not_taken > 0;
            match (both_ways, info.one_armed.is_empty()) {
                (false, true) => wrong.push(format!(
                    "{}: no case drives it both ways ({} taken, {} not taken): add a case \
                     to its family's CASES, or say in its row why it cannot be (one_armed)",
                    info.id, counts.taken, counts.not_taken
                )),
                (true, false) => wrong.push(format!(
                    "{}: its row says it is one-armed ({}), but the cases drive it both ways",
                    info.id, info.one_armed
                )),
                _ => {}
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    #[test]
    fn cases_have_names_of_their_own_and_steps_that_parse() {
        let mut names: Vec<&str> = all().map(|case| case.name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "two cases share a name");
        for case in all() {
            assert!(parse(case.steps).is_ok(), "{}: {}", case.name, case.steps);
        }
    }
}
