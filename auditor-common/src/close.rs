//! `close` (fs/open.c): whether it succeeded, for the fds that were open.

use crate::{Evaluation, errno};

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
