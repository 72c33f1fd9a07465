//! Reading what a syscall passes: the small user structs its arguments point to (timeouts,
//! signal masks), turned into the shared `auditor-common` terms.

use auditor_common::prelude::{Prelude, Timeout};
use aya_ebpf::helpers::bpf_probe_read_user;

pub fn read_user<T>(address: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_user checks the address; a fault is an Err.
    unsafe { bpf_probe_read_user(address as *const T) }.ok()
}

/// A `struct __kernel_timespec *` timeout (NULL: none).
pub fn timespec(address: u64) -> Timeout {
    if address == 0 {
        return Timeout::Infinite;
    }
    match read_user::<[i64; 2]>(address) {
        Some([sec, nsec]) => Timeout::from_timespec(sec, nsec),
        None => Timeout::Unreadable,
    }
}

/// A `struct timeval *` timeout (NULL: none).
pub fn timeval(address: u64) -> Timeout {
    if address == 0 {
        return Timeout::Infinite;
    }
    match read_user::<[i64; 2]>(address) {
        Some([sec, usec]) => Timeout::from_timeval(sec, usec),
        None => Timeout::Unreadable,
    }
}

/// `set_user_sigmask(set, size)`.
pub fn sigmask(set: u64, size: u64) -> Prelude {
    let readable = set != 0 && read_user::<u64>(set).is_some();
    Prelude::sigmask(set, size, readable)
}
