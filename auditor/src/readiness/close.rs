//! close (fs/open.c): `sys_close`'s success branch, and the fd table bookkeeping.

use auditor_common::{Evaluation, Site, close};

use super::{Decided, Hint, Recorder, SiteInfo, Unit, fd::Task, likely, written};

pub const OK: SiteInfo = SiteInfo {
    site: Site::CloseOk,
    id: "close.ok",
    function: "sys_close",
    file: "fs/open.c",
    condition: "close returns 0",
    hint: Hint::Likely,
    hint_since: "6.15",
    unit: Unit::Call,
    syscalls: &["close"],
    source: &[written("retval == 0")],
    decided: Decided::Exit,
};

/// One close call: the branch, and the fd leaves the table unless it was not open.
pub fn close(recorder: &mut Recorder, task: Option<&mut Task>, fd: i32, ret: i64) {
    let ok = likely!(recorder, OK, close::ok_evaluation(ret));
    if ok != Evaluation::NotReached
        && let (Some(task), Ok(fd)) = (task, u32::try_from(fd))
    {
        task.close(fd);
    }
}

#[cfg(test)]
mod tests {
    use auditor_common::{Counts, errno};

    use super::*;

    #[test]
    fn close_of_an_open_and_a_closed_fd() {
        let mut recorder = Recorder::default();
        let mut task = Task::with_open_fds(10, 1024);
        close(&mut recorder, Some(&mut task), 5, 0);
        close(&mut recorder, Some(&mut task), 5, -errno::EBADF);
        close(&mut recorder, Some(&mut task), 7, -errno::EINTR);
        assert_eq!(recorder.counts(Site::CloseOk), Counts::new(1, 1, 0));
        assert_eq!(task.next_fd, 5);
        assert!(!task.is_open(7));
    }
}
