//! The select family (fs/select.c): the `n < 0` branch of `core_sys_select`, and the checks
//! `kern_select` and `do_pselect` make before it, which tell whether a call got there.

use crate::{Evaluation, errno};

/// `core_sys_select`: `if (unlikely(n < 0)) return -EINVAL;`
pub const fn n_negative(n: i32) -> bool {
    n < 0
}

/// The `n` the kernel sees: the argument travels in a 64-bit register, but `n` is an `int`.
pub const fn n_from_arg(arg: u64) -> i32 {
    arg as u32 as i32
}

/// `timespec64_valid()` as `poll_select_set_timeout()` applies it.
pub const fn timespec_valid(sec: i64, nsec: i64) -> bool {
    sec >= 0 && (nsec as u64) < 1_000_000_000
}

/// Whether `kern_select` accepts a `struct timeval`: it folds whole seconds out of
/// `tv_usec` (C division, truncating) before the `timespec64_valid()` check.
pub const fn timeval_valid(sec: i64, usec: i64) -> bool {
    // C's truncating division, spelled with unsigned operations: BPF before cpu v4 has no
    // signed division, and the probe runs this.
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
    timespec_valid(sec.wrapping_add(whole), rest * 1000)
}

/// What an observer established, at entry, about the checks made before `core_sys_select`:
/// copying and validating the timeout and, for pselect6, the signal-mask argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Prelude {
    /// Everything was read and is valid: the kernel reaches `core_sys_select`.
    Passes = 0,
    /// A value was read and is invalid: the call fails before `core_sys_select`.
    Fails = 1,
    /// Something could not be read, so the kernel's own copy may have failed.
    Unknown = 2,
}

impl Prelude {
    /// Inverse of `prelude as u32`, for values kept in a BPF map; anything else is Unknown.
    pub const fn from_u32(value: u32) -> Prelude {
        match value {
            0 => Prelude::Passes,
            1 => Prelude::Fails,
            _ => Prelude::Unknown,
        }
    }

    /// From one value the observer read (`Some(valid)`) or could not read (`None`).
    pub const fn from_check(check: Option<bool>) -> Prelude {
        match check {
            Some(true) => Prelude::Passes,
            Some(false) => Prelude::Fails,
            None => Prelude::Unknown,
        }
    }

    /// Both checks run before `core_sys_select`: a failed one stops the call whatever an
    /// unreadable one did.
    pub const fn and(self, next: Prelude) -> Prelude {
        match (self, next) {
            (Prelude::Fails, _) | (_, Prelude::Fails) => Prelude::Fails,
            (Prelude::Unknown, _) | (_, Prelude::Unknown) => Prelude::Unknown,
            (Prelude::Passes, Prelude::Passes) => Prelude::Passes,
        }
    }
}

/// How `core_sys_select`'s `n < 0` branch went for one call, from the argument, what the
/// observer established before the branch, and the call's return value.
pub const fn n_negative_evaluation(n: i32, prelude: Prelude, ret: i64) -> Evaluation {
    match prelude {
        Prelude::Fails => Evaluation::NotReached,
        Prelude::Passes => Evaluation::from_taken(n_negative(n)),
        // Before the branch, the kernel fails only with EFAULT (a copy) or EINVAL (a value).
        // After it, core_sys_select returns EFAULT too (fd_set copies) but never EINVAL.
        Prelude::Unknown => {
            if ret == -errno::EFAULT {
                Evaluation::Undecided
            } else if ret == -errno::EINVAL {
                if n_negative(n) {
                    Evaluation::Undecided
                } else {
                    Evaluation::NotReached
                }
            } else {
                Evaluation::from_taken(n_negative(n))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_boundaries() {
        assert!(n_negative(-1));
        assert!(n_negative(i32::MIN));
        assert!(!n_negative(0));
        assert!(!n_negative(1));
        // A 64-bit argument whose low half is -1 is n = -1 to the kernel.
        assert_eq!(n_from_arg(0xffff_ffff), -1);
        assert_eq!(n_from_arg(0x1_0000_0005), 5);
        assert_eq!(n_from_arg(u64::MAX), -1);
    }

    #[test]
    fn timeouts() {
        assert!(timespec_valid(0, 0));
        assert!(timespec_valid(0, 999_999_999));
        assert!(!timespec_valid(0, 1_000_000_000));
        assert!(!timespec_valid(-1, 0));
        assert!(!timespec_valid(0, -1));
        assert!(timeval_valid(0, 0));
        // kern_select folds whole seconds out of tv_usec.
        assert!(timeval_valid(0, 2_500_000));
        assert!(!timeval_valid(0, -1));
        assert!(!timeval_valid(-1, 0));
        assert!(timeval_valid(1, -1_000_000));
        assert!(!timeval_valid(0, -1_000_000));
    }

    #[test]
    fn prelude_composition() {
        use Prelude::*;
        assert_eq!(Passes.and(Passes), Passes);
        assert_eq!(Unknown.and(Passes), Unknown);
        assert_eq!(Unknown.and(Fails), Fails);
        assert_eq!(Fails.and(Unknown), Fails);
        assert_eq!(Prelude::from_check(None), Unknown);
        assert_eq!(Prelude::from_check(Some(false)), Fails);
    }

    #[test]
    fn evaluation_from_return() {
        use Evaluation::*;
        let einval = -errno::EINVAL;
        let efault = -errno::EFAULT;
        assert_eq!(n_negative_evaluation(-1, Prelude::Passes, einval), Taken);
        assert_eq!(n_negative_evaluation(5, Prelude::Passes, 0), NotTaken);
        assert_eq!(
            n_negative_evaluation(-1, Prelude::Fails, einval),
            NotReached
        );
        assert_eq!(
            n_negative_evaluation(-1, Prelude::Unknown, einval),
            Undecided
        );
        assert_eq!(
            n_negative_evaluation(5, Prelude::Unknown, einval),
            NotReached
        );
        assert_eq!(
            n_negative_evaluation(5, Prelude::Unknown, efault),
            Undecided
        );
        assert_eq!(n_negative_evaluation(5, Prelude::Unknown, 2), NotTaken);
        assert_eq!(
            n_negative_evaluation(5, Prelude::Unknown, -errno::EBADF),
            NotTaken
        );
    }
}
