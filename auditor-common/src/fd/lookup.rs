//! A syscall's lookup of its one fd (`__fget_light`, `fdget_pos`, `fdput`), close's flush
//! of the file it finds, fcntl's O_PATH test, and the lookups of the fds a poll or select
//! scans.

use super::{FdFile, Lookup, TaskState};
use crate::{
    Evaluation, Reached,
    catalogue::{Recorder, likely, unlikely},
};

/// A syscall's lookup of its one `fd` (`__fget_light(fd, FMODE_PATH)`), and the `fdput()`
/// at the end of its scope. On an unshared table the file found is tested for O_PATH; on
/// a shared one `__fget_files_rcu` tests that there is a file, then its mode (its races
/// with other threads are not modelled); `fdput()` drops a reference only the shared arm
/// takes. Whatever the observer cannot read is undecided where it may have run.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn single_lookup<R: Recorder>(
    recorder: &mut R,
    fd: u32,
    lookup: Lookup,
    task: &impl TaskState,
) {
    // The table is read once for `__fget_light`'s test and the arm it takes.
    let shared = task.table_shared();
    unlikely!(recorder, FgetTableShared, Evaluation::from_known(shared));
    let file = task.fd_file(fd);
    let path_only = match file {
        Some(FdFile::Open { path_only }) => Some(path_only),
        _ => None,
    };
    match shared {
        Some(false) => {
            if file != Some(FdFile::NotOpen) {
                unlikely!(
                    recorder,
                    FgetLightPathOnly,
                    Evaluation::from_known(path_only)
                );
            }
        }
        Some(true) => {
            let missing = file.map(|file| file == FdFile::NotOpen);
            unlikely!(recorder, FgetRcuNoFile, Evaluation::from_known(missing));
            if missing != Some(true) {
                unlikely!(recorder, FgetRcuPathOnly, Evaluation::from_known(path_only));
            }
        }
        None => {
            // Either arm: each test that may have run is undecided.
            unlikely!(recorder, FgetLightPathOnly, Evaluation::Undecided);
            unlikely!(recorder, FgetRcuNoFile, Evaluation::Undecided);
            unlikely!(recorder, FgetRcuPathOnly, Evaluation::Undecided);
        }
    }
    // The file handed out: open, and not O_PATH.
    let found = file.map(|file| file == FdFile::Open { path_only: false });
    if lookup == Lookup::FdgetPos {
        likely!(recorder, FdgetPosFile, Evaluation::from_known(found));
    }
    let cloned = match (shared, found) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    };
    unlikely!(recorder, FdputCloned, Evaluation::from_known(cloned));
}

/// `filp_flush()` of the `file` a close takes from its fd (as the table held it when the
/// close began; None: unreadable): `likely(!(f_mode & FMODE_PATH))`, run only when there
/// was a file.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn close_flush<R: Recorder>(recorder: &mut R, file: Option<FdFile>) {
    match file {
        Some(FdFile::NotOpen) => {}
        Some(FdFile::Open { path_only }) => {
            likely!(
                recorder,
                CloseNotPathOnly,
                Evaluation::from_taken(!path_only)
            );
        }
        None => {
            likely!(recorder, CloseNotPathOnly, Evaluation::Undecided);
        }
    }
}

/// fcntl's `unlikely(fd_file(f)->f_mode & FMODE_PATH)`, once `fdget_raw()` found a file.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn fcntl_path_only<R: Recorder>(recorder: &mut R, fd: u32, task: &impl TaskState) {
    match task.fd_file(fd) {
        Some(FdFile::NotOpen) => {}
        Some(FdFile::Open { path_only }) => {
            unlikely!(recorder, FcntlPathOnly, Evaluation::from_taken(path_only));
        }
        None => {
            unlikely!(recorder, FcntlPathOnly, Evaluation::Undecided);
        }
    }
}

/// `__fget_light` for `lookups` fd lookups, made if `reached`: only reached lookups
/// depend on the table, so only they read it.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn fget<R: Recorder>(recorder: &mut R, lookups: u64, reached: Reached, task: &impl TaskState) {
    if lookups == 0 {
        return;
    }
    let shared = match reached {
        Reached::Yes => task.table_shared(),
        Reached::No | Reached::Unknown => None,
    };
    unlikely!(recorder, FgetTableShared, reached.evaluate(shared), lookups);
}
