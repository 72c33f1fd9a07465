//! Reading log files: `-ff` files by name, standard input, pipes and FIFOs streamed, and
//! large regular files parsed in parts at once (one thread each), the parts' calls
//! stitched back together and their counts, notes and line numbers merged as if the file
//! had been read whole.

use std::{io::Read, path::Path};

use super::{
    super::records::{Item, NoEnd, PidMap, Record, Records, Start, Started, stitch},
    Replay,
};

impl Replay {
    /// Replays a log file, parsing `chunks` parts of it at once (one thread each): calls
    /// interrupted across two parts are stitched back together, and the counts, notes
    /// and line numbers are those of reading it whole.
    pub fn ingest_file(
        &mut self,
        path: &Path,
        file_pid: Option<u32>,
        chunks: usize,
    ) -> std::io::Result<()> {
        use std::io::{BufRead, Seek, SeekFrom};
        let name = path.display().to_string();
        let size = std::fs::metadata(path)?.len();
        // Chunk boundaries: after the first line end at or past each even share.
        let mut bounds = vec![0];
        for k in 1..chunks.max(1) as u64 {
            let mut file = std::fs::File::open(path)?;
            let at = (size * k / chunks as u64).max(*bounds.last().expect("one"));
            file.seek(SeekFrom::Start(at))?;
            let mut reader = std::io::BufReader::new(file);
            let mut skipped = Vec::new();
            let read = reader.read_until(b'\n', &mut skipped)? as u64;
            bounds.push((at + read).min(size));
        }
        bounds.push(size);
        bounds.dedup();
        let parts: Vec<std::io::Result<Part>> = std::thread::scope(|scope| {
            let workers: Vec<_> = bounds
                .windows(2)
                .map(|range| {
                    let (start, end, name) = (range[0], range[1], name.as_str());
                    scope.spawn(move || -> std::io::Result<Part> {
                        let mut file = std::fs::File::open(path)?;
                        file.seek(SeekFrom::Start(start))?;
                        let mut records = Records::chunk(file_pid);
                        let mut replay = Replay::default();
                        let mut resumed = Vec::new();
                        records.read(file.take(end - start), &mut |item| match item {
                            Item::Resumed(record) => {
                                // Its frames are its own, not the call's before.
                                replay.end_call();
                                resumed.push(record.owned());
                            }
                            item => replay.item(name, item),
                        });
                        replay.end_call();
                        Ok(Part {
                            lines: records.lines(),
                            opened: records.take_opened(),
                            started: records.take_started(),
                            resumed,
                            replay,
                        })
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a worker panicked"))
                .collect()
        });
        // In file order: each part's resumed halves finish the calls earlier parts started.
        let mut started: PidMap<Start> = PidMap::default();
        let mut offset = 0;
        for part in parts {
            let part = part?;
            // A thread whose first line in this part is not a second half: what it left
            // unfinished before never resumed.
            for (pid, why) in part.opened {
                if let Some(start) = started.remove(&pid) {
                    let why = match why {
                        NoEnd::NextCall(line) => NoEnd::NextCall(offset + line),
                        why => why,
                    };
                    self.item(&name, start.unanswered(pid, why));
                }
            }
            for mut record in part.resumed {
                match started.remove(&record.pid) {
                    // A stitched call is the start's, as when reading the log whole.
                    Some(start) if start.name == record.name => {
                        record.args = stitch(&start.args, &record.args);
                        record.line = start.line;
                        record.comm = start.comm;
                        self.record(&name, &record.borrowed());
                    }
                    _ => {
                        let why = format!("`{}` resumed without its start", record.name);
                        self.unparsed(&name, offset + record.line, why);
                    }
                }
            }
            self.merge(part.replay, offset);
            for (pid, mut start) in part.started {
                start.line += offset;
                let line = start.line;
                if let Some(left) = started.insert(pid, start) {
                    self.item(&name, left.unanswered(pid, NoEnd::NextCall(line)));
                }
            }
            offset += part.lines;
        }
        // Calls that never resumed: their entry still counts, as when reading it whole.
        let mut left: Vec<_> = started.into_iter().collect();
        left.sort_by_key(|(_, start)| start.line);
        for (pid, start) in left {
            self.item(&name, start.unanswered(pid, NoEnd::LogEnded));
        }
        Ok(())
    }

    /// Replays log files (`-ff` files get their pid from their name; `-` is standard
    /// input). Large regular files are parsed in parts, one per core, unless they hold
    /// stacks (`-k`): those are read whole, so that every stack stays with its call.
    /// Anything else (a pipe, a FIFO, `/dev/stdin`, process substitution) is streamed to
    /// its end. A file that cannot be read is named in the notes, and the rest is read.
    pub fn ingest_logs(&mut self, paths: &[std::path::PathBuf]) {
        for path in paths {
            if path.as_os_str() == "-" {
                self.ingest("stdin", std::io::stdin().lock(), None);
                continue;
            }
            let name = path.display().to_string();
            if let Err(error) = self.ingest_path(path, &name) {
                self.unreadable_files.push((name, error.to_string()));
            }
        }
    }

    fn ingest_path(&mut self, path: &Path, name: &str) -> std::io::Result<()> {
        const WHOLE_BELOW: u64 = 16 << 20;
        let mut file = std::fs::File::open(path)?;
        let metadata = file.metadata()?;
        if metadata.is_file() && metadata.len() >= WHOLE_BELOW && !has_stacks(&mut file)? {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            self.ingest_file(path, file_pid(path), cores)
        } else {
            use std::io::Seek;
            if metadata.is_file() {
                file.rewind()?;
            }
            self.ingest(name, file, file_pid(path));
            Ok(())
        }
    }

    /// Adds another replay's counts; its line numbers start `offset` lines into the file.
    fn merge(&mut self, other: Replay, offset: u64) {
        self.threads.merge(&other.threads);
        self.created_by.extend(other.created_by);
        for (calls, other) in self.calls.0.iter_mut().zip(other.calls.0) {
            *calls += other;
        }
        self.execs += other.execs;
        self.strace_lines += other.strace_lines;
        self.exes.extend(other.exes);
        self.unparsed.merge(other.unparsed, offset);
        self.undecodable.merge(other.undecodable, offset);
        self.no_end.merge(other.no_end, offset);
    }
}

/// What one thread made of its part of a log.
struct Part {
    lines: u64,
    /// Threads whose first line in the part is not a call's second half, with why that ends
    /// a call an earlier part left unfinished.
    opened: Vec<(Option<u32>, NoEnd)>,
    /// Calls still unfinished at the part's end.
    started: Vec<Started>,
    /// Second halves of calls that started before the part.
    resumed: Vec<Record<String>>,
    replay: Replay,
}

/// Whether a log was made with `strace -k`: a stack frame line in its first MiB.
fn has_stacks(file: &mut std::fs::File) -> std::io::Result<bool> {
    let mut head = Vec::new();
    file.take(1 << 20).read_to_end(&mut head)?;
    Ok(memchr::memmem::find(&head, b"\n > ").is_some())
}

/// The pid of a `strace -ff -o FILE` output file, FILE.PID.
pub fn file_pid(path: &Path) -> Option<u32> {
    path.extension()?.to_str()?.parse().ok()
}

#[cfg(test)]
mod chunks {
    use super::*;
    use crate::tally::Tally;

    #[test]
    fn logs_with_stacks_are_known_by_their_first_frames() {
        let dir = tempfile::tempdir().unwrap();
        let (with, without) = (dir.path().join("k.log"), dir.path().join("plain.log"));
        std::fs::write(&with, "close(3) = 0\n > /usr/bin/app(main+0x1) [0x1]\n").unwrap();
        std::fs::write(&without, "close(3) = 0\nclose(4) = 0\n").unwrap();
        let open = |path: &Path| std::fs::File::open(path).unwrap();
        assert!(has_stacks(&mut open(&with)).unwrap());
        assert!(!has_stacks(&mut open(&without)).unwrap());
    }

    #[test]
    fn ff_files_are_named_for_their_pid() {
        assert_eq!(file_pid(Path::new("/tmp/log.1234")), Some(1234));
        assert_eq!(file_pid(Path::new("/tmp/log")), None);
    }

    fn whole(path: &Path) -> (Tally, u64, Vec<String>) {
        let mut replay = Replay::default();
        let file = std::fs::File::open(path).unwrap();
        replay.ingest(&path.display().to_string(), file, None);
        (replay.tally(), replay.unreadable(), replay.notes())
    }

    fn in_chunks(path: &Path, chunks: usize) -> (Tally, u64, Vec<String>) {
        let mut replay = Replay::default();
        replay.ingest_file(path, None, chunks).unwrap();
        (replay.tally(), replay.unreadable(), replay.notes())
    }

    /// Calls interrupted across chunk boundaries, killed, never resumed, resumed without
    /// a start, and a bad line: any number of chunks gives what reading it whole gives.
    #[test]
    fn any_number_of_chunks_reads_like_the_whole() {
        let mut log = String::new();
        for i in 0..60 {
            let (a, b) = (100 + i % 3, 200 + i % 4);
            log.push_str(&format!(
                "{a} poll([{{fd=3, events=POLLIN}}, {{fd=-1}}], 2, 0 <unfinished ...>\n"
            ));
            log.push_str(&format!("{b} close({i}) = 0\n"));
            log.push_str(&format!(
                "{b} ppoll([{{fd=4, events=POLLIN}}], 1, NULL, NULL, 8 <unfinished ...>\n"
            ));
            log.push_str(&format!(
                "{a} <... poll resumed>) = 1 ([{{fd=3, revents=POLLNVAL}}])\n"
            ));
            if i % 7 == 0 {
                log.push_str(&format!("{b} +++ killed by SIGKILL +++\n"));
            } else {
                log.push_str(&format!("{b} <... ppoll resumed>) = 0 (Timeout)\n"));
            }
        }
        log.push_str("300 <... select resumed>) = 0\nnot strace\n301 poll([{fd=5, events=POLLIN}], 1, -1 <unfinished ...>\n");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("interleaved.log");
        std::fs::write(&path, &log).unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/python-asyncio.log");
        // A log joined with itself (`cat a.log a.log`): the same pids again.
        let joined = dir.path().join("joined.log");
        std::fs::write(&joined, log.repeat(2)).unwrap();
        for path in [path.as_path(), fixture.as_path(), joined.as_path()] {
            let expected = whole(path);
            for chunks in 1..=9 {
                assert_eq!(
                    in_chunks(path, chunks),
                    expected,
                    "{} in {chunks}",
                    path.display()
                );
            }
        }
    }
}
