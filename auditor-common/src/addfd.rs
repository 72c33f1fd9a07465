//! seccomp's `SECCOMP_IOCTL_NOTIF_ADDFD` (kernel/seccomp.c) with
//! `SECCOMP_ADDFD_FLAG_SETFD`: a supervisor places a file of its own at a chosen fd of the
//! task whose call it answers, which runs `receive_fd_replace()` → `replace_fd()`
//! (fs/file.c) in that task: past RLIMIT_NOFILE -EBADF, then `expand_files()`, whose
//! failure is `unlikely(err < 0)`, then `do_dup2()` (the fd, or -EBUSY). The supervisor's
//! ioctl returns what the task's `replace_fd` made of it, so its return value decides the
//! branch; the table it grows is the other task's, which the supervisor's call does not
//! show (`fd::expand_unread_table`).

use crate::{
    Evaluation, Reached,
    catalogue::{Recorder, unlikely},
    dup::O_CLOEXEC,
    errno, fd,
};

/// `SECCOMP_IOCTL_NOTIF_ADDFD` = `_IOW('!', 3, struct seccomp_notif_addfd)`
/// (include/uapi/linux/seccomp.h).
pub const SECCOMP_IOCTL_NOTIF_ADDFD: u32 = 0x4018_2103;
/// The size field of an ioctl command (`_IOC_SIZEMASK << _IOC_SIZESHIFT`): seccomp's
/// ioctls are extensible structs, and `seccomp_notify_ioctl` matches the command without it
/// (`EA_IOCTL()`).
const IOC_SIZE: u32 = 0x3fff << 16;
/// `SECCOMP_ADDFD_FLAG_SETFD`: place the file at `newfd` (`replace_fd`), not at the lowest
/// free fd (`receive_fd`, an allocation in the other task's table).
pub const SECCOMP_ADDFD_FLAG_SETFD: u32 = 1;
/// `SECCOMP_ADDFD_FLAG_SEND`: also answer the call with the new fd.
pub const SECCOMP_ADDFD_FLAG_SEND: u32 = 2;

/// `struct seccomp_notif_addfd`, the ioctl's argument (its first version, 24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotifAddFd {
    pub id: u64,
    pub flags: u32,
    pub srcfd: u32,
    pub newfd: u32,
    pub newfd_flags: u32,
}

/// Whether an ioctl's `cmd` (an `unsigned int`, in the record's 8 bytes) is ADDFD, of any
/// size.
pub const fn is_addfd(cmd: u64) -> bool {
    (cmd as u32) & !IOC_SIZE == SECCOMP_IOCTL_NOTIF_ADDFD & !IOC_SIZE
}

/// An ADDFD ioctl: its argument (None: it could not be read) and, when known, its return
/// value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddFdCall {
    pub addfd: Option<NotifAddFd>,
    pub ret: Option<i64>,
}

/// `seccomp_notify_addfd`'s checks of the argument (-EINVAL), which come before anything
/// else it does.
pub const fn valid(addfd: &NotifAddFd) -> bool {
    let setfd = addfd.flags & SECCOMP_ADDFD_FLAG_SETFD != 0;
    addfd.newfd_flags & !O_CLOEXEC == 0
        && addfd.flags & !(SECCOMP_ADDFD_FLAG_SETFD | SECCOMP_ADDFD_FLAG_SEND) == 0
        && (addfd.newfd == 0 || setfd)
}

/// Whether the other task's `replace_fd` got to its test, and how it went, from the
/// ioctl's return value: the fd, or -EBUSY from `do_dup2`, after the table held the fd;
/// -EMFILE or -ENOMEM when growing it failed; any other error earlier (the argument, the
/// notification gone or answered, the source fd, an LSM, RLIMIT_NOFILE's -EBADF, a
/// signal).
const fn replaced(ret: i64, flags: u32) -> (Reached, bool) {
    if ret >= 0 {
        (Reached::Yes, false)
    } else if ret == -errno::EMFILE || ret == -errno::ENOMEM {
        (Reached::Yes, true)
    } else if ret == -errno::EBUSY && flags & SECCOMP_ADDFD_FLAG_SEND != 0 {
        // Also the supervisor's, for a call that has ADDFD requests queued.
        (Reached::Unknown, false)
    } else if ret == -errno::EBUSY {
        (Reached::Yes, false)
    } else {
        (Reached::No, false)
    }
}

/// An ADDFD ioctl of a supervisor. `nr_open`: fs.nr_open, for the growth's tests in the
/// other task's table (None: the caller does not follow the table's growth).
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn notif_addfd<R: Recorder>(recorder: &mut R, call: &AddFdCall, nr_open: Option<u32>) {
    let Some(addfd) = call.addfd else {
        // Neither the flags nor the fd are known: undecided if it may have got there.
        if call
            .ret
            .is_none_or(|ret| replaced(ret, SECCOMP_ADDFD_FLAG_SEND).0 != Reached::No)
        {
            unlikely!(recorder, ReplaceFdExpandFailed, Evaluation::Undecided);
            if nr_open.is_some() {
                unlikely!(recorder, FdPastNrOpen, Evaluation::Undecided);
                unlikely!(recorder, FdtableRoundedPastNrOpen, Evaluation::Undecided);
                unlikely!(recorder, FdtableTooLarge, Evaluation::Undecided);
            }
        }
        return;
    };
    // Without SETFD, `receive_fd` allocates in the other task's table: not followed
    // (`syscalls::NOT_FOLLOWED`).
    if !valid(&addfd) || addfd.flags & SECCOMP_ADDFD_FLAG_SETFD == 0 {
        return;
    }
    let failed = match call.ret {
        Some(ret) => {
            let (reached, failed) = replaced(ret, addfd.flags);
            reached.evaluate(Some(failed))
        }
        None => Evaluation::Undecided,
    };
    if failed == Evaluation::NotReached {
        return;
    }
    unlikely!(recorder, ReplaceFdExpandFailed, failed);
    if let Some(nr_open) = nr_open {
        fd::expand_unread_table(recorder, addfd.newfd, nr_open, failed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Counts, Site, catalogue::Counters};

    fn setfd(newfd: u32, flags: u32) -> NotifAddFd {
        NotifAddFd {
            id: 1,
            flags: SECCOMP_ADDFD_FLAG_SETFD | flags,
            srcfd: 3,
            newfd,
            newfd_flags: 0,
        }
    }

    fn run(addfd: Option<NotifAddFd>, ret: Option<i64>, nr_open: Option<u32>) -> Counters {
        let mut counters = Counters::default();
        notif_addfd(&mut counters, &AddFdCall { addfd, ret }, nr_open);
        counters
    }

    const GROWTH: [Site; 3] = [
        Site::FdPastNrOpen,
        Site::FdtableRoundedPastNrOpen,
        Site::FdtableTooLarge,
    ];

    #[test]
    fn the_command_of_any_size() {
        assert!(is_addfd(u64::from(SECCOMP_IOCTL_NOTIF_ADDFD)));
        // A larger struct of a later version, and the high half of the register.
        assert!(is_addfd(0x4020_2103 | 0xffff_ffff_0000_0000));
        // SECCOMP_IOCTL_NOTIF_SEND, _RECV; TCGETS.
        assert!(!is_addfd(0xc018_2101) && !is_addfd(0xc050_2100) && !is_addfd(0x5401));
    }

    #[test]
    fn the_return_value_decides_the_test() {
        let (t, n, u) = (
            Counts::new(1, 0, 0),
            Counts::new(0, 1, 0),
            Counts::new(0, 0, 1),
        );
        let at =
            |ret, flags| run(Some(setfd(4, flags)), ret, None).get(Site::ReplaceFdExpandFailed);
        assert_eq!(at(Some(4), 0), n);
        assert_eq!(at(Some(-errno::EBUSY), 0), n);
        assert_eq!(at(Some(-errno::EMFILE), 0), t);
        assert_eq!(at(Some(-errno::ENOMEM), SECCOMP_ADDFD_FLAG_SEND), t);
        // With SEND, -EBUSY is also the supervisor's, before anything.
        assert_eq!(at(Some(-errno::EBUSY), SECCOMP_ADDFD_FLAG_SEND), u);
        assert_eq!(at(None, 0), u);
        for before in [
            errno::EBADF,
            errno::EINVAL,
            errno::ENOENT,
            errno::ESRCH,
            errno::EINTR,
        ] {
            assert_eq!(at(Some(-before), 0), Counts::ZERO, "errno {before}");
        }
    }

    #[test]
    fn without_setfd_or_with_bad_flags_nothing_is_counted() {
        let mut allocation = setfd(0, 0);
        allocation.flags = 0;
        let mut bad_flags = setfd(4, 0);
        bad_flags.newfd_flags = 1;
        let mut unknown_flag = setfd(4, 4);
        unknown_flag.flags |= 4;
        for addfd in [allocation, bad_flags, unknown_flag] {
            assert_eq!(run(Some(addfd), None, Some(1024)), Counters::default());
        }
        // Unread: undecided wherever it may have got to.
        let unread = run(None, Some(4), Some(1024));
        assert_eq!(
            unread.get(Site::ReplaceFdExpandFailed),
            Counts::new(0, 0, 1)
        );
        assert_eq!(unread.get(Site::FdPastNrOpen), Counts::new(0, 0, 1));
        assert_eq!(
            run(None, Some(-errno::EBADF), Some(1024)),
            Counters::default()
        );
    }

    #[test]
    fn the_growth_of_a_table_no_one_read() {
        let growth = |newfd, ret| {
            let counters = run(Some(setfd(newfd, 0)), Some(ret), Some(1000));
            GROWTH.map(|site| counters.get(site))
        };
        let (t, n, u, z) = (
            Counts::new(1, 0, 0),
            Counts::new(0, 1, 0),
            Counts::new(0, 0, 1),
            Counts::ZERO,
        );
        // Below 64 every table holds the fd.
        assert_eq!(growth(63, 63), [z; 3]);
        assert_eq!(growth(63, -errno::EBADF), [z; 3]);
        // Past fs.nr_open: refused there, or the table held it.
        assert_eq!(growth(1005, -errno::EMFILE), [t, z, z]);
        assert_eq!(growth(1005, 1005), [z; 3]);
        // Below it, refused by the size cut to 960.
        assert_eq!(growth(970, -errno::EMFILE), [n, t, z]);
        // Placed: whether the table had to grow is the other task's, unless it could not
        // have.
        assert_eq!(growth(500, 500), [u, u, u]);
        assert_eq!(growth(970, 970), [z; 3]);
        assert_eq!(growth(500, -errno::EBUSY), [u, u, u]);
    }
}
