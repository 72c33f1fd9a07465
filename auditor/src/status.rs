//! How a traced command ended, in words and as the auditor's exit status, and the exit
//! statuses of the auditor itself (as strace and perf do: a started command's status is
//! passed on).

use std::fmt;

/// The report was printed and all input was read (or the started command exited 0).
pub const SUCCESS: u8 = 0;
/// The auditor could not do what was asked (the message says why); no report.
pub const FAILURE: u8 = 1;
/// The command line was wrong (clap's status for usage errors).
pub const USAGE: u8 = 2;
/// The report was printed, but part of the strace input could not be read (the report
/// names each line).
pub const PARTLY_UNREADABLE: u8 = 3;

/// How a started command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Killed { signal: i32, core_dumped: bool },
}

impl Ending {
    /// The status a shell would report: the exit code, or 128 + the signal.
    pub fn code(self) -> u8 {
        match self {
            Ending::Exited(code) => code as u8,
            Ending::Killed { signal, .. } => 128u8.wrapping_add(signal as u8),
        }
    }

    pub fn success(self) -> bool {
        self == Ending::Exited(0)
    }

    /// From a wait status; None for a process that has not ended.
    pub fn from_wait(status: nix::sys::wait::WaitStatus) -> Option<Ending> {
        use nix::sys::wait::WaitStatus;
        match status {
            WaitStatus::Exited(_, code) => Some(Ending::Exited(code)),
            WaitStatus::Signaled(_, signal, core_dumped) => Some(Ending::Killed {
                signal: signal as i32,
                core_dumped,
            }),
            _ => None,
        }
    }
}

impl From<std::process::ExitStatus> for Ending {
    fn from(status: std::process::ExitStatus) -> Ending {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Ending::Exited(code),
            (None, Some(signal)) => Ending::Killed {
                signal,
                core_dumped: status.core_dumped(),
            },
            // Only stopped or continued processes have neither; waited ones always do.
            (None, None) => Ending::Exited(status.into_raw()),
        }
    }
}

/// A signal's name (`SIGSEGV`), or its number when it has none.
pub fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {signal}"))
}

impl fmt::Display for Ending {
    /// "exited with status 3", "was killed by SIGSEGV (core dumped)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Ending::Exited(code) => write!(f, "exited with status {code}"),
            Ending::Killed {
                signal,
                core_dumped,
            } => {
                write!(f, "was killed by {}", signal_name(signal))?;
                if core_dumped {
                    f.write_str(" (core dumped)")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endings_read_like_a_shell() {
        assert_eq!(Ending::Exited(3).code(), 3);
        assert_eq!(Ending::Exited(3).to_string(), "exited with status 3");
        let segv = Ending::Killed {
            signal: libc::SIGSEGV,
            core_dumped: true,
        };
        assert_eq!(segv.code(), 139);
        assert_eq!(segv.to_string(), "was killed by SIGSEGV (core dumped)");
        assert_eq!(signal_name(64), "signal 64");
    }

    #[test]
    fn exit_statuses_of_real_processes() {
        let status = |script: &str| {
            Ending::from(
                std::process::Command::new("sh")
                    .args(["-c", script])
                    .status()
                    .unwrap(),
            )
        };
        assert_eq!(status("exit 3"), Ending::Exited(3));
        assert_eq!(
            status("kill -TERM $$"),
            Ending::Killed {
                signal: libc::SIGTERM,
                core_dumped: false
            }
        );
    }
}
