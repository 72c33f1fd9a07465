//! Replaying strace records through the readiness core into a tally, and keeping account
//! of what could not be read: lines that are not strace's, calls whose arguments strace did
//! not print in full.

use std::{collections::BTreeMap, io::BufRead, path::Path};

use auditor_common::{Site, Syscall};

use super::{
    decode,
    records::{Item, Record, Records},
};
use crate::{
    readiness::{self, Decided, Recorder},
    tally::{Process, Tally},
};

/// Sites a log decides: every one but those that need the task's fd table, which a log
/// does not show.
pub fn decides(site: Site) -> bool {
    readiness::info(site).decided != Decided::TaskState
}

/// At most this many unparsed lines are quoted in the notes (all are counted).
const QUOTED: usize = 10;

/// Counts from one or more strace logs.
#[derive(Default)]
pub struct Replay {
    recorders: BTreeMap<u32, Recorder>,
    tally: Tally,
    /// `file:line: why`, for the first lines that could not be parsed.
    unparsed: Vec<String>,
    unparsed_count: u64,
    /// Calls of followed syscalls whose arguments could not be decoded, per syscall.
    undecoded: BTreeMap<String, u64>,
}

fn syscall(name: &str) -> Option<Syscall> {
    Syscall::ALL.into_iter().find(|s| s.name() == name)
}

impl Replay {
    /// Replays one call.
    pub fn record(&mut self, record: &Record) {
        let recorder = self.recorders.entry(record.pid.unwrap_or(0)).or_default();
        let decoded =
            match record.name.as_str() {
                "poll" | "ppoll" => {
                    decode::poll(record).map(|call| readiness::poll::poll(recorder, None, &call))
                }
                "select" | "pselect6" => decode::select(record)
                    .map(|call| readiness::select::select(recorder, None, &call)),
                "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => decode::epoll_wait(record)
                    .map(|call| readiness::epoll::epoll_wait(recorder, &call)),
                "close" => decode::split_args(&record.args)
                    .first()
                    .and_then(|fd| fd.split('<').next()?.parse::<i32>().ok())
                    .zip(decode::kernel_return(record))
                    .map(|(fd, ret)| readiness::close::close(recorder, None, fd, ret)),
                // Not a call any measured site depends on.
                _ => return,
            };
        match decoded {
            Some(()) => {
                if let Some(syscall) = syscall(&record.name) {
                    self.tally.add_calls(syscall, 1);
                }
            }
            None => *self.undecoded.entry(record.name.clone()).or_default() += 1,
        }
    }

    /// Replays a log; `file` names it in the notes, `file_pid` is the pid of a `-ff` file.
    pub fn ingest(&mut self, file: &str, reader: impl BufRead, file_pid: Option<u32>) {
        for item in Records::new(reader, file_pid) {
            match item {
                Item::Record(record) => self.record(&record),
                Item::Event { .. } => {}
                Item::Unparsed { line, why } => {
                    self.unparsed_count += 1;
                    if self.unparsed.len() < QUOTED {
                        self.unparsed.push(format!("{file}:{line}: {why}"));
                    }
                }
            }
        }
    }

    /// Lines or calls that could not be read.
    pub fn unreadable(&self) -> u64 {
        self.unparsed_count + self.undecoded.values().sum::<u64>()
    }

    pub fn tally(&self) -> Tally {
        let mut tally = self.tally.clone();
        for (&pid, recorder) in &self.recorders {
            let process = Process {
                pid,
                comm: String::new(),
            };
            for site in Site::ALL {
                tally.add(process.clone(), site, &recorder.counts(site));
            }
        }
        tally
    }

    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.unparsed_count > 0 {
            notes.push(format!(
                "{} lines are not strace output and were skipped: {}{}",
                self.unparsed_count,
                self.unparsed.join("; "),
                if self.unparsed_count > QUOTED as u64 {
                    "; ..."
                } else {
                    ""
                }
            ));
        }
        for (name, calls) in &self.undecoded {
            notes.push(format!(
                "{calls} {name} calls could not be decoded (arguments strace did not print) \\
                 and are not counted."
            ));
        }
        notes
    }
}

/// The pid of a `strace -ff -o FILE` output file, FILE.PID.
pub fn file_pid(path: &Path) -> Option<u32> {
    path.extension()?.to_str()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use auditor_common::Counts;

    // A log of the workload `poll:1:4:1:1 select:1:-1 close:1:1 fork poll:1:2:0`, trimmed.
    pub(super) const LOG: &str = "9309  07:59:38.468226 poll([{fd=-1}, {fd=73, events=POLLIN}, {fd=5</dev/null>, events=POLLIN}, {fd=6</dev/null>, events=POLLIN}], 4, 0) = 3 ([{fd=73, revents=POLLNVAL}, {fd=5, revents=POLLIN}, {fd=6, revents=POLLIN}]) <0.000078>
9309  07:59:38.468056 select(-1, 0x560058ac0bc0, NULL, NULL, {tv_sec=0, tv_usec=0}) = -1 EINVAL (Invalid argument) <0.000070>
9309  07:59:38.469087 close(73</dev/null>) = 0 <0.000073>
9309  07:59:38.469300 close(-1)         = -1 EBADF (Bad file descriptor) <0.000070>
9309  07:59:38.470121 wait4(9310,  <unfinished ...>
9310  07:59:38.470191 poll([{fd=3</dev/null>, events=POLLIN}, {fd=4</dev/null>, events=POLLIN}], 2, 0) = 2 ([{fd=3, revents=POLLIN}, {fd=4, revents=POLLIN}]) <0.000005>
9310  07:59:38.470330 +++ exited with 0 +++
9309  07:59:38.470491 <... wait4 resumed>[{WIFEXITED(s) && WEXITSTATUS(s) == 0}], 0, NULL) = 9310 <0.000359>
";

    #[test]
    fn a_log_replays_into_exact_counts() {
        let mut replay = Replay::default();
        replay.ingest("log", LOG.as_bytes(), None);
        let tally = replay.tally();
        assert_eq!(tally.site_total(Site::PollFdNegative), Counts::new(1, 5, 0));
        assert_eq!(tally.site_total(Site::PollFdNotOpen), Counts::new(1, 4, 0));
        assert_eq!(
            tally.site_total(Site::PollZeroTimeout),
            Counts::new(2, 0, 0)
        );
        assert_eq!(
            tally.site_total(Site::SelectNNegative),
            Counts::new(1, 0, 0)
        );
        assert_eq!(tally.site_total(Site::CloseOk), Counts::new(1, 0, 0));
        assert_eq!(tally.process_count(), 2);
        assert_eq!(replay.unreadable(), 0);
        assert!(!decides(Site::FdFastPath) && decides(Site::PollFdNegative));
    }

    #[test]
    fn what_cannot_be_read_is_accounted_for() {
        let mut replay = Replay::default();
        let log = "close(3) = 0\nnot strace\npoll(0x10) = 0\npoll([{fd=3, events=POLLIN}, ...], 40, 0) = 0 (Timeout)\n";
        replay.ingest("bad.log", log.as_bytes(), Some(7));
        assert_eq!(replay.unreadable(), 2);
        let notes = replay.notes().join("\n");
        assert!(notes.contains("bad.log:2: no syscall name"), "{notes}");
        assert!(
            notes.contains("1 poll calls could not be decoded"),
            "{notes}"
        );
        // The cut array: its 40 entries count as unreadable.
        assert_eq!(
            replay.tally().site_total(Site::PollFdNegative),
            Counts::new(0, 0, 40)
        );
        assert_eq!(file_pid(Path::new("/tmp/log.1234")), Some(1234));
        assert_eq!(file_pid(Path::new("/tmp/log")), None);
    }
}

#[cfg(test)]
mod robustness {
    use super::*;

    /// A small deterministic generator (xorshift), so the test is the same on every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Real lines cut, spliced and sprinkled with the characters the parser cares about:
    /// nothing panics, and every line is either counted or reported.
    #[test]
    fn mangled_lines_never_panic() {
        let lines: Vec<&str> = tests::LOG.lines().chain(FIXTURE.lines()).collect();
        let specials = [
            '(', ')', '[', ']', '{', '}', '"', '\\', '<', '>', '=', ',', ' ', '?', '-', '.',
        ];
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut log = String::new();
        for _ in 0..20_000 {
            let mut line: Vec<char> = lines[rng.below(lines.len())].chars().collect();
            for _ in 0..rng.below(4) {
                match rng.below(3) {
                    0 if !line.is_empty() => {
                        let at = rng.below(line.len());
                        line.truncate(at);
                    }
                    1 => {
                        let at = rng.below(line.len() + 1);
                        line.insert(at, specials[rng.below(specials.len())]);
                    }
                    _ if !line.is_empty() => {
                        let at = rng.below(line.len());
                        line.remove(at);
                    }
                    _ => {}
                }
            }
            log.extend(line);
            log.push('\n');
        }
        let mut replay = Replay::default();
        replay.ingest("mangled", log.as_bytes(), None);
        let _ = replay.tally();
        assert!(replay.unreadable() > 0);
    }

    const FIXTURE: &str = include_str!("../../../../fixtures/python-asyncio.log");
}
