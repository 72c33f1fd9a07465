//! The select family (fs/select.c): branches of `core_sys_select`, `max_select_fd` and
//! `do_select`, how an observer tells whether a call got to each, and [`select`], the
//! walk through them in the kernel's order.

use crate::{
    Counts, Evaluation, Reached,
    catalogue::{Recorder, branch, unlikely},
    errno,
    fd::TaskState,
    prelude::{Prelude, Timeout},
    scan_reached,
};

/// One select or pselect6 call as observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectCall {
    pub n: i32,
    /// The entry point's checks: the timeout and, for pselect6, the signal mask.
    pub prelude: Prelude,
    pub timeout: Timeout,
    /// `fdt->max_fds` as `core_sys_select` read it, at its start (None: not read).
    pub max_fds: Option<u32>,
    pub ret: i64,
}

/// `core_sys_select` → `max_select_fd` → `do_select` for one call: every catalogued
/// branch it evaluates, each gated by the ones before. `scan` is the walk over its fd_sets
/// (None: they were not read).
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn select<R: Recorder>(
    recorder: &mut R,
    call: &SelectCall,
    scan: Option<SetScan>,
    task: &impl TaskState,
) {
    let n_negative = unlikely!(
        recorder,
        SelectNNegative,
        n_negative_evaluation(call.n, call.prelude, call.ret)
    );
    let (clamped, on_heap, used_n) = clamp_evaluations(after(n_negative), call.n, call.max_fds);
    branch!(recorder, SelectNClamped, clamped);
    branch!(recorder, SelectBitmapsOnHeap, on_heap);
    let fd_not_open = branch!(
        recorder,
        SelectFdNotOpen,
        fd_not_open_evaluation(call.n, n_negative, call.ret)
    );
    branch!(
        recorder,
        SelectZeroTimeout,
        zero_timeout_evaluation(fd_not_open, call.timeout.is_zero())
    );
    // do_select's walk: `all_bits == 0` for every word up to the highest set fd, one
    // fdget (`__fget_light`) for every set fd.
    let reached = after(fd_not_open);
    let shared = match reached {
        Reached::Yes => task.table_shared(),
        Reached::No | Reached::Unknown => None,
    };
    let upper_n = match used_n {
        Some(n) => n,
        None => call.n.max(0) as u32,
    };
    let (words, lookups) = walk_counts(reached, scan, upper_n, shared);
    branch!(recorder, SelectWordEmpty, counts = &words);
    unlikely!(recorder, FgetTableShared, counts = &lookups);
}

/// `core_sys_select`: `if (unlikely(n < 0)) return -EINVAL;`
pub const fn n_negative(n: i32) -> bool {
    n < 0
}

/// The `n` the kernel sees: the argument travels in a 64-bit register, but `n` is an `int`.
pub const fn n_from_arg(arg: u64) -> i32 {
    arg as u32 as i32
}

/// `core_sys_select`: `if (n > max_fds) n = max_fds;`
pub const fn n_clamped(n: i32, max_fds: u32) -> bool {
    n as i64 > max_fds as i64
}

/// The n the rest of `core_sys_select` uses once n >= 0: cut to `max_fds` where
/// [`n_clamped`].
pub const fn used_n(n: i32, max_fds: u32) -> u32 {
    if n_clamped(n, max_fds) {
        max_fds
    } else {
        n as u32
    }
}

/// Bytes of one bitmap for `n` fds (`FDS_BYTES`): whole longs.
pub const fn fds_bytes(n: u32) -> u64 {
    (n as u64).div_ceil(64) * 8
}

/// `core_sys_select`: six bitmaps go on the stack (`SELECT_STACK_ALLOC` = 256 bytes) unless
/// `FDS_BYTES(n) > 256 / 6`, i.e. n > 320 after clamping.
pub const fn bitmaps_on_heap(clamped_n: u32) -> bool {
    fds_bytes(clamped_n) > 256 / 6
}

/// `do_select`: `if (all_bits == 0)` — a word of in | out | ex with no fd set is skipped.
pub const fn word_empty(in_bits: u64, out_bits: u64, ex_bits: u64) -> bool {
    in_bits | out_bits | ex_bits == 0
}

/// `core_sys_select`'s clamp and heap branches, reached once the `n < 0` branch was not
/// taken (`after_n`): whether n was cut to `max_fds` (when the observer read it) and whether
/// the six bitmaps went to the heap; and the n the rest of the call uses, when known.
pub const fn clamp_evaluations(
    after_n: Reached,
    n: i32,
    max_fds: Option<u32>,
) -> (Evaluation, Evaluation, Option<u32>) {
    if self::n_negative(n) {
        // Either the n < 0 branch or an earlier check failed the call.
        return (Evaluation::NotReached, Evaluation::NotReached, None);
    }
    let clamped = match max_fds {
        Some(max_fds) => after_n.evaluate(Some(n_clamped(n, max_fds))),
        None => after_n.evaluate(None),
    };
    let used_n = match (clamped, max_fds) {
        (Evaluation::Taken | Evaluation::NotTaken, Some(max_fds)) => Some(used_n(n, max_fds)),
        _ => None,
    };
    // Clamping only lowers n: up to 320 the bitmaps are on the stack either way.
    let on_heap = match used_n {
        Some(used_n) => Some(bitmaps_on_heap(used_n)),
        None if n <= 320 => Some(false),
        None => None,
    };
    (clamped, after_n.evaluate(on_heap), used_n)
}

/// `do_select`'s walk over the fd_set words, fed one word (in | out | ex, the last one
/// masked to n) at a time: `max_select_fd` ends the walk at the highest set fd, the loop
/// evaluates `all_bits == 0` for every word up to it and looks up every set fd.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetScan {
    /// Words pushed so far.
    pub pushed: u32,
    /// Words the walk reaches: up to the last one with a set fd.
    pub scanned: u32,
    /// Empty words among those.
    pub empty: u32,
    /// Set fds: one `fdget` each.
    pub lookups: u32,
    /// Empty words since the last non-empty one (scanned only if another follows).
    pub pending_empty: u32,
}

impl SetScan {
    pub fn push(&mut self, word: u64) {
        self.pushed += 1;
        if word_empty(word, 0, 0) {
            self.pending_empty += 1;
        } else {
            self.empty += self.pending_empty;
            self.pending_empty = 0;
            self.scanned = self.pushed;
            self.lookups += word.count_ones();
        }
    }

    /// Pushes the words a [`StepSums`] summed, as many [`push`](Self::push)es in order.
    pub fn push_step(&mut self, step: &StepSums) {
        if step.last_set != 0 {
            self.empty += self.pending_empty + (step.last_set - step.set);
            self.pending_empty = step.words - step.last_set;
            self.scanned = self.pushed + step.last_set;
        } else {
            self.pending_empty += step.words;
        }
        self.pushed += step.words;
        self.lookups += step.lookups;
    }

    /// Mask of the fds below `n` in the word that holds fd `n - 1`.
    pub const fn last_word_mask(n: u32) -> u64 {
        match n % 64 {
            0 => u64::MAX,
            bits => !(u64::MAX << bits),
        }
    }

    /// Words of a call with `n` fds (after clamping).
    pub const fn words(n: u32) -> u32 {
        n.div_ceil(64)
    }
}

/// A run of words summed without a branch per word, for [`SetScan::push_step`]: the probe
/// sums a step of its walk so, and the verifier then walks one path through the run
/// rather than one per word that ends it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepSums {
    /// Words summed: set by the caller, since a run may be padded with empty words.
    pub words: u32,
    /// Words with some fd set among them.
    pub set: u32,
    /// 1 + the index of the last of those (0: none).
    pub last_set: u32,
    /// Set fds.
    pub lookups: u32,
}

impl StepSums {
    /// Adds `word`, the run's word `index`.
    #[inline(always)]
    pub fn add(&mut self, index: u32, word: u64) {
        let ones = word.count_ones();
        // 1 if some fd is set: arithmetic, not a comparison, which BPF compiles to a branch.
        let set = (ones + 63) >> 6;
        self.set += set;
        self.lookups += ones;
        self.last_set ^= (self.last_set ^ (index + 1)) & set.wrapping_neg();
    }
}

/// The walk over `words` (in | out | ex per word) for a call with `n` fds.
pub fn scan_words(words: &[u64], n: u32) -> SetScan {
    let mut scan = SetScan::default();
    let count = SetScan::words(n) as usize;
    for i in 0..count {
        let word = words.get(i).copied().unwrap_or(0);
        let mask = if i + 1 == count {
            SetScan::last_word_mask(n)
        } else {
            u64::MAX
        };
        scan.push(word & mask);
    }
    scan
}

/// The counts of `do_select`'s walk for one call: `select.word_empty` (per word) and
/// `fget.table_shared` (per set fd; `shared`: whether the table is shared, if known). The
/// walk runs if `reached`; `scan` is the observed walk, None if the sets could not be read,
/// and then every fd the call may name (`upper_n`) is counted as undecided.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn walk_counts(
    reached: Reached,
    scan: Option<SetScan>,
    upper_n: u32,
    shared: Option<bool>,
) -> (Counts, Counts) {
    let (mut words, mut lookups) = (Counts::ZERO, Counts::ZERO);
    match (reached, scan) {
        (Reached::No, _) => {}
        (Reached::Yes, Some(scan)) => {
            words.record(Evaluation::Taken, u64::from(scan.empty));
            words.record(Evaluation::NotTaken, u64::from(scan.scanned - scan.empty));
            lookups.record(reached.evaluate(shared), u64::from(scan.lookups));
        }
        (Reached::Unknown, Some(scan)) => {
            words.record(Evaluation::Undecided, u64::from(scan.scanned));
            lookups.record(Evaluation::Undecided, u64::from(scan.lookups));
        }
        (_, None) => {
            words.record(Evaluation::Undecided, u64::from(SetScan::words(upper_n)));
            lookups.record(Evaluation::Undecided, u64::from(upper_n));
        }
    }
    (words, lookups)
}

/// How `core_sys_select`'s `n < 0` branch went for one call, from the argument, what the
/// observer established about the entry point's checks, and the return value.
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

/// `max_select_fd`: a set bit names an fd that is not open, and the call fails with EBADF.
/// It runs when `n >= 0` and the `n < 0` branch was not taken, after the bitmaps are allocated (ENOMEM)
/// and the fd_sets copied in (EFAULT).
pub const fn fd_not_open_evaluation(n: i32, n_negative: Evaluation, ret: i64) -> Evaluation {
    if self::n_negative(n) {
        return Evaluation::NotReached;
    }
    match n_negative {
        Evaluation::NotTaken if ret == -errno::EBADF => Evaluation::Taken,
        Evaluation::NotTaken => scan_reached(ret).evaluate(Some(false)),
        // n < 0 with EINVAL either way, or an EFAULT from before or after.
        Evaluation::Undecided if ret == -errno::EFAULT => Evaluation::Undecided,
        _ => Evaluation::NotReached,
    }
}

/// `do_select`: the zero-timeout branch, reached once `max_select_fd` passed.
pub const fn zero_timeout_evaluation(fd_not_open: Evaluation, zero: Option<bool>) -> Evaluation {
    after(fd_not_open).evaluate(zero)
}

/// Whether the code after a branch ran, from how the branch went (the taken arm fails).
pub const fn after(gate: Evaluation) -> crate::Reached {
    match gate {
        Evaluation::NotTaken => crate::Reached::Yes,
        Evaluation::Undecided => crate::Reached::Unknown,
        Evaluation::Taken | Evaluation::NotReached => crate::Reached::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Site,
        catalogue::Counters,
        errno::*,
        fd::{TaskState, Unseen},
    };

    /// A task whose table is known not to be shared.
    struct Alone;

    impl TaskState for Alone {
        fn table_shared(&self) -> Option<bool> {
            Some(false)
        }

        fn fd_file(&self, _: u32) -> Option<crate::fd::FdFile> {
            None
        }
    }

    fn call(n: i32, timeout: Timeout, max_fds: Option<u32>, ret: i64) -> SelectCall {
        SelectCall {
            n,
            prelude: timeout.prelude(),
            timeout,
            max_fds,
            ret,
        }
    }

    #[test]
    fn a_zero_timeout_select_of_1000_fds() {
        let mut counters = Counters::default();
        let mut words = [0u64; 16];
        (3..1000).for_each(|fd| words[fd / 64] |= 1 << (fd % 64));
        let scan = scan_words(&words, 1000);
        let call = call(1000, Timeout::Zero, Some(1024), 997);
        select(&mut counters, &call, Some(scan), &Alone);
        let counts = |site| counters.get(site);
        assert_eq!(counts(Site::SelectNNegative), Counts::new(0, 1, 0));
        assert_eq!(counts(Site::SelectNClamped), Counts::new(0, 1, 0));
        // 1000 fds: 128 bytes a bitmap, over 256 / 6.
        assert_eq!(counts(Site::SelectBitmapsOnHeap), Counts::new(1, 0, 0));
        assert_eq!(counts(Site::SelectFdNotOpen), Counts::new(0, 1, 0));
        assert_eq!(counts(Site::SelectZeroTimeout), Counts::new(1, 0, 0));
        assert_eq!(counts(Site::SelectWordEmpty), Counts::new(0, 16, 0));
        assert_eq!(counts(Site::FgetTableShared), Counts::new(0, 997, 0));
    }

    #[test]
    fn failing_calls_stop_where_the_kernel_does() {
        let mut counters = Counters::default();
        let no_scan = Some(SetScan::default());
        select(
            &mut counters,
            &call(-1, Timeout::Zero, Some(64), -EINVAL),
            no_scan,
            &Alone,
        );
        select(
            &mut counters,
            &call(10, Timeout::Zero, Some(64), -EBADF),
            no_scan,
            &Alone,
        );
        assert_eq!(counters.get(Site::SelectNNegative), Counts::new(1, 1, 0));
        assert_eq!(counters.get(Site::SelectNClamped), Counts::new(0, 1, 0));
        assert_eq!(counters.get(Site::SelectFdNotOpen), Counts::new(1, 0, 0));
        assert_eq!(counters.get(Site::SelectZeroTimeout), Counts::ZERO);
        assert_eq!(counters.get(Site::SelectWordEmpty), Counts::ZERO);
    }

    #[test]
    fn without_the_task_state_the_stateful_sites_are_undecided() {
        let mut counters = Counters::default();
        select(
            &mut counters,
            &call(1000, Timeout::Zero, None, 1),
            None,
            &Unseen,
        );
        assert_eq!(counters.get(Site::SelectNClamped), Counts::new(0, 0, 1));
        assert_eq!(
            counters.get(Site::SelectBitmapsOnHeap),
            Counts::new(0, 0, 1)
        );
        assert_eq!(counters.get(Site::SelectWordEmpty), Counts::new(0, 0, 16));
        assert_eq!(counters.get(Site::FgetTableShared), Counts::new(0, 0, 1000));
        // Up to 320 fds the bitmaps are on the stack whatever the table.
        let mut counters = Counters::default();
        select(
            &mut counters,
            &call(300, Timeout::Zero, None, 1),
            None,
            &Unseen,
        );
        assert_eq!(
            counters.get(Site::SelectBitmapsOnHeap),
            Counts::new(0, 1, 0)
        );
    }

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
    fn clamping_and_the_heap() {
        for max_fds in [64, 128, 256] {
            assert!(!n_clamped(max_fds as i32, max_fds));
            assert!(n_clamped(max_fds as i32 + 1, max_fds));
            assert!(!n_clamped(0, max_fds));
        }
        assert!(!bitmaps_on_heap(0));
        assert!(!bitmaps_on_heap(320));
        assert!(bitmaps_on_heap(321));
        assert_eq!(fds_bytes(320), 40);
        assert_eq!(fds_bytes(321), 48);
    }

    #[test]
    fn clamping_from_the_table() {
        use Evaluation::*;
        assert_eq!(
            clamp_evaluations(Reached::Yes, 1000, Some(1024)),
            (NotTaken, Taken, Some(1000))
        );
        assert_eq!(
            clamp_evaluations(Reached::Yes, 1000, Some(64)),
            (Taken, NotTaken, Some(64))
        );
        assert_eq!(
            clamp_evaluations(Reached::Yes, 1000, None),
            (Undecided, Undecided, None)
        );
        assert_eq!(
            clamp_evaluations(Reached::Yes, 300, None),
            (Undecided, NotTaken, None)
        );
        assert_eq!(
            clamp_evaluations(Reached::No, 1000, Some(64)),
            (NotReached, NotReached, None)
        );
        assert_eq!(
            clamp_evaluations(Reached::Unknown, 5, Some(64)),
            (Undecided, Undecided, None)
        );
    }

    #[test]
    fn words() {
        assert!(word_empty(0, 0, 0));
        assert!(!word_empty(1, 0, 0));
        assert!(!word_empty(0, 0, 1 << 63));
        let walk = |s: SetScan| (s.empty, s.scanned - s.empty, s.lookups);
        // fds 3..1000 set: 16 words scanned, none empty, 997 lookups.
        let mut full = [0u64; 16];
        (3..1000).for_each(|fd| full[fd / 64] |= 1 << (fd % 64));
        assert_eq!(walk(scan_words(&full, 1000)), (0, 16, 997));
        // Only fd 200 set: words 0-2 empty, word 3 not; the rest not scanned.
        let mut sparse = [0u64; 16];
        sparse[3] = 1 << 8;
        assert_eq!(walk(scan_words(&sparse, 1000)), (3, 1, 1));
        // Bits at or past n are not fds of the call.
        assert_eq!(walk(scan_words(&sparse, 200)), (0, 0, 0));
        assert_eq!(walk(scan_words(&sparse, 201)), (3, 1, 1));
        assert_eq!(walk(scan_words(&[0, 0], 128)), (0, 0, 0));
        assert_eq!(SetScan::last_word_mask(64), u64::MAX);
        assert_eq!(SetScan::last_word_mask(65), 1);
    }

    #[test]
    fn steps_summed_without_branches_push_as_word_by_word() {
        // Every run of up to 7 words drawn from empty, one fd, and full words, cut into
        // steps at every place: the steps' sums push what the words push one by one.
        let kinds = [0, 1 << 9, u64::MAX];
        for len in 0..7u32 {
            for pick in 0..3u32.pow(len) {
                let all: [u64; 6] =
                    core::array::from_fn(|i| kinds[(pick / 3u32.pow(i as u32) % 3) as usize]);
                let words = &all[..len as usize];
                let mut one_by_one = SetScan::default();
                words.iter().for_each(|&w| one_by_one.push(w));
                for cut in 0..=words.len() {
                    let mut stepped = SetScan::default();
                    for part in [&words[..cut], &words[cut..]] {
                        let mut step = StepSums {
                            words: part.len() as u32,
                            ..StepSums::default()
                        };
                        for (index, &word) in part.iter().enumerate() {
                            step.add(index as u32, word);
                        }
                        stepped.push_step(&step);
                    }
                    assert_eq!(stepped, one_by_one, "{words:x?} cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn n_negative_from_return() {
        use Evaluation::*;
        assert_eq!(n_negative_evaluation(-1, Prelude::Passes, -EINVAL), Taken);
        assert_eq!(n_negative_evaluation(5, Prelude::Passes, 0), NotTaken);
        assert_eq!(
            n_negative_evaluation(-1, Prelude::Fails, -EINVAL),
            NotReached
        );
        assert_eq!(
            n_negative_evaluation(-1, Prelude::Unknown, -EINVAL),
            Undecided
        );
        assert_eq!(
            n_negative_evaluation(5, Prelude::Unknown, -EINVAL),
            NotReached
        );
        assert_eq!(
            n_negative_evaluation(5, Prelude::Unknown, -EFAULT),
            Undecided
        );
        assert_eq!(n_negative_evaluation(5, Prelude::Unknown, 2), NotTaken);
        assert_eq!(n_negative_evaluation(5, Prelude::Unknown, -EBADF), NotTaken);
    }

    #[test]
    fn later_branches_from_return() {
        use Evaluation::*;
        assert_eq!(fd_not_open_evaluation(5, NotTaken, -EBADF), Taken);
        assert_eq!(fd_not_open_evaluation(5, NotTaken, 0), NotTaken);
        assert_eq!(
            fd_not_open_evaluation(5, NotTaken, -ERESTARTNOHAND),
            NotTaken
        );
        assert_eq!(fd_not_open_evaluation(5, NotTaken, -ENOMEM), NotReached);
        assert_eq!(fd_not_open_evaluation(5, NotTaken, -EFAULT), Undecided);
        assert_eq!(fd_not_open_evaluation(-1, Taken, -EINVAL), NotReached);
        assert_eq!(fd_not_open_evaluation(-1, Undecided, -EFAULT), NotReached);
        assert_eq!(fd_not_open_evaluation(5, NotReached, -EFAULT), NotReached);
        assert_eq!(fd_not_open_evaluation(5, Undecided, -EFAULT), Undecided);
        assert_eq!(fd_not_open_evaluation(5, Undecided, -EINVAL), NotReached);
        assert_eq!(zero_timeout_evaluation(NotTaken, Some(true)), Taken);
        assert_eq!(zero_timeout_evaluation(NotTaken, Some(false)), NotTaken);
        assert_eq!(zero_timeout_evaluation(Taken, Some(true)), NotReached);
        assert_eq!(zero_timeout_evaluation(Undecided, Some(true)), Undecided);
        assert_eq!(zero_timeout_evaluation(NotTaken, None), Undecided);
    }
}
