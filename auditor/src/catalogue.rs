//! The catalogue of branch sites: for each [`Site`], the kernel function and file, the
//! condition, the hint mainline carries, the unit it is counted in and the syscalls that
//! reach it.

use auditor_common::Site;
use serde::Serialize;

/// A branch hint as written in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hint {
    Likely,
    Unlikely,
    None,
}

impl Hint {
    pub const fn name(self) -> &'static str {
        match self {
            Hint::Likely => "likely",
            Hint::Unlikely => "unlikely",
            Hint::None => "none",
        }
    }
}

/// What one evaluation of a site is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Call,
    PollfdEntry,
}

impl Unit {
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Call => "call",
            Unit::PollfdEntry => "pollfd entry",
        }
    }
}

/// Everything a report says about a site besides its counts.
#[derive(Debug, Serialize)]
pub struct SiteInfo {
    #[serde(skip)]
    pub site: Site,
    /// Stable dotted id, e.g. `poll.fd_negative`.
    pub id: &'static str,
    pub function: &'static str,
    pub file: &'static str,
    /// When the branch is taken, in one line.
    pub condition: &'static str,
    pub hint: Hint,
    /// The first mainline release carrying `hint`.
    pub hint_since: &'static str,
    pub unit: Unit,
    pub syscalls: &'static [&'static str],
}

const CATALOGUE: [SiteInfo; auditor_common::SITE_COUNT] = [
    SiteInfo {
        site: Site::SelectNNegative,
        id: "select.n_negative",
        function: "core_sys_select",
        file: "fs/select.c",
        condition: "n < 0 (-> -EINVAL)",
        hint: Hint::Unlikely,
        hint_since: "6.16",
        unit: Unit::Call,
        syscalls: &["select", "pselect6"],
    },
    SiteInfo {
        site: Site::PollFdNegative,
        id: "poll.fd_negative",
        function: "do_pollfd",
        file: "fs/select.c",
        condition: "pollfd.fd < 0 (entry ignored)",
        hint: Hint::Unlikely,
        hint_since: "6.16",
        unit: Unit::PollfdEntry,
        syscalls: &["poll", "ppoll"],
    },
];

/// The catalogue entry of `site`.
pub fn info(site: Site) -> &'static SiteInfo {
    &CATALOGUE[site as usize]
}

/// Every site, in catalogue order.
pub fn all() -> impl Iterator<Item = &'static SiteInfo> {
    CATALOGUE.iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_is_indexed_by_site() {
        for site in Site::ALL {
            assert_eq!(info(site).site, site);
        }
        let mut ids: Vec<_> = all().map(|info| info.id).collect();
        ids.dedup();
        assert_eq!(ids.len(), Site::ALL.len());
    }
}
