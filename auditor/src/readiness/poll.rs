//! poll and ppoll (fs/select.c): `do_sys_poll` → `do_poll` → `do_pollfd`.

use auditor_common::{
    Evaluation, Reached, Site,
    poll::{self, PollFd},
    prelude::{Prelude, Timeout},
};

use super::{
    Decided, Hint, Recorder, SiteInfo, Unit, branch,
    fd::{self, Task},
    unlikely, written, written_negated,
};

const SYSCALLS: &[&str] = &["poll", "ppoll"];

pub const NFDS_OVER_RLIMIT: SiteInfo = SiteInfo {
    site: Site::PollNfdsOverRlimit,
    id: "poll.nfds_over_rlimit",
    function: "do_sys_poll",
    file: "fs/select.c",
    condition: "nfds > RLIMIT_NOFILE (-> -EINVAL)",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::Call,
    syscalls: SYSCALLS,
    source: &[written("nfds > rlimit(RLIMIT_NOFILE)")],
    decided: Decided::Exit,
};

pub const ENTRIES_ON_HEAP: SiteInfo = SiteInfo {
    site: Site::PollEntriesOnHeap,
    id: "poll.entries_on_heap",
    function: "do_sys_poll",
    file: "fs/select.c",
    condition: "nfds > N_STACK_PPS = 30 (chunks of <= 510 from kmalloc)",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::Call,
    syscalls: SYSCALLS,
    source: &[
        written_negated("walk->len >= todo"),
        written_negated("if (!todo)"),
    ],
    decided: Decided::Exit,
};

/// The same test of the end time as do_select's.
pub const ZERO_TIMEOUT: SiteInfo = SiteInfo {
    site: Site::PollZeroTimeout,
    id: "poll.zero_timeout",
    function: "do_poll",
    syscalls: SYSCALLS,
    ..super::select::ZERO_TIMEOUT
};

pub const FD_NEGATIVE: SiteInfo = SiteInfo {
    site: Site::PollFdNegative,
    id: "poll.fd_negative",
    function: "do_pollfd",
    file: "fs/select.c",
    condition: "pollfd.fd < 0 (entry ignored)",
    hint: Hint::Unlikely,
    hint_since: "6.16",
    unit: Unit::PollfdEntry,
    syscalls: SYSCALLS,
    source: &[written("fd < 0"), written_negated("fd >= 0")],
    decided: Decided::Exit,
};

pub const FD_NOT_OPEN: SiteInfo = SiteInfo {
    site: Site::PollFdNotOpen,
    id: "poll.fd_not_open",
    function: "do_pollfd",
    file: "fs/select.c",
    condition: "fd >= 0 but not open (-> POLLNVAL in revents)",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::PollfdEntry,
    syscalls: SYSCALLS,
    source: &[
        written("fd_empty(f)"),
        written("!f.file"),
        written_negated("if (f.file)"),
    ],
    decided: Decided::Exit,
};

/// One poll or ppoll call as observed.
#[derive(Clone, Debug)]
pub struct PollCall {
    pub nfds: u32,
    /// ppoll's timeout and sigmask checks (poll has none).
    pub prelude: Prelude,
    pub timeout: Timeout,
    /// The entries with their revents at exit, if they were read.
    pub entries: Option<Vec<PollFd>>,
    /// How many leading entries' revents are known (strace cuts long revents lists).
    pub revents_known: usize,
    pub ret: i64,
}

/// Runs one call through the model, recording every catalogued branch it evaluates (one
/// scan of the entries per call).
pub fn poll(recorder: &mut Recorder, task: Option<&Task>, call: &PollCall) {
    let over_rlimit = branch!(
        recorder,
        NFDS_OVER_RLIMIT,
        poll::nfds_over_rlimit_evaluation(call.prelude, call.ret)
    );
    branch!(
        recorder,
        ENTRIES_ON_HEAP,
        poll::entries_on_heap_evaluation(over_rlimit, call.nfds, call.ret)
    );
    let scan = poll::scan(over_rlimit, call.ret);
    branch!(
        recorder,
        ZERO_TIMEOUT,
        scan.evaluate(call.timeout.is_zero())
    );
    match (scan, &call.entries) {
        (Reached::No, _) => {}
        (Reached::Yes, Some(entries)) => {
            for (index, entry) in entries.iter().enumerate() {
                let negative = Evaluation::from_taken(poll::fd_negative(entry.fd));
                if unlikely!(recorder, FD_NEGATIVE, negative) == Evaluation::NotTaken {
                    fd::fget(recorder, task, 1, Some(true));
                    let not_open = if index < call.revents_known {
                        Evaluation::from_taken(poll::fd_not_open(entry.revents))
                    } else {
                        Evaluation::Undecided
                    };
                    branch!(recorder, FD_NOT_OPEN, not_open);
                }
            }
        }
        _ => {
            let entries = u64::from(call.nfds);
            unlikely!(recorder, FD_NEGATIVE, Evaluation::Undecided, entries);
            branch!(recorder, FD_NOT_OPEN, Evaluation::Undecided, entries);
            fd::fget(recorder, task, entries, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use auditor_common::{Counts, errno};

    use super::*;

    fn entry(fd: i32, revents: i16) -> PollFd {
        PollFd {
            fd,
            events: 1,
            revents,
        }
    }

    #[test]
    fn entries_count_once_per_call() {
        let mut recorder = Recorder::default();
        let entries = vec![entry(3, 1), entry(-1, 0), entry(99, poll::POLLNVAL)];
        let call = PollCall {
            nfds: 3,
            prelude: Prelude::Passes,
            timeout: Timeout::Zero,
            revents_known: entries.len(),
            entries: Some(entries),
            ret: 2,
        };
        poll(&mut recorder, Some(&Task::with_open_fds(100, 1024)), &call);
        assert_eq!(
            recorder.counts(Site::PollNfdsOverRlimit),
            Counts::new(0, 1, 0)
        );
        assert_eq!(
            recorder.counts(Site::PollEntriesOnHeap),
            Counts::new(0, 1, 0)
        );
        assert_eq!(recorder.counts(Site::PollZeroTimeout), Counts::new(1, 0, 0));
        assert_eq!(recorder.counts(Site::PollFdNegative), Counts::new(1, 2, 0));
        assert_eq!(recorder.counts(Site::PollFdNotOpen), Counts::new(1, 1, 0));
        assert_eq!(recorder.counts(Site::FgetTableShared), Counts::new(0, 2, 0));
    }

    #[test]
    fn over_the_limit_nothing_else_runs() {
        let mut recorder = Recorder::default();
        let call = PollCall {
            nfds: 5000,
            prelude: Prelude::Passes,
            timeout: Timeout::Infinite,
            entries: None,
            revents_known: 0,
            ret: -errno::EINVAL,
        };
        poll(&mut recorder, Some(&Task::with_open_fds(100, 1024)), &call);
        assert_eq!(
            recorder.counts(Site::PollNfdsOverRlimit),
            Counts::new(1, 0, 0)
        );
        for site in [
            Site::PollEntriesOnHeap,
            Site::PollZeroTimeout,
            Site::PollFdNegative,
        ] {
            assert_eq!(recorder.counts(site), Counts::ZERO);
        }
    }
}
