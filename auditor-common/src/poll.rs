//! The poll family (fs/select.c): branches of `do_sys_poll`, `do_poll` and `do_pollfd`, and
//! how an observer tells whether a call got to each.

use crate::{Evaluation, Reached, errno, prelude::Prelude, scan_reached};

/// `struct pollfd` as user space passes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollFd {
    pub fd: i32,
    pub events: i16,
    pub revents: i16,
}

/// Size of one `struct pollfd` in user memory.
pub const POLLFD_SIZE: usize = core::mem::size_of::<PollFd>();

/// `POLLNVAL`: what `do_pollfd` reports for an fd that is not open.
pub const POLLNVAL: i16 = 0x20;

/// Entries `do_sys_poll` keeps on its stack on x86_64: (256 - 16) / 8.
pub const N_STACK_PPS: u32 = 30;

/// The `nfds` the kernel sees: an `unsigned int` in a 64-bit register.
pub const fn nfds_from_arg(arg: u64) -> u32 {
    arg as u32
}

/// `do_pollfd`: `if (unlikely(fd < 0))` — the entry is ignored.
pub const fn fd_negative(fd: i32) -> bool {
    fd < 0
}

/// `do_pollfd`: the fd is not open (`fd_empty(f)`), reported as POLLNVAL in revents.
pub const fn fd_not_open(revents: i16) -> bool {
    revents & POLLNVAL != 0
}

/// [`fd_negative`] and [`fd_not_open`] (for the entries `do_pollfd` does not skip) of one
/// entry as 0 or 1, without a branch: the probe sums them over thousands of entries, and a
/// branch per entry would double the verifier's paths each time.
pub const fn entry_bits(fd: i32, revents: i16) -> (u64, u64) {
    let negative = (fd as u32 >> 31) as u64;
    let not_open = ((revents as u16 as u64) >> POLLNVAL.trailing_zeros()) & 1;
    (negative, not_open & (negative ^ 1))
}

/// `do_sys_poll`: the first chunk (`N_STACK_PPS` entries on the stack) is not enough, and
/// the rest goes to kmalloc'ed chunks of up to 510.
pub const fn entries_on_heap(nfds: u32) -> bool {
    nfds > N_STACK_PPS
}

/// `do_sys_poll`: `if (nfds > rlimit(RLIMIT_NOFILE)) return -EINVAL;`. Only the return value
/// tells (the limit is the task's); ppoll's timeout and sigmask checks come first and fail
/// with EINVAL or EFAULT too. After the branch, do_sys_poll never returns EINVAL.
pub const fn nfds_over_rlimit_evaluation(prelude: Prelude, ret: i64) -> Evaluation {
    let taken = ret == -errno::EINVAL;
    match prelude {
        Prelude::Fails => Evaluation::NotReached,
        Prelude::Passes => Evaluation::from_taken(taken),
        Prelude::Unknown if taken || ret == -errno::EFAULT => Evaluation::Undecided,
        Prelude::Unknown => Evaluation::NotTaken,
    }
}

/// The heap branch runs after the RLIMIT_NOFILE check passed and the first chunk was
/// copied in, for nfds > 0; its taken arm is the only way to ENOMEM.
pub const fn entries_on_heap_evaluation(
    nfds_over_rlimit: Evaluation,
    nfds: u32,
    ret: i64,
) -> Evaluation {
    if nfds == 0 {
        return Evaluation::NotReached;
    }
    let reached = match crate::select::after(nfds_over_rlimit) {
        Reached::Yes if ret == -errno::ENOMEM => Reached::Yes,
        Reached::Yes => scan_reached(ret),
        other => other,
    };
    reached.evaluate(Some(entries_on_heap(nfds)))
}

/// Whether `do_poll` scanned the entries (and evaluated its zero-timeout branch): after the
/// RLIMIT_NOFILE check, a count or a restart code.
pub const fn scan(nfds_over_rlimit: Evaluation, ret: i64) -> Reached {
    match crate::select::after(nfds_over_rlimit) {
        Reached::Yes => scan_reached(ret),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errno::*;

    #[test]
    fn fd_boundaries() {
        assert!(fd_negative(-1));
        assert!(fd_negative(i32::MIN));
        assert!(!fd_negative(0));
        assert!(!fd_negative(i32::MAX));
        assert!(fd_not_open(POLLNVAL));
        assert!(fd_not_open(POLLNVAL | 1));
        assert!(!fd_not_open(1));
    }

    #[test]
    fn entry_bits_are_the_predicates() {
        for fd in [i32::MIN, -2, -1, 0, 1, 3, i32::MAX] {
            for revents in [0, 1, POLLNVAL, POLLNVAL | 1, -1, i16::MIN, i16::MAX, 0x1f] {
                let negative = fd_negative(fd);
                let not_open = !negative && fd_not_open(revents);
                assert_eq!(
                    entry_bits(fd, revents),
                    (u64::from(negative), u64::from(not_open)),
                    "fd {fd} revents {revents}"
                );
            }
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(nfds_from_arg(0x1_0000_0400), 1024);
        assert_eq!(POLLFD_SIZE, 8);
        assert!(!entries_on_heap(30));
        assert!(entries_on_heap(31));
    }

    #[test]
    fn rlimit_from_return() {
        use Evaluation::*;
        assert_eq!(nfds_over_rlimit_evaluation(Prelude::Passes, -EINVAL), Taken);
        assert_eq!(nfds_over_rlimit_evaluation(Prelude::Passes, 0), NotTaken);
        assert_eq!(
            nfds_over_rlimit_evaluation(Prelude::Passes, -EFAULT),
            NotTaken
        );
        assert_eq!(
            nfds_over_rlimit_evaluation(Prelude::Fails, -EINVAL),
            NotReached
        );
        assert_eq!(
            nfds_over_rlimit_evaluation(Prelude::Unknown, -EINVAL),
            Undecided
        );
        assert_eq!(
            nfds_over_rlimit_evaluation(Prelude::Unknown, -EFAULT),
            Undecided
        );
        assert_eq!(nfds_over_rlimit_evaluation(Prelude::Unknown, 1), NotTaken);
    }

    #[test]
    fn heap_and_timeout_from_return() {
        use Evaluation::*;
        assert_eq!(entries_on_heap_evaluation(NotTaken, 0, 0), NotReached);
        assert_eq!(entries_on_heap_evaluation(NotTaken, 30, 0), NotTaken);
        assert_eq!(entries_on_heap_evaluation(NotTaken, 31, 2), Taken);
        assert_eq!(entries_on_heap_evaluation(NotTaken, 31, -ENOMEM), Taken);
        assert_eq!(entries_on_heap_evaluation(Taken, 31, -EINVAL), NotReached);
        assert_eq!(entries_on_heap_evaluation(NotTaken, 31, -EFAULT), Undecided);
        assert_eq!(
            entries_on_heap_evaluation(Undecided, 31, -EFAULT),
            Undecided
        );
        assert_eq!(
            entries_on_heap_evaluation(NotTaken, 31, -ERESTART_RESTARTBLOCK),
            Taken
        );
        assert_eq!(scan(NotTaken, 0), Reached::Yes);
        assert_eq!(scan(NotTaken, -ENOMEM), Reached::No);
        assert_eq!(scan(NotTaken, -EFAULT), Reached::Unknown);
        assert_eq!(scan(Taken, -EINVAL), Reached::No);
        assert_eq!(scan(Undecided, -EINVAL), Reached::Unknown);
    }
}
