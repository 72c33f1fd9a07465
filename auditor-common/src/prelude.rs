//! What syscall entry points check before the function that holds a branch: the timeout
//! (copied, then validated) and the signal mask (size, then copied). An observer that read
//! the same values can tell whether the call got past them.

/// A timeout argument as the kernel sees it after `poll_select_set_timeout()`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// No timeout: a NULL pointer, or negative milliseconds.
    Infinite = 0,
    /// Given and zero: a single pass without waiting.
    Zero = 1,
    Positive = 2,
    /// Rejected with EINVAL (`timespec64_valid()` fails).
    Invalid = 3,
    /// The observer could not read it.
    Unreadable = 4,
}

/// `timespec64_valid()` as `poll_select_set_timeout()` applies it.
pub const fn timespec_valid(sec: i64, nsec: i64) -> bool {
    sec >= 0 && (nsec as u64) < 1_000_000_000
}

impl Timeout {
    pub const fn from_timespec(sec: i64, nsec: i64) -> Timeout {
        if !timespec_valid(sec, nsec) {
            Timeout::Invalid
        } else if sec == 0 && nsec == 0 {
            Timeout::Zero
        } else {
            Timeout::Positive
        }
    }

    /// `kern_select` folds whole seconds out of `tv_usec` (C division, truncating) first.
    pub const fn from_timeval(sec: i64, usec: i64) -> Timeout {
        // Spelled with unsigned operations: BPF before cpu v4 has no signed division, and
        // the probe runs this.
        let magnitude = usec.unsigned_abs();
        let (whole, rest) = (
            (magnitude / 1_000_000) as i64,
            (magnitude % 1_000_000) as i64,
        );
        let (whole, rest) = if usec < 0 {
            (-whole, -rest)
        } else {
            (whole, rest)
        };
        Timeout::from_timespec(sec.wrapping_add(whole), rest * 1000)
    }

    /// poll's and epoll_wait's `int` milliseconds: negative waits forever.
    pub const fn from_millis(millis: i32) -> Timeout {
        if millis < 0 {
            Timeout::Infinite
        } else if millis == 0 {
            Timeout::Zero
        } else {
            Timeout::Positive
        }
    }

    /// Inverse of `timeout as u32`, for values kept in a BPF map.
    pub const fn from_u32(value: u32) -> Timeout {
        match value {
            0 => Timeout::Infinite,
            1 => Timeout::Zero,
            2 => Timeout::Positive,
            3 => Timeout::Invalid,
            _ => Timeout::Unreadable,
        }
    }

    /// The entry point's check of this timeout.
    pub const fn prelude(self) -> Prelude {
        match self {
            Timeout::Invalid => Prelude::Fails,
            Timeout::Unreadable => Prelude::Unknown,
            Timeout::Infinite | Timeout::Zero | Timeout::Positive => Prelude::Passes,
        }
    }

    /// Whether it is a zero timeout, if known.
    pub const fn is_zero(self) -> Option<bool> {
        match self {
            Timeout::Unreadable => None,
            timeout => Some(matches!(timeout, Timeout::Zero)),
        }
    }
}

/// What an observer established about the checks an entry point makes before the function
/// that holds a branch.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prelude {
    /// Everything was read and is valid: the kernel gets past the checks.
    Passes = 0,
    /// A value was read and is invalid: the call fails before.
    Fails = 1,
    /// Something could not be read, so the kernel's own copy may have failed.
    Unknown = 2,
}

/// Size of the kernel's `sigset_t` on x86_64; any other size is EINVAL.
pub const SIGSET_SIZE: u64 = 8;

impl Prelude {
    /// From one value the observer read (`Some(valid)`) or could not read (`None`).
    pub const fn from_check(check: Option<bool>) -> Prelude {
        match check {
            Some(true) => Prelude::Passes,
            Some(false) => Prelude::Fails,
            None => Prelude::Unknown,
        }
    }

    /// `set_user_sigmask(set, size)`: nothing to do for a NULL set, EINVAL for a wrong
    /// size, EFAULT if the set cannot be copied (`set_readable`: could the observer?).
    pub const fn sigmask(set: u64, size: u64, set_readable: bool) -> Prelude {
        if set == 0 {
            Prelude::Passes
        } else if size != SIGSET_SIZE {
            Prelude::Fails
        } else if set_readable {
            Prelude::Passes
        } else {
            Prelude::Unknown
        }
    }

    /// Inverse of `prelude as u32`, for values kept in a BPF map; anything else is Unknown.
    pub const fn from_u32(value: u32) -> Prelude {
        match value {
            0 => Prelude::Passes,
            1 => Prelude::Fails,
            _ => Prelude::Unknown,
        }
    }

    /// Both checks run first: a failed one stops the call whatever an unreadable one did.
    pub const fn and(self, next: Prelude) -> Prelude {
        match (self, next) {
            (Prelude::Fails, _) | (_, Prelude::Fails) => Prelude::Fails,
            (Prelude::Unknown, _) | (_, Prelude::Unknown) => Prelude::Unknown,
            (Prelude::Passes, Prelude::Passes) => Prelude::Passes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timespecs() {
        assert_eq!(Timeout::from_timespec(0, 0), Timeout::Zero);
        assert_eq!(Timeout::from_timespec(0, 1), Timeout::Positive);
        assert_eq!(Timeout::from_timespec(0, 999_999_999), Timeout::Positive);
        assert_eq!(Timeout::from_timespec(0, 1_000_000_000), Timeout::Invalid);
        assert_eq!(Timeout::from_timespec(-1, 0), Timeout::Invalid);
        assert_eq!(Timeout::from_timespec(0, -1), Timeout::Invalid);
    }

    #[test]
    fn timevals_are_normalised_first() {
        assert_eq!(Timeout::from_timeval(0, 0), Timeout::Zero);
        assert_eq!(Timeout::from_timeval(0, 2_500_000), Timeout::Positive);
        assert_eq!(Timeout::from_timeval(0, -1), Timeout::Invalid);
        assert_eq!(Timeout::from_timeval(-1, 0), Timeout::Invalid);
        assert_eq!(Timeout::from_timeval(1, -1_000_000), Timeout::Zero);
        assert_eq!(Timeout::from_timeval(0, -1_000_000), Timeout::Invalid);
    }

    #[test]
    fn millis() {
        assert_eq!(Timeout::from_millis(-1), Timeout::Infinite);
        assert_eq!(Timeout::from_millis(0), Timeout::Zero);
        assert_eq!(Timeout::from_millis(1), Timeout::Positive);
        assert_eq!(Timeout::Infinite.is_zero(), Some(false));
        assert_eq!(Timeout::Unreadable.is_zero(), None);
        for t in [
            Timeout::Infinite,
            Timeout::Zero,
            Timeout::Positive,
            Timeout::Invalid,
            Timeout::Unreadable,
        ] {
            assert_eq!(Timeout::from_u32(t as u32), t);
        }
    }

    #[test]
    fn sigmasks() {
        assert_eq!(Prelude::sigmask(0, 99, false), Prelude::Passes);
        assert_eq!(Prelude::sigmask(0x1000, 16, true), Prelude::Fails);
        assert_eq!(Prelude::sigmask(0x1000, 8, true), Prelude::Passes);
        assert_eq!(Prelude::sigmask(0x1000, 8, false), Prelude::Unknown);
    }

    #[test]
    fn composition() {
        use Prelude::*;
        assert_eq!(Passes.and(Passes), Passes);
        assert_eq!(Unknown.and(Passes), Unknown);
        assert_eq!(Unknown.and(Fails), Fails);
        assert_eq!(Fails.and(Unknown), Fails);
        assert_eq!(Prelude::from_check(None), Unknown);
        assert_eq!(Prelude::from_check(Some(false)), Fails);
    }
}
