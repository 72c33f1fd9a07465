//! The readiness core: a model of the kernel's readiness path — select
//! (`core_sys_select` → `max_select_fd` → `do_select`), poll (`do_sys_poll` → `do_poll` →
//! `do_pollfd`), the epoll_wait family (`do_epoll_wait` → `ep_poll`), fd allocation
//! (`alloc_fd` → `find_next_fd`, with `next_fd` bookkeeping) and close — as plain functions
//! over a syscall record and the task state it needs.
//!
//! Each catalogued branch is written with [`likely!`], [`unlikely!`] or [`branch!`] naming
//! its [`SiteInfo`] declaration, which stands next to the function that holds the branch.
//! The macro checks at compile time that the hint written at the branch is the declared one
//! and records the outcome when the core runs. The catalogue ([`SITES`]) is the list of
//! those declarations, so the hints the reporter validates are the ones written in code.

pub mod close;
pub mod epoll;
pub mod fd;
pub mod poll;
pub mod select;

use auditor_common::{Counts, Evaluation, SITE_COUNT, Site};
use serde::Serialize;

/// A branch hint as written in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Hint {
    Likely,
    Unlikely,
    None,
}

impl Hint {
    /// The hint on the other arm of the branch.
    pub const fn opposite(self) -> Hint {
        match self {
            Hint::Likely => Hint::Unlikely,
            Hint::Unlikely => Hint::Likely,
            Hint::None => Hint::None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Hint::Likely => "likely",
            Hint::Unlikely => "unlikely",
            Hint::None => "none",
        }
    }

    /// Whether `self` is `other`, usable in constants.
    pub const fn is(self, other: Hint) -> bool {
        self as u8 == other as u8
    }
}

/// What one evaluation of a site is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Call,
    PollfdEntry,
    FdSetWord,
    Allocation,
    FdLookup,
}

impl Unit {
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Call => "call",
            Unit::PollfdEntry => "pollfd entry",
            Unit::FdSetWord => "fd_set word",
            Unit::Allocation => "allocation",
            Unit::FdLookup => "fd lookup",
        }
    }
}

/// Where the probe decides a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decided {
    /// From the arguments and user memory at entry.
    Enter,
    /// From the return value (and user memory the kernel wrote) at exit.
    Exit,
    /// From the task's fd table or limits.
    TaskState,
}

impl Decided {
    pub const fn name(self) -> &'static str {
        match self {
            Decided::Enter => "enter",
            Decided::Exit => "exit",
            Decided::TaskState => "task state",
        }
    }
}

/// A way a kernel release writes a site's condition, for finding its hint in a source tree.
#[derive(Debug, Serialize)]
pub struct Fragment {
    /// Text of the condition (white space is not significant).
    pub text: &'static str,
    /// The text states the other arm (e.g. `fd >= 0` for `fd < 0`): a hint on it is the
    /// opposite hint for the site.
    pub negated: bool,
}

/// The site's condition as `text` writes it.
pub const fn written(text: &'static str) -> Fragment {
    Fragment {
        text,
        negated: false,
    }
}

/// The other arm of the site's condition, as `text` writes it.
pub const fn written_negated(text: &'static str) -> Fragment {
    Fragment {
        text,
        negated: true,
    }
}

/// Everything known about a site besides its counts.
#[derive(Debug, Serialize, schemars::JsonSchema)]
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
    /// The first mainline release carrying `hint` (empty for none).
    pub hint_since: &'static str,
    pub unit: Unit,
    /// The syscalls whose evaluations are counted.
    pub syscalls: &'static [&'static str],
    pub decided: Decided,
    /// How kernel releases write the condition inside `function`.
    #[serde(skip)]
    pub source: &'static [Fragment],
}

/// The catalogue: every site's declaration, in catalogue order (the order of [`Site`]).
pub const SITES: [&SiteInfo; SITE_COUNT] = [
    &select::N_NEGATIVE,
    &select::N_CLAMPED,
    &select::BITMAPS_ON_HEAP,
    &select::FD_NOT_OPEN,
    &select::ZERO_TIMEOUT,
    &select::WORD_EMPTY,
    &poll::NFDS_OVER_RLIMIT,
    &poll::ENTRIES_ON_HEAP,
    &poll::ZERO_TIMEOUT,
    &poll::FD_NEGATIVE,
    &poll::FD_NOT_OPEN,
    &epoll::BAD_ARGS,
    &epoll::ZERO_TIMEOUT,
    &fd::BELOW_MAX,
    &fd::FAST_PATH,
    &fd::TABLE_FULL,
    &fd::EMFILE,
    &close::OK,
    &fd::TABLE_SHARED,
];

/// A fingerprint of the catalogue: each site's id, function, condition, hint and unit
/// (FNV-1a, hex). Reports of another catalogue count other branches, or count them in
/// other units.
pub fn catalogue_version() -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for info in SITES {
        let parts = [
            info.id,
            info.function,
            info.condition,
            info.hint.name(),
            info.unit.name(),
        ];
        for byte in parts.iter().flat_map(|part| part.bytes().chain([0])) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

/// The declaration of `site`.
pub fn info(site: Site) -> &'static SiteInfo {
    SITES[site as usize]
}

/// Counts per site from running the core over syscall records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorder {
    counts: [Counts; SITE_COUNT],
}

impl Recorder {
    /// Records `n` evaluations of `site` and returns how the (last) one went.
    pub fn record(&mut self, site: &SiteInfo, evaluation: Evaluation, n: u64) -> Evaluation {
        self.counts[site.site as usize].record(evaluation, n);
        evaluation
    }

    /// Adds another recorder's counts.
    pub fn merge(&mut self, other: &Recorder) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            mine.add(theirs);
        }
    }

    /// Records counts worked out elsewhere (several evaluations at once).
    pub fn record_counts(&mut self, site: &SiteInfo, counts: &Counts) {
        self.counts[site.site as usize].add(counts);
    }

    pub fn counts(&self, site: Site) -> Counts {
        self.counts[site as usize]
    }
}

/// Records a branch hinted `$hint`, checking at compile time that `$site` declares it.
macro_rules! hinted {
    ($hint:ident, $recorder:expr, $site:path, $evaluation:expr, $n:expr) => {{
        const _: () = assert!(
            $site.hint.is($crate::readiness::Hint::$hint),
            concat!(stringify!($site), " is not declared ", stringify!($hint))
        );
        $recorder.record(&$site, $evaluation, $n)
    }};
}

/// `if (likely(…))` at a catalogued site: `likely!(recorder, SITE, evaluation[, n])`.
macro_rules! likely {
    ($recorder:expr, $site:path, $evaluation:expr) => {
        $crate::readiness::hinted!(Likely, $recorder, $site, $evaluation, 1)
    };
    ($recorder:expr, $site:path, $evaluation:expr, $n:expr) => {
        $crate::readiness::hinted!(Likely, $recorder, $site, $evaluation, $n)
    };
}

/// `if (unlikely(…))` at a catalogued site.
macro_rules! unlikely {
    ($recorder:expr, $site:path, $evaluation:expr) => {
        $crate::readiness::hinted!(Unlikely, $recorder, $site, $evaluation, 1)
    };
    ($recorder:expr, $site:path, $evaluation:expr, $n:expr) => {
        $crate::readiness::hinted!(Unlikely, $recorder, $site, $evaluation, $n)
    };
}

/// A catalogued branch without a hint.
macro_rules! branch {
    ($recorder:expr, $site:path, $evaluation:expr) => {
        $crate::readiness::hinted!(None, $recorder, $site, $evaluation, 1)
    };
    ($recorder:expr, $site:path, $evaluation:expr, $n:expr) => {
        $crate::readiness::hinted!(None, $recorder, $site, $evaluation, $n)
    };
}

pub(crate) use {branch, hinted, likely, unlikely};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_is_indexed_by_site() {
        for site in Site::ALL {
            assert_eq!(info(site).site, site, "{}", info(site).id);
        }
        let mut ids: Vec<_> = SITES.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), SITE_COUNT);
    }

    #[test]
    fn hinted_sites_say_since_when() {
        for site in SITES {
            assert_eq!(
                site.hint == Hint::None,
                site.hint_since.is_empty(),
                "{}",
                site.id
            );
        }
    }
}
