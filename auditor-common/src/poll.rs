//! The poll family (fs/select.c): the `fd < 0` branch of `do_pollfd`, and which return
//! values mean `do_poll` scanned the array at all.

use crate::errno;

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

/// `do_pollfd`: `if (unlikely(fd < 0)) goto out;` — the entry is ignored.
pub const fn fd_negative(fd: i32) -> bool {
    fd < 0
}

/// The `nfds` the kernel sees: an `unsigned int` in a 64-bit register.
pub const fn nfds_from_arg(arg: u64) -> u32 {
    arg as u32
}

/// Whether `do_poll` ran `do_pollfd` over the entries, judged from the return value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// At least one scan of every entry happened.
    Scanned,
    /// The call failed before `do_poll`: nfds over RLIMIT_NOFILE, a bad timeout or sigmask
    /// (EINVAL), no memory (ENOMEM).
    NotScanned,
    /// EFAULT comes from copying entries in (before the scan), from the timeout or sigmask
    /// (before), or from writing revents back (after): the observer cannot tell which.
    Unknown,
}

/// `do_poll` only returns after a scan: a count, or a restart code when a signal came
/// (poll turns `-ERESTARTNOHAND` into `-ERESTART_RESTARTBLOCK`, ppoll may turn it into `-EINTR`).
pub const fn scan_from_return(ret: i64) -> Scan {
    if ret >= 0
        || ret == -errno::EINTR
        || ret == -errno::ERESTARTNOHAND
        || ret == -errno::ERESTART_RESTARTBLOCK
    {
        Scan::Scanned
    } else if ret == -errno::EFAULT {
        Scan::Unknown
    } else {
        Scan::NotScanned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_boundaries() {
        assert!(fd_negative(-1));
        assert!(fd_negative(i32::MIN));
        assert!(!fd_negative(0));
        assert!(!fd_negative(i32::MAX));
    }

    #[test]
    fn nfds_is_unsigned_int() {
        assert_eq!(nfds_from_arg(0x1_0000_0400), 1024);
        assert_eq!(POLLFD_SIZE, 8);
    }

    #[test]
    fn scans_from_return() {
        assert_eq!(scan_from_return(0), Scan::Scanned);
        assert_eq!(scan_from_return(3), Scan::Scanned);
        assert_eq!(scan_from_return(-errno::EINTR), Scan::Scanned);
        assert_eq!(scan_from_return(-errno::ERESTARTNOHAND), Scan::Scanned);
        assert_eq!(
            scan_from_return(-errno::ERESTART_RESTARTBLOCK),
            Scan::Scanned
        );
        assert_eq!(scan_from_return(-errno::EINVAL), Scan::NotScanned);
        assert_eq!(scan_from_return(-errno::ENOMEM), Scan::NotScanned);
        assert_eq!(scan_from_return(-errno::EFAULT), Scan::Unknown);
    }
}
