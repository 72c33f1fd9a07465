//! strace output as syscall records: lines parsed, interrupted calls stitched back together
//! per thread, and every line that is not a complete call accounted for. Streams: the
//! input is read in blocks and parsed where it lies; memory holds one block (or one line
//! longer than a block) and the calls still unfinished.

use std::{
    collections::{HashMap, HashSet},
    hash::{BuildHasherDefault, Hasher},
    io::Read,
};

use super::line::{self, Event, Return};

/// One syscall as strace printed it; `S` is `&str` for a record borrowed from the line it
/// was read from, `String` for one kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<S> {
    /// The thread id, when the log says (`-f`), else the file's (`-ff`), else None.
    pub pid: Option<u32>,
    /// The thread's command name when the log says (`-Y`), else empty.
    pub comm: S,
    pub name: S,
    pub args: S,
    /// None for `?`: no return seen (an exit, or a task killed inside the call).
    pub ret: Option<i64>,
    pub errno: Option<S>,
    /// strace's decoding of what the call wrote, and the duration.
    pub detail: S,
    /// Where the call started (its line, or its `<unfinished ...>` line).
    pub line: u64,
}

impl Record<&str> {
    pub fn owned(&self) -> Record<String> {
        Record {
            pid: self.pid,
            comm: self.comm.to_string(),
            name: self.name.to_string(),
            args: self.args.to_string(),
            ret: self.ret,
            errno: self.errno.map(str::to_string),
            detail: self.detail.to_string(),
            line: self.line,
        }
    }
}

impl Record<String> {
    pub fn borrowed(&self) -> Record<&str> {
        Record {
            pid: self.pid,
            comm: &self.comm,
            name: &self.name,
            args: &self.args,
            ret: self.ret,
            errno: self.errno.as_deref(),
            detail: &self.detail,
            line: self.line,
        }
    }
}

/// What a line gives, when it is not the start of an interrupted call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item<S> {
    Record(Record<S>),
    /// A signal or an exit: nothing to count.
    Event {
        line: u64,
    },
    /// A frame of the stack of the call before (`-k`), innermost first.
    Frame {
        line: u64,
        frame: S,
    },
    /// Not a line strace writes, with why (the caller reports it with the file name).
    Unparsed {
        line: u64,
        why: String,
    },
    /// A chunk of a log only ([`Records::chunk`]): the second half of a call that started
    /// before the chunk; `args` holds what follows `resumed>`.
    Resumed(Record<S>),
    /// A call the log shows no end of, with what its start shows, and why.
    Unanswered {
        record: Record<S>,
        why: NoEnd,
    },
}

/// Why a call has no end in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoEnd {
    /// Its task exited (or was killed) inside it: `= ?`, or `+++` after its start.
    TaskExited,
    /// strace detached from its thread inside it (`<detached ...>`).
    Detached,
    /// The log ends before it resumes.
    LogEnded,
    /// Its thread's next line, at this line, is another call: it never resumed (logs
    /// joined with `cat` give a pid's lines again).
    NextCall(u64),
}

impl std::fmt::Display for NoEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoEnd::TaskExited => f.write_str("its task exited inside it"),
            NoEnd::Detached => f.write_str("strace detached inside it"),
            NoEnd::LogEnded => f.write_str("the log ends before it resumes"),
            NoEnd::NextCall(line) => write!(
                f,
                "it never resumed (line {line} is its thread's next call)"
            ),
        }
    }
}

/// A call started (`<unfinished ...>`) and not yet resumed.
#[derive(Clone, Debug, Default)]
pub struct Start {
    pub name: String,
    pub comm: String,
    /// The arguments printed so far.
    pub args: String,
    pub line: u64,
    /// strace detached inside the call: it never resumes.
    pub detached: bool,
}

impl Start {
    /// The item of a call that never returned (`pid` is its thread): what its start shows;
    /// `why` unless strace detached inside it.
    pub fn unanswered(&self, pid: Option<u32>, why: NoEnd) -> Item<&str> {
        let why = if self.detached { NoEnd::Detached } else { why };
        let record = Record {
            pid,
            comm: self.comm.as_str(),
            name: self.name.as_str(),
            args: self.args.as_str(),
            ret: None,
            errno: None,
            detail: "",
            line: self.line,
        };
        Item::Unanswered { record, why }
    }
}

/// A call still unfinished at the end of a chunk, with its thread.
pub type Started = (Option<u32>, Start);

/// The arguments of a stitched call: its start's and its resumed part's (`<unfinished ...>`
/// when the task was killed inside the call: nothing more).
pub fn stitch(start: &str, rest: &str) -> String {
    let mut joined = String::new();
    stitch_into(&mut joined, start, rest);
    joined
}

/// [`stitch`] into `joined`, which keeps its memory from one call to the next: on two
/// threads most calls are printed in two halves.
fn stitch_into(joined: &mut String, start: &str, rest: &str) {
    let rest = if rest == "<unfinished ...>" { "" } else { rest };
    joined.clear();
    joined.push_str(start);
    joined.push(' ');
    joined.push_str(rest);
    let end = joined.trim_ascii_end().len();
    joined.truncate(end);
    let leading = joined.len() - joined.trim_ascii_start().len();
    joined.drain(..leading);
}

/// Starts kept for reuse, their strings' memory with them: one a thread that interleaves.
const SPARE_STARTS: usize = 64;
/// A start whose arguments took more than this is not kept: a few calls of huge arrays
/// would otherwise hold their memory for the rest of the session.
const SPARE_ARGS_BYTES: usize = 64 << 10;

/// Bytes read at a time; a line longer than this grows the buffer to hold it.
const BLOCK: usize = 1 << 20;

/// Hashes thread ids with one multiplication: they are small distinct integers, looked up
/// on the hot path (std's SipHash took a fifth of a chunked ingest's time).
#[derive(Default)]
pub struct PidHasher(u64);

impl Hasher for PidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}

/// Maps and sets keyed by thread id.
pub type PidMap<V> = HashMap<Option<u32>, V, BuildHasherDefault<PidHasher>>;
type PidSet = HashSet<Option<u32>, BuildHasherDefault<PidHasher>>;

/// The state of reading one strace log: the line count and the calls still unfinished.
pub struct Records {
    /// The pid of every record of a `-ff` file (FILE.PID), when lines carry none.
    file_pid: Option<u32>,
    line: u64,
    /// Calls started (`<unfinished ...>`) and not yet resumed, per thread.
    unfinished: PidMap<Start>,
    /// This is a chunk of a log: calls may resume after it or have started before it.
    chunk: bool,
    /// In a chunk, the threads seen so far, and those whose first line in it is not a
    /// call's second half (with why that ends a call an earlier chunk left unfinished).
    seen: PidSet,
    opened: Vec<(Option<u32>, NoEnd)>,
    last_seen: Option<Option<u32>>,
    /// Starts resumed, kept for the next ones (up to [`SPARE_STARTS`]).
    spare: Vec<Start>,
    /// The last stitched call's arguments.
    joined: String,
}

impl Records {
    pub fn new(file_pid: Option<u32>) -> Records {
        Records {
            file_pid,
            line: 0,
            unfinished: PidMap::default(),
            chunk: false,
            seen: PidSet::default(),
            opened: Vec::new(),
            last_seen: None,
            spare: Vec::new(),
            joined: String::new(),
        }
    }

    /// The records of a chunk of a log, for parsing the chunks of a large log at once:
    /// a resumed half whose start came before the chunk is an [`Item::Resumed`], and calls
    /// still unfinished at its end are left for [`Records::take_started`].
    pub fn chunk(file_pid: Option<u32>) -> Records {
        Records {
            chunk: true,
            ..Records::new(file_pid)
        }
    }

    /// Lines read so far.
    pub fn lines(&self) -> u64 {
        self.line
    }

    /// In a chunk: the threads whose first line is not a call's second half, with why that
    /// ends a call left unfinished before the chunk.
    pub fn take_opened(&mut self) -> Vec<(Option<u32>, NoEnd)> {
        let file_pid = self.file_pid;
        let mut opened = std::mem::take(&mut self.opened);
        opened
            .iter_mut()
            .for_each(|(pid, _)| *pid = pid.or(file_pid));
        opened
    }

    /// The calls still unfinished, in the order they started.
    pub fn take_started(&mut self) -> Vec<Started> {
        let mut started: Vec<Started> = self
            .unfinished
            .drain()
            .map(|(pid, start)| (pid.or(self.file_pid), start))
            .collect();
        started.sort_by_key(|(_, start)| start.line);
        started
    }

    /// Reads `reader` to its end and gives `sink` every item, in order. What the reader
    /// gives is parsed as soon as its lines are whole (strace's output, live, line by line).
    pub fn read(&mut self, mut reader: impl Read, sink: &mut impl FnMut(Item<&str>)) {
        let mut buffer = vec![0; BLOCK];
        let mut filled = 0;
        let mut failed = None;
        loop {
            if filled == buffer.len() {
                buffer.resize(2 * buffer.len(), 0);
            }
            let read = match reader.read(&mut buffer[filled..]) {
                Ok(0) => break,
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            };
            // What came before holds no line end (it would have been parsed).
            let end = memchr::memrchr(b'\n', &buffer[filled..filled + read]);
            filled += read;
            if let Some(end) = end.map(|at| filled - read + at + 1) {
                self.block(&buffer[..end], sink);
                buffer.copy_within(end..filled, 0);
                filled -= end;
            }
        }
        // A last line without its line end (a truncated log, or a read that failed).
        self.block(&buffer[..filled], sink);
        if let Some(error) = failed {
            let why = format!("read error: {error}");
            sink(Item::Unparsed {
                line: self.line + 1,
                why,
            });
        }
        if !self.chunk {
            self.finish(sink);
        }
    }

    /// Whole lines (the last may lack its line end).
    fn block(&mut self, block: &[u8], sink: &mut impl FnMut(Item<&str>)) {
        // strace escapes what is not printable, so a block is almost always valid UTF-8
        // and is read in place; a line that is not is read with replacement characters.
        match std::str::from_utf8(block) {
            Ok(text) => {
                let mut start = 0;
                for end in memchr::memchr_iter(b'\n', block) {
                    self.line(&text[start..end], sink);
                    start = end + 1;
                }
                if start < text.len() {
                    self.line(&text[start..], sink);
                }
            }
            Err(_) => {
                for bytes in block.split_inclusive(|&b| b == b'\n') {
                    match std::str::from_utf8(bytes) {
                        Ok(text) => self.line(text, sink),
                        Err(_) => self.line(&String::from_utf8_lossy(bytes), sink),
                    }
                }
            }
        }
    }

    fn line(&mut self, text: &str, sink: &mut impl FnMut(Item<&str>)) {
        self.line += 1;
        if !text.trim_ascii().is_empty() {
            self.item(text, sink);
        }
    }

    fn record<'a>(
        &self,
        (pid, comm): (Option<u32>, &'a str),
        name: &'a str,
        args: &'a str,
        ret: Option<Return<'a>>,
        line: u64,
    ) -> Record<&'a str> {
        Record {
            pid: pid.or(self.file_pid),
            comm,
            name,
            args,
            ret: ret.and_then(|r| r.value),
            errno: ret.and_then(|r| r.errno),
            detail: ret.map_or("", |r| r.detail),
            line,
        }
    }

    /// Gives `sink` what a line gives: nothing for the start of an interrupted call (it
    /// waits for its end).
    fn item(&mut self, text: &str, sink: &mut impl FnMut(Item<&str>)) {
        let number = self.line;
        let parsed = match line::parse(text) {
            Ok(parsed) => parsed,
            Err(error) => {
                let why = error.to_string();
                return sink(Item::Unparsed { line: number, why });
            }
        };
        let (pid, comm) = (parsed.pid, parsed.comm.unwrap_or(""));
        if self.chunk && self.last_seen != Some(pid) {
            let opening = match parsed.event {
                Event::Call { .. } | Event::Unfinished { .. } => {
                    Some(Some(NoEnd::NextCall(number)))
                }
                Event::Exit(_) => Some(Some(NoEnd::TaskExited)),
                Event::Resumed { .. } => Some(None),
                // A signal or a frame does not end a call.
                Event::Signal(_) | Event::Frame(_) => None,
            };
            if let Some(opening) = opening {
                self.last_seen = Some(pid);
                if self.seen.insert(pid)
                    && let Some(why) = opening
                {
                    self.opened.push((pid, why));
                }
            }
        }
        match parsed.event {
            Event::Call { name, args, ret } => {
                self.never_resumed(pid, number, sink);
                sink(self.ended(self.record((pid, comm), name, args, Some(ret), number)));
            }
            Event::Unfinished {
                name,
                args,
                detached,
            } => {
                self.never_resumed(pid, number, sink);
                let mut start = self.spare.pop().unwrap_or_default();
                for (field, text) in [
                    (&mut start.name, name),
                    (&mut start.comm, comm),
                    (&mut start.args, args),
                ] {
                    field.clear();
                    field.push_str(text);
                }
                (start.line, start.detached) = (number, detached);
                self.unfinished.insert(pid, start);
            }
            // A stitched call is the start's: its name, command name and line.
            Event::Resumed { name, args, ret } => match self.unfinished.remove(&pid) {
                Some(start) if start.name == name => {
                    let mut joined = std::mem::take(&mut self.joined);
                    stitch_into(&mut joined, &start.args, args);
                    let record =
                        self.record((pid, &start.comm), name, &joined, Some(ret), start.line);
                    sink(self.ended(record));
                    self.joined = joined;
                    if self.spare.len() < SPARE_STARTS && start.args.capacity() <= SPARE_ARGS_BYTES
                    {
                        self.spare.push(start);
                    }
                }
                None if self.chunk => sink(Item::Resumed(self.record(
                    (pid, comm),
                    name,
                    args,
                    Some(ret),
                    number,
                ))),
                other => {
                    if let Some(start) = other {
                        sink(start.unanswered(pid.or(self.file_pid), NoEnd::NextCall(number)));
                    }
                    sink(Item::Unparsed {
                        line: number,
                        why: format!("`{name}` resumed without its start"),
                    })
                }
            },
            Event::Signal(_) => sink(Item::Event { line: number }),
            Event::Frame(frame) => sink(Item::Frame {
                line: number,
                frame,
            }),
            Event::Exit(_) => {
                // A call still unfinished when its task exits never returned: its entry
                // still counts, without a return value.
                if let Some(start) = self.unfinished.remove(&pid) {
                    sink(start.unanswered(pid.or(self.file_pid), NoEnd::TaskExited));
                }
                sink(Item::Event { line: number })
            }
        }
    }

    /// A new call of thread `pid` at `line`: the call it left unfinished never resumed.
    fn never_resumed(&mut self, pid: Option<u32>, line: u64, sink: &mut impl FnMut(Item<&str>)) {
        if !self.unfinished.is_empty()
            && let Some(start) = self.unfinished.remove(&pid)
        {
            sink(start.unanswered(pid.or(self.file_pid), NoEnd::NextCall(line)));
        }
    }

    /// The item of a call with its end: `= ?` (no return, no errno) means its task
    /// exited inside it.
    fn ended<'a>(&self, record: Record<&'a str>) -> Item<&'a str> {
        if record.ret.is_none() && record.errno.is_none() {
            Item::Unanswered {
                record,
                why: NoEnd::TaskExited,
            }
        } else {
            Item::Record(record)
        }
    }

    /// At the end of the input: calls that never resumed (a truncated log) are still
    /// counted from what their start shows, in the order they started.
    fn finish(&mut self, sink: &mut impl FnMut(Item<&str>)) {
        let mut pending: Vec<_> = self.unfinished.drain().collect();
        pending.sort_by_key(|(_, start)| start.line);
        for (pid, start) in pending {
            sink(start.unanswered(pid.or(self.file_pid), NoEnd::LogEnded));
        }
    }
}

/// Every item of a whole log, kept (for tests).
#[cfg(test)]
pub fn items(log: &[u8], file_pid: Option<u32>) -> Vec<Item<String>> {
    items_of(log, file_pid)
}

/// Every item `reader` gives, kept (for tests).
#[cfg(test)]
fn items_of(reader: impl Read, file_pid: Option<u32>) -> Vec<Item<String>> {
    let mut items = Vec::new();
    Records::new(file_pid).read(reader, &mut |item| {
        items.push(match item {
            Item::Record(record) => Item::Record(record.owned()),
            Item::Resumed(record) => Item::Resumed(record.owned()),
            Item::Event { line } => Item::Event { line },
            Item::Frame { line, frame } => Item::Frame {
                line,
                frame: frame.to_string(),
            },
            Item::Unparsed { line, why } => Item::Unparsed { line, why },
            Item::Unanswered { record, why } => Item::Unanswered {
                record: record.owned(),
                why,
            },
        })
    });
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(items: &[Item<String>]) -> Vec<String> {
        items
            .iter()
            .filter_map(|item| match item {
                Item::Record(record) => {
                    Some(format!("{}:{}:{:?}", record.name, record.args, record.ret))
                }
                Item::Unanswered { record, why } => {
                    Some(format!("{}:{}:{why:?}", record.name, record.args))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn threads_interleave_and_resume() {
        let log = "9345  07:59:47 set_robust_list(0x7f396dee6a20, 24 <unfinished ...>\n\
                   9344  07:59:47 wait4(-1,  <unfinished ...>\n\
                   9345  07:59:47 <... set_robust_list resumed>) = 0\n\
                   9344  07:59:47 <... wait4 resumed>0x7ffffe37f8dc, WNOHANG, NULL) = 0\n";
        assert_eq!(
            names(&items(log.as_bytes(), None)),
            [
                "set_robust_list:0x7f396dee6a20, 24:Some(0)",
                "wait4:-1, 0x7ffffe37f8dc, WNOHANG, NULL:Some(0)"
            ]
        );
    }

    #[test]
    fn starts_reused_for_the_next_calls_carry_nothing_of_the_last() {
        // Two threads, each call cut in two: long arguments, then shorter ones, a start
        // with no command name after one with, and a start whose halves have spaces.
        let log = "7<a> openat(AT_FDCWD, \"/a/long/path/name\", O_RDONLY <unfinished ...>\n\
                   8<bb> close(3 <unfinished ...>\n\
                   7<a> <... openat resumed>) = 3\n\
                   8<bb> <... close resumed>) = 0\n\
                   8 close(4 <unfinished ...>\n\
                   7<a> openat(AT_FDCWD, \"/b\",  <unfinished ...>\n\
                   8 <... close resumed> ) = -1 EBADF (Bad file descriptor)\n\
                   7<a> <... openat resumed>O_RDONLY) = 4\n\
                   7<a> dup3(4, 5 <unfinished ...>\n\
                   7<a> <... dup3 resumed>, 0) = 5\n";
        let items = items(log.as_bytes(), None);
        assert_eq!(
            names(&items),
            [
                "openat:AT_FDCWD, \"/a/long/path/name\", O_RDONLY:Some(3)",
                "close:3:Some(0)",
                "close:4:Some(-1)",
                "openat:AT_FDCWD, \"/b\", O_RDONLY:Some(4)",
                "dup3:4, 5 , 0:Some(5)",
            ]
        );
        let comms: Vec<&str> = items
            .iter()
            .filter_map(|item| match item {
                Item::Record(record) => Some(record.comm.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(comms, ["a", "bb", "", "a", "a"]);
    }

    #[test]
    fn stitching_joins_the_halves_with_one_space_and_trims_the_ends() {
        for (start, rest, joined) in [
            ("3", ") = 0", "3 ) = 0"),
            ("", "3", "3"),
            ("  3, ", "  4  ", "3,    4"),
            ("3", "<unfinished ...>", "3"),
            ("", "", ""),
            (" \t", " ", ""),
        ] {
            assert_eq!(stitch(start, rest), joined, "{start:?} + {rest:?}");
            assert_eq!(
                stitch(start, rest),
                format!(
                    "{start} {}",
                    if rest == "<unfinished ...>" { "" } else { rest }
                )
                .trim_ascii(),
            );
        }
    }

    #[test]
    fn a_task_killed_inside_a_call_still_counts_its_entry() {
        let log = "100 poll([{fd=3, events=POLLIN}], 1, -1 <unfinished ...>\n\
                   100 <... poll resumed> <unfinished ...>) = ?\n\
                   101 ppoll([{fd=4, events=POLLIN}], 1, NULL, NULL, 8 <unfinished ...>\n\
                   101 +++ killed by SIGKILL +++\n";
        let items = items(log.as_bytes(), None);
        assert_eq!(
            names(&items),
            [
                "poll:[{fd=3, events=POLLIN}], 1, -1:TaskExited",
                "ppoll:[{fd=4, events=POLLIN}], 1, NULL, NULL, 8:TaskExited"
            ]
        );
    }

    #[test]
    fn bad_lines_are_reported_with_their_line_and_the_rest_goes_on() {
        let log = "close(3) = 0\n\u{0}\u{1}garbage\r\n<... poll resumed>) = 1\nclose(4) = 0\n";
        let items = items(log.as_bytes(), None);
        assert_eq!(names(&items), ["close:3:Some(0)", "close:4:Some(0)"]);
        let unparsed: Vec<(u64, &str)> = items
            .iter()
            .filter_map(|item| match item {
                Item::Unparsed { line, why } => Some((*line, why.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(
            unparsed,
            [
                (2, "no syscall name before `(`"),
                (3, "`poll` resumed without its start")
            ]
        );
    }

    #[test]
    fn a_truncated_last_line_and_per_process_files() {
        let log =
            "poll([{fd=3, events=POLLIN}], 1, 0) = 1 ([{fd=3, revents=POLLIN}])\nppoll([{fd=3, eve";
        let items = items(log.as_bytes(), Some(42));
        let Item::Record(first) = &items[0] else {
            panic!()
        };
        assert_eq!(first.pid, Some(42));
        assert!(matches!(&items[1], Item::Unparsed { line: 2, .. }));
        assert_eq!(items.len(), 2);
    }

    #[test]
    fn a_huge_line_streams() {
        let entries = "{fd=3, events=POLLIN}, ".repeat(400_000);
        let log = format!("poll([{entries}], 400000, 0) = 0\nclose(3) = 0\n");
        assert!(log.len() > 9_000_000);
        assert_eq!(items(log.as_bytes(), None).len(), 2);
    }

    /// Gives its bytes a few at a time, then fails or ends: what a pipe from a live strace
    /// (or a failing disk) does to the reader.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
        fail_at_end: bool,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
            if self.bytes.is_empty() && self.fail_at_end {
                return Err(std::io::Error::other("disk on fire"));
            }
            self.step = self.step % 7 + 1;
            let n = self.step.min(self.bytes.len()).min(buffer.len());
            buffer[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    fn trickled(log: &[u8], fail_at_end: bool) -> Vec<Item<String>> {
        let reader = Trickle {
            bytes: log,
            step: 0,
            fail_at_end,
        };
        items_of(reader, None)
    }

    #[test]
    fn input_in_small_pieces_reads_like_the_whole() {
        let log = include_str!("../../../../fixtures/python-asyncio.log");
        let whole = items(log.as_bytes(), None);
        assert!(whole.len() > 500);
        assert_eq!(trickled(log.as_bytes(), false), whole);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_read_with_replacements_and_its_neighbours_are_not() {
        let mut log = b"close(3) = 0\nwrite(1, \"".to_vec();
        log.extend([0xff, 0xfe]);
        log.extend(b"\", 2) = 2\nclose(4) = 0\n");
        let items = items(&log, None);
        assert_eq!(
            names(&items),
            [
                "close:3:Some(0)",
                "write:1, \"\u{fffd}\u{fffd}\", 2:Some(2)",
                "close:4:Some(0)"
            ]
        );
    }

    #[test]
    fn a_read_error_is_reported_and_what_came_before_still_counts() {
        // The last line, cut by the failure, still counts.
        let log =
            "close(3) = 0\npoll([{fd=3, events=POLLIN}], 1, -1 <unfinished ...>\nclose(5) = 0";
        let items = trickled(log.as_bytes(), true);
        assert_eq!(
            names(&items),
            [
                "close:3:Some(0)",
                // One thread (no pids): its next call came before the poll resumed.
                "poll:[{fd=3, events=POLLIN}], 1, -1:NextCall(3)",
                "close:5:Some(0)",
            ]
        );
        assert!(
            items.contains(&Item::Unparsed {
                line: 4,
                why: "read error: disk on fire".into()
            }),
            "{items:?}"
        );
    }
}
