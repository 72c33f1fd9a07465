//! What every session shares, whichever source counts: the stop signals (SIGINT and
//! SIGTERM are caught once, for the whole process, and a session takes the request when it
//! ends), the wait with its end conditions ([`wait`]) and the running processes a session
//! follows by pidfd. The probe's session (`trace.rs`) and strace's (`source/strace/run.rs`)
//! both stand on it.

pub(crate) mod wait;

use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
};

use nix::{
    errno::Errno,
    sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal},
};

use crate::Error;

/// The signal that asked the session to stop, 0 while none did.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Whether that signal came from the terminal (to the whole foreground process group).
static STOP_FROM_TERMINAL: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { info.as_ref() }.map_or(0, |info| info.si_code);
    STOP_FROM_TERMINAL.store(code == libc::SI_KERNEL, Ordering::SeqCst);
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
}

/// A request to stop: the signal, and whether the terminal sent it to the traced command
/// as well.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StopRequest {
    pub signal: i32,
    pub from_terminal: bool,
}

/// The stop request received and not yet taken, if any.
pub(crate) fn stop_requested() -> Option<StopRequest> {
    let signal = STOP_SIGNAL.load(Ordering::SeqCst);
    (signal != 0).then(|| StopRequest {
        signal,
        from_terminal: STOP_FROM_TERMINAL.load(Ordering::SeqCst),
    })
}

/// Takes the stop request: a session that ended takes it, so the next one starts afresh.
pub(crate) fn take_stop_request() -> Option<StopRequest> {
    let stop = stop_requested();
    STOP_SIGNAL.store(0, Ordering::SeqCst);
    stop
}

/// Catches SIGINT and SIGTERM (a handler, not SIG_IGN, so an exec'd command gets the
/// default again), so that a session can still report after them. The CLI calls it first
/// thing, so that no moment of a session is without it; a signal that came before a
/// session begins stops it at once.
pub fn catch_stop_signals() -> Result<(), Error> {
    let action = SigAction::new(
        SigHandler::SigAction(request_stop),
        // Restarted, so that no read or wait of the session fails with EINTR.
        SaFlags::SA_SIGINFO | SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to atomics.
        unsafe { signal::sigaction(signal, &action) }.map_err(std::io::Error::from)?;
    }
    Ok(())
}

/// A running process the session follows, through a pidfd: it says when the last thread
/// of the process is gone (the leader may exit first), and a reused pid cannot fool it.
pub(crate) struct Followed {
    pidfd: OwnedFd,
}

impl Followed {
    pub(crate) fn open(pid: u32) -> Result<Followed, Error> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(match Errno::last() {
                // Not a thread-group leader: a thread's id.
                Errno::EINVAL => match thread_group_of(pid) {
                    Some(process) if process != pid => Error::ThreadNotProcess { pid, process },
                    _ => Error::NoSuchProcess(pid),
                },
                Errno::ESRCH => Error::NoSuchProcess(pid),
                errno => std::io::Error::from(errno).into(),
            });
        }
        // SAFETY: a new fd that nothing else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let followed = Followed { pidfd };
        // An exited process that its parent has not reaped yet.
        if followed.ended() {
            return Err(Error::NoSuchProcess(pid));
        }
        Ok(followed)
    }

    /// Whether every thread of the process has exited.
    pub(crate) fn ended(&self) -> bool {
        let mut fds = [libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid entry; no wait.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) > 0 }
    }
}

/// Fails unless `pid` is a running process (a thread-group leader with a live thread).
pub(crate) fn check_process(pid: u32) -> Result<(), Error> {
    Followed::open(pid).map(drop)
}

/// The process that thread `tid` belongs to, from `/proc/TID/status`.
fn thread_group_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}
