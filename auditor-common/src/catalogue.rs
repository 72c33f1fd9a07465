//! The catalogue: every branch site the auditor counts, declared once as one row each.
//! [`Site`], its order, [`SITE_COUNT`] and [`SITES`] are derived from the rows.
//!
//! The model of the kernel path (the `select`, `poll`, `epoll`, `close`, `fd` and `dup`
//! modules) writes each catalogued branch with [`likely!`], [`unlikely!`] or [`branch!`]
//! naming its site: the macro checks at compile time that the hint written at the branch
//! is the row's, and hands the outcome to a [`Recorder`] — the probe's per-process row in
//! the kernel, a tally of counts in user space. The probe and the strace source run the
//! same model functions, so they cannot disagree about the kernel's order of evaluation.

use crate::{
    Counts, Evaluation, Syscall,
    syscalls::{Family, Lookup},
};

/// A branch hint as written in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "user",
    derive(serde::Serialize, schemars::JsonSchema),
    serde(rename_all = "lowercase")
)]
pub enum Hint {
    Likely,
    Unlikely,
    None,
}

impl Hint {
    /// The hint on the other arm of the branch.
    pub const fn opposite(self) -> Hint {
        match self {
            Hint::Likely => Hint::Unlikely,
            Hint::Unlikely => Hint::Likely,
            Hint::None => Hint::None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Hint::Likely => "likely",
            Hint::Unlikely => "unlikely",
            Hint::None => "none",
        }
    }

    /// Whether `self` is `other`, usable in constants.
    pub const fn is(self, other: Hint) -> bool {
        self as u8 == other as u8
    }
}

/// What one evaluation of a site is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "user",
    derive(serde::Serialize, schemars::JsonSchema),
    serde(rename_all = "snake_case")
)]
pub enum Unit {
    Call,
    PollfdEntry,
    FdSetWord,
    Allocation,
    FdLookup,
    /// One `alloc_fdtable()`: a table grown, or copied past the 64 fds it embeds.
    FdtableAllocation,
    /// A task's copy of the table (`dup_fd()`: fork, unshare); its loop tests once, or
    /// twice when it allocates.
    TableCopy,
}

impl Unit {
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Call => "call",
            Unit::PollfdEntry => "pollfd entry",
            Unit::FdSetWord => "fd_set word",
            Unit::Allocation => "allocation",
            Unit::FdLookup => "fd lookup",
            Unit::FdtableAllocation => "fdtable allocation",
            Unit::TableCopy => "table copy",
        }
    }
}

/// Where the probe decides a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "user",
    derive(serde::Serialize, schemars::JsonSchema),
    serde(rename_all = "snake_case")
)]
pub enum Decided {
    /// From the arguments and user memory at entry.
    Enter,
    /// From the return value (and user memory the kernel wrote) at exit.
    Exit,
    /// From the task's fd table or limits.
    TaskState,
}

impl Decided {
    pub const fn name(self) -> &'static str {
        match self {
            Decided::Enter => "enter",
            Decided::Exit => "exit",
            Decided::TaskState => "task state",
        }
    }
}

/// A way a kernel release writes a site's condition, for finding its hint in a source tree.
#[derive(Debug)]
pub struct Fragment {
    /// Text of the condition (white space is not significant).
    pub text: &'static str,
    /// The text states the other arm (e.g. `fd >= 0` for `fd < 0`): a hint on it is the
    /// opposite hint for the site.
    pub negated: bool,
}

/// The site's condition as `text` writes it.
pub const fn written(text: &'static str) -> Fragment {
    Fragment {
        text,
        negated: false,
    }
}

/// The other arm of the site's condition, as `text` writes it.
pub const fn written_negated(text: &'static str) -> Fragment {
    Fragment {
        text,
        negated: true,
    }
}

/// Everything known about a site besides its counts.
#[derive(Debug)]
#[cfg_attr(feature = "user", derive(serde::Serialize, schemars::JsonSchema))]
pub struct SiteInfo {
    #[cfg_attr(feature = "user", serde(skip))]
    pub site: Site,
    /// Stable dotted id, e.g. `poll.fd_negative`.
    pub id: &'static str,
    pub function: &'static str,
    pub file: &'static str,
    /// When the branch is taken, in one line.
    pub condition: &'static str,
    pub hint: Hint,
    /// The first mainline release carrying `hint` (empty for none).
    pub hint_since: &'static str,
    pub unit: Unit,
    /// The syscalls whose evaluations are counted.
    #[cfg_attr(
        feature = "user",
        serde(serialize_with = "syscall_names"),
        schemars(with = "alloc::vec::Vec<alloc::string::String>")
    )]
    pub syscalls: &'static [Syscall],
    pub decided: Decided,
    /// How kernel releases write the condition inside `function`.
    #[cfg_attr(feature = "user", serde(skip))]
    pub source: &'static [Fragment],
    /// The first mainline release whose code has the branch as the model runs it; empty
    /// when every release the probe loads on has it (the trees of 6.1, 6.12 and 7.2 are
    /// the evidence: `auditor sites --kernel-src`). On an older kernel the site's counts
    /// are what the model's code makes of the calls, not branches that kernel ran.
    pub branch_since: &'static str,
    /// What releases before `branch_since` do instead (empty when it is empty).
    pub branch_before: &'static str,
    /// Why no workload can drive one of its arms (empty: the workload's cases drive both,
    /// as `workload::cases` checks).
    #[cfg_attr(feature = "user", serde(skip))]
    pub one_armed: &'static str,
}

impl SiteInfo {
    /// Whether a kernel of `release` (major, minor) runs the branch as the model does.
    pub fn branch_in(&self, release: (u32, u32)) -> bool {
        match parse_release(self.branch_since) {
            Some(since) => release >= since,
            None => true,
        }
    }
}

/// (major, minor) of a release such as `6.19` (None for anything else, the empty string
/// among them).
pub fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The fields a row leaves out: a branch every supported release has.
const ROW: SiteInfo = SiteInfo {
    site: Site::SelectNNegative,
    id: "",
    function: "",
    file: "",
    condition: "",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::Call,
    syscalls: &[],
    decided: Decided::Exit,
    source: &[],
    branch_since: "",
    branch_before: "",
    one_armed: "",
};

#[cfg(feature = "user")]
fn syscall_names<S: serde::Serializer>(
    syscalls: &&'static [Syscall],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(syscalls.iter().map(|syscall| syscall.name()))
}

/// Declares the catalogue: `Variant { field: value, ... }` per site, the fields of
/// [`SiteInfo`] but `site` (`branch_since` and `branch_before` only where a release the
/// probe supports lacks the branch). The order of the rows is the order of [`Site`].
macro_rules! catalogue {
    ($($variant:ident { $($field:ident: $value:expr),* $(,)? })*) => {
        /// A catalogued kernel branch. The discriminant indexes the probe's per-site arrays,
        /// so values are dense and stable: new rows go at the end.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Site {
            $($variant),*
        }

        /// Number of catalogued sites (the length of the probe's per-site arrays).
        pub const SITE_COUNT: usize = [$(Site::$variant),*].len();

        impl Site {
            /// Every site, in catalogue order.
            pub const ALL: [Site; SITE_COUNT] = [$(Site::$variant),*];
        }

        /// Every site's row, in catalogue order.
        #[expect(clippy::needless_update, reason = "rows that give every field leave nothing to ROW")]
        pub const SITES: [&SiteInfo; SITE_COUNT] = [$(&SiteInfo {
            site: Site::$variant,
            $($field: $value,)*
            ..ROW
        }),*];
    };
}

// Each family's syscalls, from the syscall table.
const SELECT: &[Syscall] = &Family::Select.members::<{ Family::Select.size() }>();
const POLL: &[Syscall] = &Family::Poll.members::<{ Family::Poll.size() }>();
const EPOLL_WAIT: &[Syscall] = &Family::EpollWait.members::<{ Family::EpollWait.size() }>();
const EPOLL_CTL: &[Syscall] = &Family::EpollCtl.members::<{ Family::EpollCtl.size() }>();
const CLOSE: &[Syscall] = &Family::Close.members::<{ Family::Close.size() }>();
const OPEN: &[Syscall] = &Family::Open.members::<{ Family::Open.size() }>();
const REPLACE: &[Syscall] = &Family::Replace.members::<{ Family::Replace.size() }>();
const ADDFD: &[Syscall] = &Family::AddFd.members::<{ Family::AddFd.size() }>();
const CHMOD: &[Syscall] = &Family::Chmod.members::<{ Family::Chmod.size() }>();
const POSITIONED_LOOKUP: Family = Family::Lookup(Lookup::FdgetPos);
const FDGET_POS: &[Syscall] = &POSITIONED_LOOKUP.members::<{ POSITIONED_LOOKUP.size() }>();

catalogue! {
    // fs/select.c: core_sys_select -> max_select_fd -> do_select.
    SelectNNegative {
        id: "select.n_negative",
        function: "core_sys_select",
        file: "fs/select.c",
        condition: "n < 0 (-> -EINVAL)",
        hint: Hint::Unlikely,
        hint_since: "6.16",
        unit: Unit::Call,
        syscalls: SELECT,
        source: &[written("n < 0")],
        decided: Decided::Exit,
    }
    SelectNClamped {
        id: "select.n_clamped",
        function: "core_sys_select",
        file: "fs/select.c",
        condition: "n > fdt->max_fds (n is cut to max_fds)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Call,
        syscalls: SELECT,
        source: &[written("n > max_fds")],
        decided: Decided::TaskState,
    }
    SelectBitmapsOnHeap {
        id: "select.bitmaps_on_heap",
        function: "core_sys_select",
        file: "fs/select.c",
        condition: "FDS_BYTES(n) > 256/6, i.e. clamped n > 320 (kvmalloc, not the stack)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Call,
        syscalls: SELECT,
        source: &[written("size > sizeof(stack_fds) / 6")],
        decided: Decided::TaskState,
    }
    SelectFdNotOpen {
        id: "select.fd_not_open",
        function: "max_select_fd",
        file: "fs/select.c",
        condition: "a set bit names an fd that is not open (-> -EBADF)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Call,
        syscalls: SELECT,
        source: &[written("if (set & ~*open_fds)")],
        decided: Decided::Exit,
    }
    SelectZeroTimeout {
        id: "select.zero_timeout",
        function: "do_select",
        file: "fs/select.c",
        condition: "timeout given and zero (one pass, no wait)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Call,
        syscalls: SELECT,
        source: &[written("end_time && !end_time->tv_sec && !end_time->tv_nsec")],
        decided: Decided::Exit,
    }
    SelectWordEmpty {
        id: "select.word_empty",
        function: "do_select",
        file: "fs/select.c",
        condition: "a 64-bit word of in|out|ex is all zero (skipped)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::FdSetWord,
        syscalls: SELECT,
        source: &[written("all_bits == 0")],
        decided: Decided::TaskState,
    }
    // fs/select.c: do_sys_poll -> do_poll -> do_pollfd.
    PollNfdsOverRlimit {
        id: "poll.nfds_over_rlimit",
        function: "do_sys_poll",
        file: "fs/select.c",
        condition: "nfds > RLIMIT_NOFILE (-> -EINVAL)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Call,
        syscalls: POLL,
        source: &[written("nfds > rlimit(RLIMIT_NOFILE)")],
        decided: Decided::Exit,
    }
    PollEntriesOnHeap {
        id: "poll.entries_on_heap",
        function: "do_sys_poll",
        file: "fs/select.c",
        condition: "nfds > N_STACK_PPS = 30 (chunks of <= 510 from kmalloc)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Call,
        syscalls: POLL,
        source: &[written_negated("walk->len >= todo"), written_negated("if (!todo)")],
        decided: Decided::Exit,
    }
    PollZeroTimeout {
        id: "poll.zero_timeout",
        function: "do_poll",
        file: "fs/select.c",
        condition: "timeout given and zero (one pass, no wait)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Call,
        syscalls: POLL,
        source: &[written("end_time && !end_time->tv_sec && !end_time->tv_nsec")],
        decided: Decided::Exit,
    }
    PollFdNegative {
        id: "poll.fd_negative",
        function: "do_pollfd",
        file: "fs/select.c",
        condition: "pollfd.fd < 0 (entry ignored)",
        hint: Hint::Unlikely,
        hint_since: "6.16",
        unit: Unit::PollfdEntry,
        syscalls: POLL,
        source: &[written("fd < 0"), written_negated("fd >= 0")],
        decided: Decided::Exit,
    }
    PollFdNotOpen {
        id: "poll.fd_not_open",
        function: "do_pollfd",
        file: "fs/select.c",
        condition: "fd >= 0 but not open (-> POLLNVAL in revents)",
        // Written `if (fd_empty(f))`: the hint is fd_empty()'s (include/linux/file.h);
        // 6.12 still tested `!fd_file(f)`, unhinted.
        hint: Hint::Unlikely,
        hint_since: "> 6.12",
        unit: Unit::PollfdEntry,
        syscalls: POLL,
        source: &[written("fd_empty(f)"), written("!f.file"), written_negated("if (f.file)")],
        decided: Decided::Exit,
    }
    // fs/eventpoll.c: do_epoll_wait -> ep_poll.
    EpollBadArgs {
        id: "epoll.bad_args",
        function: "do_epoll_wait",
        file: "fs/eventpoll.c",
        condition: "maxevents <= 0 or > EP_MAX_EVENTS, bad buffer, or epfd not an epoll fd (a closed epfd fails before)",
        hint: Hint::Unlikely,
        hint_since: "6.15",
        unit: Unit::Call,
        syscalls: EPOLL_WAIT,
        // 6.15 on: `ret = ep_check_params(...); if (unlikely(ret))`; before, the tests in line.
        source: &[written("maxevents <= 0"), written("ret))")],
        decided: Decided::Exit,
        branch_since: "6.15",
        branch_before: "do_epoll_wait tests maxevents and the buffer before it looks the epoll fd up, each in a branch of its own: a closed epfd with bad maxevents is -EINVAL there",
    }
    EpollZeroTimeout {
        id: "epoll.zero_timeout",
        function: "ep_poll",
        file: "fs/eventpoll.c",
        condition: "timeout given and zero (no wait)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Call,
        syscalls: EPOLL_WAIT,
        source: &[written("timeout->tv_sec | timeout->tv_nsec")],
        decided: Decided::Exit,
    }
    // fs/eventpoll.c: epoll_ctl(EPOLL_CTL_ADD) -> ep_insert.
    EpollWatchesExhausted {
        id: "epoll_ctl.watches_exhausted",
        function: "ep_alloc_epitem",
        file: "fs/eventpoll.c",
        condition: "EPOLL_CTL_ADD past the user's max_user_watches (-> -ENOSPC)",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::Call,
        syscalls: EPOLL_CTL,
        source: &[written("percpu_counter_compare(&ep->user->epoll_watches")],
        decided: Decided::Exit,
        one_armed: "taken past the user's fs.epoll.max_user_watches, a quota all of the user's processes share: no workload knows how many watches the others hold, so none can count it exactly",
    }
    EpollTooManyPaths {
        id: "epoll_ctl.too_many_paths",
        function: "ep_insert",
        file: "fs/eventpoll.c",
        condition: "EPOLL_CTL_ADD into nested epolls whose wake-up paths pass the limits (-> -EINVAL)",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::Call,
        syscalls: EPOLL_CTL,
        source: &[written("full_check && reverse_path_check(")],
        decided: Decided::Exit,
        one_armed: "its -EINVAL is also what ep_insert's earlier tests return: a call that takes it is counted unreadable, never taken",
    }
    // fs/file.c: alloc_fd -> find_next_fd.
    FdBelowMax {
        id: "fd.below_max",
        function: "alloc_fd",
        file: "fs/file.c",
        condition: "fd < fdt->max_fds (search the table)",
        hint: Hint::Likely,
        hint_since: "6.13",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::ALLOCATING,
        source: &[written("fd < fdt->max_fds")],
        decided: Decided::TaskState,
    }
    FdFastPath {
        id: "fd.fast_path",
        function: "find_next_fd",
        file: "fs/file.c",
        condition: "a free fd from start to the end of start's 64-fd word",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::ALLOCATING,
        source: &[written("bit < BITS_PER_LONG")],
        decided: Decided::TaskState,
        branch_since: "6.13",
        branch_before: "find_next_fd has no fast path: the search goes through full_fds_bits for every allocation",
    }
    FdTableFull {
        id: "fd.table_full",
        function: "alloc_fd",
        file: "fs/file.c",
        condition: "fd >= fdt->max_fds (the table grows: 64 -> 128 -> 256 ...)",
        hint: Hint::Unlikely,
        hint_since: "6.13",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::ALLOCATING,
        source: &[written("fd >= fdt->max_fds")],
        decided: Decided::TaskState,
    }
    FdEmfile {
        id: "fd.emfile",
        function: "alloc_fd",
        file: "fs/file.c",
        condition: "fd >= end, RLIMIT_NOFILE (-> -EMFILE)",
        hint: Hint::Unlikely,
        hint_since: "6.13",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::ALLOCATING,
        source: &[written("fd >= end")],
        decided: Decided::TaskState,
    }
    // fs/file.c: alloc_fd -> expand_files -> expand_fdtable -> alloc_fdtable.
    FdPastNrOpen {
        id: "fd.past_nr_open",
        function: "expand_files",
        file: "fs/file.c",
        condition: "the fd that fills the table is at or past fs.nr_open (-> -EMFILE)",
        hint: Hint::Unlikely,
        hint_since: "> 6.12",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::EXPANDING,
        source: &[written("nr >= sysctl_nr_open")],
        decided: Decided::TaskState,
    }
    FdtableRoundedPastNrOpen {
        id: "fd.rounded_past_nr_open",
        function: "alloc_fdtable",
        file: "fs/file.c",
        condition: "the new table's size (a grown or copied one's, rounded up to a power of two) is past fs.nr_open (cut to it, rounded down to 64)",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::FdtableAllocation,
        syscalls: &crate::syscalls::GROWING,
        source: &[written("nr > sysctl_nr_open")],
        decided: Decided::TaskState,
    }
    FdtableTooLarge {
        id: "fd.fdtable_too_large",
        function: "alloc_fdtable",
        file: "fs/file.c",
        condition: "the new fd array (of a grown or copied table) would pass INT_MAX bytes, 2^28 fds (-> -EMFILE)",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::FdtableAllocation,
        syscalls: &crate::syscalls::GROWING,
        source: &[written("nr > INT_MAX / sizeof(struct file *)")],
        decided: Decided::TaskState,
    }
    FdCopyOutgrowsEmbedded {
        id: "fd.copy_outgrows_embedded",
        function: "dup_fd",
        file: "fs/file.c",
        condition: "a copied table's open fds reach past the 64 a files_struct embeds (fork, unshare: a table of its own is allocated, and the loop's test made again on it)",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::TableCopy,
        syscalls: &crate::syscalls::COPYING,
        source: &[written("open_files > new_fdt->max_fds")],
        decided: Decided::TaskState,
    }
    // fs/open.c.
    CloseOk {
        id: "close.ok",
        function: "sys_close",
        file: "fs/open.c",
        condition: "close returns 0",
        hint: Hint::Likely,
        hint_since: "6.15",
        unit: Unit::Call,
        syscalls: CLOSE,
        source: &[written("retval == 0")],
        decided: Decided::Exit,
        branch_since: "6.15",
        branch_before: "sys_close tests only for the restart errors (-ERESTARTSYS and the like, made -EINTR): no test of retval == 0",
        one_armed: "not taken only when closing an open file fails (a flush error, such as NFS's -EIO): no local file's close fails",
    }
    // fs/file.c: __fget_light.
    FgetTableShared {
        id: "fget.table_shared",
        function: "__fget_light",
        file: "fs/file.c",
        condition: "files->count > 1, threads or CLONE_FILES (the kernel writes likely(count == 1))",
        hint: Hint::Unlikely,
        hint_since: "6.13",
        unit: Unit::FdLookup,
        syscalls: &[
            Syscall::Poll,
            Syscall::Ppoll,
            Syscall::Select,
            Syscall::Pselect6,
            Syscall::Read,
            Syscall::Write,
            Syscall::Recvmsg,
            Syscall::Sendmsg,
        ],
        source: &[written_negated("&files->count) == 1")],
        decided: Decided::TaskState,
    }
    // fs/file.c: the lookup of a syscall's one fd (fdget, fdget_pos), and fdput.
    FgetLightPathOnly {
        id: "fget.light_path_only",
        function: "__fget_light",
        file: "fs/file.c",
        condition: "an unshared table's file is O_PATH, which the lookup does not hand out",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::FdLookup,
        syscalls: &crate::syscalls::LOOKING_UP,
        source: &[written("file->f_mode & mask")],
        decided: Decided::TaskState,
    }
    FgetRcuNoFile {
        id: "fget.rcu_no_file",
        function: "__fget_files_rcu",
        file: "fs/file.c",
        condition: "a shared table holds no file at the fd",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::FdLookup,
        syscalls: &crate::syscalls::LOOKING_UP,
        source: &[written("if (unlikely(!file)) return NULL")],
        decided: Decided::TaskState,
    }
    FgetRcuPathOnly {
        id: "fget.rcu_path_only",
        function: "__fget_files_rcu",
        file: "fs/file.c",
        condition: "a shared table's file is O_PATH, which the lookup does not hand out",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::FdLookup,
        syscalls: &crate::syscalls::LOOKING_UP,
        source: &[written("file->f_mode & mask")],
        decided: Decided::TaskState,
    }
    FdgetPosFile {
        id: "fdget_pos.file",
        function: "fdget_pos",
        file: "fs/file.c",
        condition: "the lookup handed out a file: the fd is open and not O_PATH",
        hint: Hint::Likely,
        hint_since: "> 6.12",
        unit: Unit::FdLookup,
        syscalls: FDGET_POS,
        source: &[written("file) && file_needs_f_pos_lock"), written("file && file_needs_f_pos_lock")],
        decided: Decided::TaskState,
    }
    FdputCloned {
        id: "fdput.cloned",
        function: "fdput",
        file: "include/linux/file.h",
        condition: "the lookup took a reference (a shared table), dropped at the end of the call",
        hint: Hint::Unlikely,
        hint_since: "> 6.12",
        unit: Unit::FdLookup,
        syscalls: &crate::syscalls::LOOKING_UP,
        source: &[written("fd.word & FDPUT_FPUT")],
        decided: Decided::TaskState,
    }
    CloseNotPathOnly {
        id: "close.not_path_only",
        function: "filp_flush",
        file: "fs/open.c",
        condition: "the file closed is not O_PATH (dnotify and POSIX locks are flushed)",
        hint: Hint::Likely,
        hint_since: "<= 6.1",
        unit: Unit::Call,
        syscalls: CLOSE,
        source: &[written("!(filp->f_mode & FMODE_PATH)")],
        decided: Decided::TaskState,
    }
    FcntlPathOnly {
        id: "fcntl.path_only",
        function: "sys_fcntl",
        file: "fs/fcntl.c",
        condition: "fcntl on an O_PATH fd (its commands then are checked: -EBADF for most)",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::Call,
        syscalls: &[Syscall::Fcntl],
        source: &[written("->f_mode & FMODE_PATH")],
        decided: Decided::TaskState,
    }
    // fs/file.c: sys_dup2 -> ksys_dup3, sys_dup3 -> ksys_dup3.
    Dup3SameFd {
        id: "dup3.same_fd",
        function: "ksys_dup3",
        file: "fs/file.c",
        condition: "oldfd == newfd, after the flags check (-> -EINVAL)",
        hint: Hint::Unlikely,
        hint_since: "2.6.27",
        unit: Unit::Call,
        syscalls: REPLACE,
        source: &[written("oldfd == newfd")],
        decided: Decided::Exit,
    }
    Dup2SameFd {
        id: "dup2.same_fd",
        function: "sys_dup2",
        file: "fs/file.c",
        condition: "newfd == oldfd (returns oldfd if it is open, else -EBADF)",
        hint: Hint::Unlikely,
        hint_since: "2.6.27",
        unit: Unit::Call,
        syscalls: &[Syscall::Dup2],
        source: &[written("newfd == oldfd")],
        decided: Decided::Exit,
    }
    Dup3OldfdNotOpen {
        id: "dup3.oldfd_not_open",
        function: "ksys_dup3",
        file: "fs/file.c",
        condition: "oldfd is not open, past the RLIMIT_NOFILE test (-> -EBADF)",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::Call,
        syscalls: REPLACE,
        source: &[written("files_lookup_fd_locked(files, oldfd); if (unlikely(!file")],
        decided: Decided::Exit,
    }
    Dup3ExpandFailed {
        id: "dup3.expand_failed",
        function: "ksys_dup3",
        file: "fs/file.c",
        condition: "growing the table for newfd failed: past fs.nr_open (-> -EBADF) or out of memory",
        hint: Hint::Unlikely,
        hint_since: "<= 6.1",
        unit: Unit::Call,
        syscalls: REPLACE,
        source: &[written("if (unlikely(err < 0)) { if (err == -EMFILE)")],
        decided: Decided::Exit,
    }
    // fs/file.c: replace_fd, from seccomp's ADDFD with SETFD (kernel/seccomp.c), in the
    // table of the task the supervisor answers.
    ReplaceFdExpandFailed {
        id: "replace_fd.expand_failed",
        function: "replace_fd",
        file: "fs/file.c",
        condition: "growing the table of the task a seccomp supervisor answers, for the fd its ADDFD ioctl (SETFD) places there, failed: past fs.nr_open (-> -EMFILE) or out of memory",
        hint: Hint::Unlikely,
        hint_since: "3.6",
        unit: Unit::Call,
        syscalls: ADDFD,
        source: &[written("err = expand_files(files, fd); if (unlikely(err < 0")],
        decided: Decided::Exit,
    }
    // fs/open.c: sys_openat2's size tests, then do_sys_openat2's flags test.
    Openat2SizeTooSmall {
        id: "openat2.size_too_small",
        function: "sys_openat2",
        file: "fs/open.c",
        condition: "usize < OPEN_HOW_SIZE_VER0 = 24 (-> -EINVAL)",
        hint: Hint::Unlikely,
        hint_since: "5.6",
        unit: Unit::Call,
        syscalls: &[Syscall::Openat2],
        source: &[written("usize < OPEN_HOW_SIZE_VER0")],
        decided: Decided::Enter,
    }
    Openat2SizeTooBig {
        id: "openat2.size_too_big",
        function: "sys_openat2",
        file: "fs/open.c",
        condition: "usize > PAGE_SIZE (-> -E2BIG)",
        hint: Hint::Unlikely,
        hint_since: "5.6",
        unit: Unit::Call,
        syscalls: &[Syscall::Openat2],
        source: &[written("usize > PAGE_SIZE")],
        decided: Decided::Enter,
    }
    OpenBadFlags {
        id: "open.bad_flags",
        function: "do_sys_openat2",
        file: "fs/open.c",
        condition: "build_open_flags refuses the flags, mode or resolve bits (-> -EINVAL; open, openat and creat drop what openat2 refuses)",
        hint: Hint::Unlikely,
        hint_since: "> 6.12",
        unit: Unit::Call,
        syscalls: OPEN,
        source: &[
            written("build_open_flags(how, &op); if (unlikely(err"),
            written("build_open_flags(how, &op)"),
        ],
        decided: Decided::Enter,
    }
    // fs/open.c: do_fchmodat.
    FchmodatBadFlags {
        id: "fchmodat.bad_flags",
        function: "do_fchmodat",
        file: "fs/open.c",
        condition: "flags other than AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH (-> -EINVAL; chmod and fchmodat pass none)",
        hint: Hint::Unlikely,
        hint_since: "6.6",
        unit: Unit::Call,
        syscalls: CHMOD,
        source: &[written("flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)")],
        decided: Decided::Enter,
        branch_since: "6.6",
        branch_before: "do_fchmodat takes no flags (there is no fchmodat2): no flags test",
    }
    // include/linux/file.h: FD_PREPARE() / FD_ADD() around an fd allocation (6.19 on), in
    // the order a call evaluates them: __FD_PREPARE_INIT, then class_fd_prepare_lock_err
    // (it returns at the first taken), __FD_ADD's test, and the destructor at scope end.
    FdPrepareFdOk {
        id: "fd_prepare.fd_ok",
        function: "__FD_PREPARE_INIT",
        file: "include/linux/file.h",
        condition: "the fd was allocated (the file is made next)",
        hint: Hint::Likely,
        hint_since: "6.19",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::PREPARING,
        source: &[written("fdf.__fd >= 0")],
        decided: Decided::Exit,
        branch_since: "6.19",
        branch_before: "there is no FD_PREPARE()/FD_ADD(): each syscall allocates with get_unused_fd_flags() and tests the results its own way",
    }
    FdPrepareErrSet {
        id: "fd_prepare.err_set",
        function: "class_fd_prepare_lock_err",
        file: "include/linux/file.h",
        condition: "the error field is set (it is zero when first read)",
        hint: Hint::Unlikely,
        hint_since: "6.19",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::PREPARING,
        source: &[written("fdf->err")],
        decided: Decided::Exit,
        branch_since: "6.19",
        branch_before: "there is no FD_PREPARE()/FD_ADD(): each syscall allocates with get_unused_fd_flags() and tests the results its own way",
        one_armed: "the error field is zero when the test first reads it: no followed syscall sets it before",
    }
    FdPrepareFdFailed {
        id: "fd_prepare.fd_failed",
        function: "class_fd_prepare_lock_err",
        file: "include/linux/file.h",
        condition: "the fd allocation failed (-EMFILE, -ENOMEM)",
        hint: Hint::Unlikely,
        hint_since: "6.19",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::PREPARING,
        source: &[written("fdf->__fd < 0")],
        decided: Decided::Exit,
        branch_since: "6.19",
        branch_before: "there is no FD_PREPARE()/FD_ADD(): each syscall allocates with get_unused_fd_flags() and tests the results its own way",
    }
    FdPrepareFileFailed {
        id: "fd_prepare.file_failed",
        function: "class_fd_prepare_lock_err",
        file: "include/linux/file.h",
        condition: "the file was not made after the fd was (the syscall's error: a failed open, an accept with no connection)",
        hint: Hint::Unlikely,
        hint_since: "6.19",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::PREPARING,
        source: &[written("IS_ERR(fdf->__file)")],
        decided: Decided::Exit,
        branch_since: "6.19",
        branch_before: "there is no FD_PREPARE()/FD_ADD(): each syscall allocates with get_unused_fd_flags() and tests the results its own way",
    }
    FdPrepareFileNull {
        id: "fd_prepare.file_null",
        function: "class_fd_prepare_lock_err",
        file: "include/linux/file.h",
        condition: "the file expression gave NULL (-ENOMEM; no followed syscall's does)",
        hint: Hint::Unlikely,
        hint_since: "6.19",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::PREPARING,
        source: &[written("!fdf->__file")],
        decided: Decided::Exit,
        branch_since: "6.19",
        branch_before: "there is no FD_PREPARE()/FD_ADD(): each syscall allocates with get_unused_fd_flags() and tests the results its own way",
        one_armed: "taken only when the file expression gives NULL (-ENOMEM): every followed syscall's gives a file or an ERR_PTR",
    }
    FdAddOk {
        id: "fd_add.ok",
        function: "__FD_ADD",
        file: "include/linux/file.h",
        condition: "fd and file were made: the fd is published",
        hint: Hint::Likely,
        hint_since: "6.19",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::ADDING,
        source: &[written("!ret")],
        decided: Decided::Exit,
        branch_since: "6.19",
        branch_before: "there is no FD_PREPARE()/FD_ADD(): each syscall allocates with get_unused_fd_flags() and tests the results its own way",
    }
    FdPrepareUnpublishedFd {
        id: "fd_prepare.unpublished_fd",
        function: "class_fd_prepare_destructor",
        file: "include/linux/file.h",
        condition: "at scope end, an fd allocated but not published is put back (the file failed)",
        hint: Hint::Unlikely,
        hint_since: "6.19",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::PREPARING,
        source: &[written("fdf->__fd >= 0")],
        decided: Decided::Exit,
        branch_since: "6.19",
        branch_before: "there is no FD_PREPARE()/FD_ADD(): each syscall allocates with get_unused_fd_flags() and tests the results its own way",
    }
    FdPrepareUnpublishedFile {
        id: "fd_prepare.unpublished_file",
        function: "class_fd_prepare_destructor",
        file: "include/linux/file.h",
        condition: "at scope end, a file made but not published is put (no followed syscall leaves one)",
        hint: Hint::Unlikely,
        hint_since: "6.19",
        unit: Unit::Allocation,
        syscalls: &crate::syscalls::PREPARING,
        source: &[written("!IS_ERR_OR_NULL(fdf->__file)")],
        decided: Decided::Exit,
        branch_since: "6.19",
        branch_before: "there is no FD_PREPARE()/FD_ADD(): each syscall allocates with get_unused_fd_flags() and tests the results its own way",
        one_armed: "taken only for a file made and not published: every followed syscall publishes the file it makes or gives an error",
    }
    // fs/open.c: sys_close (6.1: close_fd in fs/file.c, the same test).
    CloseFdNotOpen {
        id: "close.fd_not_open",
        function: "sys_close",
        file: "fs/open.c",
        condition: "the fd is not open: file_close_fd() took no file (-> -EBADF)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Call,
        syscalls: CLOSE,
        source: &[written("if (!file) return -EBADF")],
        decided: Decided::Exit,
    }
    // fs/eventpoll.c: do_epoll_ctl_file (do_epoll_ctl in 6.1 and 6.12).
    EpollCtlCannotPoll {
        id: "epoll_ctl.target_cannot_poll",
        function: "do_epoll_ctl_file",
        file: "fs/eventpoll.c",
        condition: "the target fd's file cannot be polled, such as a regular file (-> -EPERM)",
        hint: Hint::None,
        hint_since: "",
        unit: Unit::Call,
        syscalls: EPOLL_CTL,
        source: &[written("!file_can_poll(tf->file)")],
        decided: Decided::Exit,
    }
}

impl Site {
    pub const fn from_u32(value: u32) -> Option<Site> {
        if (value as usize) < SITE_COUNT {
            Some(Site::ALL[value as usize])
        } else {
            None
        }
    }

    /// The site's row.
    pub const fn info(self) -> &'static SiteInfo {
        SITES[self as usize]
    }
}

/// A fingerprint of the catalogue: each site's id, function, condition, hint and unit
/// (FNV-1a). Reports of another catalogue count other branches, or count them in other
/// units.
pub fn fingerprint() -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for info in SITES {
        let parts = [
            info.id,
            info.function,
            info.condition,
            info.hint.name(),
            info.unit.name(),
        ];
        for byte in parts.iter().flat_map(|part| part.bytes().chain([0])) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// Where the model's evaluations go: the probe's row of a process's counts, or counts kept
/// in user space.
pub trait Recorder {
    /// One evaluation of `site`.
    fn record(&mut self, site: Site, evaluation: Evaluation);
    /// Several evaluations of `site` at once.
    fn record_counts(&mut self, site: Site, counts: &Counts);
}

/// Counts per site, in user space (and in tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    counts: [Counts; SITE_COUNT],
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            counts: [Counts::ZERO; SITE_COUNT],
        }
    }
}

impl Counters {
    pub fn get(&self, site: Site) -> Counts {
        self.counts[site as usize]
    }

    /// Every site's counts, in catalogue order.
    pub fn iter(&self) -> impl Iterator<Item = (Site, &Counts)> {
        Site::ALL.into_iter().zip(&self.counts)
    }

    /// Adds another's counts.
    pub fn merge(&mut self, other: &Counters) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            mine.add(theirs);
        }
    }
}

impl Recorder for Counters {
    fn record(&mut self, site: Site, evaluation: Evaluation) {
        self.counts[site as usize].record(evaluation, 1);
    }

    fn record_counts(&mut self, site: Site, counts: &Counts) {
        self.counts[site as usize].add(counts);
    }
}

/// Records at `$site` a branch hinted `$hint`, checking at compile time that the row
/// declares that hint; the value is the evaluation (or `()` for counts).
macro_rules! hinted {
    ($hint:ident, $recorder:expr, $site:ident, counts = $counts:expr) => {{
        $crate::catalogue::hinted!(@check $hint, $site);
        $crate::catalogue::Recorder::record_counts(
            $recorder,
            $crate::catalogue::Site::$site,
            $counts,
        )
    }};
    ($hint:ident, $recorder:expr, $site:ident, $evaluation:expr, $n:expr) => {{
        $crate::catalogue::hinted!(@check $hint, $site);
        let evaluation = $evaluation;
        $crate::catalogue::Recorder::record_counts(
            $recorder,
            $crate::catalogue::Site::$site,
            &$crate::Counts::of(evaluation, $n),
        );
        evaluation
    }};
    ($hint:ident, $recorder:expr, $site:ident, $evaluation:expr) => {{
        $crate::catalogue::hinted!(@check $hint, $site);
        let evaluation = $evaluation;
        $crate::catalogue::Recorder::record($recorder, $crate::catalogue::Site::$site, evaluation);
        evaluation
    }};
    (@check $hint:ident, $site:ident) => {
        const _: () = assert!(
            $crate::catalogue::Site::$site
                .info()
                .hint
                .is($crate::catalogue::Hint::$hint),
            concat!(stringify!($site), " is not declared ", stringify!($hint))
        );
    };
}

/// `if (likely(…))` at a catalogued site: `likely!(recorder, Site, evaluation[, n])`, or
/// `likely!(recorder, Site, counts = &counts)`.
macro_rules! likely {
    ($recorder:expr, $site:ident, $($rest:tt)*) => {
        $crate::catalogue::hinted!(Likely, $recorder, $site, $($rest)*)
    };
}

/// `if (unlikely(…))` at a catalogued site.
macro_rules! unlikely {
    ($recorder:expr, $site:ident, $($rest:tt)*) => {
        $crate::catalogue::hinted!(Unlikely, $recorder, $site, $($rest)*)
    };
}

/// A catalogued branch without a hint.
macro_rules! branch {
    ($recorder:expr, $site:ident, $($rest:tt)*) => {
        $crate::catalogue::hinted!(None, $recorder, $site, $($rest)*)
    };
}

pub(crate) use {branch, hinted, likely, unlikely};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_is_indexed_by_site() {
        for site in Site::ALL {
            assert_eq!(site.info().site, site, "{}", site.info().id);
            assert_eq!(Site::from_u32(site as u32), Some(site));
        }
        assert_eq!(Site::from_u32(SITE_COUNT as u32), None);
        for (i, a) in SITES.iter().enumerate() {
            for b in &SITES[i + 1..] {
                assert_ne!(a.id, b.id);
            }
        }
    }

    #[test]
    fn hinted_sites_say_since_when() {
        for site in SITES {
            assert_eq!(
                site.hint == Hint::None,
                site.hint_since.is_empty(),
                "{}",
                site.id
            );
        }
    }

    #[test]
    fn every_site_is_reached_by_followed_syscalls_the_probe_attaches_to() {
        for site in SITES {
            assert!(!site.syscalls.is_empty(), "{}", site.id);
            for syscall in site.syscalls {
                let info = syscall.info();
                // Decided at entry: an enter program; else the exit (or, for task
                // state, either).
                let attached = match site.decided {
                    Decided::Enter => info.enter.exists(),
                    Decided::Exit => info.exit.exists(),
                    Decided::TaskState => info.enter.exists() || info.exit.exists(),
                };
                assert!(attached, "{} is reached by {}", site.id, info.name);
            }
            // A site a log decides is reached by logged syscalls (the report says which
            // are not, fchmodat2's: strace 6.1 does not know it).
            if site.decided != Decided::TaskState {
                let allowed: &[Syscall] = if site.site == Site::FchmodatBadFlags {
                    &[Syscall::Fchmodat2]
                } else {
                    &[]
                };
                for syscall in site.syscalls {
                    assert_eq!(
                        syscall.info().logged,
                        !allowed.contains(syscall),
                        "{}: {}",
                        site.id,
                        syscall.name()
                    );
                }
            }
        }
    }
}
