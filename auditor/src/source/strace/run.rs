//! Running strace: the system's `strace` with one fixed flag set, its output streamed
//! through a FIFO into the replay as it is written (constant memory however long it runs).
//!
//! Flags: `-f` (children and threads), `-Y` (each line names its thread's command),
//! `-qq` (no attach/exit chatter), `-v -s 65536` (arrays and structures in full),
//! `-e trace=` the syscalls the log source decodes and the clones that tell threads from
//! processes, and `LANG=C` (untranslated errno texts).

use std::{
    ffi::OsString,
    process::{Command, ExitStatus},
};

use super::replay::Replay;
use crate::Error;

/// The syscalls whose lines the strace source decodes, and the clones that say which
/// threads belong to which process (`xtask record-fixtures` records with the same list).
const TRACED: &str =
    "trace=poll,ppoll,select,pselect6,epoll_wait,epoll_pwait,epoll_pwait2,close,clone,clone3";

/// What strace traces.
#[derive(Clone, Debug)]
pub enum Target {
    /// Start this command (and follow its children).
    Command(Vec<OsString>),
    /// Attach to running processes.
    Pids(Vec<u32>),
}

/// Runs strace on `target` (with `-k` for `stacks`), feeding `replay`; returns strace's exit
/// status. Ctrl-C reaches strace (which stops) and not the report.
pub fn run(target: &Target, stacks: bool, replay: &mut Replay) -> Result<ExitStatus, Error> {
    crate::trace::catch_stop_signals()?;
    let dir = tempfile::tempdir()?;
    let fifo = dir.path().join("strace.out");
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .map_err(std::io::Error::from)?;
    let mut command = Command::new("strace");
    command
        .args(["-f", "-Y", "-qq", "-v", "-s", "65536", "-e", TRACED, "-o"])
        .arg(&fifo)
        .env("LANG", "C")
        .env("LC_ALL", "C");
    if stacks {
        command.arg("-k");
    }
    match target {
        Target::Command(argv) => {
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
    // Opening the read end waits for strace to open the write end; if strace fails
    // before that, nothing ever opens it: open without blocking, then wait for data.
    let reader = open_fifo(&fifo, &mut child)?;
    if let Some(reader) = reader {
        replay.ingest("strace", reader, None);
    }
    Ok(child.wait()?)
}

/// Opens the FIFO's read end once strace has opened its write end; None if strace exited
/// first.
fn open_fifo(
    fifo: &std::path::Path,
    child: &mut std::process::Child,
) -> Result<Option<std::fs::File>, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo)?;
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
    Ok(Some(file))
}
