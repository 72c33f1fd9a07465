//! The strace reader's scheduling: it yields the CPU to strace while it keeps up.
//!
//! strace and the auditor's reader share the CPUs strace's tracees leave, and every traced
//! call waits for strace. A reader of strace's own policy that is parsing a batch keeps
//! the CPU until its slice ends when strace wakes, and the tracee waits with strace; a
//! reader at `SCHED_IDLE` is preempted at once (docs/benchmarks.md, "The strace reader at
//! the idle policy"). On a busy CPU an idle reader may fall behind: once the pipe holds
//! half of what it can, it reads at the normal policy until the pipe is nearly empty, so
//! that strace never waits on a full pipe for it. The kernel lets a thread leave
//! `SCHED_IDLE` only with CAP_SYS_NICE or an RLIMIT_NICE of 20 (`can_nice`): without them
//! the reader never yields, rather than yield for good.

use std::{
    io::Read,
    os::fd::{AsFd, AsRawFd, RawFd},
};

/// A reader of a pipe that runs at `SCHED_IDLE` while the pipe holds little, and at the
/// normal policy otherwise and once dropped. The policy is the calling thread's: the
/// thread that reads holds it.
pub struct Yielding<R> {
    inner: R,
    fd: RawFd,
    /// The pipe's capacity in bytes; 0 when unknown (it never yields then).
    capacity: usize,
    may_yield: bool,
    idle: bool,
}

impl<R: Read + AsFd> Yielding<R> {
    pub fn new(inner: R) -> Self {
        let fd = inner.as_fd().as_raw_fd();
        // SAFETY: F_GETPIPE_SZ on a descriptor `inner` holds open; -1 for a non-pipe.
        let capacity = usize::try_from(unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) }).unwrap_or(0);
        let mut reader = Yielding {
            inner,
            fd,
            capacity,
            may_yield: capacity > 0 && may_leave_idle(),
            idle: false,
        };
        reader.set_idle(reader.may_yield);
        reader
    }

    /// The bytes waiting in the pipe.
    fn pending(&self) -> usize {
        let mut pending: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int, on a descriptor `inner` holds open.
        match unsafe { libc::ioctl(self.fd, libc::FIONREAD, &mut pending) } {
            0 => usize::try_from(pending).unwrap_or(0),
            _ => 0,
        }
    }
}

impl<R> Yielding<R> {
    fn set_idle(&mut self, idle: bool) {
        if idle == self.idle {
            return;
        }
        let policy = if idle {
            libc::SCHED_IDLE
        } else {
            libc::SCHED_OTHER
        };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: the calling thread (0) and a valid parameter; a failure changes nothing.
        if unsafe { libc::sched_setscheduler(0, policy, &param) } == 0 {
            self.idle = idle;
        }
    }
}

impl<R: Read + AsFd> Read for Yielding<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        if self.may_yield {
            let pending = self.pending();
            if self.idle && pending > self.capacity / 2 {
                self.set_idle(false);
            } else if !self.idle && pending < self.capacity / 8 {
                self.set_idle(true);
            }
        }
        Ok(read)
    }
}

impl<R> Drop for Yielding<R> {
    fn drop(&mut self) {
        self.set_idle(false);
    }
}

/// Whether this thread could return from `SCHED_IDLE` to the normal policy at nice 0: it
/// has CAP_SYS_NICE, or RLIMIT_NICE allows nice 0 (a limit of 20).
fn may_leave_idle() -> bool {
    const CAP_SYS_NICE: u32 = 23;
    let capable = std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|status| {
            let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_NICE) != 0);
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NICE)
        .map_or(0, |(soft, _)| soft);
    capable || limit >= 20
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn policy() -> libc::c_int {
        // SAFETY: asks for the calling thread's policy.
        unsafe { libc::sched_getscheduler(0) }
    }

    /// In a thread of its own: the policy it sets is its thread's.
    #[test]
    fn the_reader_yields_while_the_pipe_holds_little_and_not_once_it_holds_half() {
        std::thread::spawn(|| {
            let (read_end, write_end) = nix::unistd::pipe().unwrap();
            let (read_end, mut write_end) = (
                std::fs::File::from(read_end),
                std::fs::File::from(write_end),
            );
            let mut reader = Yielding::new(&read_end);
            if !may_leave_idle() {
                assert_eq!(
                    policy(),
                    libc::SCHED_OTHER,
                    "it may not come back: never idle"
                );
                return;
            }
            assert_eq!(policy(), libc::SCHED_IDLE);
            let capacity = reader.capacity;
            write_end.write_all(&vec![b'x'; capacity * 3 / 4]).unwrap();
            let mut buf = vec![0; 4096];
            assert_eq!(reader.read(&mut buf).unwrap(), 4096);
            assert_eq!(policy(), libc::SCHED_OTHER, "behind: normal");
            let mut left = capacity * 3 / 4 - 4096;
            while left > 0 {
                left -= reader.read(&mut buf[..left.min(4096)]).unwrap();
            }
            assert_eq!(policy(), libc::SCHED_IDLE, "caught up: idle again");
            drop(reader);
            assert_eq!(policy(), libc::SCHED_OTHER, "dropped: normal");
        })
        .join()
        .unwrap();
    }
}
