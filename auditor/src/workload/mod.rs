//! Workloads: small programs that issue an exactly known sequence of syscalls, and the
//! counts each site must show for them. The bundled `auditor-workload` binary runs them;
//! `auditor trace` with no target runs [`DEFAULT`]; tests use them to check exact counts.
//!
//! A workload is a list of steps. TIMEOUT_MS is 0 when left out, and negative means none
//! (NULL); fds polled or selected are open (on /dev/null, so always readable) unless a
//! step says otherwise.
//! - `select:CALLS:N[:TIMEOUT_MS[:FDS]]`, `pselect6:…`: calls with `n`; the read set holds
//!   fds 3..min(N, FDS) (FDS defaults to N; a smaller one lets N exceed the fd table).
//! - `select-sparse:CALLS:N`: selects with `n` whose read set holds only fd N - 1.
//! - `select-efault:CALLS:N`: selects whose timeout is unmapped (EFAULT, undecidable).
//! - `select-ebadf:CALLS`: selects naming an fd that is not open (EBADF).
//! - `poll:CALLS:NFDS:NEGATIVE[:NOTOPEN[:TIMEOUT_MS]]`, `ppoll:…`: calls of NFDS entries,
//!   NEGATIVE of them with fd = -1 and NOTOPEN with an fd that is not open.
//! - `poll-efault:CALLS:NFDS`: polls of an unmapped array (EFAULT: every entry undecidable).
//! - `poll-einval:CALLS`: polls of more entries than RLIMIT_NOFILE (EINVAL).
//! - `epoll_wait:CALLS:MAXEVENTS[:TIMEOUT_MS]`, `epoll_pwait:…`, `epoll_pwait2:…`: waits
//!   on an epoll fd with one ready eventfd (MAXEVENTS <= 0 is refused with EINVAL).
//! - `epoll-ebadf:CALLS`: epoll_wait on an fd that is not open (EBADF).
//! - `epoll_ctl:CALLS`: an epoll fd and CALLS eventfds added to it (EPOLL_CTL_ADD).
//! - `epoll-paths:EPOLLS`: an eventfd watched by EPOLLS epoll fds, each then added to one
//!   more (EINVAL for the 501st and later: too many wake-up paths of depth 1).
//! - `close:OK:BAD`: OK closes of fds opened for it, BAD closes of fd -1 (EBADF).
//! - `open:CALLS`, `dup:CALLS`, `dupfd:CALLS:START`: allocations (openat of /dev/null, dup
//!   of fd 3, fcntl F_DUPFD from START) whose fds stay open.
//! - `open-enoent:CALLS`: opens of a missing path (the fd is allocated, then released).
//! - `open-emfile:CALLS`: opens with RLIMIT_NOFILE lowered to the first free fd (EMFILE).
//! - `open-unmapped:CALLS`: opens of "" from pages never touched (ENOENT before the fd;
//!   the name cannot be read before the kernel's copy).
//! - `dupfd-emfile:CALLS:START`: fcntl F_DUPFD from START that fail with EMFILE (START
//!   past fs.nr_open, below RLIMIT_NOFILE).
//! - `open-badflags:CALLS`: opens with O_CREAT | O_DIRECTORY (EINVAL before the fd).
//! - `openat2:CALLS:SIZE`: openat2 of /dev/null with `usize` SIZE (below 24: EINVAL, over
//!   4096: E2BIG, else the fds stay open); `openat2-badmode:CALLS`: with a mode and no
//!   O_CREAT (EINVAL before the fd); `openat2-emptypath:CALLS`: with bit 26 (7.2's
//!   O_EMPTYPATH; 6.18 refuses it, 6.12 and older strip it), checked against the kernel.
//! - `close-fd:FD`: close of one fd the workload opened.
//! - `opath:CALLS`: an O_PATH open of /dev/null, a read of it (EBADF), an fcntl F_GETFD
//!   of it and its close, CALLS times.
//! - `read-closed:CALLS`: reads of an fd that is not open (EBADF); `read:CALLS`: reads of
//!   fd 3 (/dev/null).
//! - `dup2:CALLS:SAME`: dup2 calls, SAME of them of fd 3 onto itself, the others of fd 3
//!   onto fd 4 (which stays open: the fd table does not change).
//! - `dup3:CALLS:SAME[:BADFLAGS]`: dup3 calls, SAME of them of fd 3 onto itself (EINVAL),
//!   BADFLAGS of them of fd 3 onto itself with a flag dup3 refuses first (EINVAL), the
//!   others of fd 3 onto fd 4.
//! - `dup2-closed:CALLS`: dup2 of an fd that is not open onto fd 4 (EBADF).
//! - `dup2-emfile:CALLS:NEWFD`: dup2 of fd 3 onto NEWFD where the table cannot grow (EBADF).
//! - `accept-eagain:CALLS`: a listening socket on 127.0.0.1, then accepts with nothing to
//!   accept (EAGAIN, after the fd was allocated).
//! - `pipe:CALLS`, `socketpair:CALLS`: pipe2 and socketpair calls, two fds each, kept open.
//! - `eventfd:CALLS`, `epoll_create:CALLS`, `timerfd_create:CALLS`, `signalfd:CALLS`,
//!   `signalfd4:CALLS`, `memfd_create:CALLS`, `pidfd_open:CALLS`, `inotify_init:CALLS`,
//!   `inotify_init1:CALLS`, `fanotify_init:CALLS`, `userfaultfd:CALLS`: calls that each
//!   allocate an fd of their kind, kept open (fanotify_init and userfaultfd need root).
//! - `pidfd_getfd:CALLS`: a pidfd of the workload, then CALLS copies of fd 3 through it.
//! - `chmod:CALLS`: CALLS chmod and CALLS fchmodat calls of a missing path (ENOENT).
//! - `fchmodat2:CALLS:BAD`: fchmodat2 calls of a missing path, BAD of them with a flag it
//!   refuses (EINVAL), the others with AT_SYMLINK_NOFOLLOW (ENOENT).
//! - `fork`: the steps after it run in a child process, which the parent waits for.
//! - `thread`: the steps after it run in a new thread, which the main thread joins.
//! - `leader-exit`: the steps after it run in a new thread, and the main thread exits by
//!   itself (the process lives on in that thread, and ends when it does). The fd table is
//!   shared until the main thread is gone: a `wait` right after it makes that certain.
//! - `name:NAME`: the calling thread names itself NAME (prctl PR_SET_NAME, 15 bytes).
//! - `wait`: read a line from stdin first (lets a test attach to a running process).
//! - `sleep:MS`: sleep MS milliseconds.
//! - `unshare-files`: unshare(CLONE_FILES): a thread sharing its table takes a copy.
//!
//! The fds it uses are laid out by [`Layout`], the same for every run of the same steps.

pub mod cases;
mod drive;
mod expected;
mod run;
pub mod steps;

use std::{fmt, str::FromStr};

use thiserror::Error;

pub use drive::{expected, expected_on_table, run};
pub use expected::{DEFAULT_NR_OPEN, Expected, Prepared};
pub use run::RunError;
use steps::{
    Family, alloc::Alloc, chmod::Chmod, close::Close, dup::Dup, epoll::Epoll, poll::Poll,
    select::Select, task::Task,
};

/// The default workload: the microbenchmarks of the patches that added the two hints —
/// select of 1000 fds and poll of 1024 fds, zero timeout, through both syscalls of each
/// family — plus calls that take the rare arms: select with n = -1, and pollfd entries
/// with fd = -1 (1 in 16).
pub const DEFAULT: &str = "select:1000:1000 pselect6:1000:1000 select:10:-1 pselect6:10:-1 \
                           poll:1000:1024:0 ppoll:1000:1024:0 poll:100:1024:64";

/// Named workloads `--workload` accepts besides a step list.
pub fn named(name: &str) -> Option<&'static str> {
    match name {
        "default" => Some(DEFAULT),
        _ => None,
    }
}

/// One step of a workload: a family's (see [`steps`]), or one that says where the steps
/// after it run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Select(Select),
    Poll(Poll),
    Epoll(Epoll),
    Close(Close),
    Alloc(Alloc),
    Dup(Dup),
    Chmod(Chmod),
    Task(Task),
    /// The steps after it run in a child process, which the parent waits for.
    Fork,
    /// The steps after it run in a new thread, which the main thread joins.
    Thread,
    /// The steps after it run in a new thread, and the main thread exits by itself.
    LeaderExit,
}

/// `$body` for the family step in `$step` (bound to `$family`), None for a step that says
/// where the rest runs.
macro_rules! in_family {
    ($step:expr, $family:ident => $body:expr) => {
        match $step {
            Step::Select($family) => Some($body),
            Step::Poll($family) => Some($body),
            Step::Epoll($family) => Some($body),
            Step::Close($family) => Some($body),
            Step::Alloc($family) => Some($body),
            Step::Dup($family) => Some($body),
            Step::Chmod($family) => Some($body),
            Step::Task($family) => Some($body),
            Step::Fork | Step::Thread | Step::LeaderExit => None,
        }
    };
}
use in_family;

/// Each family's parser, as a step of the workload.
type Parser = fn(&str, &Fields) -> Result<Option<Step>, StepError>;

const FAMILIES: [Parser; 8] = [
    |kind, f| Ok(Select::parse(kind, f)?.map(Step::Select)),
    |kind, f| Ok(Poll::parse(kind, f)?.map(Step::Poll)),
    |kind, f| Ok(Epoll::parse(kind, f)?.map(Step::Epoll)),
    |kind, f| Ok(Close::parse(kind, f)?.map(Step::Close)),
    |kind, f| Ok(Alloc::parse(kind, f)?.map(Step::Alloc)),
    |kind, f| Ok(Dup::parse(kind, f)?.map(Step::Dup)),
    |kind, f| Ok(Chmod::parse(kind, f)?.map(Step::Chmod)),
    |kind, f| Ok(Task::parse(kind, f)?.map(Step::Task)),
];

#[derive(Debug, Error, PartialEq, Eq)]
#[error("bad workload step `{step}`: {why} (see the workload steps in docs/guide.md)")]
pub struct StepError {
    step: String,
    why: String,
}

/// The `:`-separated fields of one step, read in order.
struct Fields<'a> {
    step: &'a str,
    fields: Vec<&'a str>,
}

impl Fields<'_> {
    fn error(&self, why: impl Into<String>) -> StepError {
        StepError {
            step: self.step.to_string(),
            why: why.into(),
        }
    }

    fn number<T: FromStr>(
        &self,
        index: usize,
        name: &str,
        default: Option<T>,
    ) -> Result<T, StepError> {
        match (self.fields.get(index), default) {
            (Some(text), _) => text
                .parse()
                .map_err(|_| self.error(format!("{name} `{text}` is not a number in range"))),
            (None, Some(default)) => Ok(default),
            (None, None) => Err(self.error(format!("{name} is missing"))),
        }
    }

    fn at_most(&self, count: usize) -> Result<(), StepError> {
        if self.fields.len() > count {
            return Err(self.error("too many fields"));
        }
        Ok(())
    }
}

impl FromStr for Step {
    type Err = StepError;

    fn from_str(text: &str) -> Result<Step, StepError> {
        let mut parts = text.split(':');
        let kind = parts.next().unwrap_or_default();
        let f = Fields {
            step: text,
            fields: parts.collect(),
        };
        for parse in FAMILIES {
            if let Some(step) = parse(kind, &f)? {
                return Ok(step);
            }
        }
        let step = match kind {
            "fork" => Step::Fork,
            "thread" => Step::Thread,
            "leader-exit" => Step::LeaderExit,
            _ => return Err(f.error("unknown step")),
        };
        f.at_most(0)?;
        Ok(step)
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Fork => f.write_str("fork"),
            Step::Thread => f.write_str("thread"),
            Step::LeaderExit => f.write_str("leader-exit"),
            step => in_family!(step, family => family.fmt(f)).unwrap_or(Ok(())),
        }
    }
}

/// The fds a workload holds: 3..=`highest_pool_fd` on /dev/null, then, when a step waits
/// on epoll, an eventfd and an epoll fd just above them; fds 0-2 are inherited and any
/// other inherited fd is closed. The search for a free fd then starts right above them
/// (`next_fd` is `not_open()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub highest_pool_fd: i32,
    pub epoll: bool,
}

impl Layout {
    pub fn of(steps: &[Step]) -> Layout {
        let needed = steps.iter().map(|step| match step {
            Step::Select(select) => select.fds_named(),
            _ => 0,
        });
        Layout {
            // Poll entries cycle through at least 62 fds.
            highest_pool_fd: needed.max().unwrap_or(0).max(64),
            epoll: steps
                .iter()
                .any(|s| matches!(s, Step::Epoll(epoll) if epoll.needs_epoll_fd())),
        }
    }

    pub fn highest_fd(&self) -> i32 {
        self.highest_pool_fd + if self.epoll { 2 } else { 0 }
    }

    /// The first fd number that is not open.
    pub fn not_open(&self) -> i32 {
        self.highest_fd() + 1
    }

    /// `max_fds` of the fd table: it starts at 64 and grows to the smallest power of two
    /// above the highest fd.
    pub fn max_fds(&self) -> u32 {
        (self.highest_fd() as u32 + 1).next_power_of_two().max(64)
    }
}

/// Parses a workload: a name from [`named`] or steps separated by white space.
pub fn parse(spec: &str) -> Result<Vec<Step>, StepError> {
    named(spec)
        .unwrap_or(spec)
        .split_whitespace()
        .map(str::parse)
        .collect()
}

/// The command line that runs workload `spec` with the bundled `auditor-workload`, which
/// is installed beside the `auditor` binary.
pub fn command(spec: &str) -> Result<Vec<std::ffi::OsString>, crate::Error> {
    let steps = parse(spec).map_err(|e| crate::Error::Spawn {
        command: format!("workload {spec}"),
        why: e.to_string(),
    })?;
    let binary = std::env::current_exe()?.with_file_name("auditor-workload");
    if !binary.is_file() {
        return Err(crate::Error::Spawn {
            command: binary.display().to_string(),
            why: "the bundled workload binary is not beside the auditor binary (build the \
                  whole package: `cargo xtask build`)"
                .into(),
        });
    }
    let mut argv = vec![binary.into_os_string()];
    argv.extend(steps.iter().map(|s| s.to_string().into()));
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip() {
        let text = "select:3:-1 pselect6:2:9:5 select:1:5000:0:100 select-sparse:2:300 select-efault:1:4 select-ebadf:2 poll:1:8:2 \
                    ppoll:2:40:1:3 poll:1:4:0:0:-1 poll-efault:1:7 poll-einval:2 \
                    epoll_wait:2:8 epoll_pwait:1:0:-1 epoll_pwait2:3:4:10 epoll-ebadf:1 epoll_ctl:2 epoll-paths:3 \
                    close:3:1 open:2 open-enoent:1 open-emfile:2 open-badflags:1 openat2:2:24 openat2-badmode:1 accept-eagain:2 pipe:2 socketpair:1 dup:3 dupfd:2:100 dupfd-emfile:1:2000 close-fd:70 opath:2 read-closed:1 read:2 dup2:3:1 dup3:4:1:2 dup2-closed:2 dup2-emfile:1:2000000 chmod:2 fchmodat2:3:1 memfd_create:2 signalfd4:1 inotify_init:1 fork thread wait \
                    sleep:5";
        let steps = parse(text).unwrap();
        let written: Vec<String> = steps.iter().map(Step::to_string).collect();
        assert_eq!(
            written.join(" "),
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        let default: Vec<String> = parse(DEFAULT)
            .unwrap()
            .iter()
            .map(Step::to_string)
            .collect();
        assert_eq!(
            default.join(" "),
            DEFAULT.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }

    #[test]
    fn bad_steps_are_named() {
        let error = parse("poll:1:2:3").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`poll:1:2:3`: NEGATIVE and NOTOPEN"),
            "{error}"
        );
        let error = parse("select:x:1").unwrap_err();
        assert!(error.to_string().contains("CALLS `x`"), "{error}");
        assert!(
            parse("spin:1")
                .unwrap_err()
                .to_string()
                .contains("unknown step")
        );
        assert!(
            parse("fork:1")
                .unwrap_err()
                .to_string()
                .contains("too many fields")
        );
        assert!(
            parse("close:1")
                .unwrap_err()
                .to_string()
                .contains("BAD is missing")
        );
    }
}
