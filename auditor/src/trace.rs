//! A traced session: start or find the target, attach the probe, wait until the target
//! ends (or the duration passes, or SIGINT / SIGTERM comes), and return the tally.
//!
//! A command is started before the probe is loaded and held on a pipe, as strace does; the
//! probe counts it from its `execve` on, so nothing the auditor's own code does in the child
//! is counted.

use std::{
    ffi::{CString, OsString},
    io::{IsTerminal, Write},
    os::{fd::OwnedFd, unix::ffi::OsStrExt},
    sync::atomic::{AtomicI32, Ordering},
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    sys::{
        signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::{ForkResult, Pid, fork, pipe2},
};

use crate::{
    Error,
    source::ebpf::{Filter, Probe},
    tally::Tally,
    workload,
};

/// What to count.
#[derive(Clone, Debug)]
pub enum Target {
    /// Start this command and count it and its children, from its exec on.
    Command(Vec<OsString>),
    /// Run a bundled workload (a name or a step list, see [`workload`]).
    Workload(String),
    /// Processes that already run (threads included), and processes by command name.
    Processes { pids: Vec<u32>, comms: Vec<String> },
    /// Every process but the auditor.
    All,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub target: Target,
    /// Stop after this long (a started command is sent SIGTERM).
    pub duration: Option<Duration>,
    /// Show a one-line status on stderr when it is a terminal.
    pub status: bool,
}

/// The result of a session.
#[derive(Debug)]
pub struct Session {
    pub tally: Tally,
    pub elapsed: Duration,
    /// What was traced, for the report.
    pub description: String,
    /// The started command's pid and how it ended, if it ended while traced.
    pub command_pid: Option<u32>,
    pub command_status: Option<WaitStatus>,
    /// What the source says about its own view (e.g. task state it cannot read).
    pub notes: Vec<String>,
}

/// The signal that asked the session to stop, 0 while none did.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn request_stop(signal: libc::c_int) {
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
}

/// Catches SIGINT and SIGTERM (a handler, not SIG_IGN, so children do not inherit it), so
/// that a session can still report after them.
pub(crate) fn catch_stop_signals() -> Result<(), Error> {
    STOP_SIGNAL.store(0, Ordering::SeqCst);
    let action = SigAction::new(
        SigHandler::Handler(request_stop),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { signal::sigaction(signal, &action) }.map_err(std::io::Error::from)?;
    }
    Ok(())
}

/// A forked child waiting on a pipe before it execs.
struct HeldChild {
    pid: Pid,
    go: Option<OwnedFd>,
    exec_error: OwnedFd,
    command: String,
}

impl HeldChild {
    fn spawn(argv: &[OsString]) -> Result<HeldChild, Error> {
        let command = argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let spawn_error = |why: String| Error::Spawn {
            command: command.clone(),
            why,
        };
        if argv.is_empty() {
            return Err(spawn_error("no command given".into()));
        }
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| spawn_error("an argument contains a NUL byte".into()))?;
        let mut pointers: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        pointers.push(std::ptr::null());
        let (go_read, go_write) =
            pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
        let (error_read, error_write) =
            pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
        // SAFETY: the auditor has no other threads yet; the child only makes
        // async-signal-safe calls (close, read, sigaction, execvp, write, _exit).
        match unsafe { fork() }.map_err(std::io::Error::from)? {
            ForkResult::Child => {
                use std::os::fd::AsRawFd;
                drop(go_write);
                let mut byte = 0u8;
                // SAFETY: raw calls on fds and buffers owned here; see above.
                unsafe {
                    if libc::read(go_read.as_raw_fd(), (&raw mut byte).cast(), 1) != 1 {
                        libc::_exit(127);
                    }
                    // Rust ignores SIGPIPE; the command should get the default.
                    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                    libc::execvp(pointers[0], pointers.as_ptr());
                    let errno = *libc::__errno_location();
                    libc::write(error_write.as_raw_fd(), (&raw const errno).cast(), 4);
                    libc::_exit(127)
                }
            }
            ForkResult::Parent { child } => Ok(HeldChild {
                pid: child,
                go: Some(go_write),
                exec_error: error_read,
                command,
            }),
        }
    }

    /// Lets the child exec; fails if the exec failed.
    fn release(mut self) -> Result<Pid, Error> {
        let go = self.go.take().expect("released once");
        nix::unistd::write(&go, &[1]).map_err(std::io::Error::from)?;
        drop(go);
        let mut errno = [0u8; 4];
        let read = nix::unistd::read(&self.exec_error, &mut errno).map_err(std::io::Error::from)?;
        if read == 0 {
            return Ok(self.pid);
        }
        let _ = waitpid(self.pid, None);
        Err(Error::Spawn {
            command: self.command.clone(),
            why: Errno::from_raw(i32::from_ne_bytes(errno))
                .desc()
                .to_string(),
        })
    }
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        // Not released: the child sees EOF and exits without running anything.
        if self.go.take().is_some() {
            let _ = waitpid(self.pid, None);
        }
    }
}

/// Whether `pid` is a process that can still make syscalls (a zombie cannot).
fn process_exists(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Runs a traced session.
pub fn trace(options: &Options) -> Result<Session, Error> {
    trace_with(options, || {})
}

/// Runs a traced session, calling `attached` once the probe counts (before a started
/// command execs).
pub fn trace_with(options: &Options, attached: impl FnOnce()) -> Result<Session, Error> {
    let (argv, description) = match &options.target {
        Target::Command(argv) => {
            let shown = argv
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ");
            (Some(argv.clone()), format!("command `{shown}`"))
        }
        Target::Workload(spec) => (Some(workload::command(spec)?), format!("workload {spec}")),
        Target::Processes { pids, comms } => {
            if let Some(&pid) = pids.iter().find(|&&pid| !process_exists(pid)) {
                return Err(Error::NoSuchProcess(pid));
            }
            let mut parts: Vec<String> = pids.iter().map(|p| format!("pid {p}")).collect();
            parts.extend(comms.iter().map(|c| format!("comm {c}")));
            (None, parts.join(", "))
        }
        Target::All => (None, "all processes".to_string()),
    };
    let held = argv.as_deref().map(HeldChild::spawn).transpose()?;
    let filter = match &options.target {
        Target::Processes { pids, comms } => Filter {
            pids: pids.clone(),
            comms: comms.clone(),
            ..Filter::default()
        },
        Target::All => Filter {
            all: true,
            ..Filter::default()
        },
        Target::Command(_) | Target::Workload(_) => Filter {
            exec_target: held.as_ref().map(|h| h.pid.as_raw() as u32),
            follow_forks: true,
            ..Filter::default()
        },
    };
    // On any error from here the held child is dropped, and exits without running.
    let mut probe = Probe::attach(&filter)?;
    catch_stop_signals()?;
    attached();
    let started = Instant::now();
    let child = held.map(HeldChild::release).transpose()?;

    let status_line = options.status && std::io::stderr().is_terminal();
    let mut last_status = Instant::now();
    let mut command_status = None;
    loop {
        let signal = STOP_SIGNAL.load(Ordering::SeqCst);
        if signal != 0 {
            if let (Some(child), Ok(signal)) = (child, Signal::try_from(signal)) {
                // Ctrl-C reached the command through the terminal; SIGTERM did not.
                if signal == Signal::SIGTERM {
                    let _ = signal::kill(child, signal);
                }
            }
            break;
        }
        if let Some(child) = child {
            match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {}
                Ok(status) => {
                    command_status = Some(status);
                    break;
                }
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
        if let Target::Processes { pids, comms } = &options.target
            && comms.is_empty()
            && !pids.iter().any(|&pid| process_exists(pid))
        {
            break;
        }
        if options.duration.is_some_and(|d| started.elapsed() >= d) {
            if let Some(child) = child {
                let _ = signal::kill(child, Signal::SIGTERM);
            }
            break;
        }
        if status_line && last_status.elapsed() >= Duration::from_millis(500) {
            last_status = Instant::now();
            let tally = probe.tally()?;
            eprint!(
                "\r\x1b[Kauditor: {} calls, {} processes, {:.1} s",
                tally.total_calls(),
                tally.process_count(),
                started.elapsed().as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if status_line {
        eprint!("\r\x1b[K");
    }
    let elapsed = started.elapsed();
    probe.detach()?;
    Ok(Session {
        tally: probe.tally()?,
        elapsed,
        description,
        command_pid: child.map(|c| c.as_raw() as u32),
        command_status,
        notes: probe.notes(),
    })
}
