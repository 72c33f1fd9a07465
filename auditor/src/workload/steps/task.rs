//! Steps of the calling thread itself: its name, waiting for a line, sleeping, a table of
//! its own.

use std::fmt;

use super::{Case, Family, Form};
use crate::workload::{
    Fields, Layout, StepError,
    expected::{Expected, Table},
    run::{Fds, Result, ensure},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// `name:NAME`: the calling thread names itself NAME (prctl PR_SET_NAME; the kernel
    /// keeps 15 bytes), NUL-padded.
    Name { name: [u8; 16] },
    /// `wait`: read a line from stdin first (lets a test attach to a running process).
    Wait,
    /// `sleep:MS`.
    Sleep { millis: u64 },
    /// `unshare-files`: unshare(CLONE_FILES): a thread whose table is shared takes a copy
    /// of its own (`dup_fd`); an unshared table stays as it is.
    UnshareFiles,
}

/// How the task family's steps are written.
pub const FORMS: &[Form] = &[
    Form {
        kinds: &["name"],
        fields: "NAME",
        does: "the calling thread names itself NAME (prctl PR_SET_NAME, 15 bytes)",
    },
    Form {
        kinds: &["wait"],
        fields: "",
        does: "read a line from stdin first (lets a test attach to a running process)",
    },
    Form {
        kinds: &["sleep"],
        fields: "MS",
        does: "sleep MS milliseconds",
    },
    Form {
        kinds: &["unshare-files"],
        fields: "",
        does: "unshare(CLONE_FILES): a thread sharing its table takes a copy",
    },
];

/// The task family's cases: a fork copies the table (`dup_fd`): one whose open fds reach
/// past the 64 it embeds is allocated as a growth is (fd.rounded_past_nr_open and
/// fd.fdtable_too_large not taken here, taken past fs.nr_open in the allocation family's
/// `growth past fs.nr_open`), from a thread too; the thread's clone3 shares the table and
/// copies nothing; unshare(CLONE_FILES) copies only a shared table: not the first, the
/// thread's.
pub const CASES: &[Case] = &[
    Case::new("a forked table's copy", "wait dupfd:1:100 fork"),
    Case::new(
        "a copy forked from a thread",
        "wait dupfd:1:300 thread fork",
    ),
    Case::new(
        "a copy by unshare",
        "wait dupfd:1:100 unshare-files thread unshare-files read:1",
    ),
];

impl Family for Task {
    fn parse(kind: &str, f: &Fields) -> std::result::Result<Option<Task>, StepError> {
        Ok(Some(match kind {
            "name" => {
                let given = f.fields.first().ok_or_else(|| f.error("NAME is missing"))?;
                if given.is_empty() || given.len() > 15 || given.contains('\0') {
                    return Err(f.error("NAME must be 1 to 15 bytes"));
                }
                let mut name = [0u8; 16];
                name[..given.len()].copy_from_slice(given.as_bytes());
                Task::Name { name }
            }
            "wait" => Task::Wait,
            "unshare-files" => Task::UnshareFiles,
            "sleep" => Task::Sleep {
                millis: f.number(0, None)?,
            },
            _ => return Ok(None),
        }))
    }

    fn run(&self, _: &Fds) -> Result<()> {
        match *self {
            Task::Name { name } => {
                // SAFETY: PR_SET_NAME reads a NUL-terminated name of at most 16 bytes.
                let ret = unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                ensure!(ret == 0, "prctl(PR_SET_NAME) failed");
                Ok(())
            }
            Task::Wait => std::io::stdin()
                .read_line(&mut String::new())
                .map(drop)
                .map_err(Into::into),
            Task::Sleep { millis } => {
                std::thread::sleep(std::time::Duration::from_millis(millis));
                Ok(())
            }
            Task::UnshareFiles => {
                // SAFETY: changes only which fd table this thread uses.
                let ret = unsafe { libc::unshare(libc::CLONE_FILES) };
                ensure!(ret == 0, "unshare(CLONE_FILES) failed");
                Ok(())
            }
        }
    }

    fn expect(&self, e: &mut Expected, _: &Layout, table: &mut Table) {
        match self {
            // One read of the line on stdin.
            Task::Wait => e.reads(1, table.shared),
            Task::UnshareFiles => {
                e.calls[auditor_common::Syscall::Unshare] += 1;
                if table.shared {
                    *table = table.fork(e);
                }
            }
            Task::Name { .. } | Task::Sleep { .. } => {}
        }
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Task::Name { name } => {
                let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                write!(f, "name:{}", String::from_utf8_lossy(&name[..end]))
            }
            Task::Wait => f.write_str("wait"),
            Task::Sleep { millis } => write!(f, "sleep:{millis}"),
            Task::UnshareFiles => f.write_str("unshare-files"),
        }
    }
}
