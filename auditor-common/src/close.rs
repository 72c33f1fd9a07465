//! `close` (fs/open.c): whether the fd was open, and whether closing it succeeded.

use crate::{
    Evaluation,
    catalogue::{Recorder, branch, likely},
    errno,
};

/// `sys_close` for one call that returned `ret`; the evaluation is close.ok's (anything
/// but NotReached: the fd was open).
pub fn close<R: Recorder>(recorder: &mut R, ret: i64) -> Evaluation {
    branch!(recorder, CloseFdNotOpen, fd_not_open_evaluation(ret));
    likely!(recorder, CloseOk, ok_evaluation(ret))
}

/// `sys_close` for a call whose return is unknown (followed from its entry only): each
/// branch the return decides is undecided.
pub fn close_unreturned<R: Recorder>(recorder: &mut R) {
    branch!(recorder, CloseFdNotOpen, Evaluation::Undecided);
    likely!(recorder, CloseOk, Evaluation::Undecided);
}

/// `sys_close`: `if (!file) return -EBADF;` on what `file_close_fd()` took from the table,
/// the first test of every close. Only that test returns -EBADF (a driver's flush
/// returning it is not modelled, as close.ok does not).
pub const fn fd_not_open_evaluation(ret: i64) -> Evaluation {
    Evaluation::from_taken(ret == -errno::EBADF)
}

/// `sys_close`: `likely(retval == 0)`, evaluated once the fd was found open (EBADF first).
pub const fn ok_evaluation(ret: i64) -> Evaluation {
    if ret == -errno::EBADF {
        Evaluation::NotReached
    } else {
        Evaluation::from_taken(ret == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_returns() {
        assert_eq!(ok_evaluation(0), Evaluation::Taken);
        assert_eq!(ok_evaluation(-errno::EINTR), Evaluation::NotTaken);
        assert_eq!(ok_evaluation(-errno::EBADF), Evaluation::NotReached);
        assert_eq!(fd_not_open_evaluation(0), Evaluation::NotTaken);
        assert_eq!(fd_not_open_evaluation(-errno::EINTR), Evaluation::NotTaken);
        assert_eq!(fd_not_open_evaluation(-errno::EBADF), Evaluation::Taken);
    }
}
