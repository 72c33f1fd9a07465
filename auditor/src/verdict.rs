//! Verdicts: does a site's hint match its counts? The bars follow GCC, which takes a
//! `__builtin_expect` to be right 90% of the time (`builtin-expect-probability`).

use auditor_common::Counts;
use serde::Serialize;

use auditor_common::catalogue::Hint;

/// A hint holds when the mispredicted share is bounded under this (Wilson 95% upper bound),
/// and costs more than it saves when it is bounded over it (lower bound).
pub const HOLDS_BELOW: f64 = 0.10;
/// A hint is wrong when the mispredicted share is bounded over this (lower bound).
pub const WRONG_ABOVE: f64 = 0.50;
/// An unhinted site whose minority direction is bounded under this is a hint candidate.
pub const CANDIDATE_BELOW: f64 = 0.01;

/// z for a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    Holds,
    /// Mispredicted more often than the compiler assumes (the lower bound past
    /// [`HOLDS_BELOW`]), though not mostly.
    Costly,
    Wrong,
    /// The interval straddles a bar: more evaluations would settle it.
    Unclear,
    NoData,
    /// Unhinted, and one direction is rare enough to deserve a hint.
    Candidate,
    /// Unhinted, and no direction is rare enough (the minority bounded over 1%).
    NoHint,
    /// The source does not decide this site.
    NotMeasured,
}

impl VerdictKind {
    pub const fn name(self) -> &'static str {
        match self {
            VerdictKind::Holds => "holds",
            VerdictKind::Costly => "costly",
            VerdictKind::Wrong => "wrong",
            VerdictKind::Unclear => "unclear",
            VerdictKind::NoData => "no data",
            VerdictKind::Candidate => "candidate",
            VerdictKind::NoHint => "no hint",
            VerdictKind::NotMeasured => "not measured",
        }
    }
}

/// A verdict and the interval it rests on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Verdict {
    pub kind: VerdictKind,
    /// Bounds of the share of evaluations against the hint (for an unhinted site: in the
    /// minority direction). Unreadable evaluations widen the interval both ways: they are
    /// counted as mispredicted for the upper bound and as predicted for the lower one.
    pub mispredicted_low: f64,
    pub mispredicted_high: f64,
    /// For a candidate: the hint its counts suggest (`unlikely` when `taken` is rare).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggests: Option<Hint>,
    /// For unclear and no data: the evaluations from which, with none more against the
    /// hint (or the minority, unhinted), it would hold (be a candidate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settles_from: Option<u64>,
}

impl Verdict {
    /// The verdict's words: its kind, and for a candidate the hint it suggests
    /// (`candidate: unlikely`).
    pub fn label(&self) -> String {
        match self.suggests {
            Some(hint) => format!("{}: {}", self.kind.name(), hint.name()),
            None => self.kind.name().to_string(),
        }
    }
}

/// The hint that calls `arm` rare.
pub const fn hint_against(arm: Arm) -> Hint {
    match arm {
        Arm::Taken => Hint::Unlikely,
        Arm::NotTaken => Hint::Likely,
    }
}

/// The fewest evaluations from which `against` of them (no more) bound the share under
/// `bar`: the upper Wilson bound falls as evaluations grow with `against` fixed. None when
/// no count a u64 holds is enough.
pub fn evaluations_to_bound(against: u64, bar: f64) -> Option<u64> {
    let under = |n: u64| wilson(against, n).1 < bar;
    let (mut low, mut high) = (against.max(1), against.max(1));
    while !under(high) {
        if high == u64::MAX {
            return None;
        }
        low = high;
        high = high.saturating_mul(2);
    }
    // under(high), and under(low) is false unless low == high.
    while low < high {
        let mid = low + (high - low) / 2;
        if under(mid) {
            high = mid
        } else {
            low = mid + 1
        }
    }
    Some(high)
}

/// Wilson score interval for `successes` out of `trials` at 95%.
pub fn wilson(successes: u64, trials: u64) -> (f64, f64) {
    if trials == 0 {
        return (0.0, 1.0);
    }
    let n = trials as f64;
    let p = successes as f64 / n;
    let z2 = Z95 * Z95;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
    // At the extremes the bound is exact; keep rounding from making 0 look like 1e-17.
    let low = if successes == 0 {
        0.0
    } else {
        (centre - half).max(0.0)
    };
    let high = if successes == trials {
        1.0
    } else {
        (centre + half).min(1.0)
    };
    (low, high)
}

/// Bounds on the share of `against` among all evaluations when `unreadable` ones may go
/// either way.
fn bounds(against: u64, counts: &Counts) -> (f64, f64) {
    let all = counts.total();
    let (low, _) = wilson(against, all);
    let (_, high) = wilson(against + counts.unreadable, all);
    (low, high)
}

/// A direction of a branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    Taken,
    NotTaken,
}

impl Arm {
    pub const fn name(self) -> &'static str {
        match self {
            Arm::Taken => "taken",
            Arm::NotTaken => "not taken",
        }
    }

    /// The evaluations of `counts` that went this way.
    pub const fn of(self, counts: &Counts) -> u64 {
        match self {
            Arm::Taken => counts.taken,
            Arm::NotTaken => counts.not_taken,
        }
    }
}

/// The direction a hint calls rare (for an unhinted site: the minority of `counts`).
pub fn rare_arm(hint: Hint, counts: &Counts) -> Arm {
    match hint {
        Hint::Likely => Arm::NotTaken,
        Hint::Unlikely => Arm::Taken,
        Hint::None if counts.taken <= counts.not_taken => Arm::Taken,
        Hint::None => Arm::NotTaken,
    }
}

pub fn judge(hint: Hint, counts: &Counts) -> Verdict {
    let against = rare_arm(hint, counts).of(counts);
    let (low, high) = bounds(against, counts);
    let kind = if counts.taken + counts.not_taken == 0 {
        VerdictKind::NoData
    } else if hint == Hint::None {
        if high < CANDIDATE_BELOW {
            VerdictKind::Candidate
        } else if low > CANDIDATE_BELOW {
            VerdictKind::NoHint
        } else {
            VerdictKind::Unclear
        }
    } else if high < HOLDS_BELOW {
        VerdictKind::Holds
    } else if low > WRONG_ABOVE {
        VerdictKind::Wrong
    } else if low > HOLDS_BELOW {
        VerdictKind::Costly
    } else {
        VerdictKind::Unclear
    };
    let bar = if hint == Hint::None {
        CANDIDATE_BELOW
    } else {
        HOLDS_BELOW
    };
    let settles_from = matches!(kind, VerdictKind::Unclear | VerdictKind::NoData)
        .then(|| evaluations_to_bound(against + counts.unreadable, bar))
        .flatten()
        .filter(|&n| n > counts.total());
    Verdict {
        kind,
        mispredicted_low: low,
        mispredicted_high: high,
        suggests: (kind == VerdictKind::Candidate).then(|| hint_against(rare_arm(hint, counts))),
        settles_from,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn counts(taken: u64, not_taken: u64, unreadable: u64) -> Counts {
        Counts::new(taken, not_taken, unreadable)
    }

    #[test]
    fn nothing_observed_is_no_data() {
        assert_eq!(
            judge(Hint::Unlikely, &counts(0, 0, 0)).kind,
            VerdictKind::NoData
        );
        // Only unreadable evaluations: still nothing decided.
        assert_eq!(
            judge(Hint::Likely, &counts(0, 0, 9)).kind,
            VerdictKind::NoData
        );
    }

    #[test]
    fn all_one_way() {
        assert_eq!(
            judge(Hint::Unlikely, &counts(0, 1000, 0)).kind,
            VerdictKind::Holds
        );
        assert_eq!(
            judge(Hint::Unlikely, &counts(1000, 0, 0)).kind,
            VerdictKind::Wrong
        );
        assert_eq!(
            judge(Hint::Likely, &counts(1000, 0, 0)).kind,
            VerdictKind::Holds
        );
        assert_eq!(
            judge(Hint::Likely, &counts(0, 1000, 0)).kind,
            VerdictKind::Wrong
        );
        // Too few to bound the share under 10%.
        assert_eq!(
            judge(Hint::Unlikely, &counts(0, 30, 0)).kind,
            VerdictKind::Unclear
        );
    }

    #[test]
    fn wilson_matches_known_values() {
        // 0 of 35: upper bound 0.0989 (the smallest n with an upper bound under 10%).
        let (low, high) = wilson(0, 35);
        assert_eq!(low, 0.0);
        assert!((high - 0.0989).abs() < 1e-4, "{high}");
        let (_, high) = wilson(0, 34);
        assert!(high > 0.10, "{high}");
        // 50 of 100: 0.4038 .. 0.5962.
        let (low, high) = wilson(50, 100);
        assert!((low - 0.4038).abs() < 1e-4 && (high - 0.5962).abs() < 1e-4);
    }

    #[test]
    fn bars_at_their_boundaries() {
        use VerdictKind::*;
        let cases = [
            (Hint::Unlikely, counts(0, 35, 0), Holds),
            (Hint::Unlikely, counts(0, 34, 0), Unclear),
            // 60 of 100 against: lower bound 0.502 > 0.5, wrong; 59: 0.492, costly (past
            // the 10% bar, not past 50%).
            (Hint::Likely, counts(40, 60, 0), Wrong),
            (Hint::Likely, counts(41, 59, 0), Costly),
            // 17 of 100: a lower bound past 10%, costly; 15 of 100 (9.3% .. 23.3%)
            // straddles the bar, unclear.
            (Hint::Unlikely, counts(17, 83, 0), Costly),
            (Hint::Unlikely, counts(15, 85, 0), Unclear),
        ];
        for (hint, counts, kind) in cases {
            assert_eq!(judge(hint, &counts).kind, kind, "{counts:?}");
        }
        // The poll.fd_negative: 32.5% of 3.5 million, a tight interval past the bar.
        let fleet = judge(Hint::Unlikely, &counts(1_149_070, 3_533_812 - 1_149_070, 0));
        assert_eq!(fleet.kind, VerdictKind::Costly);
        assert!(fleet.mispredicted_low > 0.3246 && fleet.mispredicted_high < 0.3257);
        assert_eq!(fleet.settles_from, None);
    }

    #[test]
    fn unreadable_widens_the_interval() {
        assert_eq!(
            judge(Hint::Unlikely, &counts(0, 1000, 0)).kind,
            VerdictKind::Holds
        );
        assert_eq!(
            judge(Hint::Unlikely, &counts(0, 1000, 200)).kind,
            VerdictKind::Unclear
        );
    }

    #[test]
    fn what_would_settle_an_unclear_verdict() {
        // The example: 0 of 30 is unclear; 0 of 35 holds.
        let verdict = judge(Hint::Unlikely, &counts(0, 30, 0));
        assert_eq!(verdict.settles_from, Some(35));
        assert_eq!(
            judge(Hint::Unlikely, &counts(0, 0, 0)).settles_from,
            Some(35)
        );
        assert_eq!(judge(Hint::Unlikely, &counts(0, 35, 0)).settles_from, None);
        for against in [0, 1, 7, 300] {
            let n = evaluations_to_bound(against, HOLDS_BELOW).unwrap();
            assert!(wilson(against, n).1 < HOLDS_BELOW, "{against}");
            assert!(wilson(against, n - 1).1 >= HOLDS_BELOW, "{against}");
        }
        // Near the top of u64 no count is enough: said at once, never searched for ever.
        assert_eq!(evaluations_to_bound(u64::MAX - 5, HOLDS_BELOW), None);
        let verdict = judge(Hint::Unlikely, &counts(u64::MAX / 2, u64::MAX / 2, 0));
        assert_eq!(verdict.kind, VerdictKind::Costly);
        assert_eq!(verdict.settles_from, None);
        let verdict = judge(Hint::Unlikely, &counts(0, 1000, u64::MAX / 2));
        assert_eq!(verdict.kind, VerdictKind::Unclear);
        assert_eq!(verdict.settles_from, None);
        // Unhinted: the 1% bar of a candidate.
        assert_eq!(judge(Hint::None, &counts(0, 0, 0)).settles_from, Some(381));
        // 15 against `unlikely`: it holds once enough evaluations carry no more.
        let verdict = judge(Hint::Unlikely, &counts(15, 85, 0));
        let n = verdict.settles_from.unwrap();
        assert!(wilson(15, n).1 < HOLDS_BELOW && wilson(15, n - 1).1 >= HOLDS_BELOW);
        // A costly hint is settled already: no more evaluations make it hold.
        assert_eq!(judge(Hint::Likely, &counts(41, 59, 0)).settles_from, None);
    }

    #[test]
    fn unhinted_sites() {
        let candidate = judge(Hint::None, &counts(1, 10_000, 0));
        assert_eq!(candidate.kind, VerdictKind::Candidate);
        assert_eq!(candidate.suggests, Some(Hint::Unlikely));
        assert_eq!(
            judge(Hint::None, &counts(10_000, 3, 0)).suggests,
            Some(Hint::Likely)
        );
        assert_eq!(
            judge(Hint::None, &counts(10, 90, 0)).kind,
            VerdictKind::NoHint
        );
        // 1 of 100: 0.18% .. 5.45%, on both sides of the candidate's 1%.
        let unclear = judge(Hint::None, &counts(1, 99, 0));
        assert_eq!(unclear.kind, VerdictKind::Unclear);
        let n = unclear.settles_from.unwrap();
        assert!(wilson(1, n).1 < CANDIDATE_BELOW && wilson(1, n - 1).1 >= CANDIDATE_BELOW);
    }
}
