//! Sources of observations. Each one hands over an [`Observation`] — a tally and what the
//! source says of its own view; none formats output.

pub mod ebpf;
pub mod strace;

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
