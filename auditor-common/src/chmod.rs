//! chmod, fchmodat and fchmodat2 (fs/open.c): `do_fchmodat`'s test of the flags, which
//! only fchmodat2 passes (the others pass 0), decided from the arguments.

use crate::{
    Evaluation,
    catalogue::{Recorder, unlikely},
};

/// include/uapi/linux/fcntl.h.
pub const AT_SYMLINK_NOFOLLOW: u32 = 0x100;
pub const AT_EMPTY_PATH: u32 = 0x1000;

/// `do_fchmodat`: `if (unlikely(flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)))` (-EINVAL).
pub const fn flags_refused(flags: u32) -> bool {
    flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0
}

/// `do_fchmodat(dfd, filename, mode, flags)`: fchmodat2's flags, 0 for chmod and fchmodat.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn do_fchmodat<R: Recorder>(recorder: &mut R, flags: u32) {
    unlikely!(
        recorder,
        FchmodatBadFlags,
        Evaluation::from_taken(flags_refused(flags))
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_flags_pass() {
        assert!(!flags_refused(0));
        assert!(!flags_refused(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH));
        assert!(flags_refused(0x4));
        assert!(flags_refused(AT_SYMLINK_NOFOLLOW | 0x200));
    }
}
