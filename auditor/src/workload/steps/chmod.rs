//! chmod, fchmodat and fchmodat2 steps, on a path that does not exist: the flags test
//! comes before the path is looked up, and nothing on the machine changes mode.

use std::fmt;

use auditor_common::{Site, Syscall};

use super::{Case, Family, Form};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Table},
    run::{Fds, Result, repeat},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chmod {
    /// `chmod:CALLS`: CALLS chmod and CALLS fchmodat calls (no flags; ENOENT).
    Chmod { calls: u32 },
    /// `fchmodat2:CALLS:BAD`: fchmodat2 calls, BAD of them with a flag it refuses
    /// (EINVAL), the others with AT_SYMLINK_NOFOLLOW (ENOENT).
    Fchmodat2 { calls: u32, bad: u32 },
}

const MISSING: &std::ffi::CStr = c"/nonexistent/auditor-workload";

/// How the chmod family's steps are written.
pub const FORMS: &[Form] = &[
    Form {
        kinds: &["chmod"],
        fields: "CALLS",
        does: "CALLS chmod and CALLS fchmodat calls of a missing path (ENOENT)",
    },
    Form {
        kinds: &["fchmodat2"],
        fields: "CALLS:BAD",
        does: "fchmodat2 calls of a missing path, BAD of them with a flag it refuses \
               (EINVAL), the others with AT_SYMLINK_NOFOLLOW (ENOENT)",
    },
];

/// The chmod family's cases: fchmodat.bad_flags both ways: chmod and fchmodat (no
/// flags), fchmodat2 with flags it takes and refuses; in a child too. Before 6.6 there is
/// no fchmodat2: chmod alone reaches the test, never taken.
pub const CASES: &[Case] = &[
    Case {
        needs_event: Some("sys_enter_fchmodat2"),
        not_in_log: "Debian's strace 6.1 does not know fchmodat2, so its calls are not \
                     counted (ingest.rs, `fchmodat_flags_from_a_log`)",
        ..Case::new(
            "fchmodat2 flags",
            "chmod:3 fchmodat2:5:2 fork fchmodat2:2:1",
        )
    },
    Case::new("chmod without flags", "chmod:3 fork chmod:2"),
];

impl Family for Chmod {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Chmod>, StepError> {
        match kind {
            "chmod" => Ok(Some(Chmod::Chmod {
                calls: f.number(0, None)?,
            })),
            "fchmodat2" => {
                let calls: u32 = f.number(0, None)?;
                let bad: u32 = f.number(1, None)?;
                if bad > calls {
                    return Err(f.error("BAD is more than CALLS"));
                }
                Ok(Some(Chmod::Fchmodat2 { calls, bad }))
            }
            _ => Ok(None),
        }
    }

    fn run(&self, _: &Fds) -> Result<()> {
        // SAFETY: NUL-terminated paths; every call fails without changing anything.
        unsafe {
            match *self {
                Chmod::Chmod { calls } => {
                    repeat(calls, Some(libc::ENOENT), || {
                        libc::syscall(libc::SYS_chmod, MISSING.as_ptr(), 0o644)
                    })?;
                    repeat(calls, Some(libc::ENOENT), || {
                        libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, MISSING.as_ptr(), 0o644)
                    })
                }
                Chmod::Fchmodat2 { calls, bad } => {
                    let fchmodat2 = |flags: libc::c_int| {
                        libc::syscall(
                            libc::SYS_fchmodat2,
                            libc::AT_FDCWD,
                            MISSING.as_ptr(),
                            0o644,
                            flags,
                        )
                    };
                    repeat(bad, Some(libc::EINVAL), || fchmodat2(0x4))?;
                    repeat(calls - bad, Some(libc::ENOENT), || {
                        fchmodat2(libc::AT_SYMLINK_NOFOLLOW)
                    })
                }
            }
        }
    }

    fn expect(&self, e: &mut Expected, _: &Layout, _: &mut Table) {
        match *self {
            Chmod::Chmod { calls } => {
                e.calls[Syscall::Chmod] += u64::from(calls);
                e.calls[Syscall::Fchmodat] += u64::from(calls);
                e.all(Site::FchmodatBadFlags, 2 * u64::from(calls), false);
            }
            Chmod::Fchmodat2 { calls, bad } => {
                e.calls[Syscall::Fchmodat2] += u64::from(calls);
                e.add(
                    Site::FchmodatBadFlags,
                    u64::from(bad),
                    u64::from(calls - bad),
                    0,
                );
            }
        }
    }
}

impl fmt::Display for Chmod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Chmod::Chmod { calls } => write!(f, "chmod:{calls}"),
            Chmod::Fchmodat2 { calls, bad } => write!(f, "fchmodat2:{calls}:{bad}"),
        }
    }
}
