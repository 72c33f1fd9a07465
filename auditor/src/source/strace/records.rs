//! strace output as syscall records: lines parsed, interrupted calls stitched back together
//! per thread, and every line that is not a complete call accounted for. Streams: memory
//! holds one line and the calls still unfinished.

use std::{collections::HashMap, io::BufRead};

use super::line::{self, Event, Return};

/// One syscall as strace printed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The thread id, when the log says (`-f`), else the file's (`-ff`), else None.
    pub pid: Option<u32>,
    pub name: String,
    pub args: String,
    /// None for `?`: no return seen (an exit, or a task killed inside the call).
    pub ret: Option<i64>,
    pub errno: Option<String>,
    /// strace's decoding of what the call wrote, and the duration.
    pub detail: String,
    /// Where the call started (its line, or its `<unfinished ...>` line).
    pub line: u64,
}

/// What a line that is not a complete call was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Record(Record),
    /// A signal or an exit: nothing to count.
    Event {
        line: u64,
    },
    /// Not a line strace writes, with why (the caller reports it with the file name).
    Unparsed {
        line: u64,
        why: String,
    },
    /// A chunk of a log only ([`Records::chunk`]): the second half of a call that started
    /// before the chunk; `args` holds what follows `resumed>`.
    Resumed(Record),
}

/// A call started (`<unfinished ...>`) and not resumed: its thread, name, arguments so far
/// and line.
pub type Started = (Option<u32>, String, String, u64);

/// The arguments of a stitched call: its start's and its resumed part's (`<unfinished ...>`
/// when the task was killed inside the call: nothing more).
pub fn stitch(start: &str, rest: &str) -> String {
    let rest = if rest == "<unfinished ...>" { "" } else { rest };
    format!("{start} {rest}").trim_ascii().to_string()
}

/// The records of one strace log.
pub struct Records<R> {
    reader: R,
    /// The pid of every record of a `-ff` file (FILE.PID), when lines carry none.
    file_pid: Option<u32>,
    line: u64,
    buffer: Vec<u8>,
    /// Calls started (`<unfinished ...>`) and not yet resumed, per thread.
    unfinished: HashMap<Option<u32>, (String, String, u64)>,
    /// Records released at an exit or at the end, returned before reading on (last first).
    released: Vec<Item>,
    /// The input has ended.
    done: bool,
    /// This is a chunk of a log: calls may resume after it or have started before it.
    chunk: bool,
}

impl<R: BufRead> Records<R> {
    pub fn new(reader: R, file_pid: Option<u32>) -> Records<R> {
        Records {
            reader,
            file_pid,
            line: 0,
            buffer: Vec::new(),
            unfinished: HashMap::new(),
            released: Vec::new(),
            done: false,
            chunk: false,
        }
    }

    /// The records of a chunk of a log, for parsing the chunks of a large log at once:
    /// a resumed half whose start came before the chunk is an [`Item::Resumed`], and calls
    /// still unfinished at its end are left for [`Records::take_started`].
    pub fn chunk(reader: R, file_pid: Option<u32>) -> Records<R> {
        Records {
            chunk: true,
            ..Records::new(reader, file_pid)
        }
    }

    /// Lines read so far.
    pub fn lines(&self) -> u64 {
        self.line
    }

    /// The calls still unfinished, in the order they started.
    pub fn take_started(&mut self) -> Vec<Started> {
        let mut started: Vec<Started> = self
            .unfinished
            .drain()
            .map(|(pid, (name, args, line))| (pid.or(self.file_pid), name, args, line))
            .collect();
        started.sort_by_key(|(_, _, _, line)| *line);
        started
    }

    fn record(
        &self,
        pid: Option<u32>,
        name: &str,
        args: String,
        ret: Option<Return<'_>>,
        line: u64,
    ) -> Record {
        Record {
            pid: pid.or(self.file_pid),
            name: name.to_string(),
            args,
            ret: ret.and_then(|r| r.value),
            errno: ret.and_then(|r| r.errno).map(str::to_string),
            detail: ret.map(|r| r.detail.to_string()).unwrap_or_default(),
            line,
        }
    }

    /// What a line gives; None for the start of an interrupted call (it waits for its end).
    fn item(&mut self, text: &str) -> Option<Item> {
        let number = self.line;
        let parsed = match line::parse(text) {
            Ok(parsed) => parsed,
            Err(error) => {
                return Some(Item::Unparsed {
                    line: number,
                    why: error.to_string(),
                });
            }
        };
        let pid = parsed.pid;
        let item = match parsed.event {
            Event::Call { name, args, ret } => {
                Item::Record(self.record(pid, name, args.to_string(), Some(ret), number))
            }
            Event::Unfinished { name, args } => {
                self.unfinished
                    .insert(pid, (name.to_string(), args.to_string(), number));
                return None;
            }
            Event::Resumed { name, args, ret } => match self.unfinished.remove(&pid) {
                Some((started, start_args, start_line)) if started == name => {
                    let joined = stitch(&start_args, args);
                    Item::Record(self.record(pid, name, joined, Some(ret), start_line))
                }
                None if self.chunk => {
                    Item::Resumed(self.record(pid, name, args.to_string(), Some(ret), number))
                }
                _ => Item::Unparsed {
                    line: number,
                    why: format!("`{name}` resumed without its start"),
                },
            },
            Event::Signal(_) => Item::Event { line: number },
            Event::Exit(_) => {
                // A call still unfinished when its task exits never returned: its entry
                // still counts, without a return value.
                if let Some((name, args, start_line)) = self.unfinished.remove(&pid) {
                    let record = self.record(pid, &name, args, None, start_line);
                    self.released.push(Item::Record(record));
                }
                Item::Event { line: number }
            }
        };
        Some(item)
    }

    /// At the end of the input: calls that never resumed (a truncated log) are still
    /// counted from what their start shows, in the order they started.
    fn finish(&mut self) {
        let mut pending: Vec<_> = self.unfinished.drain().collect();
        pending.sort_by_key(|(_, (_, _, line))| std::cmp::Reverse(*line));
        for (pid, (name, args, line)) in pending {
            let record = self.record(pid, &name, args, None, line);
            self.released.push(Item::Record(record));
        }
    }
}

impl<R: BufRead> Iterator for Records<R> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.released.pop() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            self.buffer.clear();
            match self.reader.read_until(b'\n', &mut self.buffer) {
                Ok(0) => {
                    self.done = true;
                    if !self.chunk {
                        self.finish();
                    }
                    continue;
                }
                Ok(_) => self.line += 1,
                Err(error) => {
                    self.done = true;
                    return Some(Item::Unparsed {
                        line: self.line + 1,
                        why: format!("read error: {error}"),
                    });
                }
            }
            // strace escapes what is not printable, so a line is almost always valid UTF-8
            // and can be read in place; anything else is read with replacement characters.
            let buffer = std::mem::take(&mut self.buffer);
            let item = match std::str::from_utf8(&buffer) {
                Ok(text) if text.trim_ascii().is_empty() => None,
                Ok(text) => self.item(text),
                Err(_) => self.item(&String::from_utf8_lossy(&buffer)),
            };
            self.buffer = buffer;
            if let Some(item) = item {
                return Some(item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(text: &str) -> Vec<Item> {
        Records::new(text.as_bytes(), None).collect()
    }

    fn names(items: &[Item]) -> Vec<String> {
        items
            .iter()
            .filter_map(|item| match item {
                Item::Record(record) => {
                    Some(format!("{}:{}:{:?}", record.name, record.args, record.ret))
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
            names(&items(log)),
            [
                "set_robust_list:0x7f396dee6a20, 24:Some(0)",
                "wait4:-1, 0x7ffffe37f8dc, WNOHANG, NULL:Some(0)"
            ]
        );
    }

    #[test]
    fn a_task_killed_inside_a_call_still_counts_its_entry() {
        let log = "100 poll([{fd=3, events=POLLIN}], 1, -1 <unfinished ...>\n\
                   100 <... poll resumed> <unfinished ...>) = ?\n\
                   101 ppoll([{fd=4, events=POLLIN}], 1, NULL, NULL, 8 <unfinished ...>\n\
                   101 +++ killed by SIGKILL +++\n";
        let items = items(log);
        assert_eq!(
            names(&items),
            [
                "poll:[{fd=3, events=POLLIN}], 1, -1:None",
                "ppoll:[{fd=4, events=POLLIN}], 1, NULL, NULL, 8:None"
            ]
        );
    }

    #[test]
    fn bad_lines_are_reported_with_their_line_and_the_rest_goes_on() {
        let log = "close(3) = 0\n\u{0}\u{1}garbage\r\n<... poll resumed>) = 1\nclose(4) = 0\n";
        let items = items(log);
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
        let items: Vec<Item> = Records::new(log.as_bytes(), Some(42)).collect();
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
        assert_eq!(items(&log).len(), 2);
    }
}
