//! Replaying strace records through the model of the kernel path (`auditor_common`) into a
//! tally, and keeping account of what could not be read: lines that are not strace's,
//! calls whose arguments strace did not print in full. Reading the files is
//! [`files`]'s; the places quoted in the notes are [`quoted`]'s.

mod files;
mod quoted;

use std::{
    collections::{BTreeMap, HashMap},
    io::Read,
    time::Duration,
};

use auditor_common::{
    Evaluation, Site, Syscall, addfd,
    catalogue::{self, Counters, Decided, Recorder, Unit},
    chmod, close, dup, epoll,
    fd::{self, Unseen},
    open, poll, select,
    syscalls::{Family, PerSyscall},
};

use super::{
    decode,
    decode::OpenArgs,
    records::{Item, NoEnd, Record, Records},
};
pub use files::file_pid;
use quoted::Quoted;

use crate::{
    observation::Observation,
    stacks::Frame,
    tally::{Process, Tally},
};

/// Sites a log decides: every one but those that need the task's fd table, which a log
/// does not show.
pub fn decides(site: Site) -> bool {
    site.info().decided != Decided::TaskState
}

/// Counts from one or more strace logs.
#[derive(Default)]
pub struct Replay {
    /// The counts per thread (strace prints threads' ids) and command name, and the
    /// calls' stacks: regrouped into processes by [`Replay::tally`].
    threads: Tally,
    /// The thread that created each thread (clone with CLONE_THREAD): the probe counts per
    /// process, so a thread's counts go to its thread group.
    created_by: HashMap<u32, u32>,
    /// Calls replayed, per syscall (indexed by discriminant).
    calls: PerSyscall<u64>,
    /// Lines that could not be parsed.
    unparsed: Quoted,
    /// Calls of followed syscalls that could not be decoded.
    undecodable: Quoted,
    /// Calls with no end in the log, counted from what their start shows.
    no_end: Quoted,
    /// Files that could not be read at all, with why.
    unreadable_files: Vec<(String, String)>,
    /// The log shows stacks (`-k`): each call's counts are kept apart until its frames
    /// name the code that made it.
    stacks: bool,
    /// What the call replayed last counted, while its frames may still follow.
    last_call: Option<Counters>,
    /// The frames of that call so far.
    last_frames: Vec<Frame>,
    /// Successful `execve` calls: a live strace of a command shows that it started.
    execs: u64,
    /// Lines read as strace's (calls, their ends, signals and exits, stack frames).
    strace_lines: u64,
    /// The executable each (thread, name) exec'd.
    exes: BTreeMap<(u32, String), String>,
}

impl Replay {
    /// Replays one call of log `file`.
    fn record(&mut self, file: &str, record: &Record<&str>) {
        self.end_call();
        // clone and clone3 are in the syscall table (the probe follows the table's copy),
        // not in the log's: what a log tells of them is which threads they make.
        self.note_thread(record);
        // Not a call any measured site depends on.
        let Some(syscall) = Syscall::from_name(record.name) else {
            if record.name == "execve" && record.ret == Some(0) {
                self.execs += 1;
                // `execve("/usr/bin/ssh", [...], ...)`: the path, as strace quotes it. The
                // line names the thread as it was before; after the exec the kernel names
                // it after the path's last part, cut to 15 bytes.
                if let (Some(tid), Some(path)) =
                    (record.pid, decode::split_args(record.args).next())
                {
                    let path = path.trim_matches('"');
                    let base = path.rsplit('/').next().unwrap_or(path);
                    let mut end = base.len().min(15);
                    while !base.is_char_boundary(end) {
                        end -= 1;
                    }
                    self.exes
                        .insert((tid, base[..end].to_string()), path.to_string());
                }
            }
            return;
        };
        let (pid, comm) = (record.pid.unwrap_or(0), record.comm);
        let mut call = self.stacks.then(Counters::default);
        let recorder = match call.as_mut() {
            Some(call) => call,
            None => self.threads.row(pid, comm),
        };
        // The model of each call strace decodes; a log shows no task state.
        let decoded = match syscall.info().family {
            Family::Poll => decode::poll(record)
                .map(|(call, entries)| poll::poll(recorder, &call, || entries, &Unseen)),
            Family::Select => {
                decode::select(record).map(|call| select::select(recorder, &call, None, &Unseen))
            }
            Family::EpollWait => {
                decode::epoll_wait(record).map(|call| epoll::epoll_wait(recorder, &call))
            }
            Family::EpollCtl => {
                decode::epoll_ctl(record).map(|call| epoll::epoll_ctl(recorder, &call))
            }
            Family::Close => decode::close(record).map(|(_, ret)| {
                close::close(recorder, ret);
            }),
            Family::Chmod => decode::fchmodat_flags(record, syscall)
                .map(|flags| chmod::do_fchmodat(recorder, flags)),
            Family::Replace => decode::replace(record, syscall).map(|call| match syscall {
                Syscall::Dup2 => dup::dup2(recorder, &call, None),
                _ => dup::dup3(recorder, &call, None),
            }),
            // How FD_PREPARE() went follows from the return value; the fd.* sites need the
            // table, which a log does not show.
            Family::Open | Family::Allocate => {
                // Whether the checks before the path walk refused an open (then nothing is
                // allocated).
                let refused = match syscall.info().family {
                    Family::Open => decode::open(record, syscall).map(|call| match call {
                        OpenArgs::Open { flags, mode } => {
                            open::open(recorder, flags, mode, crate::kernel::open_flag_set())
                        }
                        OpenArgs::Openat2 { size, how } => open::openat2(
                            recorder,
                            size,
                            how.as_ref(),
                            crate::kernel::open_flag_set(),
                        ),
                    }),
                    _ => Ok(false),
                };
                let allocated = decode::allocation(record, syscall).map(|call| {
                    if call.allocates {
                        let refused = call.refused || refused.as_ref().is_ok_and(|r| *r);
                        let outcome = syscall.info().allocates.one().outcome(call.ret, refused);
                        fd::fd_prepare(recorder, syscall.info().prepares, outcome, call.ret);
                    }
                });
                refused.and(allocated)
            }
            // The growth's tests are the other task's table's, which a log does not show.
            Family::AddFd => match decode::addfd(record) {
                Some(decoded) => decoded.map(|call| addfd::notif_addfd(recorder, &call, None)),
                // Not an ADDFD: no call of the family.
                None => return,
            },
            // Not in the log (see `LOGGED`).
            Family::Lookup(_) | Family::AllocatePair | Family::Mappings | Family::CopyTable => {
                return;
            }
        };
        self.calls[syscall] += 1;
        if let Err(why) = decoded {
            // Counted where the call would be: unreadable at each site it reaches once.
            for site in catalogue::SITES {
                let once = matches!(site.unit, Unit::Call | Unit::Allocation);
                if once && decides(site.site) && site.syscalls.contains(&syscall) {
                    recorder.record(site.site, Evaluation::Undecided);
                }
            }
            let why = format!("`{}`: {why}", record.name);
            self.undecodable.add(file, record.line, why);
        }
        if let Some(call) = call {
            self.threads.row(pid, comm).merge(&call);
            self.last_call = Some(call);
        }
    }

    /// Replays a call the log shows no end of: counted from what its start shows.
    fn unanswered(&mut self, file: &str, record: &Record<&str>, why: NoEnd) {
        let undecodable = self.undecodable.count;
        self.record(file, record);
        if self.undecodable.count == undecodable && Syscall::from_name(record.name).is_some() {
            self.no_end
                .add(file, record.line, format!("`{}`: {why}", record.name));
        }
    }

    /// A frame of the last call's stack (`strace -k`).
    fn frame(&mut self, frame: &str) {
        self.stacks = true;
        if self.last_call.is_some()
            && let Some(frame) = Frame::from_strace(frame)
        {
            self.last_frames.push(frame);
        }
    }

    /// The last call's frames are over: its counts go to its stack.
    fn end_call(&mut self) {
        let frames = std::mem::take(&mut self.last_frames);
        let Some(call) = self.last_call.take() else {
            return;
        };
        if frames.is_empty() {
            return;
        }
        for (site, counts) in call.iter() {
            self.threads.add_call_stack(site, &frames, counts);
        }
    }

    /// `clone`/`clone3` with CLONE_THREAD: the new thread belongs to the caller's process.
    fn note_thread(&mut self, record: &Record<&str>) {
        let creates_thread = matches!(record.name, "clone" | "clone3")
            && decode::flags(record.args).any(|flag| flag == "CLONE_THREAD");
        if let (true, Some(parent), Some(tid)) = (creates_thread, record.pid, record.ret)
            && let Ok(tid) = u32::try_from(tid)
            && tid > 0
        {
            self.created_by.insert(tid, parent);
        }
    }

    /// The process (thread group) of thread `tid`, as far as the log shows its creation.
    fn process_of(&self, mut tid: u32) -> u32 {
        // Bounded: a log that reuses thread ids could otherwise make a cycle.
        for _ in 0..self.created_by.len() {
            match self.created_by.get(&tid) {
                Some(&parent) => tid = parent,
                None => break,
            }
        }
        tid
    }

    fn unparsed(&mut self, file: &str, line: u64, why: String) {
        self.unparsed.add(file, line, why);
    }

    /// Replays a log; `file` names it in the notes, `file_pid` is the pid of a `-ff` file.
    pub fn ingest(&mut self, file: &str, reader: impl Read, file_pid: Option<u32>) {
        Records::new(file_pid).read(reader, &mut |item| self.item(file, item));
        self.end_call();
    }

    fn item(&mut self, file: &str, item: Item<&str>) {
        if !matches!(item, Item::Unparsed { .. }) {
            self.strace_lines += 1;
        }
        if let Item::Frame { frame, .. } = item {
            return self.frame(frame);
        }
        // Frames follow their call at once: anything else in between ends its stack.
        self.end_call();
        match item {
            Item::Record(record) => self.record(file, &record),
            Item::Unanswered { record, why } => self.unanswered(file, &record, why),
            Item::Event { .. } | Item::Frame { .. } => {}
            Item::Unparsed { line, why } => self.unparsed(file, line, why),
            // Only chunks yield these; `ingest_file` stitches them.
            Item::Resumed(record) => {
                let why = format!("`{}` resumed without its start", record.name);
                self.unparsed(file, record.line, why);
            }
        }
    }

    /// Successful `execve` calls replayed.
    pub fn execs(&self) -> u64 {
        self.execs
    }

    /// Lines read as strace's: none means the input held no strace output at all.
    pub fn strace_lines(&self) -> u64 {
        self.strace_lines
    }

    /// Why nothing of the input could be used (no strace line in it), in one line: each
    /// file that could not be read and why, and how many lines were not strace's.
    pub fn nothing_read(&self) -> Option<String> {
        if self.strace_lines > 0 {
            return None;
        }
        let mut why: Vec<String> = self
            .unreadable_files
            .iter()
            .map(|(file, why)| format!("{file} cannot be read ({why})"))
            .collect();
        if let Some((file, line, reason)) = self.unparsed.first() {
            why.push(format!(
                "{} not strace output (the first, {file}:{line}: {reason})",
                crate::observation::counted(self.unparsed.count, "line is", "lines are")
            ));
        }
        if why.is_empty() {
            why.push("the input is empty".to_string());
        }
        Some(format!("no strace output to count: {}", why.join("; ")))
    }

    /// Lines or calls that could not be read.
    pub fn unreadable(&self) -> u64 {
        self.unparsed.count + self.undecodable.count + self.unreadable_files.len() as u64
    }

    /// The counts per process, as the probe keys them: a thread's go to its process,
    /// under the process's name as `ps` shows it (its leader's) when the log gives the
    /// leader one name; only the sites a log decides (the model also records, as
    /// unreadable, the sites it had no task state for).
    pub fn tally(&self) -> Tally {
        let mut leader_names: HashMap<u32, Option<&str>> = HashMap::new();
        for thread in self.threads.processes() {
            if self.process_of(thread.pid) == thread.pid {
                leader_names
                    .entry(thread.pid)
                    .and_modify(|name| {
                        if *name != Some(thread.comm.as_str()) {
                            *name = None;
                        }
                    })
                    .or_insert(Some(&thread.comm));
            }
        }
        let process = |thread: &Process| {
            let pid = self.process_of(thread.pid);
            let leader = leader_names.get(&pid).copied().flatten();
            Process {
                pid,
                comm: leader.unwrap_or(&thread.comm).to_string(),
            }
        };
        let mut tally = self.threads.regrouped(process, decides);
        for ((tid, comm), exe) in &self.exes {
            let process = Process {
                pid: self.process_of(*tid),
                comm: comm.clone(),
            };
            tally.set_exe(process, exe);
        }
        for syscall in Syscall::ALL {
            tally.add_calls(syscall, self.calls[syscall]);
        }
        tally
    }

    /// What a replay of `target` (the logs, or a live strace of it) observed, in
    /// `elapsed`.
    pub fn observe(&self, target: String, elapsed: Duration) -> Observation {
        Observation {
            source: "strace",
            target,
            elapsed,
            tally: self.tally(),
            notes: self.notes(),
            measured: decides,
        }
    }

    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .unreadable_files
            .iter()
            .map(|(file, why)| {
                format!("{file} could not be read ({why}): nothing of it is counted.")
            })
            .collect();
        // A site a log decides for some of its syscalls only.
        for site in catalogue::SITES.iter().filter(|site| decides(site.site)) {
            let unlogged: Vec<&str> = site
                .syscalls
                .iter()
                .filter(|syscall| !syscall.info().logged)
                .map(|syscall| syscall.name())
                .collect();
            if !unlogged.is_empty() {
                notes.push(format!(
                    "{}: the calls of {} are not counted (strace 6.1 does not know them; the \
                     probe counts them).",
                    site.id,
                    unlogged.join(", ")
                ));
            }
        }
        if self.unparsed.count > 0 {
            notes.push(self.unparsed.note(
                "line is not strace output and was skipped",
                "lines are not strace output and were skipped",
            ));
        }
        if self.undecodable.count > 0 {
            notes.push(self.undecodable.note(
                "call could not be decoded and is counted as unreadable at each site it reaches \
                 once per call (its per-entry and per-word sites are not counted)",
                "calls could not be decoded and are counted as unreadable at each site they \
                 reach once per call (their per-entry and per-word sites are not counted)",
            ));
        }
        if self.no_end.count > 0 {
            notes.push(self.no_end.note(
                "call has no end in the log and is counted as waiting in the kernel: what only \
                 its return shows (revents, ready fds) is unreadable",
                "calls have no end in the log and are counted as waiting in the kernel: what \
                 only their return shows (revents, ready fds) is unreadable",
            ));
        }
        notes
    }
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
            notes.contains("1 call could not be decoded")
                && notes.contains("bad.log:3: `poll`: it has no nfds argument"),
            "{notes}"
        );
        // Counted where it would be: unreadable once per call.
        assert_eq!(
            replay.tally().site_total(Site::PollNfdsOverRlimit),
            Counts::new(0, 1, 1)
        );
        // The cut array: its 40 entries count as unreadable.
        assert_eq!(
            replay.tally().site_total(Site::PollFdNegative),
            Counts::new(0, 0, 40)
        );
    }

    /// With stacks (`strace -k`), the rare arm is traced to the code that made the calls:
    /// the first frame outside the C library and the loader.
    #[test]
    fn stacks_name_the_code_that_took_the_rare_arm() {
        let log = "100<app> execve(\"/usr/bin/app\", [\"app\"], 0x7ffd2f1e7a08 /* 20 vars */) = 0
 > /usr/lib/x86_64-linux-gnu/libc.so.6(execve+0xb) [0xd2ecb]
100<app> poll([{fd=-1}, {fd=4, events=POLLIN}], 2, 0) = 1 ([{fd=4, revents=POLLIN}])
 > /usr/lib/x86_64-linux-gnu/libc.so.6(poll+0x10) [0xfc230]
 > /usr/lib/x86_64-linux-gnu/libglib-2.0.so.0(g_main_context_poll+0x2b1) [0x56f21]
 > /usr/bin/app(main+0x20) [0x1120]
100<app> poll([{fd=4, events=POLLIN}], 1, 0) = 1 ([{fd=4, revents=POLLIN}])
 > /usr/lib/x86_64-linux-gnu/libc.so.6(poll+0x10) [0xfc230]
 > /usr/bin/app(tick+0x8) [0x1180]
101<app> poll([{fd=-1}, {fd=-1}], 2, 0) = 0 (Timeout)
 > /usr/lib/x86_64-linux-gnu/libc.so.6(poll+0x10) [0xfc230]
 > /usr/bin/app(tick+0x8) [0x1180]
101<app> close(3)                       = 0
 > /usr/bin/app(cleanup) [0x1190]
";
        let mut replay = Replay::default();
        replay.ingest("stacks.log", log.as_bytes(), None);
        assert_eq!(replay.unreadable(), 0, "{:?}", replay.notes());
        let tally = replay.tally();
        let callers: Vec<(Site, &str, Counts)> = tally
            .callers()
            .filter(|(site, _, _)| matches!(site, Site::PollFdNegative | Site::CloseOk))
            .map(|(site, caller, counts)| (site, caller, *counts))
            .collect();
        assert_eq!(
            callers,
            [
                (Site::PollFdNegative, "app(tick)", Counts::new(2, 1, 0)),
                (
                    Site::PollFdNegative,
                    "libglib-2.0.so.0(g_main_context_poll)",
                    Counts::new(1, 1, 0)
                ),
                (Site::CloseOk, "app(cleanup)", Counts::new(1, 0, 0)),
            ]
        );
        let report = crate::report::Report::of(&replay.observe(String::new(), Default::default()));
        let note = report
            .notes
            .iter()
            .find(|n| n.starts_with("poll.fd_negative"));
        assert_eq!(
            note.map(String::as_str),
            Some(
                "poll.fd_negative: its rare direction, taken (against `unlikely`), came from \
                 app (pid 101): 2, app (pid 100): 1. Called from app(tick): 2, \
                 libglib-2.0.so.0(g_main_context_poll): 1 (3 of 3 with a stack)."
            )
        );
    }

    /// strace names threads by their own ids; the probe counts per process. Real lines
    /// (strace 6.1, -f -Y -k) of python starting two threads (one clone3 interrupted) and
    /// forking once; stack frames (-k) count as nothing.
    #[test]
    fn threads_count_for_their_process_and_forks_for_their_own() {
        let log = "20971<python3> clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM|CLONE_SETTLS|CLONE_PARENT_SETTID|CLONE_CHILD_CLEARTID, child_tid=0x7f1f92d1b990, parent_tid=0x7f1f92d1b990, exit_signal=0, stack=0x7f1f9251b000, stack_size=0x7fff80, tls=0x7f1f92d1b6c0} => {parent_tid=[21012<python3>]}, 88) = 21012<python3>
21012<python3> close(3)                 = 0
21012<python3> clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM|CLONE_SETTLS|CLONE_PARENT_SETTID|CLONE_CHILD_CLEARTID, child_tid=0x7f1f9251a990, parent_tid=0x7f1f9251a990, exit_signal=0, stack=0x7f1f91d1a000, stack_size=0x7fff80, tls=0x7f1f9251a6c0} <unfinished ...>
20971<python3> close(4)                 = 0
21012<python3> <... clone3 resumed> => {parent_tid=[21014<python3>]}, 88) = 21014<python3>
21014<python3> poll([{fd=-1}], 1, 0)    = 0 (Timeout)
 > /usr/lib/x86_64-linux-gnu/libc.so.6(poll+0x10) [0xfc230]
 > /root/.pyenv/versions/3.11.7/lib/python3.11/lib-dynload/select.cpython-311-x86_64-linux-gnu.so(select_poll_poll+0x10e) [0x2a5e]
20971<python3> clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7fce1048da10) = 21013<python3>
21013<python3> close(3)                 = 0
";
        let mut replay = Replay::default();
        replay.ingest("threads.log", log.as_bytes(), None);
        assert_eq!(replay.unreadable(), 0, "{:?}", replay.notes());
        let rows: Vec<(u32, String, Site, Counts)> = replay
            .tally()
            .per_process()
            .map(|(p, site, counts)| (p.pid, p.comm.clone(), site, *counts))
            .collect();
        let python = |pid: u32, site, counts| (pid, "python3".to_string(), site, counts);
        assert_eq!(
            rows,
            [
                python(20971, Site::PollNfdsOverRlimit, Counts::new(0, 1, 0)),
                python(20971, Site::PollEntriesOnHeap, Counts::new(0, 1, 0)),
                python(20971, Site::PollZeroTimeout, Counts::new(1, 0, 0)),
                python(20971, Site::PollFdNegative, Counts::new(1, 0, 0)),
                python(20971, Site::CloseOk, Counts::new(2, 0, 0)),
                python(20971, Site::CloseFdNotOpen, Counts::new(0, 2, 0)),
                python(21013, Site::CloseOk, Counts::new(1, 0, 0)),
                python(21013, Site::CloseFdNotOpen, Counts::new(0, 1, 0)),
            ]
        );
    }
}

/// What a log shows of calls that never ended, and of calls it cannot decode.
#[cfg(test)]
mod no_end {
    use super::*;
    use auditor_common::Counts;

    fn replayed(log: &str) -> Replay {
        let mut replay = Replay::default();
        replay.ingest("t.log", log.as_bytes(), None);
        replay
    }

    /// A task killed inside its waits (chromium at exit): a poll's entries were printed at
    /// entry and scanned before it slept, so they count; what only the return shows
    /// (revents, an epoll_wait's arguments) is unreadable, and each such call is named.
    #[test]
    fn waits_a_task_was_killed_in_count_what_their_start_shows() {
        let log = "7 poll([{fd=-1}, {fd=3, events=POLLIN}], 2, -1 <unfinished ...>\n\
                   8 epoll_wait(5,  <unfinished ...>\n\
                   9 ppoll([{fd=4, events=POLLIN}], 1, NULL, NULL, 8 <unfinished ...>\n\
                   7 <... poll resumed> <unfinished ...>) = ?\n\
                   8 +++ killed by SIGKILL +++\n\
                   9 +++ killed by SIGKILL +++\n\
                   10 poll([{fd=-1}], 1, 0 <unfinished ...>\n\
                   10 +++ killed by SIGKILL +++\n";
        let replay = replayed(log);
        let tally = replay.tally();
        // The zero-timeout poll is not decoded: its entries are not counted.
        assert_eq!(tally.site_total(Site::PollFdNegative), Counts::new(1, 2, 0));
        assert_eq!(tally.site_total(Site::PollFdNotOpen), Counts::new(0, 0, 2));
        assert_eq!(
            tally.site_total(Site::PollNfdsOverRlimit),
            Counts::new(0, 2, 1)
        );
        assert_eq!(tally.site_total(Site::EpollBadArgs), Counts::new(0, 0, 1));
        assert_eq!(
            tally.site_total(Site::EpollZeroTimeout),
            Counts::new(0, 0, 1)
        );
        let notes = replay.notes().join("\n");
        assert!(
            notes.contains(
                "2 calls have no end in the log and are counted as waiting in the kernel"
            ) && notes.contains("t.log:1: `poll`: its task exited inside it")
                && notes.contains("t.log:3: `ppoll`: its task exited inside it"),
            "{notes}"
        );
        assert!(
            notes.contains("t.log:2: `epoll_wait`: it did not return in the log, and strace prints its arguments after the epoll fd only at its return")
                && notes.contains("t.log:7: `poll`: it did not return in the log, and its timeout let it not wait"),
            "{notes}"
        );
        assert_eq!(replay.unreadable(), 2);
    }

    /// A call whose numbers contradict each other, or do not fit, is named with why.
    #[test]
    fn undecodable_calls_are_named_with_their_reason() {
        let replay = replayed(
            "poll([{fd=3, events=POLLIN}], 2, 0) = 0 (Timeout)\n\
             poll([{fd=3, events=POLLIN}], 99999999999, 0) = -1 EINVAL (Invalid argument)\n\
             select(5, [3], NULL, NULL, NULL) = 1 (in [3])\n",
        );
        let notes = replay.notes().join("\n");
        assert!(
            notes.contains("t.log:1: `poll`: its nfds is 2 but 1 pollfd entries are printed")
                && notes
                    .contains("t.log:2: `poll`: its nfds `99999999999` is not a number in range"),
            "{notes}"
        );
        assert_eq!(replay.unreadable(), 2);
        assert_eq!(
            replay.tally().site_total(Site::PollZeroTimeout),
            Counts::new(0, 0, 2)
        );
    }

    /// Logs joined with `cat`: a call the first left unfinished never resumes in the
    /// second, which gives its pid's lines again; the joined log reads as its parts do.
    #[test]
    fn joined_logs_read_as_their_parts() {
        let log = "100 close(3) = 0\n\
                   100 poll([{fd=-1}, {fd=4, events=POLLIN}], 2, 0) = 0 (Timeout)\n\
                   101 poll([{fd=5, events=POLLIN}], 1, -1 <unfinished ...>\n\
                   100 poll([{fd=-1}], 1, 50 <unfinished ...>\n";
        let single = replayed(log);
        let joined = replayed(&log.repeat(2));
        assert_eq!(joined.unreadable(), 0, "{:?}", joined.notes());
        for site in Site::ALL {
            let mut twice = single.tally().site_total(site);
            twice.add(&single.tally().site_total(site));
            assert_eq!(joined.tally().site_total(site), twice, "{site:?}");
        }
        let notes = joined.notes().join("\n");
        assert!(
            notes.contains("t.log:4: `poll`: it never resumed (line 5 is its thread's next call)"),
            "{notes}"
        );
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

    const FIXTURE: &str = include_str!("../../../../../fixtures/python-asyncio.log");
}
