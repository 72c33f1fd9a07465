//! Running strace: the system's `strace` with one fixed flag set, its output streamed
//! through a FIFO into the replay as it is written (constant memory however long it runs).
//!
//! Flags: `-f` (children and threads), `-Y` (each line names its thread's command),
//! `-qq` (no attach/exit chatter), `-v -s 65536` (arrays and structures in full),
//! `-e trace=` the syscalls the log source decodes, the clones that tell threads from
//! processes and the execs that show a started command ran, and `LANG=C` (untranslated
//! errno texts). A started command is traced with `--seccomp-bpf` where strace has it
//! (5.3 on): a seccomp filter stops the command only at the traced syscalls, where plain
//! ptrace stops it at every syscall (`-p` cannot install one). The FIFO gets the largest
//! pipe buffer allowed, so that strace never waits on the reader.
//!
//! Stopping: a started command is what ends, as under strace alone (strace blocks fatal
//! signals while it writes to a file, and reports how the command ended); strace on
//! `-p` processes detaches when it is sent SIGINT or SIGTERM.

use std::{
    ffi::OsString,
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use auditor_common::syscalls::LOGGED;
use nix::{sys::signal::Signal, unistd::Pid};

use super::replay::Replay;
use crate::{
    Error,
    session::{
        self,
        wait::{self, Cause, End, Stopping},
    },
    status::{self, Ending},
};

/// strace's `-e trace=` list: the syscalls whose lines the strace source decodes (the
/// syscall table's logged ones), the clones that say which threads belong to which
/// process, and the execs that show the command started (`xtask record-fixtures` records
/// the same list but the execs).
pub fn traced() -> String {
    let logged: Vec<&str> = LOGGED.iter().map(|syscall| syscall.name()).collect();
    format!("trace={},clone,clone3,execve", logged.join(","))
}

/// What strace traces.
#[derive(Clone, Debug)]
pub enum Target {
    /// Start this command (and follow its children).
    Command(Vec<OsString>),
    /// Attach to running processes.
    Pids(Vec<u32>),
}

/// How a live strace session ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// How the started command ended (None for `-p`).
    pub command: Option<Ending>,
    /// The signal the session ended on (SIGTERM for `--duration`) where the started
    /// command outlived the grace and was left running.
    pub left_running: Option<i32>,
    /// What the report says of the end (a command left running).
    pub notes: Vec<String>,
}

impl Outcome {
    /// The auditor's exit status before the input's own state is considered: the
    /// command's, else 128 + the signal the session ended on when the command was left
    /// running (as `auditor trace`).
    pub fn code(&self) -> u8 {
        match (self.command, self.left_running) {
            (Some(ending), _) => ending.code(),
            (None, Some(signal)) => Ending::Killed {
                signal,
                core_dumped: false,
            }
            .code(),
            (None, None) => status::SUCCESS,
        }
    }
}

/// Runs strace on `target` (with `-k` for `stacks`) for at most `duration`, feeding
/// `replay`. SIGINT and SIGTERM end the session with what was counted: from the terminal
/// they reach the command and strace by themselves; sent to the auditor alone they are
/// passed on.
pub fn run(
    target: &Target,
    stacks: bool,
    duration: Option<Duration>,
    replay: &mut Replay,
) -> Result<Outcome, Error> {
    session::catch_stop_signals()?;
    if let Target::Pids(pids) = target {
        for &pid in pids {
            session::check_process(pid)?;
        }
    }
    let dir = tempfile::tempdir()?;
    let fifo = dir.path().join("strace.out");
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .map_err(std::io::Error::from)?;
    let mut command = Command::new("strace");
    command
        .args([
            "-f",
            "-Y",
            "-qq",
            "-v",
            "-s",
            "65536",
            "-e",
            &traced(),
            "-o",
        ])
        .arg(&fifo)
        .env("LANG", "C")
        .env("LC_ALL", "C");
    if stacks {
        command.arg("-k");
    }
    match target {
        Target::Command(argv) => {
            if supports_seccomp_bpf() {
                command.arg("--seccomp-bpf");
            }
            command.arg("--").args(argv);
        }
        Target::Pids(pids) => {
            for pid in pids {
                command.arg("-p").arg(pid.to_string());
            }
        }
    }
    let mut child = command.spawn().map_err(|error| Error::Spawn {
        command: "strace".into(),
        why: if error.kind() == std::io::ErrorKind::NotFound {
            "strace is not installed (Debian: apt-get install strace)".into()
        } else {
            error.to_string()
        },
    })?;
    let strace = Pid::from_raw(child.id() as i32);
    let finished = AtomicBool::new(false);
    let end = std::thread::scope(|scope| -> Result<End<()>, Error> {
        let watcher = scope.spawn(|| watch(strace, target, duration, &finished));
        // Opening the read end waits for strace to open the write end; if strace fails
        // before that, nothing ever opens it: open without blocking, then wait for data.
        let reader = open_fifo(&fifo, &mut child);
        if let Ok(Some((reader, pipe))) = &reader {
            replay.ingest(
                "strace",
                Batched {
                    reader,
                    gathered: pipe / 4,
                },
                None,
            );
        }
        finished.store(true, Ordering::SeqCst);
        let end = watcher.join().expect("the watcher does not panic");
        reader.and(end)
    })?;
    let asked = matches!(end, End::Stopped { .. });
    // Taken, so that the next session starts afresh.
    let stopped_by = session::take_stop_request();
    let ending = Ending::from(child.wait()?);
    let outcome = match target {
        // strace passes on the command's status; it fails by itself only before the exec.
        Target::Command(argv) => {
            if replay.execs() == 0 && !ending.success() && stopped_by.is_none() {
                return Err(Error::Spawn {
                    command: argv
                        .first()
                        .map(|a| a.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    why: format!("strace did not start it (strace {ending}; its message is above)"),
                });
            }
            match end.left_running() {
                // strace was killed: its status is not the command's, which runs on.
                Some(note) => Outcome {
                    command: None,
                    left_running: Some(match end {
                        End::Stopped {
                            cause: Cause::Signal(stop),
                            ..
                        } => stop.signal,
                        _ => libc::SIGTERM,
                    }),
                    notes: vec![note],
                },
                None => Outcome {
                    command: Some(ending),
                    left_running: None,
                    notes: Vec::new(),
                },
            }
        }
        // strace -p ends by itself only when its processes are gone, or on a failure.
        Target::Pids(pids) => {
            if !ending.success() && !asked {
                let shown: Vec<String> = pids.iter().map(u32::to_string).collect();
                return Err(Error::Spawn {
                    command: format!("strace -p {}", shown.join(" -p ")),
                    why: format!("strace {ending}; its message is above"),
                });
            }
            Outcome {
                command: None,
                left_running: None,
                notes: Vec::new(),
            }
        }
    };
    Ok(outcome)
}

/// strace's run, as the session's wait sees it: it ends when the replay has read all it
/// wrote; a stop goes to the command strace started (strace reports how it ended) or, for
/// `-p`, to strace itself, which detaches.
struct Running<'a> {
    strace: Pid,
    target: &'a Target,
    finished: &'a AtomicBool,
}

impl wait::Running for Running<'_> {
    type Ending = ();

    fn ended(&mut self) -> Result<Option<()>, Error> {
        Ok(self.finished.load(Ordering::SeqCst).then_some(()))
    }

    fn stop(&mut self, signal: Option<Signal>) -> Stopping {
        let Some(signal) = signal else {
            return Stopping::Passed;
        };
        let receivers = match self.target {
            Target::Command(_) => children(self.strace),
            Target::Pids(_) => vec![self.strace],
        };
        for &pid in &receivers {
            let _ = nix::sys::signal::kill(pid, signal);
        }
        // A command strace has not started yet gets it once it is there.
        if receivers.is_empty() {
            Stopping::NotYet
        } else {
            Stopping::Passed
        }
    }
}

/// Until the replay has `finished`: on a stop signal or at the end of `duration`, ends the
/// session the way strace itself would be ended, and kills strace if it has not ended
/// [`wait::STOP_GRACE`] later. Returns how the wait ended.
fn watch(
    strace: Pid,
    target: &Target,
    duration: Option<Duration>,
    finished: &AtomicBool,
) -> Result<End<()>, Error> {
    let mut running = Running {
        strace,
        target,
        finished,
    };
    let end = wait::wait(&mut running, Instant::now(), duration)?;
    if let End::Stopped { ended: None, .. } = end {
        // The command, no longer traced, runs on.
        let _ = nix::sys::signal::kill(strace, Signal::SIGKILL);
    }
    Ok(end)
}

/// The processes strace started (its command), from `/proc/PID/task/PID/children`.
fn children(pid: Pid) -> Vec<Pid> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|child| child.parse().ok())
        .map(Pid::from_raw)
        .collect()
}

/// Whether the installed strace has `--seccomp-bpf` (strace 5.3 and later).
fn supports_seccomp_bpf() -> bool {
    let Ok(output) = Command::new("strace").arg("-V").output() else {
        return false;
    };
    // "strace -- version 6.1"
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text.split_whitespace().nth(3).unwrap_or("");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (5, 3)
}

/// A read of the FIFO that lets strace's lines gather: after a read that found little, it
/// waits `PAUSE` before the next. strace writes each line as it ends it, so a reader that
/// reads whatever is there wakes once a line (60,000 times a second on a loop of small
/// calls), each time taking the CPU strace runs on; gathered, it wakes a few hundred
/// times. "Little" is under a quarter of the pipe: a poll of 1024 fds writes 24 KB a
/// call, and a fixed threshold below that woke the reader once a call. strace writes at
/// most some 170 MB a second (that poll's loop), 340 KB in a pause, well within the pipe,
/// so strace never waits for it; the end of strace's output is read at most `PAUSE` late.
struct Batched<R> {
    reader: R,
    /// A read of less than this is "little".
    gathered: usize,
}

const PAUSE: Duration = Duration::from_millis(2);

impl<R: std::io::Read> std::io::Read for Batched<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.reader.read(buf)?;
        if read > 0 && read < self.gathered.min(buf.len()) {
            std::thread::sleep(PAUSE);
        }
        Ok(read)
    }
}

/// Grows the FIFO's pipe buffer to the system's limit (`fs.pipe-max-size`, 1 MiB by
/// default) from the default 64 KiB: strace blocks on a full pipe, and its tracees with it.
/// Returns the size it has.
fn grow_pipe(file: &std::fs::File) -> usize {
    let limit = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|t| t.trim().parse::<libc::c_int>().ok())
        .unwrap_or(1 << 20);
    let fd = std::os::fd::AsRawFd::as_raw_fd(file);
    // SAFETY: F_SETPIPE_SZ and F_GETPIPE_SZ on a pipe fd this function borrows; failure
    // leaves it as it was.
    unsafe {
        libc::fcntl(fd, libc::F_SETPIPE_SZ, limit);
        usize::try_from(libc::fcntl(fd, libc::F_GETPIPE_SZ)).unwrap_or(PIPE_DEFAULT)
    }
}

/// A pipe's size where it cannot be read: Linux's default.
const PIPE_DEFAULT: usize = 64 << 10;

/// Opens the FIFO's read end once strace has opened its write end, with the size of its
/// pipe; None if strace exited first.
fn open_fifo(
    fifo: &std::path::Path,
    child: &mut std::process::Child,
) -> Result<Option<(std::fs::File, usize)>, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo)?;
    let pipe = grow_pipe(&file);
    loop {
        // A writer has opened the FIFO once a poll says it is readable or hung up after
        // writing; until then poll reports nothing (Linux reports no POLLHUP before).
        let mut fds = [libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&file),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid entry.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, 50) };
        if ready > 0 {
            break;
        }
        if child.try_wait()?.is_some() {
            return Ok(None);
        }
    }
    // Blocking reads from here on.
    nix::fcntl::fcntl(
        &file,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .map_err(std::io::Error::from)?;
    Ok(Some((file, pipe)))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// A source that gives at most `step` bytes a read, as a pipe does while its writer
    /// is still writing.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        reads: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            self.reads += 1;
            Ok(n)
        }
    }

    #[test]
    fn gathering_reads_passes_every_byte_on_and_the_end() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut source = Trickle {
            data: &data,
            step: 3_000,
            reads: 0,
        };
        let mut read = Vec::new();
        Batched {
            reader: &mut source,
            gathered: 16 << 10,
        }
        .read_to_end(&mut read)
        .unwrap();
        assert_eq!(read, data);
        assert!(source.data.is_empty() && source.reads > 4);
    }
}
