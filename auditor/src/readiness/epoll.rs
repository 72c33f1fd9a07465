//! The epoll_wait family (fs/eventpoll.c): `do_epoll_wait` → `ep_poll`.

use auditor_common::{
    Site, epoll,
    prelude::{Prelude, Timeout},
};

use super::{Decided, Hint, Recorder, SiteInfo, Unit, branch, unlikely, written};

const SYSCALLS: &[&str] = &["epoll_wait", "epoll_pwait", "epoll_pwait2"];

pub const BAD_ARGS: SiteInfo = SiteInfo {
    site: Site::EpollBadArgs,
    id: "epoll.bad_args",
    function: "do_epoll_wait",
    file: "fs/eventpoll.c",
    condition: "maxevents <= 0 or > EP_MAX_EVENTS, bad buffer, or epfd not an epoll fd",
    hint: Hint::Unlikely,
    hint_since: "6.15",
    unit: Unit::Call,
    syscalls: SYSCALLS,
    source: &[written("maxevents <= 0")],
    decided: Decided::Exit,
};

pub const ZERO_TIMEOUT: SiteInfo = SiteInfo {
    site: Site::EpollZeroTimeout,
    id: "epoll.zero_timeout",
    function: "ep_poll",
    file: "fs/eventpoll.c",
    condition: "timeout given and zero (no wait)",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::Call,
    syscalls: SYSCALLS,
    source: &[written("timeout->tv_sec | timeout->tv_nsec")],
    decided: Decided::Exit,
};

/// One epoll_wait, epoll_pwait or epoll_pwait2 call as observed.
#[derive(Clone, Debug)]
pub struct EpollWaitCall {
    pub maxevents: i32,
    /// The user address of the events buffer.
    pub events: u64,
    /// epoll_pwait2's timeout and the sigmask checks.
    pub prelude: Prelude,
    pub timeout: Timeout,
    pub ret: i64,
}

pub fn epoll_wait(recorder: &mut Recorder, call: &EpollWaitCall) {
    let bad_args = unlikely!(
        recorder,
        BAD_ARGS,
        epoll::bad_args_evaluation(call.maxevents, call.events, call.prelude, call.ret)
    );
    branch!(
        recorder,
        ZERO_TIMEOUT,
        epoll::zero_timeout_evaluation(bad_args, call.timeout.is_zero())
    );
}

#[cfg(test)]
mod tests {
    use auditor_common::{Counts, errno};

    use super::*;

    #[test]
    fn refused_calls_never_reach_ep_poll() {
        let mut recorder = Recorder::default();
        let call = |maxevents, ret| EpollWaitCall {
            maxevents,
            events: 0x7f00_0000_0000,
            prelude: Prelude::Passes,
            timeout: Timeout::Zero,
            ret,
        };
        epoll_wait(&mut recorder, &call(0, -errno::EINVAL));
        epoll_wait(&mut recorder, &call(8, -errno::EBADF));
        epoll_wait(&mut recorder, &call(8, 0));
        assert_eq!(recorder.counts(Site::EpollBadArgs), Counts::new(2, 1, 0));
        assert_eq!(
            recorder.counts(Site::EpollZeroTimeout),
            Counts::new(1, 0, 0)
        );
    }
}
