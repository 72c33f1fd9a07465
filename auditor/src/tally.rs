//! The tally: counts per (process, site), whatever source produced them. Counts add, so
//! tallies merge exactly. A source that sees threads (a log) keeps a row per thread and
//! regroups the threads into their processes at the end ([`Tally::regrouped`]).

use std::collections::{BTreeMap, HashMap};

use auditor_common::{Counts, Site, Syscall, catalogue::Counters};

use crate::stacks::{self, Frame};

/// A process as the report names it: its id and the program name it ran under.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
}

/// Every site's counts per process (or thread), found by pid and name: a row per name a
/// pid ran under. A log's lines come in runs from one thread, so the row used last is
/// found without a search.
#[derive(Clone, Debug, Default)]
struct Rows {
    list: Vec<(Process, Counters)>,
    /// Indexes into `list` by pid.
    index: HashMap<u32, Vec<usize>>,
    last: usize,
}

impl Rows {
    fn of(&mut self, pid: u32, comm: &str) -> &mut Counters {
        // Names compared inline: a memcmp call per line cost a third of ingest's time.
        let is = |(process, _): &(Process, Counters)| {
            process.pid == pid
                && process.comm.len() == comm.len()
                && process.comm.bytes().zip(comm.bytes()).all(|(a, b)| a == b)
        };
        if !self.list.get(self.last).is_some_and(is) {
            let indexes = self.index.entry(pid).or_default();
            self.last = match indexes.iter().find(|&&i| is(&self.list[i])) {
                Some(&i) => i,
                None => {
                    let process = Process {
                        pid,
                        comm: comm.to_string(),
                    };
                    self.list.push((process, Counters::default()));
                    indexes.push(self.list.len() - 1);
                    self.list.len() - 1
                }
            };
        }
        &mut self.list[self.last].1
    }

    /// The rows in process order.
    fn sorted(&self) -> Vec<&(Process, Counters)> {
        let mut rows: Vec<&(Process, Counters)> = self.list.iter().collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }
}

#[derive(Clone, Debug, Default)]
pub struct Tally {
    rows: Rows,
    /// Counts the source could not attribute to a process (the probe's table was full).
    unattributed: BTreeMap<Site, Counts>,
    calls: BTreeMap<&'static str, u64>,
    /// Counts per site and calling code, for the calls whose stacks the source saw
    /// (`strace -k`).
    callers: BTreeMap<(Site, String), Counts>,
    /// Counts per site and whole call stack, for the same calls.
    stacks: BTreeMap<(Site, Vec<Frame>), Counts>,
    /// Probe runs the kernel skipped (another BPF program ran on that CPU).
    missed_probe_runs: u64,
    /// The executable each process exec'd, when the source saw it.
    exes: BTreeMap<Process, String>,
}

impl PartialEq for Tally {
    fn eq(&self, other: &Tally) -> bool {
        self.per_process().eq(other.per_process())
            && self.unattributed == other.unattributed
            && self.calls == other.calls
            && self.callers == other.callers
            && self.stacks == other.stacks
            && self.missed_probe_runs == other.missed_probe_runs
            && self.exes == other.exes
    }
}

impl Eq for Tally {}

impl Tally {
    pub fn add(&mut self, process: Process, site: Site, counts: &Counts) {
        use auditor_common::catalogue::Recorder as _;
        self.row(process.pid, &process.comm)
            .record_counts(site, counts);
    }

    /// Every site's counts of the process (or thread) `pid` running as `comm`, for the
    /// model to record into.
    pub fn row(&mut self, pid: u32, comm: &str) -> &mut Counters {
        self.rows.of(pid, comm)
    }

    /// This tally with its rows (of threads, say) grouped under `process_of` each and
    /// only the sites `kept` (the executables noted go with them); the rest as it is.
    pub fn regrouped(
        &self,
        process_of: impl Fn(&Process) -> Process,
        kept: impl Fn(Site) -> bool,
    ) -> Tally {
        let mut grouped = Tally {
            rows: Rows::default(),
            unattributed: self.unattributed.clone(),
            calls: self.calls.clone(),
            callers: self.callers.clone(),
            stacks: self.stacks.clone(),
            missed_probe_runs: self.missed_probe_runs,
            exes: BTreeMap::new(),
        };
        grouped.callers.retain(|(site, _), _| kept(*site));
        grouped.stacks.retain(|(site, _), _| kept(*site));
        for (process, exe) in &self.exes {
            grouped.set_exe(process_of(process), exe);
        }
        for (row, counters) in &self.rows.list {
            let process = process_of(row);
            for (site, counts) in counters.iter().filter(|(site, _)| kept(*site)) {
                if counts.total() > 0 {
                    grouped.add(process.clone(), site, counts);
                }
            }
        }
        grouped
    }

    /// The processes (or threads) with a row.
    pub fn processes(&self) -> impl Iterator<Item = &Process> {
        self.rows.list.iter().map(|(process, _)| process)
    }

    pub fn add_unattributed(&mut self, site: Site, counts: &Counts) {
        if counts.total() > 0 {
            self.unattributed.entry(site).or_default().add(counts);
        }
    }

    pub fn add_calls(&mut self, syscall: Syscall, calls: u64) {
        if calls > 0 {
            *self.calls.entry(syscall.name()).or_default() += calls;
        }
    }

    /// Notes the executable `process` ran (the first one noted stays).
    pub fn set_exe(&mut self, process: Process, exe: &str) {
        self.exes.entry(process).or_insert_with(|| exe.to_string());
    }

    /// The executable `process` ran, if the source saw its exec.
    pub fn exe(&self, process: &Process) -> Option<&str> {
        self.exes.get(process).map(String::as_str)
    }

    pub fn add_missed_probe_runs(&mut self, runs: u64) {
        self.missed_probe_runs += runs;
    }

    pub fn missed_probe_runs(&self) -> u64 {
        self.missed_probe_runs
    }

    /// Counts of `site` over every process, attributed or not.
    pub fn site_total(&self, site: Site) -> Counts {
        let mut total = self.unattributed.get(&site).copied().unwrap_or_default();
        for (_, counters) in &self.rows.list {
            total.add(&counters.get(site));
        }
        total
    }

    /// Rows per (process, site) with counts, ordered by process then site.
    pub fn per_process(&self) -> impl Iterator<Item = (&Process, Site, &Counts)> {
        self.rows
            .sorted()
            .into_iter()
            .flat_map(|(process, counters)| {
                counters
                    .iter()
                    .filter(|(_, counts)| counts.total() > 0)
                    .map(move |(site, counts)| (process, site, counts))
            })
    }

    pub fn unattributed(&self) -> impl Iterator<Item = (Site, &Counts)> {
        self.unattributed
            .iter()
            .map(|(site, counts)| (*site, counts))
    }

    pub fn add_caller(&mut self, site: Site, caller: &str, counts: &Counts) {
        if counts.total() > 0 {
            let key = (site, caller.to_string());
            self.callers.entry(key).or_default().add(counts);
        }
    }

    pub fn add_stack(&mut self, site: Site, frames: &[Frame], counts: &Counts) {
        if counts.total() > 0 {
            let key = (site, frames.to_vec());
            self.stacks.entry(key).or_default().add(counts);
        }
    }

    /// Adds the counts of calls whose stack was `frames`: to that stack, and to the code
    /// that made them (its [`stacks::caller`]).
    pub fn add_call_stack(&mut self, site: Site, frames: &[Frame], counts: &Counts) {
        self.add_stack(site, frames, counts);
        if let Some(caller) = stacks::caller(frames) {
            self.add_caller(site, &caller, counts);
        }
    }

    /// Rows per (site, stack), ordered by site then stack.
    pub fn stacks(&self) -> impl Iterator<Item = (Site, &[Frame], &Counts)> {
        self.stacks
            .iter()
            .map(|((site, frames), counts)| (*site, frames.as_slice(), counts))
    }

    /// Rows per (site, calling code), ordered by site then caller.
    pub fn callers(&self) -> impl Iterator<Item = (Site, &str, &Counts)> {
        self.callers
            .iter()
            .map(|((site, caller), counts)| (*site, caller.as_str(), counts))
    }

    /// Calls seen per syscall name.
    pub fn calls(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.calls.iter().map(|(name, calls)| (*name, *calls))
    }

    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    /// Number of distinct process ids with counts.
    pub fn process_count(&self) -> usize {
        self.rows.index.len()
    }

    /// Adds every count of `other` to this tally.
    pub fn merge(&mut self, other: &Tally) {
        for (process, site, counts) in other.per_process() {
            self.add(process.clone(), site, counts);
        }
        for (site, counts) in other.unattributed() {
            self.add_unattributed(site, counts);
        }
        for (name, calls) in &other.calls {
            *self.calls.entry(name).or_default() += calls;
        }
        for (site, caller, counts) in other.callers() {
            self.add_caller(site, caller, counts);
        }
        for (site, frames, counts) in other.stacks() {
            self.add_stack(site, frames, counts);
        }
        self.missed_probe_runs += other.missed_probe_runs;
        for (process, exe) in &other.exes {
            self.set_exe(process.clone(), exe);
        }
    }
}

/// A sum of counts that does not fit the u64 a count is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} would be {sum}, past the largest count a report holds ({})",
    u64::MAX
)]
pub struct Overflow {
    /// Which sum, in words.
    pub what: String,
    pub sum: u128,
}

/// The sums a tally holds or derives, taken wide (u128) from counts before any is added,
/// so that counts from a file are refused rather than wrapped. Every sum a report makes of
/// a site's counts (a process's row, a program's, the pooled one, any arm of them) is part
/// of that site's sum over every row, so once the sums over every row fit, all the parts
/// do.
#[derive(Debug, Default)]
pub struct Sums {
    /// Per site and what is summed (the counts, the callers' rows, the stacks' rows):
    /// taken, not taken, unreadable, and the three together.
    sites: BTreeMap<(Site, &'static str), [u128; 4]>,
    calls: u128,
    missed_probe_runs: u128,
}

impl Sums {
    /// Adds a row of `what` (`counts`, `callers`, `stacks`) of `site`.
    pub fn row(&mut self, site: Site, what: &'static str, counts: &Counts) {
        let sums = self.sites.entry((site, what)).or_default();
        let arms = [counts.taken, counts.not_taken, counts.unreadable].map(u128::from);
        for (sum, arm) in sums.iter_mut().zip(arms) {
            *sum += arm;
        }
        sums[3] += arms.iter().sum::<u128>();
    }

    pub fn calls(&mut self, calls: u64) {
        self.calls += u128::from(calls);
    }

    pub fn missed_probe_runs(&mut self, runs: u64) {
        self.missed_probe_runs += u128::from(runs);
    }

    /// Adds everything `tally` holds.
    pub fn tally(&mut self, tally: &Tally) {
        for (_, site, counts) in tally.per_process() {
            self.row(site, "counts", counts);
        }
        for (site, counts) in tally.unattributed() {
            self.row(site, "counts", counts);
        }
        for (site, _, counts) in tally.callers() {
            self.row(site, "callers", counts);
        }
        for (site, _, counts) in tally.stacks() {
            self.row(site, "stacks", counts);
        }
        for (_, calls) in tally.calls() {
            self.calls(calls);
        }
        self.missed_probe_runs(tally.missed_probe_runs());
    }

    /// The first sum that does not fit a u64, if any.
    pub fn overflow(&self) -> Option<Overflow> {
        let too_large = |sum: u128| sum > u128::from(u64::MAX);
        for (&(site, what), sums) in &self.sites {
            for (sum, arm) in sums.iter().zip(["taken ", "not taken ", "unreadable ", ""]) {
                if too_large(*sum) {
                    let what = match what {
                        "counts" => String::new(),
                        other => format!(" (its {other})"),
                    };
                    return Some(Overflow {
                        what: format!(
                            "the {arm}evaluations of {}{what} over every process",
                            site.info().id
                        ),
                        sum: *sum,
                    });
                }
            }
        }
        [
            (self.calls, "the calls of every syscall"),
            (self.missed_probe_runs, "the missed probe runs"),
        ]
        .into_iter()
        .find(|(sum, _)| too_large(*sum))
        .map(|(sum, what)| Overflow {
            what: what.into(),
            sum,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn counts(taken: u64, not_taken: u64, unreadable: u64) -> Counts {
        Counts::new(taken, not_taken, unreadable)
    }

    fn process(pid: u32) -> Process {
        Process {
            pid,
            comm: "w".into(),
        }
    }

    #[test]
    fn totals_include_unattributed_counts() {
        let mut tally = Tally::default();
        tally.add(process(1), Site::PollFdNegative, &counts(1, 2, 0));
        tally.add(process(2), Site::PollFdNegative, &counts(3, 4, 5));
        tally.add(process(2), Site::SelectNNegative, &counts(7, 0, 0));
        tally.add_unattributed(Site::PollFdNegative, &counts(10, 0, 0));
        assert_eq!(tally.site_total(Site::PollFdNegative), counts(14, 6, 5));
        assert_eq!(tally.site_total(Site::SelectNNegative), counts(7, 0, 0));
        assert_eq!(tally.process_count(), 2);
    }

    #[test]
    fn merging_is_exact_and_associative() {
        let mut a = Tally::default();
        a.add(process(1), Site::PollFdNegative, &counts(1, 2, 3));
        a.add_calls(Syscall::Poll, 4);
        let mut b = Tally::default();
        b.add(process(1), Site::PollFdNegative, &counts(10, 20, 30));
        b.add_unattributed(Site::SelectNNegative, &counts(1, 0, 0));
        let mut c = Tally::default();
        c.add(process(9), Site::SelectNNegative, &counts(0, 5, 0));
        c.add_calls(Syscall::Poll, 1);

        let mut left = a.clone();
        left.merge(&b);
        left.merge(&c);
        let mut bc = b.clone();
        bc.merge(&c);
        let mut right = a.clone();
        right.merge(&bc);
        assert_eq!(left, right);
        assert_eq!(left.site_total(Site::PollFdNegative), counts(11, 22, 33));
        assert_eq!(left.total_calls(), 5);
    }
}

#[cfg(test)]
mod sums {
    use super::*;

    #[test]
    fn a_sum_past_u64_is_found_before_it_is_made() {
        let mut tally = Tally::default();
        let process = Process {
            pid: 1,
            comm: "a".into(),
        };
        tally.add(
            process,
            Site::PollFdNegative,
            &Counts::new(u64::MAX - 5, 0, 0),
        );
        let mut sums = Sums::default();
        sums.tally(&tally);
        assert_eq!(sums.overflow(), None);
        sums.row(Site::PollFdNegative, "counts", &Counts::new(10, 0, 0));
        let overflow = sums.overflow().unwrap();
        assert_eq!(overflow.sum, u128::from(u64::MAX) + 5);
        assert!(
            overflow
                .what
                .contains("taken evaluations of poll.fd_negative"),
            "{overflow}"
        );
        // The arms fit, their total does not.
        let mut sums = Sums::default();
        sums.row(Site::CloseOk, "counts", &Counts::new(u64::MAX, 1, 0));
        assert_eq!(
            sums.overflow().unwrap().what,
            "the evaluations of close.ok over every process"
        );
        let mut sums = Sums::default();
        sums.calls(u64::MAX);
        sums.calls(1);
        assert_eq!(sums.overflow().unwrap().what, "the calls of every syscall");
    }
}
