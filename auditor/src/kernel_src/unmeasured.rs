//! The hints of the followed files that no catalogue site measures, each classified once:
//! `not_yet` (decidable from what a syscall passes, returns or reads in user memory, or
//! from task state, but not in the catalogue yet) or `not_decidable`, with the reason.
//! Rows are anchored like sites, on their code; a fragment may include the hint call to
//! tell apart conditions a function writes more than once. Rows of code an older release
//! had (6.1) stay, so `auditor hints` can classify that tree too.

use auditor_common::catalogue::{Fragment, written};

use super::{Anchor, HintStatus};

pub struct Unmeasured {
    pub file: &'static str,
    pub function: &'static str,
    pub source: &'static [Fragment],
    pub status: HintStatus,
    pub why: &'static str,
}

impl<'a> From<&'a Unmeasured> for Anchor<'a> {
    fn from(row: &'a Unmeasured) -> Anchor<'a> {
        Anchor {
            file: row.file,
            function: row.function,
            fragments: row.source,
        }
    }
}

use HintStatus::{NotDecidable, NotYet};

const ALLOCATION: &str =
    "an allocation failure: kernel memory state, and -ENOMEM has other sources in the same call";
const RACE_RESIZE: &str = "a race: another thread sharing the table is growing it at that moment";
const DENTRY_OPEN: &str = "do_dentry_open runs for every file the kernel opens, overlayfs' and FUSE's backing files \
     included (twice in one open), and the syscall's error does not tell its checks from the path walk's";

macro_rules! rows {
    ($($file:literal $function:literal [$($fragment:literal),+] $status:ident $why:expr;)*) => {
        pub const UNMEASURED: &[Unmeasured] = &[$(Unmeasured {
            file: $file,
            function: $function,
            source: &[$(written($fragment)),+],
            status: $status,
            why: $why,
        }),*];
    };
}

rows! {
    // fs/eventpoll.c
    "fs/eventpoll.c" "ep_alloc" ["unlikely(!ep)"] NotDecidable ALLOCATION;
    "fs/eventpoll.c" "eventpoll_release_file" ["unlikely(!file->f_ep)"] NotDecidable
        "a race at a watched file's last fput (6.1's stable tree): another release emptied its epoll links under epmutex";
    "fs/eventpoll.c" "ep_ptable_queue_proc" ["unlikely(!epi)"] NotDecidable
        "an earlier wait-queue allocation of the same insert failed (memory state), once per wait queue the target's ->poll adds";
    "fs/eventpoll.c" "ep_ptable_queue_proc" ["unlikely(!pwq)"] NotDecidable
        "an allocation failure, once per wait queue the target's ->poll adds: a number no syscall shows";
    "fs/eventpoll.c" "ep_attach_file" ["unlikely(!head)"] NotDecidable
        "a race: another epoll attached to the file between the unlocked look and the lock";
    "fs/eventpoll.c" "ep_alloc_epitem" ["GFP_KERNEL); if (unlikely(!epi))"] NotDecidable ALLOCATION;
    "fs/eventpoll.c" "ep_register_epitem" ["error = ep_attach_file(tfile, epi); if (unlikely(error", "unlikely(attach_epitem(tfile, epi) < 0"] NotDecidable
        "attaching the item failed, which only an allocation does (-ENOMEM, which has other sources)";
    "fs/eventpoll.c" "ep_insert" ["unlikely(!epq.epi)"] NotDecidable ALLOCATION;
    "fs/eventpoll.c" "ep_loop_check_proc" ["unlikely(is_file_epoll(epi->ffd.file))"] NotDecidable
        "once per item of every epoll the loop check visits: their contents are kernel state no syscall shows";
    "fs/eventpoll.c" "epoll_sendevents" ["ret = ep_check_params(file, events, maxevents); if (unlikely(ret"] NotDecidable
        "reached only from io_uring's EPOLL_WAIT: its arguments are in a submission queue entry (SQPOLL submits with no syscall)";
    "fs/eventpoll.c" "ep_remove_safe" ["unlikely(READ_ONCE(epi->dying))"] NotDecidable
        "a race with the watched file's release (6.1)";
    // fs/file.c
    "fs/file.c" "__file_ref_put" ["likely(cnt == FILE_REF_NOREF)"] NotDecidable
        "whether this put drops the last reference: references others hold (io_uring, mappings, other tasks) are kernel state";
    "fs/file.c" "expand_files" ["unlikely(files->resize_in_progress)"] NotDecidable RACE_RESIZE;
    "fs/file.c" "fd_install" ["unlikely(file->f_mode & FMODE_BACKING)"] NotDecidable
        "an assertion (WARN_ON_ONCE): backing files of overlayfs and FUSE never reach an fd table";
    "fs/file.c" "fd_install" ["unlikely(files->resize_in_progress)"] NotDecidable RACE_RESIZE;
    "fs/file.c" "__get_file_rcu" ["unlikely(!atomic_long_inc_not_zero(&file->f_count))"] NotDecidable
        "a race: the file's last reference went at that moment (6.12)";
    "fs/file.c" "__fget_files_rcu" ["unlikely(!atomic_long_inc_not_zero(&file->f_count))"] NotDecidable
        "a race: the file's last reference went at that moment (6.12)";
    "fs/file.c" "__get_file_rcu" ["unlikely(!file_ref_get(&file->f_ref))"] NotDecidable
        "a race: the file's last reference went at that moment";
    "fs/file.c" "__fget_files_rcu" ["unlikely(fd >= fdt->max_fds)"] NotYet
        "an fd beyond the table (6.1): the fd and the table's size (task state) decide it";
    "fs/file.c" "__fget_files_rcu" ["unlikely(!file_ref_get(&file->f_ref))", "unlikely(!get_file_rcu(file))"] NotDecidable
        "a race: the file's last reference went at that moment";
    "fs/file.c" "__fget_files_rcu" ["unlikely(file != rcu_dereference_raw(*fdentry))", "unlikely(rcu_dereference_raw(*fdentry) != file)"] NotDecidable
        "a race: another thread replaced the fd during the lookup";
    "fs/file.c" "__fget_files_rcu" ["unlikely(rcu_dereference_raw(files->fdt) != fdt)"] NotDecidable RACE_RESIZE;
    // fs/open.c
    "fs/open.c" "file_get_write_access" ["error = get_write_access(f->f_inode); if (unlikely(error"] NotDecidable
        "the inode is being executed (deny-write), for every file the kernel opens for writing, backing files included";
    "fs/open.c" "file_get_write_access" ["error = mnt_get_write_access(f->f_path.mnt); if (unlikely(error"] NotDecidable
        "the mount is read-only or frozen at that moment, for every file the kernel opens for writing, backing files included";
    "fs/open.c" "file_get_write_access" ["unlikely(f->f_mode & FMODE_BACKING)"] NotDecidable
        "the file is an overlayfs or FUSE backing file: opened by the kernel inside another open";
    "fs/open.c" "file_get_write_access" ["error = mnt_get_write_access(backing_file_user_path(f)->mnt); if (unlikely(error"] NotDecidable
        "the backing file's user mount is read-only at that moment: opened by the kernel inside another open";
    "fs/open.c" "do_dentry_open" ["unlikely(f->f_flags & O_PATH)"] NotDecidable DENTRY_OPEN;
    "fs/open.c" "do_dentry_open" ["error = file_get_write_access(f); if (unlikely(error", "error = get_write_access(inode); if (unlikely(error"] NotDecidable DENTRY_OPEN;
    "fs/open.c" "do_dentry_open" ["error = __mnt_want_write(f->f_path.mnt); if (unlikely(error"] NotDecidable DENTRY_OPEN;
    "fs/open.c" "do_dentry_open" ["error = security_file_open(f); if (unlikely(error"] NotDecidable
        "a security module refused the open: LSM policy state, for every file the kernel opens";
    "fs/open.c" "do_dentry_open" ["error = fsnotify_open_perm_and_set_mode(f); if (unlikely(error"] NotDecidable
        "a fanotify permission listener refused the open: another process's answer";
    "fs/open.c" "do_dentry_open" ["error = break_lease(file_inode(f), f->f_flags); if (unlikely(error"] NotDecidable
        "breaking another process's lease failed or was interrupted: lease state";
    "fs/open.c" "do_dentry_open" ["likely(f->f_op->read || f->f_op->read_iter)"] NotDecidable
        "whether the file's driver has read methods: its file_operations, kernel state";
    "fs/open.c" "do_dentry_open" ["likely(f->f_op->write || f->f_op->write_iter)"] NotDecidable
        "whether the file's driver has write methods: its file_operations, kernel state";
    "fs/open.c" "dentry_create" ["if (unlikely(error)) { fput(f);"] NotDecidable
        "called by nfsd only, never from a syscall (6.1)";
    "fs/open.c" "sys_close" ["unlikely(retval == -ERESTARTSYS"] NotYet
        "the file's flush asked for a restart (6.1): close then returns -EINTR, which flush may also return itself";
    // fs/fcntl.c
    "fs/fcntl.c" "file_f_owner_allocate" ["unlikely(cmpxchg(&file->f_owner, NULL, f_owner))"] NotDecidable
        "a race: another thread set the file's owner at that moment";
    "fs/fcntl.c" "sys_fcntl64" ["unlikely(fd_file(f)->f_mode & FMODE_PATH)", "unlikely(f.file->f_mode & FMODE_PATH)"] NotDecidable
        "built only where BITS_PER_LONG is 32: not in a 64-bit kernel";
    "fs/fcntl.c" "do_compat_fcntl64" ["unlikely(fd_file(f)->f_mode & FMODE_PATH)", "unlikely(f.file->f_mode & FMODE_PATH)"] NotDecidable
        "compat (32-bit) syscalls: the syscall tracepoints do not fire for them";
    // include/linux/file.h
    "include/linux/file.h" "fd_empty" ["unlikely(!f.word)"] NotYet
        "the lookup found no file: measured where do_pollfd calls it (7.2); no measured code calls it in this tree";
    "include/linux/file.h" "class_fd_prepare_destructor" ["unlikely(fdf->__fd >= 0)"] NotYet
        "an fd was allocated and the file was not made (FD_PREPARE): the allocation and the syscall's error decide it";
    "include/linux/file.h" "class_fd_prepare_destructor" ["unlikely(!IS_ERR_OR_NULL(fdf->__file))"] NotYet
        "a file made but not published (FD_PREPARE): the syscall's error path decides it";
    "include/linux/file.h" "class_fd_prepare_lock_err" ["unlikely(fdf->err)"] NotYet
        "FD_PREPARE's error field, zero when it is first read";
    "include/linux/file.h" "class_fd_prepare_lock_err" ["unlikely(fdf->__fd < 0)"] NotYet
        "the fd allocation failed (FD_PREPARE): the fd model and the syscall's error decide it";
    "include/linux/file.h" "class_fd_prepare_lock_err" ["unlikely(IS_ERR(fdf->__file))"] NotYet
        "the file was not made after the fd was allocated (FD_PREPARE): the syscall's error decides it";
    "include/linux/file.h" "class_fd_prepare_lock_err" ["unlikely(!fdf->__file)"] NotYet
        "the file expression gave NULL (FD_PREPARE): the syscall's error decides it";
    "include/linux/file.h" "__FD_PREPARE_INIT" ["likely(fdf.__fd >= 0)"] NotYet
        "the fd allocation succeeded (FD_PREPARE): the fd model decides it";
    "include/linux/file.h" "__FD_ADD" ["likely(!ret)"] NotYet
        "fd and file both made (FD_ADD): the syscall's result decides it";
}
