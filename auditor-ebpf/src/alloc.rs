//! fd allocation: the branches of `alloc_fd` and `find_next_fd` for the syscalls that
//! allocate one fd (the syscall table's `Family::Open` and `Family::Allocate`) and two
//! (`Family::AllocatePair`). Entry reads the fd table as the allocation will find it
//! (next_fd, max_fds, the open-fd word it starts in, RLIMIT_NOFILE) and nothing else; exit
//! runs the checks that may refuse the call first (an open's flags, mode and name), learns
//! from the return value whether the allocation ran and which fd it found, and runs the
//! model (`auditor_common::fd::allocation`, `fd::pair`). The programs a row derives are listed
//! by build.rs; those that read their own arguments are written here.

use auditor_common::{
    ProcessKey, Syscall, errno,
    fd::{self, AllocStart},
    open,
    syscalls::{Allocator, Asks, FdPrepare, PairAllocator},
};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{
    arg, args, exit_ret,
    in_flight::{self, Call, Kind},
    tally,
    tally::Row,
    target,
    target::Caller,
    task::{self, Task},
};

/// An allocation in flight: the table at entry, and what tells its outcome at exit.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingAlloc {
    process: ProcessKey,
    table: AllocStart,
    /// An `Allocator` as u32.
    allocator: u32,
    prepares: FdPrepare,
    /// 1 when the table could be read.
    table_read: u32,
    syscall: Syscall,
    /// For pipe, pipe2 and socketpair (two allocations): a `PairAllocator` plus one (0 for
    /// one allocation).
    pair: u32,
    /// What may refuse the call before its allocation ([`Checks`]).
    checks: u32,
    /// The arguments the checks read (an open's flags and mode; openat2's size and struct).
    args: [u64; 2],
    /// The user address pipe, pipe2 and socketpair write the two fds to; an open's name.
    address: u64,
}

/// What may refuse an allocating call before it allocates, decided at its exit, where its
/// row of counts is found anyway: the entry finds none, and reads no user memory (the
/// kernel has copied the name and the struct by the exit, so their pages are resident).
struct Checks;

impl Checks {
    /// Nothing refuses it.
    const NONE: u32 = 0;
    /// Its arguments refused it, as its entry found.
    const REFUSED: u32 = 1;
    /// open, openat, creat: `open::open` on flags and mode; then an empty name.
    const OPEN: u32 = 2;
    /// openat2: `open::openat2` on the size and the struct it points to; then an empty name.
    const OPENAT2: u32 = 3;
}

impl PendingAlloc {
    /// Whether the call was refused before its allocation (None: unknown), its checks
    /// counted on `row`; `ret`, its return value (None: not followed to its exit).
    #[inline(always)]
    fn refused(&self, row: &mut Row, ret: Option<i64>) -> Option<bool> {
        let [first, second] = self.args;
        let refused = match self.checks {
            Checks::NONE => return Some(false),
            Checks::REFUSED => return Some(true),
            Checks::OPEN => open::open(row, first, second, flag_set()),
            _ => {
                // Read as the kernel copies it: only the first version's 24 bytes are decided.
                // Into a struct of zeros and a flag, not an Option: 6.1's verifier refuses
                // the read of an Option's payload left unwritten when None.
                let mut how = open::OpenHow::default();
                let mut read = false;
                if first == open::OPEN_HOW_SIZE_VER0
                    && let Some(copied) = args::read_user::<open::OpenHow>(second)
                {
                    how = copied;
                    read = true;
                }
                open::openat2(row, first, read.then_some(&how), flag_set())
            }
        };
        // An empty name refuses the open only where the name is read before the fd, and
        // with ENOENT: any other return says the name was not empty, without a read.
        if refused
            || !flag_set().name_before_fd()
            || self.address == 0
            || ret != Some(-errno::ENOENT)
        {
            return Some(refused);
        }
        args::read_user::<u8>(self.address).map(|byte| byte == 0)
    }
}

impl Call for PendingAlloc {
    const KIND: Kind = Kind::Alloc;

    fn unfollowed(&self) {
        if let Some(mut row) = Row::by_key(&self.process) {
            // Its checks, which the exit would have run.
            let _ = self.refused(&mut row, None);
            // It may allocate, on a table not kept.
            fd::allocation(&mut row, None, fd::AllocOutcome::Maybe);
            fd::fd_prepare(&mut row, self.prepares, fd::AllocOutcome::Maybe, 0);
        }
    }
}

/// The running kernel's `open::FlagSet`, set by the loader.
#[unsafe(no_mangle)]
static OPEN_FLAG_SET: u32 = 0;

fn flag_set() -> open::FlagSet {
    open::FlagSet::from_u32(target::global(&OPEN_FLAG_SET))
}

/// Notes an allocation by `syscall` (of the table's `One` allocations) that starts at
/// `start`; `name` is open's path (0 for others), `checks` what may refuse it first (a
/// [`Checks`] and the arguments it reads).
macro_rules! enter {
    ($syscall:ident, $start:expr) => {
        if let Some(caller) = target::current() {
            enter!($syscall, caller, $start, 0, (Checks::NONE, [0, 0]))
        }
    };
    ($syscall:ident, $caller:expr, $start:expr, $name:expr, $checks:expr) => {{
        const ALLOCATOR: Allocator = Syscall::$syscall.info().allocates.one();
        const PREPARES: FdPrepare = Syscall::$syscall.info().prepares;
        let pending = Allocation {
            caller: $caller,
            syscall: Syscall::$syscall,
            allocator: ALLOCATOR as u32,
            prepares: PREPARES,
            start: $start,
            address: $name,
            checks: $checks,
        };
        enter_with(&pending, 0)
    }};
}

/// Notes the two allocations of pipe, pipe2 or socketpair, which write the fds to `fds`.
macro_rules! enter_pair {
    ($syscall:ident, $fds:expr, $checks:expr) => {{
        const ALLOCATOR: PairAllocator = Syscall::$syscall.info().allocates.two();
        let Some(caller) = target::current() else {
            return 0;
        };
        let pending = Allocation {
            caller,
            syscall: Syscall::$syscall,
            allocator: 0,
            prepares: FdPrepare::Direct,
            start: 0,
            address: $fds,
            checks: ($checks, [0, 0]),
        };
        enter_with(&pending, ALLOCATOR as u32 + 1)
    }};
}

/// What an allocating syscall's entry knows.
struct Allocation {
    /// The traced process making the call, and its thread's state.
    caller: Caller,
    syscall: Syscall,
    allocator: u32,
    prepares: FdPrepare,
    start: u32,
    /// An open's name; the address a pair's fds are written to.
    address: u64,
    /// A [`Checks`] and the arguments it reads.
    checks: (u32, [u64; 2]),
}

#[inline(always)]
fn enter_with(call: &Allocation, pair: u32) {
    let Allocation {
        caller,
        syscall,
        allocator,
        prepares,
        start,
        address,
        checks: (checks, args),
    } = *call;
    let table = task::alloc_start(caller.task, start);
    in_flight::stash(
        &PendingAlloc {
            process: caller.process.key,
            table: table.unwrap_or_default(),
            allocator,
            prepares,
            table_read: u32::from(table.is_some()),
            syscall,
            pair,
            checks,
            args,
            address,
        },
        &caller,
    );
}

/// The exit of every allocating syscall, attached to each (their rows'
/// `Program::Shared`), so that the verifier checks this body once rather than once for
/// each of 27 syscalls (half the probe's load time).
#[tracepoint]
pub fn alloc_exit(ctx: TracePointContext) -> u32 {
    let task = Task::current();
    if in_flight::may_hold(task) {
        exit(&ctx, task);
    }
    0
}

// Inlined: as a frame of its own it took 6.1's verifier past the 512 bytes it allows a
// chain of calls (each frame rounded up to 32).
#[inline(always)]
fn exit(ctx: &TracePointContext, task: Task) {
    let Some((pending, slot)) = in_flight::take_of::<PendingAlloc>(task) else {
        return;
    };
    let Some(mut row) = Row::of(&pending.process, slot) else {
        return;
    };
    let ret = exit_ret(ctx);
    let table = (pending.table_read != 0).then_some(&pending.table);
    let refused = pending.refused(&mut row, Some(ret));
    if pending.pair != 0 {
        let allocator = PairAllocator::from_u32(pending.pair - 1);
        match allocator.fds_written(ret, refused == Some(true)) {
            Some(false) => {}
            Some(true) => fd::pair(
                &mut row,
                table,
                args::read_user::<[u32; 2]>(pending.address),
            ),
            // Both ran, or may have; which fds they found is not in user memory.
            None => fd::pair(&mut row, table, None),
        }
    } else {
        let allocator = Allocator::from_u32(pending.allocator);
        let outcome = allocator.outcome_if_refused(ret, refused);
        fd::allocation(&mut row, table, outcome);
        fd::fd_prepare(&mut row, pending.prepares, outcome, ret);
    }
    // fcntl's calls are counted at entry, all of them.
    if pending.syscall != Syscall::Fcntl {
        tally::call(pending.syscall);
    }
}

/// open and openat: the checks on their flags and mode, then the allocation.
macro_rules! opens {
    ($($function:ident => $event:literal: $syscall:ident),* $(,)?) => {
        $(
            #[tracepoint(category = "syscalls", name = $event)]
            pub fn $function(ctx: TracePointContext) -> u32 {
                let Some(caller) = target::current() else {
                    return 0;
                };
                let checks = [arg!(&ctx, $syscall, "flags"), arg!(&ctx, $syscall, "mode")];
                let name = arg!(&ctx, $syscall, "filename");
                enter!($syscall, caller, 0, name, (Checks::OPEN, checks));
                0
            }
        )*
    };
}

opens! {
    open_enter => "sys_enter_open": Open,
    openat_enter => "sys_enter_openat": Openat,
}

#[tracepoint(category = "syscalls", name = "sys_enter_creat")]
pub fn creat_enter(ctx: TracePointContext) -> u32 {
    let Some(caller) = target::current() else {
        return 0;
    };
    let checks = [open::CREAT_FLAGS, arg!(&ctx, Creat, "mode")];
    let name = arg!(&ctx, Creat, "pathname");
    enter!(Creat, caller, 0, name, (Checks::OPEN, checks));
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_openat2")]
pub fn openat2_enter(ctx: TracePointContext) -> u32 {
    let Some(caller) = target::current() else {
        return 0;
    };
    let checks = [arg!(&ctx, Openat2, "usize"), arg!(&ctx, Openat2, "how")];
    let name = arg!(&ctx, Openat2, "filename");
    enter!(Openat2, caller, 0, name, (Checks::OPENAT2, checks));
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_fcntl")]
pub fn fcntl_enter(ctx: TracePointContext) -> u32 {
    let Some(caller) = target::current() else {
        return 0;
    };
    crate::fget::fcntl_entry(&caller, arg!(&ctx, Fcntl, "fd") as u32);
    const ASKS: Asks = Syscall::Fcntl.info().asks;
    if ASKS.asks(arg!(&ctx, Fcntl, "cmd")) {
        // The start is an int; a negative one fails with EINVAL before allocating.
        let start = arg!(&ctx, Fcntl, "arg") as u32;
        enter!(Fcntl, caller, start, 0, (Checks::NONE, [0, 0]));
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_pipe")]
pub fn pipe_enter(ctx: TracePointContext) -> u32 {
    enter_pair!(Pipe, arg!(&ctx, Pipe, "fildes"), Checks::NONE);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_pipe2")]
pub fn pipe2_enter(ctx: TracePointContext) -> u32 {
    enter_pair!(Pipe2, arg!(&ctx, Pipe2, "fildes"), Checks::NONE);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_socketpair")]
pub fn socketpair_enter(ctx: TracePointContext) -> u32 {
    enter_pair!(
        Socketpair,
        arg!(&ctx, Socketpair, "usockvec"),
        if fd::socketpair_flags_refused(arg!(&ctx, Socketpair, "type")) {
            Checks::REFUSED
        } else {
            Checks::NONE
        }
    );
    0
}

/// accept4: flags past SOCK_CLOEXEC and SOCK_NONBLOCK refuse it before the fd.
#[tracepoint(category = "syscalls", name = "sys_enter_accept4")]
pub fn accept4_enter(ctx: TracePointContext) -> u32 {
    if let Some(caller) = target::current() {
        let checks = if fd::accept_flags_refused(arg!(&ctx, Accept4, "flags")) {
            Checks::REFUSED
        } else {
            Checks::NONE
        };
        enter!(Accept4, caller, 0, 0, (checks, [0, 0]));
    }
    0
}

/// The entries of the allocating syscalls that read at most the argument their row's
/// `asks` names (the syscall table's `Derived` entries of `Family::Allocate`).
macro_rules! allocation_enters {
    ($($function:ident => $event:literal: $syscall:ident),* $(,)?) => {
        $(
            #[tracepoint(category = "syscalls", name = $event)]
            pub fn $function(ctx: TracePointContext) -> u32 {
                const ASKS: Asks = Syscall::$syscall.info().asks;
                const ASKED_BY: Option<usize> = match ASKS.argument() {
                    Some(name) => Some(Syscall::$syscall.arg(name)),
                    None => None,
                };
                let value = match ASKED_BY {
                    Some(index) => {
                        crate::enter_record::<{ Syscall::$syscall.arity() }>(&ctx).args[index]
                    }
                    None => 0,
                };
                if ASKS.asks(value) {
                    enter!($syscall, 0);
                }
                0
            }
        )*
    };
}

include!(concat!(env!("OUT_DIR"), "/programs/alloc.rs"));
