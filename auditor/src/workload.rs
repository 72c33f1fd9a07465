//! Workloads: small programs that issue an exactly known sequence of syscalls, and the
//! counts each site must show for them. The bundled `auditor-workload` binary runs them;
//! `auditor trace` with no target runs [`DEFAULT`]; tests use them to check exact counts.
//!
//! A workload is a list of steps (every call has a zero timeout):
//! - `select:CALLS:N`, `pselect6:CALLS:N`: calls with `n`; the read set holds fds 3..n.
//! - `poll:CALLS:NFDS:NEGATIVE`, `ppoll:CALLS:NFDS:NEGATIVE`: calls of NFDS entries, NEGATIVE
//!   of them with fd = -1.
//! - `poll-efault:CALLS:NFDS`: polls of an unmapped array (EFAULT: the probe cannot tell
//!   whether the kernel scanned, so every entry is unreadable).
//! - `select-efault:CALLS:N`: selects whose timeout is unmapped (EFAULT, undecidable).
//! - `fork`: the steps after it run in a child process, which the parent waits for.
//! - `thread`: the steps after it run in a new thread, which the main thread joins.
//! - `wait`: read a line from stdin first (lets a test attach to a running process).
//! - `sleep:MS`: sleep MS milliseconds.

use std::{fmt, os::fd::AsRawFd, str::FromStr};

use auditor_common::{Counts, Evaluation, SYSCALL_COUNT, Site, Syscall, select};
use thiserror::Error;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectSyscall {
    Select,
    Pselect6,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollSyscall {
    Poll,
    Ppoll,
}

impl SelectSyscall {
    pub const fn syscall(self) -> Syscall {
        match self {
            SelectSyscall::Select => Syscall::Select,
            SelectSyscall::Pselect6 => Syscall::Pselect6,
        }
    }
}

impl PollSyscall {
    pub const fn syscall(self) -> Syscall {
        match self {
            PollSyscall::Poll => Syscall::Poll,
            PollSyscall::Ppoll => Syscall::Ppoll,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `calls` calls with `n`; when n > 3 the read set holds fds 3..n, all open.
    Select {
        syscall: SelectSyscall,
        calls: u32,
        n: i32,
    },
    /// `calls` calls of `nfds` entries, `negative` of them with fd = -1, spread evenly; the
    /// others cycle through open fds.
    Poll {
        syscall: PollSyscall,
        calls: u32,
        nfds: u32,
        negative: u32,
    },
    /// Polls of `nfds` entries at an unmapped address.
    PollFault {
        calls: u32,
        nfds: u32,
    },
    /// Selects (the `select` syscall) with `n` and an unmapped timeout.
    SelectFault {
        calls: u32,
        n: i32,
    },
    Fork,
    Thread,
    Wait,
    /// Sleep this many milliseconds.
    Sleep {
        millis: u64,
    },
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "bad workload step `{step}`: {why} (steps: select:CALLS:N, pselect6:CALLS:N, poll:CALLS:NFDS:NEGATIVE, ppoll:CALLS:NFDS:NEGATIVE, fork)"
)]
pub struct StepError {
    step: String,
    why: String,
}

fn number<T: FromStr>(step: &str, field: &str, text: &str) -> Result<T, StepError> {
    text.parse().map_err(|_| StepError {
        step: step.to_string(),
        why: format!("{field} `{text}` is not a number in range"),
    })
}

impl FromStr for Step {
    type Err = StepError;

    fn from_str(text: &str) -> Result<Step, StepError> {
        let fields: Vec<&str> = text.split(':').collect();
        let error = |why: &str| StepError {
            step: text.to_string(),
            why: why.to_string(),
        };
        match fields.as_slice() {
            ["fork"] => Ok(Step::Fork),
            ["thread"] => Ok(Step::Thread),
            ["wait"] => Ok(Step::Wait),
            ["sleep", millis] => Ok(Step::Sleep {
                millis: number(text, "MS", millis)?,
            }),
            ["poll-efault", calls, nfds] => Ok(Step::PollFault {
                calls: number(text, "CALLS", calls)?,
                nfds: number(text, "NFDS", nfds)?,
            }),
            ["select-efault", calls, n] => Ok(Step::SelectFault {
                calls: number(text, "CALLS", calls)?,
                n: number(text, "N", n)?,
            }),
            [kind @ ("select" | "pselect6"), calls, n] => Ok(Step::Select {
                syscall: if *kind == "select" {
                    SelectSyscall::Select
                } else {
                    SelectSyscall::Pselect6
                },
                calls: number(text, "CALLS", calls)?,
                n: number(text, "N", n)?,
            }),
            [kind @ ("poll" | "ppoll"), calls, nfds, negative] => {
                let nfds: u32 = number(text, "NFDS", nfds)?;
                let negative: u32 = number(text, "NEGATIVE", negative)?;
                if negative > nfds {
                    return Err(error("NEGATIVE is larger than NFDS"));
                }
                Ok(Step::Poll {
                    syscall: if *kind == "poll" {
                        PollSyscall::Poll
                    } else {
                        PollSyscall::Ppoll
                    },
                    calls: number(text, "CALLS", calls)?,
                    nfds,
                    negative,
                })
            }
            _ => Err(error("unknown step or wrong number of fields")),
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Select { syscall, calls, n } => {
                write!(f, "{}:{calls}:{n}", syscall.syscall().name())
            }
            Step::Poll {
                syscall,
                calls,
                nfds,
                negative,
            } => {
                write!(f, "{}:{calls}:{nfds}:{negative}", syscall.syscall().name())
            }
            Step::PollFault { calls, nfds } => write!(f, "poll-efault:{calls}:{nfds}"),
            Step::SelectFault { calls, n } => write!(f, "select-efault:{calls}:{n}"),
            Step::Fork => f.write_str("fork"),
            Step::Thread => f.write_str("thread"),
            Step::Wait => f.write_str("wait"),
            Step::Sleep { millis } => write!(f, "sleep:{millis}"),
        }
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

/// Expected counts of one process of a workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// Per site, in `Site` order.
    pub sites: [Counts; auditor_common::SITE_COUNT],
    /// Calls per followed syscall, in `Syscall` order.
    pub calls: [u64; SYSCALL_COUNT],
}

impl Expected {
    pub fn site(&self, site: Site) -> Counts {
        self.sites[site as usize]
    }

    pub fn calls(&self, syscall: Syscall) -> u64 {
        self.calls[syscall as usize]
    }
}

/// What each process of the workload must count: index 0 is the process started, index i
/// the child created by the i-th `fork`.
pub fn expected(steps: &[Step]) -> Vec<Expected> {
    let mut processes = vec![Expected::default()];
    for step in steps {
        let current = processes.last_mut().expect("never empty");
        match *step {
            Step::Select { syscall, calls, n } => {
                current.calls[syscall.syscall() as usize] += u64::from(calls);
                let evaluation = Evaluation::from_taken(select::n_negative(n));
                current.sites[Site::SelectNNegative as usize].record(evaluation, u64::from(calls));
            }
            Step::Poll {
                syscall,
                calls,
                nfds,
                negative,
            } => {
                current.calls[syscall.syscall() as usize] += u64::from(calls);
                let counts = &mut current.sites[Site::PollFdNegative as usize];
                counts.record(Evaluation::Taken, u64::from(calls) * u64::from(negative));
                counts.record(
                    Evaluation::NotTaken,
                    u64::from(calls) * u64::from(nfds - negative),
                );
            }
            Step::PollFault { calls, nfds } => {
                current.calls[Syscall::Poll as usize] += u64::from(calls);
                current.sites[Site::PollFdNegative as usize]
                    .record(Evaluation::Undecided, u64::from(calls) * u64::from(nfds));
            }
            Step::SelectFault { calls, .. } => {
                current.calls[Syscall::Select as usize] += u64::from(calls);
                current.sites[Site::SelectNNegative as usize]
                    .record(Evaluation::Undecided, u64::from(calls));
            }
            Step::Fork => processes.push(Expected::default()),
            Step::Thread | Step::Wait | Step::Sleep { .. } => {}
        }
    }
    processes
}

/// Runs the steps in this process. Errors name the step whose syscall did not behave.
pub fn run(steps: &[Step]) -> anyhow::Result<()> {
    use anyhow::Context;
    raise_nofile_limit(nofile_needed(steps))?;
    let fds = FdPool::open(pool_size(steps)).context("cannot open the workload's fds")?;
    run_steps(&fds, steps)
}

fn run_steps(fds: &FdPool, steps: &[Step]) -> anyhow::Result<()> {
    use anyhow::Context;
    for (index, step) in steps.iter().enumerate() {
        match *step {
            Step::Select { syscall, calls, n } => run_select(fds, syscall, calls, n),
            Step::Poll {
                syscall,
                calls,
                nfds,
                negative,
            } => run_poll(fds, syscall, calls, nfds, negative),
            Step::PollFault { calls, nfds } => run_faults(calls, || {
                // SAFETY: the kernel checks the address and fails with EFAULT.
                unsafe { libc::syscall(libc::SYS_poll, UNMAPPED, nfds, 0) }
            }),
            Step::SelectFault { calls, n } => run_faults(calls, || {
                let null = std::ptr::null_mut::<libc::c_void>();
                // SAFETY: as above, for the timeout.
                unsafe { libc::syscall(libc::SYS_select, n, null, null, null, UNMAPPED) }
            }),
            Step::Sleep { millis } => {
                std::thread::sleep(std::time::Duration::from_millis(millis));
                Ok(())
            }
            Step::Wait => std::io::stdin()
                .read_line(&mut String::new())
                .map(drop)
                .map_err(Into::into),
            Step::Fork => return fork_rest(fds, &steps[index + 1..]),
            Step::Thread => return thread_rest(fds, &steps[index + 1..]),
        }
        .with_context(|| format!("workload step `{step}`"))?;
    }
    Ok(())
}

/// Highest fd the steps need open, plus one.
fn pool_size(steps: &[Step]) -> usize {
    steps
        .iter()
        .map(|step| match *step {
            Step::Select { n, .. } => n.max(0) as usize,
            // Poll entries cycle through a pool; 64 fds are plenty.
            Step::Poll { .. } => 64,
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

/// The RLIMIT_NOFILE the steps need: the kernel refuses a poll of more entries.
fn nofile_needed(steps: &[Step]) -> u64 {
    let largest_poll = steps.iter().map(|step| match *step {
        Step::Poll { nfds, .. } => u64::from(nfds),
        _ => 0,
    });
    largest_poll
        .max()
        .unwrap_or(0)
        .max(pool_size(steps) as u64 + 64)
}

/// Open fds 3.. up to a limit, all on /dev/null (always readable, so every call returns
/// without sleeping).
struct FdPool {
    files: Vec<std::fs::File>,
}

impl FdPool {
    fn open(limit: usize) -> anyhow::Result<FdPool> {
        let mut files = Vec::new();
        loop {
            let file = std::fs::File::open("/dev/null")?;
            if file.as_raw_fd() as usize >= limit {
                break;
            }
            files.push(file);
        }
        Ok(FdPool { files })
    }

    fn fd(&self, i: usize) -> i32 {
        self.files[i % self.files.len()].as_raw_fd()
    }
}

/// Raises the soft RLIMIT_NOFILE to `want`, as far as the hard limit allows.
fn raise_nofile_limit(want: u64) -> anyhow::Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < want {
        setrlimit(Resource::RLIMIT_NOFILE, want.min(hard), hard)?;
    }
    Ok(())
}

/// Returns a syscall's result as the kernel gave it, or the error.
fn check(ret: libc::c_long) -> anyhow::Result<i64> {
    if ret < 0 {
        Err(std::io::Error::last_os_error().into())
    } else {
        Ok(ret)
    }
}

fn run_select(fds: &FdPool, syscall: SelectSyscall, calls: u32, n: i32) -> anyhow::Result<()> {
    let words = (n.max(0) as usize).div_ceil(64);
    let mut template = vec![0u64; words.max(1)];
    for file in &fds.files {
        let fd = file.as_raw_fd();
        if fd < n {
            template[fd as usize / 64] |= 1 << (fd % 64);
        }
    }
    for _ in 0..calls {
        let mut read_set = template.clone();
        let set = read_set.as_mut_ptr();
        let null = std::ptr::null_mut::<libc::c_void>();
        // SAFETY: the set holds n bits; the timeout structs live across the call.
        let ret = unsafe {
            match syscall {
                SelectSyscall::Select => {
                    let mut timeout = libc::timeval {
                        tv_sec: 0,
                        tv_usec: 0,
                    };
                    libc::syscall(libc::SYS_select, n, set, null, null, &raw mut timeout)
                }
                SelectSyscall::Pselect6 => {
                    let mut timeout = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    };
                    libc::syscall(
                        libc::SYS_pselect6,
                        n,
                        set,
                        null,
                        null,
                        &raw mut timeout,
                        null,
                    )
                }
            }
        };
        match check(ret) {
            Ok(_) if n >= 0 => {}
            Err(e)
                if n < 0
                    && e.downcast_ref::<std::io::Error>()
                        .and_then(|e| e.raw_os_error())
                        == Some(libc::EINVAL) => {}
            other => anyhow::bail!("unexpected result {other:?}"),
        }
    }
    Ok(())
}

fn run_poll(
    fds: &FdPool,
    syscall: PollSyscall,
    calls: u32,
    nfds: u32,
    negative: u32,
) -> anyhow::Result<()> {
    let entries: Vec<libc::pollfd> = (0..nfds as usize)
        .map(|i| {
            // Entry i is negative when it is the k-th of `negative` spread evenly.
            let is_negative = negative > 0
                && (i as u64 * u64::from(negative)) % u64::from(nfds) < u64::from(negative);
            libc::pollfd {
                fd: if is_negative { -1 } else { fds.fd(i) },
                events: libc::POLLIN,
                revents: 0,
            }
        })
        .collect();
    let counted = entries.iter().filter(|e| e.fd < 0).count();
    anyhow::ensure!(
        counted == negative as usize,
        "spread {counted} negative entries, not {negative}"
    );
    for _ in 0..calls {
        let mut array = entries.clone();
        let array = array.as_mut_ptr();
        // SAFETY: the array holds nfds entries; the timeout lives across the call.
        let ret = unsafe {
            match syscall {
                PollSyscall::Poll => libc::syscall(libc::SYS_poll, array, nfds, 0),
                PollSyscall::Ppoll => {
                    let timeout = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    };
                    let null = std::ptr::null::<libc::c_void>();
                    libc::syscall(libc::SYS_ppoll, array, nfds, &raw const timeout, null, 8)
                }
            }
        };
        check(ret)?;
    }
    Ok(())
}

/// An address below `vm.mmap_min_addr`: never mapped.
const UNMAPPED: usize = 0x10;

fn run_faults(calls: u32, call: impl Fn() -> libc::c_long) -> anyhow::Result<()> {
    for _ in 0..calls {
        let result = check(call());
        let errno = result
            .as_ref()
            .err()
            .and_then(|e| e.downcast_ref::<std::io::Error>()?.raw_os_error());
        anyhow::ensure!(
            errno == Some(libc::EFAULT),
            "expected EFAULT, got {result:?}"
        );
    }
    Ok(())
}

fn thread_rest(fds: &FdPool, rest: &[Step]) -> anyhow::Result<()> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| run_steps(fds, rest))
            .join()
            .map_err(|_| anyhow::anyhow!("the workload thread panicked"))?
    })
}

fn fork_rest(fds: &FdPool, rest: &[Step]) -> anyhow::Result<()> {
    use nix::{
        sys::wait::{WaitStatus, waitpid},
        unistd::{ForkResult, fork},
    };
    // SAFETY: the child runs the remaining steps and leaves with _exit, never returning into
    // the caller. Should a `thread` step come first, glibc's fork keeps malloc usable in the
    // child, and the steps use nothing else another thread could hold.
    match unsafe { fork() }? {
        ForkResult::Child => {
            let code = match run_steps(fds, rest) {
                Ok(()) => 0,
                Err(error) => {
                    eprintln!("auditor-workload (child): {error:#}");
                    1
                }
            };
            // SAFETY: ends the child without running the parent's exit handlers twice.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => match waitpid(child, None)? {
            WaitStatus::Exited(_, 0) => Ok(()),
            status => anyhow::bail!("forked child ended with {status:?}"),
        },
    }
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
        let steps = parse(DEFAULT).unwrap();
        let text: Vec<String> = steps.iter().map(Step::to_string).collect();
        assert_eq!(
            text.join(" "),
            DEFAULT.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }

    #[test]
    fn bad_steps_are_named() {
        let error = parse("poll:1:2:3").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`poll:1:2:3`: NEGATIVE is larger than NFDS"),
            "{error}"
        );
        let error = parse("select:x:1").unwrap_err();
        assert!(error.to_string().contains("CALLS `x`"), "{error}");
        assert!(parse("spin:1").is_err());
    }

    #[test]
    fn default_expectations() {
        let expected = expected(&parse("default").unwrap());
        assert_eq!(expected.len(), 1);
        let select = expected[0].site(Site::SelectNNegative);
        assert_eq!((select.taken, select.not_taken), (20, 2000));
        let poll = expected[0].site(Site::PollFdNegative);
        assert_eq!((poll.taken, poll.not_taken), (6400, 2_100 * 1024 - 6400));
    }

    #[test]
    fn fork_splits_processes() {
        let expected = expected(&parse("select:3:-1 fork poll:2:10:4").unwrap());
        assert_eq!(expected.len(), 2);
        assert_eq!(expected[0].site(Site::SelectNNegative).taken, 3);
        assert_eq!(expected[0].site(Site::PollFdNegative).total(), 0);
        assert_eq!(expected[1].site(Site::PollFdNegative).taken, 8);
        assert_eq!(expected[1].site(Site::PollFdNegative).not_taken, 12);
        assert_eq!(expected[0].calls(Syscall::Select), 3);
        assert_eq!(expected[1].calls(Syscall::Poll), 2);
        assert_eq!(expected[1].calls(Syscall::Select), 0);
    }
}
