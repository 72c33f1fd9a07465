//! The poll family (fs/select.c): branches of `do_sys_poll`, `do_poll` and `do_pollfd`, how
//! an observer tells whether a call got to each, and [`poll`], the walk through them in the
//! kernel's order.

use crate::{
    Counts, Evaluation, Reached,
    catalogue::{Recorder, branch, unlikely},
    errno,
    fd::{self, TaskState},
    prelude::{Prelude, Timeout},
    scan_reached,
};

/// One poll or ppoll call as observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollCall {
    pub nfds: u32,
    /// ppoll's timeout and sigmask checks (poll has none).
    pub prelude: Prelude,
    pub timeout: Timeout,
    pub ret: i64,
}

/// `do_poll`'s scan of the entries, fed entry by entry (or in bulk): `do_pollfd` skips an
/// entry with `fd < 0`, and looks the others up, POLLNVAL in revents for one not open.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryScan {
    /// Entries read.
    pub read: u64,
    /// Of them, with fd < 0.
    pub negative: u64,
    /// Of the others, not open.
    pub not_open: u64,
    /// Of the others, whose revents are not known (strace cuts long lists).
    pub revents_unknown: u64,
    /// Entries that could not be read at all.
    pub unreadable: u64,
}

impl EntryScan {
    /// An entry and its revents after the scan.
    pub fn push(&mut self, entry: PollFd) {
        self.add(1, entry_bits(entry.fd, entry.revents));
    }

    /// `entries` entries read at once, of which `negative` with fd < 0 and `not_open` of
    /// the others not open (as [`entry_bits`] sums them).
    pub fn add(&mut self, entries: u64, (negative, not_open): (u64, u64)) {
        self.read += entries;
        self.negative += negative;
        self.not_open += not_open;
    }

    /// An entry whose revents are not known.
    pub fn push_without_revents(&mut self, fd: i32) {
        self.read += 1;
        if fd_negative(fd) {
            self.negative += 1;
        } else {
            self.revents_unknown += 1;
        }
    }

    /// An array none of whose `nfds` entries could be read.
    pub const fn unreadable(nfds: u32) -> EntryScan {
        EntryScan {
            read: 0,
            negative: 0,
            not_open: 0,
            revents_unknown: 0,
            unreadable: nfds as u64,
        }
    }
}

/// `do_sys_poll` → `do_poll` → `do_pollfd` for one call: every catalogued branch it
/// evaluates, each gated by the ones before. `entries` reads the array after the scan
/// (asked only when the scan ran; None: it could not be read).
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn poll<R: Recorder>(
    recorder: &mut R,
    call: &PollCall,
    entries: impl FnOnce() -> Option<EntryScan>,
    task: &impl TaskState,
) {
    let over_rlimit = branch!(
        recorder,
        PollNfdsOverRlimit,
        nfds_over_rlimit_evaluation(call.prelude, call.ret)
    );
    branch!(
        recorder,
        PollEntriesOnHeap,
        entries_on_heap_evaluation(over_rlimit, call.nfds, call.ret)
    );
    let scanned = scan(over_rlimit, call.ret);
    branch!(
        recorder,
        PollZeroTimeout,
        scanned.evaluate(call.timeout.is_zero())
    );
    let entries = match scanned {
        Reached::No => return,
        Reached::Yes => entries().unwrap_or(EntryScan::unreadable(call.nfds)),
        Reached::Unknown => EntryScan::unreadable(call.nfds),
    };
    let looked_up = entries.read - entries.negative;
    unlikely!(
        recorder,
        PollFdNegative,
        counts = &Counts::new(entries.negative, looked_up, entries.unreadable)
    );
    // `if (fd_empty(f))`: fd_empty() returns `unlikely(!f.word)`.
    unlikely!(
        recorder,
        PollFdNotOpen,
        counts = &Counts::new(
            entries.not_open,
            looked_up - entries.not_open - entries.revents_unknown,
            entries.unreadable + entries.revents_unknown,
        )
    );
    // Every entry not skipped is looked up; one that could not be read may have been.
    fd::fget(recorder, looked_up, scanned, task);
    fd::fget(recorder, entries.unreadable, Reached::Unknown, task);
}

/// `struct pollfd` as user space passes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollFd {
    pub fd: i32,
    pub events: i16,
    pub revents: i16,
}

impl PollFd {
    /// The entry as the little-endian word it is in user memory (see [`words`]).
    pub const fn word(self) -> u64 {
        self.fd as u32 as u64
            | (self.events as u16 as u64) << 32
            | (self.revents as u16 as u64) << 48
    }
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

/// [`entry_bits`] summed a word at a time over many entries, for the probe: an entry is
/// the little-endian word [`PollFd::word`], fd in bits 0..32 and revents in 48..64. The sum
/// of [`word_bits`] keeps fd's sign in one field and POLLNVAL in another, three
/// instructions an entry; only when it found POLLNVAL does [`word_skipped_nval`] need a
/// second sum, of the entries that have both (do_pollfd skips a negative fd whatever its
/// revents say). [`word_sums`] turns the two sums into `entry_bits`' pair.
pub mod words {
    use super::POLLNVAL;

    const SIGN_BIT: u32 = 31;
    const NVAL_BIT: u32 = 48 + POLLNVAL.trailing_zeros();
    const SIGN: u64 = 1 << SIGN_BIT;
    const NVAL: u64 = 1 << NVAL_BIT;

    /// Entries whose words one u64 sums without a carry from a field into the next: the
    /// POLLNVAL field, bits 53..64, holds 2047 (the sign field, 22 bits, more).
    pub const MAX_SUMMED: usize = (1 << (64 - NVAL_BIT)) - 1;

    /// What the first sum keeps of an entry's word: fd's sign bit and revents' POLLNVAL.
    pub const fn word_bits(word: u64) -> u64 {
        word & (SIGN | NVAL)
    }

    /// Whether the first sum counted POLLNVAL somewhere (so the second sum is needed).
    pub const fn has_nval(bits: u64) -> bool {
        bits >> NVAL_BIT != 0
    }

    /// What the second sum keeps of an entry's word: POLLNVAL when fd < 0 too.
    pub const fn word_skipped_nval(word: u64) -> u64 {
        word & (word << (NVAL_BIT - SIGN_BIT)) & NVAL
    }

    /// The entries with fd < 0, and of the others those not open, from the sum of
    /// [`word_bits`] and that of [`word_skipped_nval`] (0 when not [`has_nval`]) over at
    /// most [`MAX_SUMMED`] entries.
    pub const fn word_sums(bits: u64, skipped_nval: u64) -> (u64, u64) {
        let negative = (bits >> SIGN_BIT) & ((1 << (NVAL_BIT - SIGN_BIT)) - 1);
        (negative, (bits >> NVAL_BIT) - (skipped_nval >> NVAL_BIT))
    }
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
    use crate::{Site, catalogue::Counters, errno::*, fd::Unseen};

    fn call(nfds: u32, ret: i64) -> PollCall {
        PollCall {
            nfds,
            prelude: Prelude::Passes,
            timeout: Timeout::Zero,
            ret,
        }
    }

    #[test]
    fn entries_count_once_per_call() {
        let mut counters = Counters::default();
        let mut scan = EntryScan::default();
        for (fd, revents) in [(3, 1), (-1, 0), (99, POLLNVAL)] {
            scan.push(PollFd {
                fd,
                events: 1,
                revents,
            });
        }
        // strace cut the list: the last entry's revents are not known.
        scan.push_without_revents(7);
        poll(&mut counters, &call(4, 2), || Some(scan), &Unseen);
        assert_eq!(counters.get(Site::PollNfdsOverRlimit), Counts::new(0, 1, 0));
        assert_eq!(counters.get(Site::PollEntriesOnHeap), Counts::new(0, 1, 0));
        assert_eq!(counters.get(Site::PollZeroTimeout), Counts::new(1, 0, 0));
        assert_eq!(counters.get(Site::PollFdNegative), Counts::new(1, 3, 0));
        assert_eq!(counters.get(Site::PollFdNotOpen), Counts::new(1, 1, 1));
        assert_eq!(counters.get(Site::FgetTableShared), Counts::new(0, 0, 3));
    }

    #[test]
    fn over_the_limit_nothing_else_runs() {
        let mut counters = Counters::default();
        poll(
            &mut counters,
            &call(5000, -EINVAL),
            || unreachable!(),
            &Unseen,
        );
        assert_eq!(counters.get(Site::PollNfdsOverRlimit), Counts::new(1, 0, 0));
        for site in [
            Site::PollEntriesOnHeap,
            Site::PollZeroTimeout,
            Site::PollFdNegative,
        ] {
            assert_eq!(counters.get(site), Counts::ZERO);
        }
    }

    #[test]
    fn an_unreadable_array_is_unreadable_at_every_entry() {
        let mut counters = Counters::default();
        poll(&mut counters, &call(8, -EFAULT), || unreachable!(), &Unseen);
        poll(&mut counters, &call(8, 0), || None, &Unseen);
        assert_eq!(counters.get(Site::PollFdNegative), Counts::new(0, 0, 16));
        assert_eq!(counters.get(Site::PollFdNotOpen), Counts::new(0, 0, 16));
        assert_eq!(counters.get(Site::FgetTableShared), Counts::new(0, 0, 16));
    }

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

    /// The word sums equal entry_bits' over arrays of every mix: fds of either sign,
    /// revents with and without POLLNVAL (on negative fds too), up to the most entries a
    /// sum holds.
    #[test]
    fn word_sums_are_entry_bits() {
        let entry = PollFd {
            fd: -2,
            events: 3,
            revents: POLLNVAL,
        };
        assert_eq!(entry.word(), 0x0020_0003_ffff_fffe);
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..2000 {
            let len = match round % 4 {
                0 => words::MAX_SUMMED,
                _ => (next() % 300) as usize,
            };
            let nval_share = next() % 4;
            let mut array = [PollFd::default(); words::MAX_SUMMED];
            for entry in &mut array[..len] {
                let r = next();
                let revents = r as i16;
                *entry = PollFd {
                    fd: (r >> 16) as i32,
                    events: (r >> 48) as i16,
                    revents: match (r >> 40) % 4 < nval_share {
                        true => revents | POLLNVAL,
                        false => revents & !POLLNVAL,
                    },
                };
            }
            let entries = &array[..len];
            let expected = entries.iter().fold((0, 0), |(n, o), e| {
                let (dn, d_o) = entry_bits(e.fd, e.revents);
                (n + dn, o + d_o)
            });
            let bits: u64 = entries.iter().map(|e| words::word_bits(e.word())).sum();
            let skipped: u64 = entries
                .iter()
                .map(|e| words::word_skipped_nval(e.word()))
                .sum();
            assert_eq!(words::word_sums(bits, skipped), expected, "round {round}");
            assert_eq!(
                words::has_nval(bits),
                entries.iter().any(|e| fd_not_open(e.revents))
            );
            if !words::has_nval(bits) {
                assert_eq!(words::word_sums(bits, 0), expected);
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
