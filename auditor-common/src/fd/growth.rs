//! The table's growth (`expand_files`, `alloc_fdtable`) and its copy at fork or unshare
//! (`dup_fd`).

use super::BITS_PER_LONG;
use crate::{
    Evaluation,
    catalogue::{Recorder, unlikely},
};

/// `expand_files`: `if (unlikely(nr >= sysctl_nr_open))` — the table cannot grow to hold
/// `fd` (-EMFILE).
pub const fn past_nr_open(fd: u32, nr_open: u32) -> bool {
    fd >= nr_open
}

/// `alloc_fdtable`: `if (unlikely(nr > sysctl_nr_open))` — the size rounded up to a power
/// of two is past fs.nr_open (it is then cut to fs.nr_open rounded down to 64 fds).
pub const fn rounded_past_nr_open(nr: u32, nr_open: u32) -> bool {
    nr > nr_open
}

/// `alloc_fdtable`: `if (unlikely(nr > INT_MAX / sizeof(struct file *)))` — the fd array
/// would pass INT_MAX bytes (-EMFILE).
pub const fn fd_array_too_large(nr: u32) -> bool {
    nr as u64 > i32::MAX as u64 / 8
}

/// A recorder that keeps nothing: for working out what the kernel did without counting it
/// again.
struct Uncounted;

impl Recorder for Uncounted {
    fn record(&mut self, _: crate::Site, _: Evaluation) {}
    fn record_counts(&mut self, _: crate::Site, _: &crate::Counts) {}
}

/// `expand_files(files, fd)` once the table is full at `fd`, then `expand_fdtable` →
/// `alloc_fdtable(fd + 1)`: the size the table grows to, or None when it cannot
/// (-EMFILE). A race with another thread growing it is not modelled.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub(super) fn grow<R: Recorder>(recorder: &mut R, fd: u32, nr_open: u32) -> Option<u32> {
    let past = unlikely!(
        recorder,
        FdPastNrOpen,
        Evaluation::from_taken(past_nr_open(fd, nr_open))
    );
    if past == Evaluation::Taken {
        return None;
    }
    alloc_fdtable(recorder, fd + 1, nr_open)
}

/// `alloc_fdtable(slots_wanted)`: the size of the new table (a power of two, or fs.nr_open
/// rounded down to 64 fds when that is past it), or None when it cannot (-EMFILE).
#[cfg_attr(target_arch = "bpf", inline(always))]
fn alloc_fdtable<R: Recorder>(recorder: &mut R, wanted: u32, nr_open: u32) -> Option<u32> {
    let mut nr = wanted.next_power_of_two();
    let rounded_past = unlikely!(
        recorder,
        FdtableRoundedPastNrOpen,
        Evaluation::from_taken(rounded_past_nr_open(nr, nr_open))
    );
    if rounded_past == Evaluation::Taken {
        nr = nr_open / BITS_PER_LONG * BITS_PER_LONG;
        if nr < wanted {
            return None;
        }
    }
    let too_large = unlikely!(
        recorder,
        FdtableTooLarge,
        Evaluation::from_taken(fd_array_too_large(nr))
    );
    (too_large == Evaluation::NotTaken).then_some(nr)
}

/// A recorder that counts every evaluation it is given as undecided: for the tests a call
/// reaches only if a state nobody read says so.
struct Unsure<'a, R>(&'a mut R);

impl<R: Recorder> Recorder for Unsure<'_, R> {
    fn record(&mut self, site: crate::Site, evaluation: Evaluation) {
        if evaluation != Evaluation::NotReached {
            self.0.record(site, Evaluation::Undecided);
        }
    }
    fn record_counts(&mut self, site: crate::Site, counts: &crate::Counts) {
        let undecided = crate::Counts::new(0, 0, counts.total());
        self.0.record_counts(site, &undecided);
    }
}

/// `expand_files(files, fd)` on a table no one read (another task's: a seccomp
/// supervisor's ADDFD places an fd in the table of the task it answers), knowing only
/// whether it `failed` (-EMFILE, -ENOMEM). The table has at least [`NR_OPEN_DEFAULT`]
/// slots; it holds `fd` unless it was full there, which a failure says, and which a
/// success where the growth would have failed rules out; otherwise the growth's tests are
/// counted undecided, each as it would have gone.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn expand_unread_table<R: Recorder>(
    recorder: &mut R,
    fd: u32,
    nr_open: u32,
    failed: Evaluation,
) {
    if fd < NR_OPEN_DEFAULT {
        return;
    }
    match failed {
        Evaluation::Taken => {
            grow(recorder, fd, nr_open);
        }
        // It could not have grown there: the table held it.
        Evaluation::NotTaken if grown_max_fds(fd, nr_open).is_none() => {}
        _ => {
            grow(&mut Unsure(recorder), fd, nr_open);
        }
    }
}

/// `NR_OPEN_DEFAULT`: the fds of the table embedded in every `files_struct`.
pub const NR_OPEN_DEFAULT: u32 = BITS_PER_LONG;

/// `sane_fdtable_size()`: the slots a copy of a table needs, from its highest open fd
/// (None: none is open): that fd's 64-fd word and every word below, at least
/// [`NR_OPEN_DEFAULT`].
pub const fn copied_size(last_open: Option<u32>) -> u32 {
    match last_open {
        Some(fd) => (fd / BITS_PER_LONG + 1) * BITS_PER_LONG,
        None => NR_OPEN_DEFAULT,
    }
}

/// How a copy of the table (`dup_fd`: fork without CLONE_FILES, `unshare(CLONE_FILES)` of
/// a shared one) went, as the syscall's return value tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyOutcome {
    /// The call succeeded: the table was copied.
    Copied,
    /// It failed: before the copy or in it, the return value does not say.
    Maybe,
}

/// `dup_fd()` of a table whose open fds need `open_files` slots ([`copied_size`]; None:
/// the table could not be read): past the embedded [`NR_OPEN_DEFAULT`] it allocates a
/// table of its own, `alloc_fdtable(open_files)`, whose tests the growth shares. A race
/// with another thread growing the table meanwhile (the copy then tries again) is not
/// modelled.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn copy_table<R: Recorder>(
    recorder: &mut R,
    open_files: Option<u32>,
    nr_open: u32,
    outcome: CopyOutcome,
) {
    let outgrows = open_files.map(|slots| slots > NR_OPEN_DEFAULT);
    if outcome == CopyOutcome::Maybe {
        // The call failed, before the copy or in it.
        unlikely!(recorder, FdCopyOutgrowsEmbedded, Evaluation::Undecided);
        if outgrows != Some(false) {
            unlikely!(recorder, FdtableRoundedPastNrOpen, Evaluation::Undecided);
            unlikely!(recorder, FdtableTooLarge, Evaluation::Undecided);
        }
        return;
    }
    let outgrows = unlikely!(
        recorder,
        FdCopyOutgrowsEmbedded,
        Evaluation::from_known(outgrows)
    );
    match (outgrows, open_files) {
        (Evaluation::Taken, Some(slots)) => {
            // The test is a `while`: once the table is allocated it is made again, on the
            // new table, which holds the open fds.
            if alloc_fdtable(recorder, slots, nr_open).is_some() {
                unlikely!(recorder, FdCopyOutgrowsEmbedded, Evaluation::NotTaken);
            }
        }
        (Evaluation::NotTaken, _) => {}
        _ => {
            unlikely!(recorder, FdtableRoundedPastNrOpen, Evaluation::Undecided);
            unlikely!(recorder, FdtableTooLarge, Evaluation::Undecided);
        }
    }
}

/// The size a table full at `fd` grows to (None: it cannot), as [`grow`] works it out.
pub fn grown_max_fds(fd: u32, nr_open: u32) -> Option<u32> {
    grow(&mut Uncounted, fd, nr_open)
}

/// What `expand_files(files, fd)` did to a table of `max_fds` fds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expansion {
    /// `fd` is inside the table: nothing is tested.
    Fits,
    /// The table grew to this many fds (unless its allocation failed: -ENOMEM, which
    /// only the return value tells).
    Grew(u32),
    /// -EMFILE: past fs.nr_open, or rounded down to it below `fd`, or too large.
    Refused,
}

/// `expand_files(files, fd)` as every caller reaches it (the allocator's search, dup2's
/// newfd): the growth's tests counted once, here.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn expand_files<R: Recorder>(
    recorder: &mut R,
    fd: u32,
    max_fds: u32,
    nr_open: u32,
) -> Expansion {
    if fd < max_fds {
        return Expansion::Fits;
    }
    match grow(recorder, fd, nr_open) {
        Some(grown) => Expansion::Grew(grown),
        None => Expansion::Refused,
    }
}
