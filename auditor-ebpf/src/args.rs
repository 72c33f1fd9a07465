//! Reading what a syscall passes: the small user structs its arguments point to (timeouts,
//! signal masks), turned into the shared `auditor-common` terms.

use auditor_common::prelude::{Prelude, SIGSET_SIZE, Timeout};
use aya_ebpf::helpers::{bpf_probe_read_user, generated::bpf_task_pt_regs};

use crate::{span, task::Task};

/// The current task's user registers (`struct pt_regs`), which hold its syscall's
/// arguments until the syscall returns (`auditor_common::syscalls::pt_regs`): how an exit
/// program reads the arguments of a call that has no entry program.
#[derive(Clone, Copy)]
pub struct Registers(*const u8);

impl Registers {
    /// The registers of the current `task`.
    pub fn of(task: Task) -> Registers {
        // SAFETY: a helper whose one argument is the current task, BTF-typed.
        Registers(unsafe { bpf_task_pt_regs(task.as_ptr()) } as *const u8)
    }

    /// The register at `offset` (one of `pt_regs`'s).
    pub fn at(self, offset: u32) -> u64 {
        // SAFETY: the pointer is BTF-typed (`struct pt_regs`): the verifier checks the load
        // against the kernel's type, and the offsets are its members'.
        unsafe { *self.0.add(offset as usize).cast::<u64>() }
    }
}

/// Argument `$name` of `$syscall`, read at its exit from `$registers` ([`Registers`]), the
/// table's order of arguments in the syscall ABI's registers: `exit_arg!(regs, Poll,
/// "nfds")`.
macro_rules! exit_arg {
    ($registers:expr, $syscall:ident, $name:literal) => {{
        const OFFSET: u32 =
            auditor_common::syscalls::pt_regs::ARGS[auditor_common::Syscall::$syscall.arg($name)];
        $registers.at(OFFSET)
    }};
}
pub(crate) use exit_arg;

pub fn read_user<T>(address: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_user checks the address; a fault is an Err.
    unsafe { bpf_probe_read_user(address as *const T) }.ok()
}

/// An entry point's checks before the call's body (`Prelude`) and its timeout: packed in
/// one number, what a global function returns of what it read (`select_user_memory`).
#[derive(Clone, Copy)]
pub struct Checks {
    pub prelude: Prelude,
    pub timeout: Timeout,
}

impl Checks {
    /// The two as `prelude << 8 | timeout`.
    pub const fn packed(self) -> u64 {
        (self.prelude as u64) << 8 | self.timeout as u64
    }

    pub const fn unpacked(packed: u64) -> Checks {
        Checks {
            prelude: Prelude::from_u32((packed >> 8) as u32 & 0xff),
            timeout: Timeout::from_u32(packed as u32 & 0xff),
        }
    }
}

/// ppoll's and epoll_pwait2's checks before their bodies: the `struct __kernel_timespec *`
/// timeout's copy and value (NULL: none), then `set_user_sigmask(set, size)`, the two
/// read at once where they lie together (`span`): glibc's ppoll passes its own copy of
/// the timeout and its caller's mask, a frame or two apart. The mask is read only if it
/// has the kernel's size (else EINVAL before the copy).
#[inline(always)]
pub fn timespec_and_sigmask(timeout: u64, set: u64, size: u64) -> Checks {
    let copied_set = if size == SIGSET_SIZE { set } else { 0 };
    let spanned = span::read(&[(timeout, 16), (copied_set, SIGSET_SIZE)]);
    let timeout = timespec_read(timeout, |address| spanned.user_words::<2>(address));
    let sigmask = sigmask_read(set, size, |set| spanned.user_words::<1>(set).is_some());
    Checks {
        prelude: timeout.prelude().and(sigmask),
        timeout,
    }
}

/// A `struct __kernel_timespec *` timeout (NULL: none), its two words read by `read`.
#[inline(always)]
pub fn timespec_read(address: u64, read: impl FnOnce(u64) -> Option<[u64; 2]>) -> Timeout {
    if address == 0 {
        return Timeout::Infinite;
    }
    match read(address) {
        Some([sec, nsec]) => Timeout::from_timespec(sec as i64, nsec as i64),
        None => Timeout::Unreadable,
    }
}

/// A `struct timeval *` timeout (NULL: none), its two words read by `read`.
#[inline(always)]
pub fn timeval_read(address: u64, read: impl FnOnce(u64) -> Option<[u64; 2]>) -> Timeout {
    if address == 0 {
        return Timeout::Infinite;
    }
    match read(address) {
        Some([sec, usec]) => Timeout::from_timeval(sec as i64, usec as i64),
        None => Timeout::Unreadable,
    }
}

/// `set_user_sigmask(set, size)`.
pub fn sigmask(set: u64, size: u64) -> Prelude {
    sigmask_read(set, size, |set| read_user::<u64>(set).is_some())
}

/// [`sigmask`], whether the set is readable told by `readable`.
#[inline(always)]
pub fn sigmask_read(set: u64, size: u64, readable: impl FnOnce(u64) -> bool) -> Prelude {
    let readable = set != 0 && readable(set);
    Prelude::sigmask(set, size, readable)
}
