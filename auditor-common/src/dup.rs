//! dup2 and dup3 (fs/file.c): `sys_dup2`'s `newfd == oldfd` corner case and `ksys_dup3`'s
//! tests — `oldfd == newfd` (from the arguments), then, past the RLIMIT_NOFILE test,
//! whether oldfd is open and whether growing the table for newfd failed (from the task's
//! table, or from the return value where it tells).

use crate::{
    Evaluation,
    catalogue::{Recorder, unlikely},
    errno, fd,
};

/// What `ksys_dup3` finds of the task's fd table (read at entry).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DupTable {
    /// RLIMIT_NOFILE: a newfd at or past it is refused (-EBADF) before the table is locked.
    pub nofile: u64,
    /// `fdt->max_fds`: a newfd at or past it makes `expand_files` grow the table.
    pub max_fds: u32,
    /// `sysctl fs.nr_open`: `expand_files` refuses to grow past it (-EMFILE, told as -EBADF).
    pub nr_open: u32,
    /// 1 when oldfd is open.
    pub oldfd_open: u32,
    pub _pad: u32,
}

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

/// A dup2 or dup3 call: its arguments (dup2's flags are 0) and, when known, its return
/// value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DupCall {
    pub oldfd: u32,
    pub newfd: u32,
    pub flags: u32,
    pub ret: Option<i64>,
}

/// `dup2(oldfd, newfd)`: the corner case returns at once; every other call is
/// `ksys_dup3(oldfd, newfd, 0)`. `table`: the task's, when read.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn dup2<R: Recorder>(recorder: &mut R, call: &DupCall, table: Option<&DupTable>) {
    let same = unlikely!(
        recorder,
        Dup2SameFd,
        Evaluation::from_taken(same_fd(call.newfd, call.oldfd))
    );
    if same == Evaluation::NotTaken {
        ksys_dup3(recorder, call, table);
    }
}

/// `dup3(oldfd, newfd, flags)`, as [`dup2`].
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn dup3<R: Recorder>(recorder: &mut R, call: &DupCall, table: Option<&DupTable>) {
    ksys_dup3(recorder, call, table);
}

#[cfg_attr(target_arch = "bpf", inline(always))]
fn ksys_dup3<R: Recorder>(recorder: &mut R, call: &DupCall, table: Option<&DupTable>) {
    let DupCall {
        oldfd,
        newfd,
        flags,
        ret,
    } = *call;
    if !flags_valid(flags) {
        return;
    }
    let same = unlikely!(
        recorder,
        Dup3SameFd,
        Evaluation::from_taken(same_fd(oldfd, newfd))
    );
    if same == Evaluation::Taken {
        return;
    }
    // Past RLIMIT_NOFILE: -EBADF before the table is looked at.
    if table.is_some_and(|table| u64::from(newfd) >= table.nofile) {
        return;
    }
    let ebadf = ret == Some(-errno::EBADF);
    let enomem = ret == Some(-errno::ENOMEM);
    let (not_open, expand_failed) = match (table, ret) {
        (Some(table), _) => {
            // The table grows for newfd before oldfd is looked up, open or not.
            let expansion = fd::expand_files(recorder, newfd, table.max_fds, table.nr_open);
            let missing = table.oldfd_open == 0;
            // Growing fails with -EMFILE as the growth rule says, or when its allocation
            // does (which only the return value tells).
            let failed = match expansion {
                fd::Expansion::Fits => Evaluation::NotTaken,
                fd::Expansion::Refused => Evaluation::Taken,
                fd::Expansion::Grew(_) if enomem => Evaluation::Taken,
                fd::Expansion::Grew(_) if ret.is_some() => Evaluation::NotTaken,
                fd::Expansion::Grew(_) => Evaluation::Undecided,
            };
            (
                Evaluation::from_taken(missing),
                (!missing).then_some(failed),
            )
        }
        // From the return value alone: -EBADF is the limit's, the lookup's or the growth's.
        (None, Some(_)) if ebadf => (Evaluation::Undecided, Some(Evaluation::Undecided)),
        (None, Some(_)) => (Evaluation::NotTaken, Some(Evaluation::from_taken(enomem))),
        (None, None) => (Evaluation::Undecided, Some(Evaluation::Undecided)),
    };
    unlikely!(recorder, Dup3OldfdNotOpen, not_open);
    if let Some(failed) = expand_failed {
        unlikely!(recorder, Dup3ExpandFailed, failed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Counts, Site, catalogue::Counters};

    fn call([oldfd, newfd, flags]: [u32; 3], ret: Option<i64>) -> DupCall {
        DupCall {
            oldfd,
            newfd,
            flags,
            ret,
        }
    }

    #[test]
    fn dup2_reaches_ksys_dup3_only_with_two_fds() {
        let mut counters = Counters::default();
        for newfd in [3, 4, 5] {
            dup2(
                &mut counters,
                &call([3, newfd, 0], Some(i64::from(newfd))),
                None,
            );
        }
        assert_eq!(counters.get(Site::Dup2SameFd), Counts::new(1, 2, 0));
        assert_eq!(counters.get(Site::Dup3SameFd), Counts::new(0, 2, 0));
    }

    #[test]
    fn dup3_checks_its_flags_first() {
        let mut counters = Counters::default();
        let einval = Some(-errno::EINVAL);
        dup3(&mut counters, &call([3, 3, 0], einval), None);
        dup3(&mut counters, &call([3, 3, O_CLOEXEC], einval), None);
        dup3(&mut counters, &call([3, 3, 1], einval), None);
        dup3(&mut counters, &call([3, 4, O_CLOEXEC], Some(4)), None);
        assert_eq!(counters.get(Site::Dup3SameFd), Counts::new(2, 1, 0));
        assert_eq!(counters.get(Site::Dup2SameFd), Counts::ZERO);
        assert!(flags_valid(0) && flags_valid(O_CLOEXEC) && !flags_valid(0o4000));
        assert_eq!(fd_from_arg(0x1_0000_0003), 3);
        assert_eq!(fd_from_arg(u64::MAX), u32::MAX);
    }

    #[test]
    fn the_lookup_and_the_growth_after_the_limit() {
        let table = |oldfd_open, max_fds| DupTable {
            nofile: 1024,
            max_fds,
            nr_open: 1000,
            oldfd_open,
            _pad: 0,
        };
        let run = |newfd, table: Option<DupTable>, ret| {
            let mut counters = Counters::default();
            dup3(&mut counters, &call([3, newfd, 0], ret), table.as_ref());
            (
                counters.get(Site::Dup3OldfdNotOpen),
                counters.get(Site::Dup3ExpandFailed),
            )
        };
        let (t, n, u, z) = (
            Counts::new(1, 0, 0),
            Counts::new(0, 1, 0),
            Counts::new(0, 0, 1),
            Counts::ZERO,
        );
        let ebadf = Some(-errno::EBADF);
        // Past RLIMIT_NOFILE: neither test runs.
        assert_eq!(run(2000, Some(table(1, 64)), ebadf), (z, z));
        // A closed oldfd: the growth's test does not run.
        assert_eq!(run(4, Some(table(0, 64)), ebadf), (t, z));
        assert_eq!(run(4, Some(table(1, 64)), Some(4)), (n, n));
        // Growing past fs.nr_open (below the limit), or failing to allocate.
        assert_eq!(run(1010, Some(table(1, 64)), ebadf), (n, t));
        assert_eq!(run(100, Some(table(1, 64)), Some(-errno::ENOMEM)), (n, t));
        assert_eq!(run(100, Some(table(1, 64)), None), (n, u));
        // Below fs.nr_open, but rounded up past it and cut below newfd (-EMFILE, told as
        // -EBADF): the kernel's dup2(0, 970) with fs.nr_open at 1000.
        assert_eq!(run(970, Some(table(1, 64)), ebadf), (n, t));
        // From the return value alone.
        assert_eq!(run(4, None, ebadf), (u, u));
        assert_eq!(run(4, None, Some(4)), (n, n));
        assert_eq!(run(4, None, Some(-errno::ENOMEM)), (n, t));
        assert_eq!(run(4, None, None), (u, u));
    }

    #[test]
    fn the_growth_for_newfd_is_the_tables_growth_rule() {
        let growth = |newfd, oldfd_open| {
            let mut counters = Counters::default();
            let table = DupTable {
                nofile: 4096,
                max_fds: 64,
                nr_open: 1000,
                oldfd_open,
                _pad: 0,
            };
            dup2(
                &mut counters,
                &call([0, newfd, 0], Some(-errno::EBADF)),
                Some(&table),
            );
            [
                Site::FdPastNrOpen,
                Site::FdtableRoundedPastNrOpen,
                Site::FdtableTooLarge,
            ]
            .map(|site| counters.get(site))
        };
        let (t, n, z) = (Counts::new(1, 0, 0), Counts::new(0, 1, 0), Counts::ZERO);
        // 971 rounds to 1024, past 1000: cut to 960, below 971.
        assert_eq!(growth(970, 1), [n, t, z]);
        // The table grows before oldfd is looked up: a closed oldfd grows it as well.
        assert_eq!(growth(970, 0), [n, t, z]);
        assert_eq!(growth(1000, 1), [t, z, z]);
        assert_eq!(growth(100, 0), [n, n, n]);
        assert_eq!(growth(10, 1), [z, z, z]);
    }
}
