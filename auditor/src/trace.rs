//! A traced session: start or find the target, attach the probe, wait until the target
//! ends (or the duration passes, or SIGINT / SIGTERM comes), and return the tally.
//!
//! A command is started before the probe is loaded and held on a pipe, as strace does; the
//! probe counts it from its `execve` on, so nothing the auditor's own code does in the child
//! is counted.

use std::{
    ffi::{CString, OsString},
    io::IsTerminal,
    os::{
        fd::{AsRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    sys::{
        signal::{self, Signal},
        wait::{WaitPidFlag, waitpid},
    },
    unistd::{ForkResult, Pid, fork, pipe2},
};

use crate::{
    Error,
    metrics::{self, ProgramLabels, SessionInfo, server::Exporter},
    observation::Observation,
    session::{
        Followed, catch_stop_signals, stop_requested, take_stop_request,
        wait::{self, Cause, End, Stopping},
    },
    source::ebpf::{self, Filter, Probe},
    stacks::Arms,
    status::{self, Ending},
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
    /// Processes that already run (threads included), processes by name (their leader's,
    /// as `ps` shows it), and threads by their own name.
    Processes {
        pids: Vec<u32>,
        comms: Vec<String>,
        thread_comms: Vec<String>,
    },
    /// Every process but the auditor.
    All,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub target: Target,
    /// Stop after this long (a started command is sent SIGTERM).
    pub duration: Option<Duration>,
    /// Show a one-line status on stderr when it is a terminal no started command writes to.
    pub status: bool,
    /// Attach programs that do nothing: the probe benchmark's floor (nothing is counted).
    pub empty_programs: bool,
    /// Take the user stacks of the calls that go these arms, and name the code behind them.
    pub stacks: Option<Arms>,
    /// Serve the live counts for Prometheus at `http://ADDRESS/metrics`.
    pub metrics: Option<String>,
    /// Turn on the kernel's run statistics of BPF programs for the session and return each
    /// program's runs and time (the probe bench's view of where the time goes).
    pub program_runs: bool,
}

/// The result of a session.
#[derive(Debug)]
pub struct Session {
    /// What the probe counted, and what it says of its view and of how the session ended.
    pub observation: Observation,
    /// The started command's pid and how it ended, if it ended while traced.
    pub command_pid: Option<u32>,
    pub command_status: Option<Ending>,
    /// The signal that ended the session, if one did.
    pub stopped_by: Option<i32>,
    /// Whether the probe was attached (a signal during loading stops before).
    pub attached: bool,
    /// Each program's runs, with `Options::program_runs`.
    pub program_runs: Option<Vec<ebpf::ProgramRuns>>,
}

impl Session {
    /// The auditor's exit status: the started command's, else 128 + the signal that
    /// stopped the session before anything was counted, else success.
    pub fn exit_code(&self) -> u8 {
        match (self.command_status, self.stopped_by) {
            (Some(ending), _) => ending.code(),
            (None, Some(signal)) if !self.attached || self.command_pid.is_some() => {
                Ending::Killed {
                    signal,
                    core_dumped: false,
                }
                .code()
            }
            _ => status::SUCCESS,
        }
    }
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
        // async-signal-safe calls (close, read, signal, raise, execvp, write, _exit) and
        // loads an atomic.
        match unsafe { fork() }.map_err(std::io::Error::from)? {
            ForkResult::Child => {
                drop(go_write);
                let mut byte = 0u8;
                // SAFETY: raw calls on fds and buffers owned here; see above.
                unsafe {
                    // The auditor's stop handler is inherited until exec: a signal only
                    // interrupts the read, and the auditor decides what happens next.
                    loop {
                        match libc::read(go_read.as_raw_fd(), (&raw mut byte).cast(), 1) {
                            1 => break,
                            -1 if *libc::__errno_location() == libc::EINTR => {}
                            _ => libc::_exit(127),
                        }
                    }
                    // Rust ignores SIGPIPE; the command should get the default.
                    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                    // A stop signal that reached this child before its exec (the session
                    // passes one on at once) ends it as it would have ended the command.
                    // Released, so it came after the fork: one before it interrupts the
                    // probe's loading, and the child is never released.
                    libc::signal(libc::SIGINT, libc::SIG_DFL);
                    libc::signal(libc::SIGTERM, libc::SIG_DFL);
                    // (Two atomic loads: safe between fork and exec.)
                    if let Some(stop) = stop_requested() {
                        libc::raise(stop.signal);
                    }
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

/// The pids of the tasks (threads included) named `name` now, from `/proc/*/task/*/comm`.
fn tasks_named(name: &str) -> Vec<u32> {
    let comm_is = |path: std::path::PathBuf| {
        std::fs::read_to_string(path).is_ok_and(|comm| comm.trim_end_matches('\n') == name)
    };
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let tasks = std::fs::read_dir(entry.path().join("task")).ok()?;
            tasks
                .flatten()
                .any(|task| comm_is(task.path().join("comm")))
                .then_some(pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// What the report says of a `--comm` name no task had at a followed call: that none ran,
/// or, when tasks of that name are there at the end (`pids`), that they made no counted
/// call.
fn unmatched_name_warning(name: &str, pids: &[u32]) -> String {
    if pids.is_empty() {
        return format!("Warning: no process named `{name}` ran during the session.");
    }
    let shown: Vec<String> = pids.iter().take(5).map(u32::to_string).collect();
    let more = match pids.len().saturating_sub(5) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!(
        "Warning: tasks named `{name}` are running (pid {}{more}) but made no counted call \
         during the session (a call begun before it, such as a poll a process sits in, is \
         not counted, nor is a call of a syscall no site follows).",
        shown.join(", ")
    )
}

/// Runs a traced session.
pub fn trace(options: &Options) -> Result<Session, Error> {
    trace_with(options, || {})
}

/// How a traced session's work ends by itself.
enum Ended {
    /// The started command ended.
    Command(Ending),
    /// Every process followed by pid is gone (and no name was asked for, which a process
    /// yet to come could take).
    TargetsGone,
}

/// A traced session's work, as the wait sees it.
struct Running<'a> {
    child: Option<Pid>,
    /// The processes followed by pid, when their end is the session's.
    followed: Option<&'a [Followed]>,
    probe: &'a Probe,
    exporter: Option<(&'a Exporter, &'a SessionInfo)>,
    program_labels: &'a mut ProgramLabels,
    /// When the status line was last written, if there is one.
    status_line: Option<Instant>,
}

impl wait::Running for Running<'_> {
    type Ending = Ended;

    fn ended(&mut self) -> Result<Option<Ended>, Error> {
        if let Some(child) = self.child {
            let status = waitpid(child, Some(WaitPidFlag::WNOHANG))
                .map_err(|e| Error::from(std::io::Error::from(e)))?;
            return Ok(Ending::from_wait(status).map(Ended::Command));
        }
        let gone = self
            .followed
            .is_some_and(|followed| followed.iter().all(Followed::ended));
        Ok(gone.then_some(Ended::TargetsGone))
    }

    fn tick(&mut self, elapsed: Duration) -> Result<(), Error> {
        if let Some((exporter, session_info)) = self.exporter {
            let (probe, labels) = (self.probe, &mut *self.program_labels);
            exporter.answer(|| {
                let tally = probe.tally().ok()?;
                Some(metrics::text(&tally, session_info, labels))
            });
        }
        if let Some(last) = &mut self.status_line
            && last.elapsed() >= Duration::from_millis(500)
        {
            *last = Instant::now();
            let tally = self.probe.tally()?;
            crate::write_stderr(format_args!(
                "\r\x1b[Kauditor: {} calls, {} processes, {:.1} s",
                tally.total_calls(),
                tally.process_count(),
                elapsed.as_secs_f64()
            ));
        }
        Ok(())
    }

    fn stop(&mut self, signal: Option<Signal>) -> Stopping {
        let Some(child) = self.child else {
            return Stopping::Now;
        };
        if let Some(signal) = signal {
            let _ = signal::kill(child, signal);
        }
        Stopping::Passed
    }
}

/// Runs a traced session, calling `attached` once the probe counts (before a started
/// command execs).
pub fn trace_with(options: &Options, attached: impl FnOnce()) -> Result<Session, Error> {
    catch_stop_signals()?;
    let (argv, description) = match &options.target {
        Target::Command(argv) => {
            let shown = crate::report::shell_quoted(argv);
            (Some(argv.clone()), format!("command `{shown}`"))
        }
        Target::Workload(spec) => (Some(workload::command(spec)?), format!("workload {spec}")),
        Target::Processes {
            pids,
            comms,
            thread_comms,
        } => {
            let mut parts: Vec<String> = pids.iter().map(|p| format!("pid {p}")).collect();
            parts.extend(comms.iter().map(|c| format!("comm {c}")));
            parts.extend(thread_comms.iter().map(|c| format!("thread comm {c}")));
            (None, parts.join(", "))
        }
        Target::All => (None, "all processes".to_string()),
    };
    let followed = match &options.target {
        Target::Processes { pids, .. } => pids
            .iter()
            .map(|&pid| Followed::open(pid))
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    // A bad or busy address is refused before anything is started or loaded.
    let exporter = options
        .metrics
        .as_deref()
        .map(Exporter::start)
        .transpose()?;
    if let Some(exporter) = &exporter {
        crate::say!("auditor: metrics at http://{}/metrics", exporter.address());
        if let Some(warning) = exporter.reachable_warning() {
            crate::say!("auditor: {warning}");
        }
    }
    let session_info = SessionInfo {
        source: "ebpf",
        kernel_release: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|release| release.trim().to_string())
            .unwrap_or_else(|_| "unknown".into()),
    };
    let mut program_labels = ProgramLabels::default();
    let held = argv.as_deref().map(HeldChild::spawn).transpose()?;
    let filter = Filter {
        empty_programs: options.empty_programs,
        stacks: options.stacks,
        ..match &options.target {
            Target::Processes {
                pids,
                comms,
                thread_comms,
            } => Filter {
                pids: pids.clone(),
                comms: comms.clone(),
                thread_comms: thread_comms.clone(),
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
        }
    };
    let run_statistics = options
        .program_runs
        .then(ebpf::enable_run_statistics)
        .transpose()?;
    // On any error from here the held child is dropped, and exits without running.
    let mut probe = match Probe::attach(&filter, &|| stop_requested().is_some()) {
        Ok(probe) => probe,
        Err(Error::Interrupted) => {
            let signal = take_stop_request().map_or(libc::SIGINT, |stop| stop.signal);
            let mut note = format!(
                "Stopped by {} while the probe was being loaded: nothing was counted.",
                status::signal_name(signal)
            );
            if held.is_some() {
                note.push_str(" The command was not started.");
            }
            return Ok(Session {
                observation: ebpf::observation(description, Duration::ZERO, Tally::default())
                    .with_note(note),
                command_pid: None,
                command_status: None,
                stopped_by: Some(signal),
                attached: false,
                program_runs: None,
            });
        }
        Err(error) => return Err(error),
    };
    attached();
    let started = Instant::now();
    let child = held.map(HeldChild::release).transpose()?;

    // A started command writes to the terminal it inherited: a status line there would be
    // written over its output, so there is one only when no command runs.
    let status_line = options.status && child.is_none() && std::io::stderr().is_terminal();
    let mut running = Running {
        child,
        followed: match &options.target {
            // Names may match processes yet to come: the session waits for them.
            Target::Processes {
                comms,
                thread_comms,
                ..
            } if comms.is_empty() && thread_comms.is_empty() => Some(&followed),
            _ => None,
        },
        probe: &probe,
        exporter: exporter.as_ref().map(|exporter| (exporter, &session_info)),
        program_labels: &mut program_labels,
        status_line: status_line.then(Instant::now),
    };
    let end = wait::wait(&mut running, started, options.duration)?;
    if status_line {
        crate::write_stderr(format_args!("\r\x1b[K"));
    }
    let elapsed = started.elapsed();
    let program_runs = run_statistics
        .is_some()
        .then(|| probe.program_runs())
        .transpose()?;
    drop(run_statistics);
    probe.detach()?;
    let tally = probe.tally()?;
    let mut notes = probe.notes(&tally);
    notes.extend(exporter.as_ref().and_then(Exporter::reachable_warning));
    for name in probe.unmatched_names()? {
        notes.push(unmatched_name_warning(&name, &tasks_named(&name)));
    }
    if child.is_some() {
        notes.extend(end.left_running());
    }
    let (command_status, stopped_by) = match end {
        End::Ended(Ended::Command(ending))
        | End::Stopped {
            ended: Some(Ended::Command(ending)),
            ..
        } => (Some(ending), take_stop_request().map(|s| s.signal)),
        End::Ended(Ended::TargetsGone)
        | End::Stopped {
            ended: Some(Ended::TargetsGone),
            ..
        } => (None, None),
        End::Stopped {
            cause: Cause::Signal(stop),
            ended: None,
        } => {
            take_stop_request();
            (None, Some(stop.signal))
        }
        // As a session a SIGTERM stopped while the command ran on.
        End::Stopped {
            cause: Cause::Duration,
            ended: None,
        } if child.is_some() => (None, Some(libc::SIGTERM)),
        End::Stopped {
            cause: Cause::Duration,
            ended: None,
        } => (None, None),
    };
    let mut observation = ebpf::observation(description, elapsed, tally);
    observation.notes = notes;
    Ok(Session {
        observation,
        command_pid: child.map(|c| c.as_raw() as u32),
        command_status,
        stopped_by,
        attached: true,
        program_runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_tasks_but_no_counted_call_is_said_so() {
        let own = std::fs::read_to_string("/proc/self/comm").unwrap();
        let pids = tasks_named(own.trim_end());
        assert!(pids.contains(&std::process::id()), "{pids:?}");
        assert!(tasks_named("no-such-task-x").is_empty());
        assert_eq!(
            unmatched_name_warning("sshd", &[]),
            "Warning: no process named `sshd` ran during the session."
        );
        let warning = unmatched_name_warning("sshd", &[7, 8, 9, 10, 11, 12, 13]);
        assert!(
            warning.starts_with(
                "Warning: tasks named `sshd` are running (pid 7, 8, 9, 10, 11 and 2 more) but \
                 made no counted call"
            ),
            "{warning}"
        );
    }
}
