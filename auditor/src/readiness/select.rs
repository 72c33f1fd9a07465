//! select and pselect6 (fs/select.c): `core_sys_select` → `max_select_fd` → `do_select`.

use auditor_common::{
    Site,
    prelude::{Prelude, Timeout},
    select,
};

use super::{
    Decided, Hint, Recorder, SiteInfo, Unit, branch,
    fd::{self, Task},
    unlikely, written,
};

const SYSCALLS: &[&str] = &["select", "pselect6"];

pub const N_NEGATIVE: SiteInfo = SiteInfo {
    site: Site::SelectNNegative,
    id: "select.n_negative",
    function: "core_sys_select",
    file: "fs/select.c",
    condition: "n < 0 (-> -EINVAL)",
    hint: Hint::Unlikely,
    hint_since: "6.16",
    unit: Unit::Call,
    syscalls: SYSCALLS,
    source: &[written("n < 0")],
    decided: Decided::Exit,
};

pub const N_CLAMPED: SiteInfo = SiteInfo {
    site: Site::SelectNClamped,
    id: "select.n_clamped",
    function: "core_sys_select",
    file: "fs/select.c",
    condition: "n > fdt->max_fds (n is cut to max_fds)",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::Call,
    syscalls: SYSCALLS,
    source: &[written("n > max_fds")],
    decided: Decided::TaskState,
};

pub const BITMAPS_ON_HEAP: SiteInfo = SiteInfo {
    site: Site::SelectBitmapsOnHeap,
    id: "select.bitmaps_on_heap",
    function: "core_sys_select",
    file: "fs/select.c",
    condition: "FDS_BYTES(n) > 256/6, i.e. clamped n > 320 (kvmalloc, not the stack)",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::Call,
    syscalls: SYSCALLS,
    source: &[written("size > sizeof(stack_fds) / 6")],
    decided: Decided::TaskState,
};

pub const FD_NOT_OPEN: SiteInfo = SiteInfo {
    site: Site::SelectFdNotOpen,
    id: "select.fd_not_open",
    function: "max_select_fd",
    file: "fs/select.c",
    condition: "a set bit names an fd that is not open (-> -EBADF)",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::Call,
    syscalls: SYSCALLS,
    source: &[written("if (set & ~*open_fds)")],
    decided: Decided::Exit,
};

pub const ZERO_TIMEOUT: SiteInfo = SiteInfo {
    site: Site::SelectZeroTimeout,
    id: "select.zero_timeout",
    function: "do_select",
    file: "fs/select.c",
    condition: "timeout given and zero (one pass, no wait)",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::Call,
    syscalls: SYSCALLS,
    source: &[written(
        "end_time && !end_time->tv_sec && !end_time->tv_nsec",
    )],
    decided: Decided::Exit,
};

pub const WORD_EMPTY: SiteInfo = SiteInfo {
    site: Site::SelectWordEmpty,
    id: "select.word_empty",
    function: "do_select",
    file: "fs/select.c",
    condition: "a 64-bit word of in|out|ex is all zero (skipped)",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::FdSetWord,
    syscalls: SYSCALLS,
    source: &[written("all_bits == 0")],
    decided: Decided::TaskState,
};

/// One select or pselect6 call as observed.
#[derive(Clone, Debug)]
pub struct SelectCall {
    pub n: i32,
    /// The entry point's checks: the timeout and, for pselect6, the signal mask.
    pub prelude: Prelude,
    pub timeout: Timeout,
    /// in | out | ex per word, as passed, if they were read.
    pub words: Option<Vec<u64>>,
    pub ret: i64,
}

/// Runs one call through the model, recording every catalogued branch it evaluates.
pub fn select(recorder: &mut Recorder, task: Option<&Task>, call: &SelectCall) {
    let n_negative = unlikely!(
        recorder,
        N_NEGATIVE,
        select::n_negative_evaluation(call.n, call.prelude, call.ret)
    );
    let after_n = select::after(n_negative);
    let (clamped, on_heap, n) = select::clamp_evaluations(after_n, call.n, task.map(|t| t.max_fds));
    branch!(recorder, N_CLAMPED, clamped);
    branch!(recorder, BITMAPS_ON_HEAP, on_heap);
    let fd_not_open = branch!(
        recorder,
        FD_NOT_OPEN,
        select::fd_not_open_evaluation(call.n, n_negative, call.ret)
    );
    branch!(
        recorder,
        ZERO_TIMEOUT,
        select::zero_timeout_evaluation(fd_not_open, call.timeout.is_zero())
    );
    let scan = match (n, &call.words) {
        (Some(n), Some(words)) => Some(select::scan_words(words, n)),
        _ => None,
    };
    let upper_n = n.unwrap_or(call.n.max(0) as u32);
    let shared = task.map(|task| task.shared);
    let (words, lookups) = select::walk_counts(select::after(fd_not_open), scan, upper_n, shared);
    // Every word of the walk is a branch!(WORD_EMPTY) and every set fd a TABLE_SHARED
    // lookup; the counts come whole from the shared walk.
    const _: () = assert!(WORD_EMPTY.hint.is(Hint::None));
    recorder.record_counts(&WORD_EMPTY, &words);
    recorder.record_counts(&fd::TABLE_SHARED, &lookups);
}

#[cfg(test)]
mod tests {
    use auditor_common::{Counts, errno};

    use super::*;

    fn call(n: i32, timeout: Timeout, words: Vec<u64>, ret: i64) -> SelectCall {
        SelectCall {
            n,
            prelude: timeout.prelude(),
            timeout,
            words: Some(words),
            ret,
        }
    }

    #[test]
    fn a_zero_timeout_select_of_1000_fds() {
        let mut recorder = Recorder::default();
        let task = Task::with_open_fds(1000, 1024);
        let mut words = vec![0u64; 16];
        (3..1000).for_each(|fd| words[fd / 64] |= 1 << (fd % 64));
        select(
            &mut recorder,
            Some(&task),
            &call(1000, Timeout::Zero, words, 997),
        );
        let counts = |site| recorder.counts(site);
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
    fn n_is_clamped_to_the_table() {
        let mut recorder = Recorder::default();
        let task = Task::with_open_fds(3, 1024);
        // n = 1000 on a 64-fd table: n becomes 64, the bitmaps fit on the stack.
        select(
            &mut recorder,
            Some(&task),
            &call(1000, Timeout::Infinite, vec![0b100], 1),
        );
        assert_eq!(recorder.counts(Site::SelectNClamped), Counts::new(1, 0, 0));
        assert_eq!(
            recorder.counts(Site::SelectBitmapsOnHeap),
            Counts::new(0, 1, 0)
        );
        assert_eq!(
            recorder.counts(Site::SelectZeroTimeout),
            Counts::new(0, 1, 0)
        );
        assert_eq!(recorder.counts(Site::SelectWordEmpty), Counts::new(0, 1, 0));
    }

    #[test]
    fn failing_calls_stop_where_the_kernel_does() {
        let mut recorder = Recorder::default();
        let task = Task::with_open_fds(3, 1024);
        select(
            &mut recorder,
            Some(&task),
            &call(-1, Timeout::Zero, vec![], -errno::EINVAL),
        );
        select(
            &mut recorder,
            Some(&task),
            &call(10, Timeout::Zero, vec![1 << 9], -errno::EBADF),
        );
        assert_eq!(recorder.counts(Site::SelectNNegative), Counts::new(1, 1, 0));
        assert_eq!(recorder.counts(Site::SelectNClamped), Counts::new(0, 1, 0));
        assert_eq!(recorder.counts(Site::SelectFdNotOpen), Counts::new(1, 0, 0));
        assert_eq!(recorder.counts(Site::SelectZeroTimeout), Counts::ZERO);
        assert_eq!(recorder.counts(Site::SelectWordEmpty), Counts::ZERO);
    }

    #[test]
    fn without_the_task_state_the_stateful_sites_are_undecided() {
        let mut recorder = Recorder::default();
        select(
            &mut recorder,
            None,
            &call(1000, Timeout::Zero, vec![1; 16], 1),
        );
        assert_eq!(recorder.counts(Site::SelectNClamped), Counts::new(0, 0, 1));
        assert_eq!(
            recorder.counts(Site::SelectBitmapsOnHeap),
            Counts::new(0, 0, 1)
        );
        assert_eq!(
            recorder.counts(Site::SelectWordEmpty),
            Counts::new(0, 0, 16)
        );
        // Up to 320 fds the bitmaps are on the stack whatever the table.
        let mut recorder = Recorder::default();
        select(
            &mut recorder,
            None,
            &call(300, Timeout::Zero, vec![1; 5], 1),
        );
        assert_eq!(
            recorder.counts(Site::SelectBitmapsOnHeap),
            Counts::new(0, 1, 0)
        );
    }
}
