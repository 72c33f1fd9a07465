//! `close` (fs/open.c): whether it succeeded, for the fds that were open.

use crate::{
    Evaluation,
    catalogue::{Recorder, likely},
    errno,
};

/// `sys_close` for one call that returned `ret`; the evaluation says whether the fd was
/// open (anything but NotReached).
pub fn close<R: Recorder>(recorder: &mut R, ret: i64) -> Evaluation {
    likely!(recorder, CloseOk, ok_evaluation(ret))
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
    }
}
