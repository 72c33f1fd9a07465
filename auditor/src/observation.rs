//! What a source hands over when it is done, beside the tally and below the report: the
//! counts and what the source says of its own view, in sentences for the report's notes;
//! and the one way those sentences count things.

use std::time::Duration;

use auditor_common::Site;

use crate::tally::Tally;

/// What a source hands over when it is done: everything its report is built from.
#[derive(Clone, Debug)]
pub struct Observation {
    /// The source that counted: `ebpf` or `strace`.
    pub source: &'static str,
    /// What was traced, in words.
    pub target: String,
    pub elapsed: Duration,
    pub tally: Tally,
    /// What the source says of its own view (what it cannot see, what it missed, how a
    /// session ended), in sentences for the report's notes.
    pub notes: Vec<String>,
    /// The sites the source decides.
    pub measured: fn(Site) -> bool,
}

impl Observation {
    pub fn with_note(mut self, note: String) -> Observation {
        self.notes.push(note);
        self
    }
}

/// `1 evaluation is` or `2 evaluations are`: `n` with the words for one or for many.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
