//! The epoll_wait family (fs/eventpoll.c): the argument checks of `do_epoll_wait` and the
//! zero-timeout branch of `ep_poll`, and [`epoll_wait`], the walk through them; and
//! epoll_ctl's test of its target and `ep_insert` ([`epoll_ctl`]), decided from the
//! operation and the return.

use crate::{
    Evaluation,
    catalogue::{Recorder, branch, unlikely},
    errno,
    prelude::{Prelude, Timeout},
};

/// One epoll_wait, epoll_pwait or epoll_pwait2 call as observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpollWaitCall {
    pub maxevents: i32,
    /// The user address of the events buffer.
    pub events: u64,
    /// epoll_pwait2's timeout and the sigmask checks.
    pub prelude: Prelude,
    pub timeout: Timeout,
    pub ret: i64,
}

/// include/uapi/linux/eventpoll.h.
pub const EPOLL_CTL_ADD: i32 = 1;

/// One epoll_ctl call: its operation and, when known, its return value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpollCtlCall {
    pub op: i32,
    pub ret: Option<i64>,
}

/// epoll_ctl's test that its target can be polled ([`cannot_poll_evaluation`]), then
/// `ep_insert` for an EPOLL_CTL_ADD of an fd not yet watched: the user's watch quota
/// first (`ep_alloc_epitem`), then — once the item is attached — the wake-up paths test.
/// Everything epoll_ctl refuses before (-EBADF, -EFAULT, -EPERM, -EEXIST, -ELOOP, an
/// interrupted lock) never reaches it; -ENOMEM comes only after the quota test, from
/// before or after the paths test; -EINVAL from an earlier test or from the paths test.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn epoll_ctl<R: Recorder>(recorder: &mut R, call: &EpollCtlCall) {
    use Evaluation::{NotTaken, Taken, Undecided};
    branch!(
        recorder,
        EpollCtlCannotPoll,
        cannot_poll_evaluation(call.ret)
    );
    if call.op != EPOLL_CTL_ADD {
        return;
    }
    let (quota, paths) = match call.ret.map(|ret| -ret) {
        None => (Undecided, Some(Undecided)),
        Some(0) => (NotTaken, Some(NotTaken)),
        // Only ep_alloc_epitem's quota test returns -ENOSPC from epoll_ctl.
        Some(errno::ENOSPC) => (Taken, None),
        Some(errno::ENOMEM) => (NotTaken, Some(Undecided)),
        Some(errno::EINVAL) => (Undecided, Some(Undecided)),
        Some(_) => return,
    };
    unlikely!(recorder, EpollWatchesExhausted, quota);
    if let Some(paths) = paths {
        unlikely!(recorder, EpollTooManyPaths, paths);
    }
}

/// `do_epoll_ctl_file`'s `if (!file_can_poll(tf->file)) return -EPERM;`, whatever the op:
/// the target's file has no `->poll` (a regular file, /dev/null). It comes once the event
/// is copied (-EFAULT before it) and both fds are found (-EBADF before it); nothing after
/// it returns -EPERM. An unknown return (a call not followed) may have reached it.
pub const fn cannot_poll_evaluation(ret: Option<i64>) -> Evaluation {
    match ret {
        None => Evaluation::Undecided,
        Some(ret) if ret == -errno::EBADF || ret == -errno::EFAULT => Evaluation::NotReached,
        Some(ret) => Evaluation::from_taken(ret == -errno::EPERM),
    }
}

/// `do_epoll_wait` → `ep_poll` for one call.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn epoll_wait<R: Recorder>(recorder: &mut R, call: &EpollWaitCall) {
    let bad_args = unlikely!(
        recorder,
        EpollBadArgs,
        bad_args_evaluation(call.maxevents, call.events, call.prelude, call.ret)
    );
    branch!(
        recorder,
        EpollZeroTimeout,
        zero_timeout_evaluation(bad_args, call.timeout.is_zero())
    );
}

/// `EP_MAX_EVENTS` on x86_64: `INT_MAX / sizeof(struct epoll_event)` (12 bytes, packed).
pub const EP_MAX_EVENTS: i32 = i32::MAX / 12;

/// Highest user address on x86_64 with 4-level paging (`TASK_SIZE_MAX`).
pub const USER_ADDRESS_END: u64 = 0x7fff_ffff_f000;

/// `do_epoll_wait`'s checks of maxevents and of the events buffer (`access_ok`).
pub const fn arguments_valid(maxevents: i32, events: u64) -> bool {
    if maxevents <= 0 || maxevents > EP_MAX_EVENTS {
        return false;
    }
    let size = maxevents as u64 * 12;
    match events.checked_add(size) {
        Some(end) => end <= USER_ADDRESS_END,
        None => false,
    }
}

/// `do_epoll_wait`'s `if (unlikely(ret))` on `ep_check_params()`: maxevents out of range
/// or the buffer outside user memory (EINVAL, EFAULT, decided from the arguments), or epfd
/// not an epoll fd (EINVAL with valid arguments). The epoll fd is looked up first: one
/// that is not open (EBADF) never gets to the branch, whatever the arguments (so since the
/// hint came, 6.15; 6.18 answers a bad fd with maxevents 0 with EBADF). epoll_pwait2's
/// timeout and the sigmask are checked before, with EINVAL and EFAULT of their own.
pub const fn bad_args_evaluation(
    maxevents: i32,
    events: u64,
    prelude: Prelude,
    ret: i64,
) -> Evaluation {
    let valid = arguments_valid(maxevents, events);
    let prelude_errno = ret == -errno::EINVAL || ret == -errno::EFAULT;
    match prelude {
        Prelude::Fails => Evaluation::NotReached,
        _ if ret == -errno::EBADF => Evaluation::NotReached,
        Prelude::Unknown if prelude_errno => Evaluation::Undecided,
        Prelude::Passes | Prelude::Unknown => {
            Evaluation::from_taken(!valid || ret == -errno::EINVAL)
        }
    }
}

/// `ep_poll`: the zero-timeout branch, reached when `do_epoll_wait` accepted the call.
pub const fn zero_timeout_evaluation(bad_args: Evaluation, zero: Option<bool>) -> Evaluation {
    match bad_args {
        Evaluation::NotTaken => match zero {
            Some(zero) => Evaluation::from_taken(zero),
            None => Evaluation::Undecided,
        },
        Evaluation::Undecided => Evaluation::Undecided,
        Evaluation::Taken | Evaluation::NotReached => Evaluation::NotReached,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Counts, Site, catalogue::Counters, errno::*};

    #[test]
    fn refused_calls_never_reach_ep_poll() {
        let mut counters = Counters::default();
        let call = |maxevents, ret| EpollWaitCall {
            maxevents,
            events: 0x7f00_0000_0000,
            prelude: Prelude::Passes,
            timeout: Timeout::Zero,
            ret,
        };
        epoll_wait(&mut counters, &call(0, -EINVAL));
        epoll_wait(&mut counters, &call(8, -EINVAL));
        epoll_wait(&mut counters, &call(8, 0));
        // A bad epoll fd is refused before the branch, whatever maxevents is.
        epoll_wait(&mut counters, &call(0, -EBADF));
        assert_eq!(counters.get(Site::EpollBadArgs), Counts::new(2, 1, 0));
        assert_eq!(counters.get(Site::EpollZeroTimeout), Counts::new(1, 0, 0));
    }

    #[test]
    fn only_a_target_without_poll_returns_eperm() {
        let mut counters = Counters::default();
        let ctl = |op, ret| EpollCtlCall { op, ret };
        // Refused with EPERM, any op; added, or refused after (EEXIST, EINVAL, ENOSPC).
        for call in [
            ctl(EPOLL_CTL_ADD, Some(-EPERM)),
            ctl(2, Some(-EPERM)),
            ctl(EPOLL_CTL_ADD, Some(0)),
            ctl(EPOLL_CTL_ADD, Some(-17)), // EEXIST
            ctl(3, Some(-EINVAL)),
            ctl(EPOLL_CTL_ADD, Some(-ENOSPC)),
            // Either fd not open, or the event not readable: before the test.
            ctl(EPOLL_CTL_ADD, Some(-EBADF)),
            ctl(EPOLL_CTL_ADD, Some(-EFAULT)),
            // Not followed: it may have run.
            ctl(EPOLL_CTL_ADD, None),
        ] {
            epoll_ctl(&mut counters, &call);
        }
        assert_eq!(counters.get(Site::EpollCtlCannotPoll), Counts::new(2, 4, 1));
        // EPERM comes before ep_insert's quota: not counted there.
        assert_eq!(
            counters.get(Site::EpollWatchesExhausted),
            Counts::new(1, 1, 1)
        );
    }

    #[test]
    fn maxevents_boundaries() {
        let buffer = 0x7f00_0000_0000;
        assert!(!arguments_valid(0, buffer));
        assert!(!arguments_valid(-1, buffer));
        assert!(arguments_valid(1, buffer));
        assert_eq!(EP_MAX_EVENTS, 178_956_970);
        assert!(arguments_valid(EP_MAX_EVENTS, 0x1000));
        assert!(!arguments_valid(EP_MAX_EVENTS + 1, 0x1000));
        assert!(!arguments_valid(1, USER_ADDRESS_END - 11));
        assert!(arguments_valid(1, USER_ADDRESS_END - 12));
        assert!(!arguments_valid(1, u64::MAX - 4));
    }

    #[test]
    fn ep_insert_from_the_return() {
        use crate::{Counts, Site, catalogue::Counters};
        let run = |op, ret| {
            let mut counters = Counters::default();
            epoll_ctl(&mut counters, &EpollCtlCall { op, ret });
            [
                counters.get(Site::EpollWatchesExhausted),
                counters.get(Site::EpollTooManyPaths),
            ]
        };
        let (t, n, u, z) = (
            Counts::new(1, 0, 0),
            Counts::new(0, 1, 0),
            Counts::new(0, 0, 1),
            Counts::ZERO,
        );
        assert_eq!(run(EPOLL_CTL_ADD, Some(0)), [n, n]);
        assert_eq!(run(EPOLL_CTL_ADD, Some(-errno::ENOSPC)), [t, z]);
        assert_eq!(run(EPOLL_CTL_ADD, Some(-errno::ENOMEM)), [n, u]);
        assert_eq!(run(EPOLL_CTL_ADD, Some(-errno::EINVAL)), [u, u]);
        assert_eq!(run(EPOLL_CTL_ADD, None), [u, u]);
        // Refused before ep_insert, or another operation.
        assert_eq!(run(EPOLL_CTL_ADD, Some(-17)), [z, z]);
        assert_eq!(run(EPOLL_CTL_ADD, Some(-errno::EBADF)), [z, z]);
        assert_eq!(run(2, Some(0)), [z, z]);
    }

    #[test]
    fn bad_args_from_return() {
        use Evaluation::*;
        let buffer = 0x7f00_0000_0000;
        assert_eq!(
            bad_args_evaluation(0, buffer, Prelude::Passes, -EINVAL),
            Taken
        );
        assert_eq!(
            bad_args_evaluation(8, buffer, Prelude::Passes, -EBADF),
            NotReached
        );
        assert_eq!(
            bad_args_evaluation(0, buffer, Prelude::Passes, -EBADF),
            NotReached
        );
        assert_eq!(
            bad_args_evaluation(8, buffer, Prelude::Passes, -EINVAL),
            Taken
        );
        assert_eq!(bad_args_evaluation(8, buffer, Prelude::Passes, 0), NotTaken);
        assert_eq!(
            bad_args_evaluation(8, buffer, Prelude::Passes, -EFAULT),
            NotTaken
        );
        assert_eq!(
            bad_args_evaluation(8, buffer, Prelude::Fails, -EINVAL),
            NotReached
        );
        assert_eq!(
            bad_args_evaluation(8, buffer, Prelude::Unknown, -EFAULT),
            Undecided
        );
        assert_eq!(
            bad_args_evaluation(8, buffer, Prelude::Unknown, -EBADF),
            NotReached
        );
        assert_eq!(
            bad_args_evaluation(8, buffer, Prelude::Unknown, 1),
            NotTaken
        );
    }

    #[test]
    fn zero_timeout_after_the_checks() {
        use Evaluation::*;
        assert_eq!(zero_timeout_evaluation(NotTaken, Some(true)), Taken);
        assert_eq!(zero_timeout_evaluation(NotTaken, Some(false)), NotTaken);
        assert_eq!(zero_timeout_evaluation(Taken, Some(true)), NotReached);
        assert_eq!(zero_timeout_evaluation(Undecided, Some(true)), Undecided);
        assert_eq!(zero_timeout_evaluation(NotTaken, None), Undecided);
    }
}
