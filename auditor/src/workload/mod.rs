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
//! - `close:OK:BAD`: OK closes of fds opened for it, BAD closes of fd -1 (EBADF).
//! - `open:CALLS`, `dup:CALLS`, `dupfd:CALLS:START`: allocations (openat of /dev/null, dup
//!   of fd 3, fcntl F_DUPFD from START) whose fds stay open.
//! - `open-enoent:CALLS`: opens of a missing path (the fd is allocated, then released).
//! - `open-emfile:CALLS`: opens with RLIMIT_NOFILE lowered to the first free fd (EMFILE).
//! - `close-fd:FD`: close of one fd the workload opened.
//! - `dup2:CALLS:SAME`: dup2 calls, SAME of them of fd 3 onto itself, the others of fd 3
//!   onto fd 4 (which stays open: the fd table does not change).
//! - `dup3:CALLS:SAME[:BADFLAGS]`: dup3 calls, SAME of them of fd 3 onto itself (EINVAL),
//!   BADFLAGS of them of fd 3 onto itself with a flag dup3 refuses first (EINVAL), the
//!   others of fd 3 onto fd 4.
//! - `accept-eagain:CALLS`: a listening socket on 127.0.0.1, then accepts with nothing to
//!   accept (EAGAIN, after the fd was allocated).
//! - `pipe:CALLS`, `socketpair:CALLS`: pipe2 and socketpair calls, two fds each, kept open.
//! - `fork`: the steps after it run in a child process, which the parent waits for.
//! - `thread`: the steps after it run in a new thread, which the main thread joins.
//! - `leader-exit`: the steps after it run in a new thread, and the main thread exits by
//!   itself (the process lives on in that thread, and ends when it does). The fd table is
//!   shared until the main thread is gone: a `wait` right after it makes that certain.
//! - `name:NAME`: the calling thread names itself NAME (prctl PR_SET_NAME, 15 bytes).
//! - `wait`: read a line from stdin first (lets a test attach to a running process).
//! - `sleep:MS`: sleep MS milliseconds.
//!
//! The fds it uses are laid out by [`Layout`], the same for every run of the same steps.

mod expected;
mod run;

use std::{fmt, str::FromStr};

use auditor_common::Syscall;
use thiserror::Error;

pub use expected::{Expected, expected, expected_on_table};
pub use run::{RunError, run};

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

/// `poll:CALLS:NFDS:NEGATIVE[:NOTOPEN[:TIMEOUT_MS]]` (or `ppoll:…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollStep {
    pub syscall: Syscall,
    pub calls: u32,
    pub nfds: u32,
    pub negative: u32,
    pub not_open: u32,
    pub timeout_ms: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Select {
        syscall: Syscall,
        calls: u32,
        n: i32,
        timeout_ms: i32,
        /// The read set holds fds 3..min(n, fds).
        fds: i32,
    },
    /// Selects with `n` whose read set holds only fd n - 1.
    SelectSparse {
        calls: u32,
        n: i32,
    },
    SelectFault {
        calls: u32,
        n: i32,
    },
    SelectBadFd {
        calls: u32,
    },
    Poll(PollStep),
    PollFault {
        calls: u32,
        nfds: u32,
    },
    PollOverLimit {
        calls: u32,
    },
    Epoll {
        syscall: Syscall,
        calls: u32,
        maxevents: i32,
        timeout_ms: i32,
    },
    EpollBadFd {
        calls: u32,
    },
    Close {
        ok: u32,
        bad: u32,
    },
    /// Opens of /dev/null, kept open.
    Open {
        calls: u32,
    },
    /// Opens of a path that does not exist (ENOENT after the fd was allocated).
    OpenMissing {
        calls: u32,
    },
    /// Opens with RLIMIT_NOFILE lowered to the first free fd (EMFILE), then restored.
    OpenOverLimit {
        calls: u32,
    },
    /// dup of fd 3, kept open.
    Dup {
        calls: u32,
    },
    /// fcntl(3, F_DUPFD, start), kept open.
    DupFd {
        calls: u32,
        start: u32,
    },
    /// close of one fd the workload opened.
    CloseFd {
        fd: u32,
    },
    /// dup2 calls, `same` of them with newfd == oldfd.
    Dup2 {
        calls: u32,
        same: u32,
    },
    /// dup3 calls, `same` of them with newfd == oldfd, `bad_flags` of them refused for
    /// their flags first.
    Dup3 {
        calls: u32,
        same: u32,
        bad_flags: u32,
    },
    /// A non-blocking listening socket on 127.0.0.1, then accepts with no connection
    /// pending (EAGAIN: the fd is allocated, then released).
    AcceptNone {
        calls: u32,
    },
    /// pipe2 calls (two fds each), kept open.
    Pipe {
        calls: u32,
    },
    /// socketpair calls (two fds each), kept open.
    SocketPair {
        calls: u32,
    },
    Fork,
    Thread,
    LeaderExit,
    /// The thread's new name, NUL-padded (the kernel keeps 15 bytes).
    Name {
        name: [u8; 16],
    },
    Wait,
    Sleep {
        millis: u64,
    },
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("bad workload step `{step}`: {why} (see `auditor-workload` steps in the README)")]
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
        let step = match kind {
            "select" | "pselect6" => {
                f.at_most(4)?;
                let n: i32 = f.number(1, "N", None)?;
                Step::Select {
                    syscall: if kind == "select" {
                        Syscall::Select
                    } else {
                        Syscall::Pselect6
                    },
                    calls: f.number(0, "CALLS", None)?,
                    n,
                    timeout_ms: f.number(2, "TIMEOUT_MS", Some(0))?,
                    fds: f.number(3, "FDS", Some(n))?,
                }
            }
            "select-sparse" => {
                f.at_most(2)?;
                let n: i32 = f.number(1, "N", None)?;
                if n < 4 {
                    return Err(f.error("N must be at least 4 (fd N - 1 is one of the workload's)"));
                }
                Step::SelectSparse {
                    calls: f.number(0, "CALLS", None)?,
                    n,
                }
            }
            "select-efault" => {
                f.at_most(2)?;
                Step::SelectFault {
                    calls: f.number(0, "CALLS", None)?,
                    n: f.number(1, "N", None)?,
                }
            }
            "select-ebadf" => {
                f.at_most(1)?;
                Step::SelectBadFd {
                    calls: f.number(0, "CALLS", None)?,
                }
            }
            "poll" | "ppoll" => {
                f.at_most(5)?;
                let nfds: u32 = f.number(1, "NFDS", None)?;
                let negative: u32 = f.number(2, "NEGATIVE", None)?;
                let not_open: u32 = f.number(3, "NOTOPEN", Some(0))?;
                if u64::from(negative) + u64::from(not_open) > u64::from(nfds) {
                    return Err(f.error("NEGATIVE and NOTOPEN add up to more than NFDS"));
                }
                Step::Poll(PollStep {
                    syscall: if kind == "poll" {
                        Syscall::Poll
                    } else {
                        Syscall::Ppoll
                    },
                    calls: f.number(0, "CALLS", None)?,
                    nfds,
                    negative,
                    not_open,
                    timeout_ms: f.number(4, "TIMEOUT_MS", Some(0))?,
                })
            }
            "poll-efault" => {
                f.at_most(2)?;
                Step::PollFault {
                    calls: f.number(0, "CALLS", None)?,
                    nfds: f.number(1, "NFDS", None)?,
                }
            }
            "poll-einval" => {
                f.at_most(1)?;
                Step::PollOverLimit {
                    calls: f.number(0, "CALLS", None)?,
                }
            }
            "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => {
                f.at_most(3)?;
                Step::Epoll {
                    syscall: match kind {
                        "epoll_wait" => Syscall::EpollWait,
                        "epoll_pwait" => Syscall::EpollPwait,
                        _ => Syscall::EpollPwait2,
                    },
                    calls: f.number(0, "CALLS", None)?,
                    maxevents: f.number(1, "MAXEVENTS", None)?,
                    timeout_ms: f.number(2, "TIMEOUT_MS", Some(0))?,
                }
            }
            "epoll-ebadf" => {
                f.at_most(1)?;
                Step::EpollBadFd {
                    calls: f.number(0, "CALLS", None)?,
                }
            }
            "close" => {
                f.at_most(2)?;
                Step::Close {
                    ok: f.number(0, "OK", None)?,
                    bad: f.number(1, "BAD", None)?,
                }
            }
            "open" | "open-enoent" | "open-emfile" | "dup" => {
                f.at_most(1)?;
                let calls = f.number(0, "CALLS", None)?;
                match kind {
                    "open" => Step::Open { calls },
                    "dup" => Step::Dup { calls },
                    "open-emfile" => Step::OpenOverLimit { calls },
                    _ => Step::OpenMissing { calls },
                }
            }
            "dup2" | "dup3" => {
                f.at_most(if kind == "dup2" { 2 } else { 3 })?;
                let calls: u32 = f.number(0, "CALLS", None)?;
                let same: u32 = f.number(1, "SAME", None)?;
                let bad_flags: u32 = f.number(2, "BADFLAGS", Some(0))?;
                if u64::from(same) + u64::from(bad_flags) > u64::from(calls) {
                    return Err(f.error("SAME and BADFLAGS add up to more than CALLS"));
                }
                if kind == "dup2" {
                    Step::Dup2 { calls, same }
                } else {
                    Step::Dup3 {
                        calls,
                        same,
                        bad_flags,
                    }
                }
            }
            "dupfd" => {
                f.at_most(2)?;
                Step::DupFd {
                    calls: f.number(0, "CALLS", None)?,
                    start: f.number(1, "START", None)?,
                }
            }
            "accept-eagain" | "pipe" | "socketpair" => {
                f.at_most(1)?;
                let calls = f.number(0, "CALLS", None)?;
                match kind {
                    "pipe" => Step::Pipe { calls },
                    "socketpair" => Step::SocketPair { calls },
                    _ => Step::AcceptNone { calls },
                }
            }
            "close-fd" => {
                f.at_most(1)?;
                Step::CloseFd {
                    fd: f.number(0, "FD", None)?,
                }
            }
            "sleep" => {
                f.at_most(1)?;
                Step::Sleep {
                    millis: f.number(0, "MS", None)?,
                }
            }
            "fork" | "thread" | "leader-exit" | "wait" => {
                f.at_most(0)?;
                match kind {
                    "fork" => Step::Fork,
                    "thread" => Step::Thread,
                    "leader-exit" => Step::LeaderExit,
                    _ => Step::Wait,
                }
            }
            "name" => {
                f.at_most(1)?;
                let given = f.fields.first().ok_or_else(|| f.error("NAME is missing"))?;
                if given.is_empty() || given.len() > 15 || given.contains('\0') {
                    return Err(f.error("NAME must be 1 to 15 bytes"));
                }
                let mut name = [0u8; 16];
                name[..given.len()].copy_from_slice(given.as_bytes());
                Step::Name { name }
            }
            _ => return Err(f.error("unknown step")),
        };
        Ok(step)
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Optional fields are written only when they differ from their default.
        let timeout = |ms: i32| {
            if ms == 0 {
                String::new()
            } else {
                format!(":{ms}")
            }
        };
        match *self {
            Step::Select {
                syscall,
                calls,
                n,
                timeout_ms,
                fds,
            } => {
                write!(f, "{}:{calls}:{n}", syscall.name())?;
                if fds != n {
                    write!(f, ":{timeout_ms}:{fds}")
                } else {
                    f.write_str(&timeout(timeout_ms))
                }
            }
            Step::SelectSparse { calls, n } => write!(f, "select-sparse:{calls}:{n}"),
            Step::SelectFault { calls, n } => write!(f, "select-efault:{calls}:{n}"),
            Step::SelectBadFd { calls } => write!(f, "select-ebadf:{calls}"),
            Step::Poll(poll) => {
                let PollStep {
                    calls,
                    nfds,
                    negative,
                    not_open,
                    timeout_ms,
                    ..
                } = poll;
                write!(f, "{}:{calls}:{nfds}:{negative}", poll.syscall.name())?;
                if not_open != 0 || timeout_ms != 0 {
                    write!(f, ":{not_open}{}", timeout(timeout_ms))?;
                }
                Ok(())
            }
            Step::PollFault { calls, nfds } => write!(f, "poll-efault:{calls}:{nfds}"),
            Step::PollOverLimit { calls } => write!(f, "poll-einval:{calls}"),
            Step::Epoll {
                syscall,
                calls,
                maxevents,
                timeout_ms,
            } => {
                write!(
                    f,
                    "{}:{calls}:{maxevents}{}",
                    syscall.name(),
                    timeout(timeout_ms)
                )
            }
            Step::EpollBadFd { calls } => write!(f, "epoll-ebadf:{calls}"),
            Step::Close { ok, bad } => write!(f, "close:{ok}:{bad}"),
            Step::Open { calls } => write!(f, "open:{calls}"),
            Step::OpenMissing { calls } => write!(f, "open-enoent:{calls}"),
            Step::OpenOverLimit { calls } => write!(f, "open-emfile:{calls}"),
            Step::Dup { calls } => write!(f, "dup:{calls}"),
            Step::DupFd { calls, start } => write!(f, "dupfd:{calls}:{start}"),
            Step::CloseFd { fd } => write!(f, "close-fd:{fd}"),
            Step::Dup2 { calls, same } => write!(f, "dup2:{calls}:{same}"),
            Step::Dup3 {
                calls,
                same,
                bad_flags,
            } => write!(f, "dup3:{calls}:{same}:{bad_flags}"),
            Step::AcceptNone { calls } => write!(f, "accept-eagain:{calls}"),
            Step::Pipe { calls } => write!(f, "pipe:{calls}"),
            Step::SocketPair { calls } => write!(f, "socketpair:{calls}"),
            Step::Fork => f.write_str("fork"),
            Step::Thread => f.write_str("thread"),
            Step::LeaderExit => f.write_str("leader-exit"),
            Step::Name { name } => {
                let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                write!(f, "name:{}", String::from_utf8_lossy(&name[..end]))
            }
            Step::Wait => f.write_str("wait"),
            Step::Sleep { millis } => write!(f, "sleep:{millis}"),
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
        let needed = steps.iter().map(|step| match *step {
            // A select names fds 3..min(n, fds).
            Step::Select { n, fds, .. } => n.min(fds),
            Step::SelectSparse { n, .. } => n,
            _ => 0,
        });
        Layout {
            // Poll entries cycle through at least 62 fds.
            highest_pool_fd: needed.max().unwrap_or(0).max(64),
            epoll: steps.iter().any(|s| matches!(s, Step::Epoll { .. })),
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
                    epoll_wait:2:8 epoll_pwait:1:0:-1 epoll_pwait2:3:4:10 epoll-ebadf:1 \
                    close:3:1 open:2 open-enoent:1 open-emfile:2 accept-eagain:2 pipe:2 socketpair:1 dup:3 dupfd:2:100 close-fd:70 dup2:3:1 dup3:4:1:2 fork thread wait \
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
