//! Saved reports: what a JSON report keeps of its runs (where and how each was taken) and
//! of their counts, read back to be rendered again or merged with other reports. Counts
//! add exactly (u64); the verdicts are worked out again from them.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::{Duration, SystemTime},
};

use auditor_common::{Counts, Site, Syscall, catalogue};
use serde::{Deserialize, Serialize};

use super::JSON_VERSION;
use crate::tally::{Process, Sums, Tally};

/// Where and how one run's counts were taken.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Run {
    pub auditor_version: String,
    /// The catalogue the counts are of ([`catalogue::fingerprint`]).
    pub catalogue_version: String,
    pub kernel_release: String,
    pub host: String,
    /// `ebpf` or `strace`.
    pub source: String,
    /// What was traced: the command line, pids, names or log files.
    pub traced: String,
    /// When the run began (RFC 3339, UTC).
    pub started_at: String,
    pub duration_seconds: f64,
}

/// A line of a file of the kernel's `/proc/sys`, or `unknown`.
fn sysctl(name: &str) -> String {
    std::fs::read_to_string(Path::new("/proc/sys/kernel").join(name))
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

impl Run {
    /// A run on this machine that took `duration` and ends now.
    pub fn here(source: &str, traced: String, duration: Duration) -> Run {
        let started = SystemTime::now()
            .checked_sub(duration)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        Run {
            auditor_version: env!("CARGO_PKG_VERSION").to_string(),
            catalogue_version: format!("{:016x}", catalogue::fingerprint()),
            kernel_release: sysctl("osrelease"),
            host: sysctl("hostname"),
            source: source.to_string(),
            traced,
            started_at: humantime::format_rfc3339_seconds(started).to_string(),
            duration_seconds: duration.as_secs_f64(),
        }
    }
}

/// One row of counts of a site, by its id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SiteCounts {
    pub site: String,
    #[serde(flatten)]
    pub counts: Counts,
}

/// What reading a saved report needs of it; the rest (verdicts, notes on them) is derived.
#[derive(Deserialize)]
struct Saved {
    version: u32,
    runs: Vec<Run>,
    calls: BTreeMap<String, u64>,
    sites: Vec<SavedSite>,
    processes: Vec<super::ProcessReport>,
    unattributed: Vec<SiteCounts>,
    callers: Vec<super::CallerReport>,
    /// Reports saved before stacks were kept have none.
    #[serde(default)]
    stacks: Vec<super::StackReport>,
    missed_probe_runs: u64,
    source_notes: Vec<String>,
}

#[derive(Deserialize)]
struct SavedSite {
    id: String,
    measured: bool,
}

/// Why a saved report cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    #[error("{file}: {why}")]
    Unreadable { file: String, why: String },
    #[error("{file}: {overflow}: refused, no count is wrapped or cut")]
    Overflow {
        file: String,
        overflow: crate::tally::Overflow,
    },
    #[error(
        "{file} holds runs already read from {earlier} ({shared}) and runs that are not \
         ({new}): merging it would count the shared ones twice; give the reports whose runs \
         do not overlap"
    )]
    PartlyRead {
        file: String,
        earlier: String,
        shared: String,
        new: String,
    },
    #[error(
        "{file} is of another {what} ({theirs}, not {ours}): its counts are not of the same \
         branches; --force merges them anyway"
    )]
    Mismatch {
        file: String,
        what: &'static str,
        theirs: String,
        ours: String,
    },
}

/// Runs and their counts, read from saved reports (or merged from several).
#[derive(Debug)]
pub struct Loaded {
    pub runs: Vec<Run>,
    pub tally: Tally,
    /// The sites some run's source decides.
    pub measured: BTreeSet<Site>,
    pub notes: Vec<String>,
    /// Each input's runs and counts, as read (what grouping by host or source needs).
    pub parts: Vec<(Vec<Run>, Tally)>,
}

fn site_of(id: &str, file: &str) -> Result<Site, SavedError> {
    catalogue::SITES
        .iter()
        .find(|info| info.id == id)
        .map(|info| info.site)
        .ok_or_else(|| SavedError::Unreadable {
            file: file.to_string(),
            why: format!("`{id}` is not a site of this auditor's catalogue"),
        })
}

/// The most a saved report may hold, in bytes: far past what a session writes (a row per
/// process and site of a full table of 16 384 processes is about 80 MiB).
pub const LARGEST_REPORT: u64 = 512 << 20;

/// Reads a saved JSON report; `-` is standard input, as for `ingest`.
pub fn read(path: &Path) -> Result<Loaded, SavedError> {
    let stdin = path == Path::new("-");
    let file = if stdin {
        "standard input".to_string()
    } else {
        path.display().to_string()
    };
    let unreadable = |why: String| SavedError::Unreadable {
        file: file.clone(),
        why,
    };
    // Never read past a bound: an endless or enormous input is refused at the bound, not
    // when memory runs out.
    let input: Box<dyn std::io::Read> = if stdin {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(path).map_err(|e| unreadable(e.to_string()))?)
    };
    let mut text = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(input, LARGEST_REPORT + 1),
        &mut text,
    )
    .map_err(|e| unreadable(e.to_string()))?;
    if text.len() as u64 > LARGEST_REPORT {
        return Err(unreadable(format!(
            "larger than the largest report this auditor reads ({} MiB)",
            LARGEST_REPORT >> 20
        )));
    }
    let value: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| unreadable(format!("not JSON, or cut short: {e}")))?;
    match value.get("version").and_then(serde_json::Value::as_u64) {
        Some(version) if version == u64::from(JSON_VERSION) => {}
        Some(version) => {
            return Err(unreadable(format!(
                "a report of schema version {version}; this auditor reads version {JSON_VERSION}"
            )));
        }
        None => {
            return Err(unreadable(
                "not an auditor report (it has no `version`)".into(),
            ));
        }
    }
    let saved: Saved = serde_json::from_value(value)
        .map_err(|e| unreadable(format!("not an auditor report: {e}")))?;
    debug_assert_eq!(saved.version, JSON_VERSION);
    if saved.runs.is_empty() {
        return Err(unreadable(
            "a report with no runs: every report a session saves says where its counts were \
             taken"
                .into(),
        ));
    }
    // Every sum is checked wide before one is made: a file cannot make a count wrap.
    let mut sums = Sums::default();
    for row in &saved.processes {
        sums.row(site_of(&row.site, &file)?, "counts", &row.counts);
    }
    for row in &saved.unattributed {
        sums.row(site_of(&row.site, &file)?, "counts", &row.counts);
    }
    for row in &saved.callers {
        sums.row(site_of(&row.site, &file)?, "callers", &row.counts);
    }
    for row in &saved.stacks {
        sums.row(site_of(&row.site, &file)?, "stacks", &row.counts);
    }
    for calls in saved.calls.values() {
        sums.calls(*calls);
    }
    sums.missed_probe_runs(saved.missed_probe_runs);
    if let Some(overflow) = sums.overflow() {
        return Err(SavedError::Overflow { file, overflow });
    }
    let mut tally = Tally::default();
    for row in &saved.processes {
        let process = Process {
            pid: row.pid,
            comm: row.comm.clone(),
        };
        if let Some(exe) = &row.exe {
            tally.set_exe(process.clone(), exe);
        }
        tally.add(process, site_of(&row.site, &file)?, &row.counts);
    }
    for row in &saved.unattributed {
        tally.add_unattributed(site_of(&row.site, &file)?, &row.counts);
    }
    for row in &saved.callers {
        tally.add_caller(site_of(&row.site, &file)?, &row.caller, &row.counts);
    }
    for row in &saved.stacks {
        tally.add_stack(site_of(&row.site, &file)?, &row.frames, &row.counts);
    }
    for (name, calls) in &saved.calls {
        let syscall = Syscall::from_name(name)
            .ok_or_else(|| unreadable(format!("`{name}` is not a syscall this auditor counts")))?;
        tally.add_calls(syscall, *calls);
    }
    tally.add_missed_probe_runs(saved.missed_probe_runs);
    let mut measured = BTreeSet::new();
    for site in saved.sites.iter().filter(|s| s.measured) {
        measured.insert(site_of(&site.id, &file)?);
    }
    Ok(Loaded {
        parts: vec![(saved.runs.clone(), tally.clone())],
        runs: saved.runs,
        tally,
        measured,
        notes: saved.source_notes,
    })
}

/// Reads and merges saved reports. Another catalogue version or kernel release than the
/// first report's is refused unless `force`; a file given twice, or one whose runs were
/// all read from another file, is counted once, and the notes say so; a file with some of
/// its runs read before is refused (which counts would be whose cannot be told), and so is
/// a sum that would not fit a count.
pub fn merge_files(paths: &[std::path::PathBuf], force: bool) -> Result<Loaded, SavedError> {
    let mut merged = Loaded {
        runs: Vec::new(),
        tally: Tally::default(),
        measured: BTreeSet::new(),
        notes: Vec::new(),
        parts: Vec::new(),
    };
    let mut seen_files = BTreeSet::new();
    // The runs of each file merged, to name where a run was read before.
    let mut read_from: Vec<(Vec<Run>, String)> = Vec::new();
    for path in paths {
        let file = path.display().to_string();
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        if !seen_files.insert(canonical) {
            merged
                .notes
                .push(format!("{file} was given more than once: counted once."));
            continue;
        }
        let loaded = read(path)?;
        if let Some(first) = merged.runs.first() {
            for run in &loaded.runs {
                for (what, theirs, ours) in [
                    (
                        "catalogue version",
                        &run.catalogue_version,
                        &first.catalogue_version,
                    ),
                    ("kernel release", &run.kernel_release, &first.kernel_release),
                ] {
                    if theirs != ours {
                        if !force {
                            return Err(SavedError::Mismatch {
                                file,
                                what,
                                theirs: theirs.clone(),
                                ours: ours.clone(),
                            });
                        }
                        merged.notes.push(format!(
                            "{file} is of another {what} ({theirs}, not {ours}); merged as \
                             --force asked."
                        ));
                    }
                }
            }
        }
        let (shared, new): (Vec<&Run>, Vec<&Run>) = loaded
            .runs
            .iter()
            .partition(|run| merged.runs.contains(run));
        if new.is_empty() {
            merged.notes.push(format!(
                "{file} holds only runs already read: counted once."
            ));
            continue;
        }
        if !shared.is_empty() {
            let earlier = read_from
                .iter()
                .filter(|(runs, _)| runs.iter().any(|run| shared.contains(&run)))
                .map(|(_, file): &(Vec<Run>, String)| file.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(SavedError::PartlyRead {
                file,
                earlier,
                shared: named(&shared),
                new: named(&new),
            });
        }
        let mut sums = Sums::default();
        sums.tally(&merged.tally);
        sums.tally(&loaded.tally);
        if let Some(overflow) = sums.overflow() {
            return Err(SavedError::Overflow {
                file: format!("{file}, merged with the reports before it"),
                overflow,
            });
        }
        read_from.push((loaded.runs.clone(), file));
        merge(&mut merged, loaded);
    }
    Ok(merged)
}

/// Runs in words, as a user tells them apart: what was traced, where and when.
fn named(runs: &[&Run]) -> String {
    runs.iter()
        .map(|run| format!("{} on {} at {}", run.traced, run.host, run.started_at))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Adds `other`'s runs and counts to `into`: exact, associative and commutative in the
/// counts.
pub fn merge(into: &mut Loaded, other: Loaded) {
    into.tally.merge(&other.tally);
    into.measured.extend(other.measured);
    for note in other.notes {
        if !into.notes.contains(&note) {
            into.notes.push(note);
        }
    }
    into.runs.extend(other.runs);
    into.parts.extend(other.parts);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift), so the test is the same on every run.
    struct Random(u64);

    impl Random {
        fn next(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below
        }
    }

    fn loaded(random: &mut Random, name: &str) -> Loaded {
        let mut tally = Tally::default();
        for _ in 0..random.next(20) {
            let process = Process {
                pid: random.next(5) as u32,
                comm: format!("p{}", random.next(3)),
            };
            let site = Site::ALL[random.next(Site::ALL.len() as u64) as usize];
            let big = u64::MAX / 64;
            let counts = Counts::new(random.next(big), random.next(big), random.next(9));
            tally.add(process, site, &counts);
        }
        tally.add_calls(Syscall::Poll, random.next(1000));
        Loaded {
            runs: vec![Run::here("ebpf", name.into(), Duration::from_secs(1))],
            tally,
            measured: [Site::PollFdNegative].into(),
            notes: Vec::new(),
            parts: Vec::new(),
        }
    }

    fn merged(parts: Vec<Loaded>) -> Loaded {
        let mut all = Loaded {
            runs: Vec::new(),
            tally: Tally::default(),
            measured: BTreeSet::new(),
            notes: Vec::new(),
            parts: Vec::new(),
        };
        for part in parts {
            merge(&mut all, part);
        }
        all
    }

    /// Merging adds exactly, in any grouping and any order, near the top of u64 too.
    #[test]
    fn merging_is_associative_and_commutative() {
        let mut random = Random(0x9e37_79b9_7f4a_7c15);
        for _ in 0..200 {
            let seed = random.next(u64::MAX) | 1;
            let part = |k: u64| loaded(&mut Random(seed.wrapping_mul(k + 3)), "run");
            let in_order = merged(vec![part(0), part(1), part(2)]);
            let reversed = merged(vec![part(2), part(1), part(0)]);
            let grouped = merged(vec![part(0), merged(vec![part(1), part(2)])]);
            assert_eq!(in_order.tally, reversed.tally);
            assert_eq!(in_order.tally, grouped.tally);
            assert_eq!(in_order.runs.len(), 3);
            assert_eq!(grouped.runs.len(), 3);
            for site in Site::ALL {
                let mut sum = Counts::ZERO;
                for k in 0..3 {
                    sum.add(&part(k).tally.site_total(site));
                }
                assert_eq!(in_order.tally.site_total(site), sum, "{site:?}");
            }
        }
    }
}
