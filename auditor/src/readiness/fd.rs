//! fd allocation and lookup (fs/file.c): `alloc_fd` → `find_next_fd`, with the bookkeeping
//! of `files->next_fd` on close, fork and dup2, and `__fget_light`'s shared-table arm.

use auditor_common::{Evaluation, Site, errno, fd};

use super::{
    Decided, Hint, Recorder, SiteInfo, Unit, branch, likely, unlikely, written, written_negated,
};

/// The syscalls whose `alloc_fd` calls are counted (others allocate too: memfd_create,
/// timerfd_create, signalfd4, ...; dup2 and dup3 do not).
const ALLOCATING: &[&str] = &[
    "open",
    "openat",
    "openat2",
    "creat",
    "dup",
    "fcntl F_DUPFD",
    "eventfd2",
    "epoll_create1",
    "socket",
    "accept",
    "accept4",
    "pipe",
    "pipe2",
    "socketpair",
];

pub const BELOW_MAX: SiteInfo = SiteInfo {
    site: Site::FdBelowMax,
    id: "fd.below_max",
    function: "alloc_fd",
    file: "fs/file.c",
    condition: "fd < fdt->max_fds (search the table)",
    hint: Hint::Likely,
    hint_since: "6.13",
    unit: Unit::Allocation,
    syscalls: ALLOCATING,
    source: &[written("fd < fdt->max_fds")],
    decided: Decided::TaskState,
};

pub const FAST_PATH: SiteInfo = SiteInfo {
    site: Site::FdFastPath,
    id: "fd.fast_path",
    function: "find_next_fd",
    file: "fs/file.c",
    condition: "a free fd from start to the end of start's 64-fd word",
    hint: Hint::None,
    hint_since: "",
    unit: Unit::Allocation,
    syscalls: ALLOCATING,
    source: &[written("bit < BITS_PER_LONG")],
    decided: Decided::TaskState,
};

pub const TABLE_FULL: SiteInfo = SiteInfo {
    site: Site::FdTableFull,
    id: "fd.table_full",
    function: "alloc_fd",
    file: "fs/file.c",
    condition: "fd >= fdt->max_fds (the table grows: 64 -> 128 -> 256 ...)",
    hint: Hint::Unlikely,
    hint_since: "6.13",
    unit: Unit::Allocation,
    syscalls: ALLOCATING,
    source: &[written("fd >= fdt->max_fds")],
    decided: Decided::TaskState,
};

pub const EMFILE: SiteInfo = SiteInfo {
    site: Site::FdEmfile,
    id: "fd.emfile",
    function: "alloc_fd",
    file: "fs/file.c",
    condition: "fd >= end, RLIMIT_NOFILE (-> -EMFILE)",
    hint: Hint::Unlikely,
    hint_since: "6.13",
    unit: Unit::Allocation,
    syscalls: ALLOCATING,
    source: &[written("fd >= end")],
    decided: Decided::TaskState,
};

pub const TABLE_SHARED: SiteInfo = SiteInfo {
    site: Site::FgetTableShared,
    id: "fget.table_shared",
    function: "__fget_light",
    file: "fs/file.c",
    condition: "files->count > 1, threads or CLONE_FILES (the kernel writes likely(count == 1))",
    hint: Hint::Unlikely,
    hint_since: "6.13",
    unit: Unit::FdLookup,
    syscalls: &[
        "poll", "ppoll", "select", "pselect6", "read", "write", "recvmsg", "sendmsg",
    ],
    source: &[written_negated("&files->count) == 1")],
    decided: Decided::TaskState,
};

/// A task's fd table as `alloc_fd` sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// `fdt->max_fds`: 64 for a new table, then powers of two.
    pub max_fds: u32,
    /// `files->next_fd`: where the search for a free fd starts.
    pub next_fd: u32,
    /// `fdt->open_fds`, a bit per fd.
    pub open: Vec<u64>,
    /// RLIMIT_NOFILE, the `end` of most allocations.
    pub nofile: u64,
    /// `sysctl_nr_open`: the table never grows past it.
    pub nr_open: u32,
    /// `files->count > 1`: other tasks (threads, CLONE_FILES) share the table.
    pub shared: bool,
}

/// `NR_OPEN_DEFAULT`: the table embedded in `files_struct`.
const NR_OPEN_DEFAULT: u32 = 64;

impl Task {
    /// A new table (as after exec from a fresh process) with fds 0..count open and the
    /// search starting after them.
    pub fn with_open_fds(count: u32, nofile: u64) -> Task {
        let mut task = Task {
            max_fds: NR_OPEN_DEFAULT,
            next_fd: 0,
            open: vec![0; 1],
            nofile,
            nr_open: 1 << 20,
            shared: false,
        };
        while task.max_fds < count {
            task.grow(task.max_fds);
        }
        for fd in 0..count {
            task.set_open(fd);
        }
        task.next_fd = count;
        task
    }

    /// The lowest fd that is not open.
    pub fn next_free(&self) -> u32 {
        (0..)
            .find(|&fd| !self.is_open(fd))
            .expect("some fd is free")
    }

    pub fn is_open(&self, fd: u32) -> bool {
        self.open
            .get((fd / 64) as usize)
            .is_some_and(|word| word & (1 << (fd % 64)) != 0)
    }

    fn set_open(&mut self, fd: u32) {
        self.open[(fd / 64) as usize] |= 1 << (fd % 64);
    }

    /// Makes the table at least `max_fds` slots (as one inherited from a parent may be).
    pub fn grow_to(&mut self, max_fds: u32) {
        if max_fds > self.max_fds {
            self.max_fds = max_fds;
            self.open.resize(max_fds.div_ceil(64) as usize, 0);
        }
    }

    /// `expand_fdtable` → `alloc_fdtable(fd + 1)`: the smallest power of two above fd,
    /// at most nr_open.
    fn grow(&mut self, fd: u32) {
        self.max_fds = (fd + 1).next_power_of_two().min(self.nr_open);
        self.open.resize(self.max_fds.div_ceil(64) as usize, 0);
    }

    /// `find_next_fd(fdt, start)`, recording whether the fast path found a free fd in
    /// start's word.
    fn find_next_fd(&self, recorder: &mut Recorder, start: u32) -> u32 {
        let word = self.open[(start / 64) as usize];
        let fast = branch!(
            recorder,
            FAST_PATH,
            Evaluation::from_taken(fd::fast_path(word, start))
        );
        let from = if fast == Evaluation::Taken {
            start
        } else {
            (start / 64 + 1) * 64
        };
        (from..self.max_fds)
            .find(|&fd| !self.is_open(fd))
            .unwrap_or(self.max_fds)
    }

    /// `alloc_fd(start, end)`: the lowest free fd from `start` (and from next_fd), growing
    /// the table as needed; every pass of its `repeat` loop evaluates the branches again.
    pub fn alloc_fd(&mut self, recorder: &mut Recorder, start: u32, end: u64) -> Result<u32, i64> {
        loop {
            let mut fd = start.max(self.next_fd);
            let below = likely!(
                recorder,
                BELOW_MAX,
                Evaluation::from_taken(fd::below_max(fd, self.max_fds))
            );
            if below == Evaluation::Taken {
                fd = self.find_next_fd(recorder, fd);
            }
            if unlikely!(
                recorder,
                EMFILE,
                Evaluation::from_taken(fd::emfile(fd, end))
            ) == Evaluation::Taken
            {
                return Err(-errno::EMFILE);
            }
            let full = unlikely!(
                recorder,
                TABLE_FULL,
                Evaluation::from_taken(fd::table_full(fd, self.max_fds))
            );
            if full == Evaluation::Taken {
                // expand_files: EMFILE past sysctl_nr_open, else a larger table; repeat.
                if fd >= self.nr_open {
                    return Err(-errno::EMFILE);
                }
                self.grow(fd);
                continue;
            }
            if start <= self.next_fd {
                self.next_fd = fd + 1;
            }
            self.set_open(fd);
            return Ok(fd);
        }
    }

    /// An ordinary allocation (open, socket, dup, ...): from 0, up to RLIMIT_NOFILE.
    pub fn open(&mut self, recorder: &mut Recorder) -> Result<u32, i64> {
        self.alloc_fd(recorder, 0, self.nofile)
    }

    /// `close` of an open fd: `__put_unused_fd` lowers next_fd to it.
    pub fn close(&mut self, fd: u32) {
        if self.is_open(fd) {
            self.open[(fd / 64) as usize] &= !(1 << (fd % 64));
            self.next_fd = self.next_fd.min(fd);
        }
    }

    /// `dup2(old, new)`: opens `new` (growing the table) and leaves next_fd alone.
    pub fn dup2(&mut self, new: u32) {
        if new >= self.max_fds {
            self.grow(new);
        }
        self.set_open(new);
    }

    /// The child's table after fork (`dup_fd`): the same open fds, next_fd at 0, its own.
    pub fn fork(&self) -> Task {
        Task {
            next_fd: 0,
            shared: false,
            ..self.clone()
        }
    }
}

/// `__fget_light` for `lookups` fds of a task whose table may be unknown; `made`: whether
/// the lookups were made (None: unknown).
pub fn fget(recorder: &mut Recorder, task: Option<&Task>, lookups: u64, made: Option<bool>) {
    let files_count = task.map(|task| if task.shared { 2 } else { 1 });
    let evaluation = match made {
        Some(false) => Evaluation::NotReached,
        Some(true) => files_count.map_or(Evaluation::Undecided, |count| {
            Evaluation::from_taken(fd::table_shared(count))
        }),
        None => Evaluation::Undecided,
    };
    unlikely!(recorder, TABLE_SHARED, evaluation, lookups);
}

#[cfg(test)]
mod tests {
    use auditor_common::Counts;

    use super::*;

    fn counts(recorder: &Recorder) -> [Counts; 4] {
        [
            Site::FdBelowMax,
            Site::FdFastPath,
            Site::FdTableFull,
            Site::FdEmfile,
        ]
        .map(|site| recorder.counts(site))
    }

    #[test]
    fn growing_past_64_repeats_the_branches() {
        let mut recorder = Recorder::default();
        let mut task = Task::with_open_fds(3, 1024);
        for expected in 3..=64 {
            assert_eq!(task.open(&mut recorder), Ok(expected));
        }
        assert_eq!(task.max_fds, 128);
        // 62 allocations: 61 found their fd in the word (3..=63); the 62nd (fd 64) went
        // round twice: first fd 64 >= max_fds 64 (table full, grow to 128), then fd 64 in
        // word 1 through the fast path.
        let [below, fast, full, emfile] = counts(&recorder);
        assert_eq!(below, Counts::new(62, 1, 0));
        assert_eq!(fast, Counts::new(62, 0, 0));
        assert_eq!(full, Counts::new(1, 62, 0));
        assert_eq!(emfile, Counts::new(0, 63, 0));
    }

    #[test]
    fn a_full_word_leaves_the_fast_path() {
        let mut recorder = Recorder::default();
        let mut task = Task::with_open_fds(100, 1024);
        // fds 0..100 open (words 0 and 1 up to 99); close 10, then reopen: next_fd is 10.
        task.close(10);
        assert_eq!(task.next_fd, 10);
        assert_eq!(task.open(&mut recorder), Ok(10));
        // next_fd 11: word 0 is full from 11, so the fast path fails and the search finds 100.
        assert_eq!(task.open(&mut recorder), Ok(100));
        let [below, fast, full, emfile] = counts(&recorder);
        assert_eq!(below, Counts::new(2, 0, 0));
        assert_eq!(fast, Counts::new(1, 1, 0));
        assert_eq!(full, Counts::new(0, 2, 0));
        assert_eq!(emfile, Counts::new(0, 2, 0));
    }

    #[test]
    fn rlimit_gives_emfile() {
        let mut recorder = Recorder::default();
        let mut task = Task::with_open_fds(3, 4);
        assert_eq!(task.open(&mut recorder), Ok(3));
        assert_eq!(task.open(&mut recorder), Err(-errno::EMFILE));
        assert_eq!(recorder.counts(Site::FdEmfile), Counts::new(1, 1, 0));
        assert_eq!(recorder.counts(Site::FdTableFull), Counts::new(0, 1, 0));
    }

    #[test]
    fn f_dupfd_above_next_fd_leaves_it_alone() {
        let mut recorder = Recorder::default();
        let mut task = Task::with_open_fds(3, 1024);
        assert_eq!(task.alloc_fd(&mut recorder, 10, 1024), Ok(10));
        assert_eq!(task.next_fd, 3);
        assert_eq!(task.open(&mut recorder), Ok(3));
        assert_eq!(task.next_fd, 4);
    }

    #[test]
    fn dup2_and_fork_bookkeeping() {
        let mut task = Task::with_open_fds(3, 1024);
        task.dup2(200);
        assert_eq!((task.max_fds, task.next_fd), (256, 3));
        assert!(task.is_open(200));
        let child = task.fork();
        assert_eq!(child.next_fd, 0);
        assert!(child.is_open(200));
    }

    #[test]
    fn open_200_close_scattered_open_again() {
        let mut recorder = Recorder::default();
        let mut task = Task::with_open_fds(3, 1024);
        for _ in 0..200 {
            task.open(&mut recorder).unwrap();
        }
        for fd in [5, 70, 71, 150, 199] {
            task.close(fd);
        }
        let reopened: Vec<u32> = (0..6).map(|_| task.open(&mut recorder).unwrap()).collect();
        // Lowest first; then the end of the table.
        assert_eq!(reopened, [5, 70, 71, 150, 199, 203]);
        assert_eq!(task.max_fds, 256);
    }
}
