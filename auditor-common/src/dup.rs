//! dup2 and dup3 (fs/file.c): `sys_dup2`'s `newfd == oldfd` corner case and `ksys_dup3`'s
//! `oldfd == newfd` refusal, both decided from the arguments alone.

use crate::{
    Evaluation,
    catalogue::{Recorder, unlikely},
};

/// `O_CLOEXEC` (x86_64, asm-generic): the one flag dup3 accepts.
pub const O_CLOEXEC: u32 = 0o2_000_000;

/// `ksys_dup3`: `if ((flags & ~O_CLOEXEC) != 0) return -EINVAL;` comes first.
pub const fn flags_valid(flags: u32) -> bool {
    flags & !O_CLOEXEC == 0
}

/// `oldfd == newfd`, as `unsigned int`s: the syscalls take them so.
pub const fn same_fd(oldfd: u32, newfd: u32) -> bool {
    oldfd == newfd
}

/// The fds of a dup2 or dup3 call as the kernel sees them: `unsigned int`s in 64-bit
/// registers.
pub const fn fd_from_arg(arg: u64) -> u32 {
    arg as u32
}

/// `dup2(oldfd, newfd)`: the corner case returns at once; every other call is
/// `ksys_dup3(oldfd, newfd, 0)`.
pub fn dup2<R: Recorder>(recorder: &mut R, oldfd: u32, newfd: u32) {
    let same = unlikely!(
        recorder,
        Dup2SameFd,
        Evaluation::from_taken(same_fd(newfd, oldfd))
    );
    if same == Evaluation::NotTaken {
        ksys_dup3(recorder, oldfd, newfd, 0);
    }
}

/// `dup3(oldfd, newfd, flags)`.
pub fn dup3<R: Recorder>(recorder: &mut R, oldfd: u32, newfd: u32, flags: u32) {
    ksys_dup3(recorder, oldfd, newfd, flags);
}

fn ksys_dup3<R: Recorder>(recorder: &mut R, oldfd: u32, newfd: u32, flags: u32) {
    if flags_valid(flags) {
        unlikely!(
            recorder,
            Dup3SameFd,
            Evaluation::from_taken(same_fd(oldfd, newfd))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Counts, Site, catalogue::Counters};

    #[test]
    fn dup2_reaches_ksys_dup3_only_with_two_fds() {
        let mut counters = Counters::default();
        dup2(&mut counters, 3, 3);
        dup2(&mut counters, 3, 4);
        dup2(&mut counters, 3, 5);
        assert_eq!(counters.get(Site::Dup2SameFd), Counts::new(1, 2, 0));
        assert_eq!(counters.get(Site::Dup3SameFd), Counts::new(0, 2, 0));
    }

    #[test]
    fn dup3_checks_its_flags_first() {
        let mut counters = Counters::default();
        dup3(&mut counters, 3, 3, 0);
        dup3(&mut counters, 3, 3, O_CLOEXEC);
        dup3(&mut counters, 3, 3, 1);
        dup3(&mut counters, 3, 4, O_CLOEXEC);
        assert_eq!(counters.get(Site::Dup3SameFd), Counts::new(2, 1, 0));
        assert_eq!(counters.get(Site::Dup2SameFd), Counts::ZERO);
        assert!(flags_valid(0) && flags_valid(O_CLOEXEC) && !flags_valid(0o4000));
        assert_eq!(fd_from_arg(0x1_0000_0003), 3);
        assert_eq!(fd_from_arg(u64::MAX), u32::MAX);
    }
}
