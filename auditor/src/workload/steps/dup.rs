//! dup2 and dup3 steps.

use std::{fmt, os::fd::RawFd};

use auditor_common::{Site, Syscall};

use super::{Case, Family, Form};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Table},
    run::{Fds, Result, repeat},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dup {
    /// `dup2:CALLS:SAME`: dup2 calls, SAME of them of fd 3 onto itself, the others of fd 3
    /// onto fd 4 (which stays open: the fd table does not change).
    Dup2 { calls: u32, same: u32 },
    /// `dup3:CALLS:SAME[:BADFLAGS]`: dup3 calls, SAME of them of fd 3 onto itself (EINVAL),
    /// BADFLAGS of them onto itself with a flag dup3 refuses first (EINVAL), the others of
    /// fd 3 onto fd 4.
    Dup3 {
        calls: u32,
        same: u32,
        bad_flags: u32,
    },
    /// `dup2-closed:CALLS`: dup2 of an fd that is not open onto fd 4 (EBADF from
    /// ksys_dup3's lookup).
    Dup2Closed { calls: u32 },
    /// `dup2-emfile:CALLS:NEWFD`: dup2 of fd 3 onto NEWFD, below RLIMIT_NOFILE, where the
    /// table cannot grow to hold it (EBADF): at or past fs.nr_open, or below it where the
    /// size rounded up is cut back below NEWFD.
    Dup2PastNrOpen { calls: u32, newfd: u32 },
}

/// How the dup family's steps are written.
pub const FORMS: &[Form] = &[
    Form {
        kinds: &["dup2"],
        fields: "CALLS:SAME",
        does: "dup2 calls, SAME of them of fd 3 onto itself, the others of fd 3 onto fd 4 \
               (which stays open: the fd table does not change)",
    },
    Form {
        kinds: &["dup3"],
        fields: "CALLS:SAME[:BADFLAGS]",
        does: "dup3 calls, SAME of them of fd 3 onto itself (EINVAL), BADFLAGS of them of fd \
               3 onto itself with a flag dup3 refuses first (EINVAL), the others of fd 3 onto \
               fd 4",
    },
    Form {
        kinds: &["dup2-closed"],
        fields: "CALLS",
        does: "dup2 of an fd that is not open onto fd 4 (EBADF)",
    },
    Form {
        kinds: &["dup2-emfile"],
        fields: "CALLS:NEWFD",
        does: "dup2 of fd 3 onto NEWFD, below RLIMIT_NOFILE, where the table cannot grow to \
               hold it (EBADF): at or past fs.nr_open, or below it where the size rounded up \
               is cut back below NEWFD",
    },
];

/// The dup family's cases: dup2.same_fd and dup3.same_fd, both ways each: dup2 of an fd
/// onto itself (returned at once) and onto another (on to ksys_dup3, not taken there),
/// dup3 onto itself (EINVAL), onto another, and with a flag refused before the fds are
/// compared; dup3.oldfd_not_open both ways (dup2 of a closed fd) and dup3.expand_failed
/// not taken; in a child too.
pub const CASES: &[Case] = &[Case {
    not_in_log: super::alloc::DUP2_EBADF,
    ..Case::new(
        "dup sites",
        "dup2:7:3 dup3:9:4:2 dup2-closed:3 fork dup2:2:2 dup3:3:0:3 dup2-closed:1",
    )
}];

impl Family for Dup {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Dup>, StepError> {
        if kind == "dup2-closed" {
            return Ok(Some(Dup::Dup2Closed {
                calls: f.number(0, None)?,
            }));
        }
        if kind == "dup2-emfile" {
            return Ok(Some(Dup::Dup2PastNrOpen {
                calls: f.number(0, None)?,
                newfd: f.number(1, None)?,
            }));
        }
        if kind != "dup2" && kind != "dup3" {
            return Ok(None);
        }
        let calls: u32 = f.number(0, None)?;
        let same: u32 = f.number(1, None)?;
        let bad_flags: u32 = f.number(2, Some(0))?;
        if u64::from(same) + u64::from(bad_flags) > u64::from(calls) {
            return Err(f.error("SAME and BADFLAGS add up to more than CALLS"));
        }
        Ok(Some(if kind == "dup2" {
            Dup::Dup2 { calls, same }
        } else {
            Dup::Dup3 {
                calls,
                same,
                bad_flags,
            }
        }))
    }

    fn run(&self, fds: &Fds) -> Result<()> {
        match *self {
            Dup::Dup2Closed { calls } => repeat(calls, Some(libc::EBADF), || {
                // SAFETY: the fd is not open; the call fails without changing the table.
                unsafe { libc::syscall(libc::SYS_dup2, fds.not_open, 4) }
            }),
            Dup::Dup2PastNrOpen { calls, newfd } => repeat(calls, Some(libc::EBADF), || {
                // SAFETY: the call fails without changing the table.
                unsafe { libc::syscall(libc::SYS_dup2, 3, newfd) }
            }),
            Dup::Dup2 { calls, same } => {
                // dup2(3, 3) returns 3; dup2(3, 4) replaces fd 4 by a copy of fd 3.
                repeat(same, None, || dup(libc::SYS_dup2, 3, 0))?;
                repeat(calls - same, None, || dup(libc::SYS_dup2, 4, 0))
            }
            Dup::Dup3 {
                calls,
                same,
                bad_flags,
            } => {
                repeat(same, Some(libc::EINVAL), || dup(libc::SYS_dup3, 3, 0))?;
                repeat(bad_flags, Some(libc::EINVAL), || {
                    dup(libc::SYS_dup3, 3, libc::O_NONBLOCK)
                })?;
                repeat(calls - same - bad_flags, None, || {
                    dup(libc::SYS_dup3, 4, libc::O_CLOEXEC)
                })
            }
        }
    }

    fn expect(&self, e: &mut Expected, _: &Layout, table: &mut Table) {
        match *self {
            Dup::Dup2 { calls, same } => dup2s(e, calls, same),
            Dup::Dup3 {
                calls,
                same,
                bad_flags,
            } => {
                e.calls[Syscall::Dup3] += u64::from(calls);
                // The flags are checked before the fds (and refuse the call).
                let reached = u64::from(calls - bad_flags);
                e.add(
                    Site::Dup3SameFd,
                    u64::from(same),
                    reached - u64::from(same),
                    0,
                );
                looked_up(e, reached - u64::from(same));
            }
            Dup::Dup2Closed { calls } => {
                let calls = u64::from(calls);
                e.calls[Syscall::Dup2] += calls;
                e.all(Site::Dup2SameFd, calls, false);
                e.all(Site::Dup3SameFd, calls, false);
                // Below RLIMIT_NOFILE: oldfd is looked up and missing.
                e.all(Site::Dup3OldfdNotOpen, calls, true);
            }
            Dup::Dup2PastNrOpen { calls, newfd } => {
                assert!(
                    newfd >= table.max_fds(),
                    "dup2-emfile: NEWFD inside the table"
                );
                let calls = u64::from(calls);
                e.calls[Syscall::Dup2] += calls;
                e.all(Site::Dup2SameFd, calls, false);
                e.all(Site::Dup3SameFd, calls, false);
                // The table grows for newfd before oldfd (open) is looked up, and cannot.
                for _ in 0..calls {
                    let grew = table.expand(e, newfd);
                    assert!(!grew, "dup2-emfile: the table can grow to NEWFD");
                }
                e.all(Site::Dup3OldfdNotOpen, calls, false);
                e.all(Site::Dup3ExpandFailed, calls, true);
            }
        }
    }
}

/// `calls` ksys_dup3 calls past the same-fd test, of an open oldfd onto a newfd below
/// RLIMIT_NOFILE, whose table grows (if at all) within fs.nr_open.
fn looked_up(e: &mut Expected, calls: u64) {
    e.all(Site::Dup3OldfdNotOpen, calls, false);
    e.all(Site::Dup3ExpandFailed, calls, false);
}

/// `calls` dup2 calls, `same` of them with newfd == oldfd (returned at once), the others
/// going on to ksys_dup3, which finds two fds.
pub fn dup2s(e: &mut Expected, calls: u32, same: u32) {
    let (calls, same) = (u64::from(calls), u64::from(same));
    e.calls[Syscall::Dup2] += calls;
    e.add(Site::Dup2SameFd, same, calls - same, 0);
    e.add(Site::Dup3SameFd, 0, calls - same, 0);
    looked_up(e, calls - same);
}

/// dup2 or dup3 (dup2 ignores `flags`) of fd 3 onto `newfd`, 3 or 4.
fn dup(syscall: libc::c_long, newfd: RawFd, flags: libc::c_int) -> libc::c_long {
    // SAFETY: fds 3 and 4 are the workload's own, both /dev/null: a copy of fd 3 onto fd
    // 4 replaces one with the other.
    unsafe { libc::syscall(syscall, 3, newfd, flags) }
}

impl fmt::Display for Dup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Dup::Dup2 { calls, same } => write!(f, "dup2:{calls}:{same}"),
            Dup::Dup3 {
                calls,
                same,
                bad_flags,
            } => write!(f, "dup3:{calls}:{same}:{bad_flags}"),
            Dup::Dup2Closed { calls } => write!(f, "dup2-closed:{calls}"),
            Dup::Dup2PastNrOpen { calls, newfd } => write!(f, "dup2-emfile:{calls}:{newfd}"),
        }
    }
}
