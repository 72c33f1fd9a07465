//! Running a workload: every step issues its syscalls directly (`libc::syscall`), so the
//! process makes exactly the calls the step names, and checks that each returned what the
//! step expects; a call that did not is an error naming the step.

use std::os::fd::{AsRawFd, IntoRawFd, RawFd};

use auditor_common::Syscall;

use super::{Layout, PollStep, Step};

/// An address below `vm.mmap_min_addr`: never mapped.
const UNMAPPED: usize = 0x10;

/// Why a workload could not run as its steps say: what failed, and why, innermost last.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RunError(String);

impl RunError {
    fn new(why: impl Into<String>) -> RunError {
        RunError(why.into())
    }

    /// The error, as part of `what`.
    fn within(self, what: &str) -> RunError {
        RunError(format!("{what}: {}", self.0))
    }
}

impl From<std::io::Error> for RunError {
    fn from(error: std::io::Error) -> RunError {
        RunError(error.to_string())
    }
}

impl From<nix::errno::Errno> for RunError {
    fn from(error: nix::errno::Errno) -> RunError {
        RunError(error.desc().to_string())
    }
}

type Result<T> = std::result::Result<T, RunError>;

/// What failed, for a result or an option.
trait Context<T> {
    fn context(self, what: &str) -> Result<T>;
}

impl<T, E: std::fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.map_err(|error| RunError(format!("{what}: {error}")))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: &str) -> Result<T> {
        self.ok_or_else(|| RunError::new(what))
    }
}

/// `return Err(...)` with a formatted reason.
macro_rules! bail {
    ($($why:tt)+) => {
        return Err(RunError::new(format!($($why)+)))
    };
}

/// [`bail!`] unless `condition` holds.
macro_rules! ensure {
    ($condition:expr, $($why:tt)+) => {
        if !$condition {
            bail!($($why)+);
        }
    };
}

/// Runs the steps in this process.
pub fn run(steps: &[Step]) -> Result<()> {
    raise_nofile_limit(nofile_needed(steps))?;
    let fds = Fds::open(&Layout::of(steps)).context("cannot open the workload's fds")?;
    run_steps(&fds, steps)
}

fn run_steps(fds: &Fds, steps: &[Step]) -> Result<()> {
    for (index, step) in steps.iter().enumerate() {
        match *step {
            Step::Select {
                syscall,
                calls,
                n,
                timeout_ms,
                fds: set_below,
            } => run_select(fds, syscall, calls, n, timeout_ms, set_below),
            Step::SelectSparse { calls, n } => {
                let mut set = vec![0u64; (n as usize).div_ceil(64)];
                set[(n as usize - 1) / 64] |= 1 << ((n - 1) % 64);
                repeat(calls, None, || {
                    let null = std::ptr::null_mut::<libc::c_void>();
                    let mut read_set = set.clone();
                    let mut timeout = libc::timeval {
                        tv_sec: 0,
                        tv_usec: 0,
                    };
                    // SAFETY: the set holds n bits; the timeout lives across the call.
                    unsafe {
                        libc::syscall(
                            libc::SYS_select,
                            n,
                            read_set.as_mut_ptr(),
                            null,
                            null,
                            &raw mut timeout,
                        )
                    }
                })
            }
            Step::SelectFault { calls, n } => repeat(calls, Some(libc::EFAULT), || {
                let null = std::ptr::null_mut::<libc::c_void>();
                // SAFETY: the kernel checks the timeout address and fails with EFAULT.
                unsafe { libc::syscall(libc::SYS_select, n, null, null, null, UNMAPPED) }
            }),
            Step::SelectBadFd { calls } => {
                let bad = fds.not_open;
                let mut set = vec![0u64; (bad as usize) / 64 + 1];
                set[bad as usize / 64] |= 1 << (bad % 64);
                repeat(calls, Some(libc::EBADF), || {
                    let null = std::ptr::null_mut::<libc::c_void>();
                    let mut read_set = set.clone();
                    // SAFETY: the set holds bad + 1 bits; no timeout.
                    unsafe {
                        libc::syscall(
                            libc::SYS_select,
                            bad + 1,
                            read_set.as_mut_ptr(),
                            null,
                            null,
                            null,
                        )
                    }
                })
            }
            Step::Poll(poll) => run_poll(fds, poll),
            Step::PollFault { calls, nfds } => repeat(calls, Some(libc::EFAULT), || {
                // SAFETY: the kernel checks the address and fails with EFAULT.
                unsafe { libc::syscall(libc::SYS_poll, UNMAPPED, nfds, 0) }
            }),
            Step::PollOverLimit { calls } => {
                let (soft, _) =
                    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
                repeat(calls, Some(libc::EINVAL), || {
                    // SAFETY: the kernel refuses nfds over RLIMIT_NOFILE before reading.
                    unsafe { libc::syscall(libc::SYS_poll, UNMAPPED, soft + 1, 0) }
                })
            }
            Step::Epoll {
                syscall,
                calls,
                maxevents,
                timeout_ms,
            } => run_epoll(fds, syscall, calls, maxevents, timeout_ms),
            Step::EpollBadFd { calls } => repeat(calls, Some(libc::EBADF), || {
                let mut events = [libc::epoll_event { events: 0, u64: 0 }];
                // SAFETY: one event of room.
                unsafe {
                    libc::syscall(
                        libc::SYS_epoll_wait,
                        fds.not_open,
                        events.as_mut_ptr(),
                        1,
                        0,
                    )
                }
            }),
            Step::Close { ok, bad } => {
                for _ in 0..ok {
                    let fd = std::fs::File::open("/dev/null")?.into_raw_fd();
                    // SAFETY: closes the fd just opened, which nothing else owns.
                    let ret = unsafe { libc::syscall(libc::SYS_close, fd) };
                    ensure!(ret == 0, "close failed");
                }
                // SAFETY: fd -1 is never open.
                repeat(bad, Some(libc::EBADF), || unsafe {
                    libc::syscall(libc::SYS_close, -1)
                })
            }
            Step::Open { calls } => (0..calls)
                .try_for_each(|_| {
                    std::fs::File::open("/dev/null").map(|file| {
                        let _kept_open = file.into_raw_fd();
                    })
                })
                .map_err(Into::into),
            Step::OpenMissing { calls } => (0..calls).try_for_each(|_| {
                match std::fs::File::open("/nonexistent/auditor-workload") {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    other => bail!("expected ENOENT, got {other:?}"),
                }
            }),
            Step::OpenOverLimit { calls } => with_nofile_at_next_free(|| {
                (0..calls).try_for_each(|_| match std::fs::File::open("/dev/null") {
                    Err(e) if e.raw_os_error() == Some(libc::EMFILE) => Ok(()),
                    other => bail!("expected EMFILE, got {other:?}"),
                })
            }),
            Step::Dup { calls } => repeat(calls, None, || {
                // SAFETY: fd 3 is the workload's; the new fds stay open.
                unsafe { libc::syscall(libc::SYS_dup, 3) }
            }),
            Step::Dup2 { calls, same } => {
                // dup2(3, 3) returns 3; dup2(3, 4) replaces fd 4 by a copy of fd 3.
                repeat(same, None, || dup(libc::SYS_dup2, 3, 0))?;
                repeat(calls - same, None, || dup(libc::SYS_dup2, 4, 0))
            }
            Step::Dup3 {
                calls,
                same,
                bad_flags,
            } => {
                repeat(same, Some(libc::EINVAL), || dup(libc::SYS_dup3, 3, 0))?;
                repeat(bad_flags, Some(libc::EINVAL), || {
                    dup(libc::SYS_dup3, 3, libc::O_NONBLOCK)
                })?;
                repeat(calls - same - bad_flags, None, || {
                    dup(libc::SYS_dup3, 4, libc::O_CLOEXEC)
                })
            }
            Step::DupFd { calls, start } => repeat(calls, None, || {
                // SAFETY: as above.
                unsafe { libc::syscall(libc::SYS_fcntl, 3, libc::F_DUPFD, start) }
            }),
            Step::CloseFd { fd } => repeat(1, None, || {
                // SAFETY: the step names an fd the workload opened.
                unsafe { libc::syscall(libc::SYS_close, fd) }
            }),
            Step::AcceptNone { calls } => accept_none(calls),
            Step::Pipe { calls } => repeat(calls, None, || {
                let mut fds = [0i32; 2];
                // SAFETY: room for the two fds; they stay open.
                unsafe { libc::syscall(libc::SYS_pipe2, fds.as_mut_ptr(), 0) }
            }),
            Step::SocketPair { calls } => repeat(calls, None, || {
                let mut fds = [0i32; 2];
                // SAFETY: as above.
                unsafe {
                    libc::syscall(
                        libc::SYS_socketpair,
                        libc::AF_UNIX,
                        libc::SOCK_STREAM,
                        0,
                        fds.as_mut_ptr(),
                    )
                }
            }),
            Step::Sleep { millis } => {
                std::thread::sleep(std::time::Duration::from_millis(millis));
                Ok(())
            }
            Step::Wait => std::io::stdin()
                .read_line(&mut String::new())
                .map(drop)
                .map_err(Into::into),
            Step::Fork => return fork_rest(fds, &steps[index + 1..]),
            Step::Thread => return thread_rest(fds, &steps[index + 1..]),
            Step::LeaderExit => leader_exit_rest(fds, &steps[index + 1..]),
            Step::Name { name } => {
                // SAFETY: PR_SET_NAME reads a NUL-terminated name of at most 16 bytes.
                let ret = unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                ensure!(ret == 0, "prctl(PR_SET_NAME) failed");
                Ok(())
            }
        }
        .map_err(|error| error.within(&format!("workload step `{step}`")))?;
    }
    Ok(())
}

/// The RLIMIT_NOFILE the steps need: the kernel refuses a poll of more entries.
fn nofile_needed(steps: &[Step]) -> u64 {
    let largest_poll = steps.iter().map(|step| match *step {
        Step::Poll(poll) => u64::from(poll.nfds),
        _ => 0,
    });
    let highest = Layout::of(steps).highest_fd() as u64;
    largest_poll.max().unwrap_or(0).max(highest + 64)
}

/// Raises the soft RLIMIT_NOFILE to `want`, as far as the hard limit allows.
fn raise_nofile_limit(want: u64) -> Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < want {
        setrlimit(Resource::RLIMIT_NOFILE, want.min(hard), hard)?;
    }
    Ok(())
}

/// The fds of [`Layout`], opened. None is ever closed: the process ends with them, so the
/// only closes are those of `close` steps.
#[derive(Clone)]
struct Fds {
    pool: Vec<RawFd>,
    not_open: RawFd,
    epoll: Option<RawFd>,
}

impl Fds {
    fn open(layout: &Layout) -> Result<Fds> {
        // Inherited fds past 2 would change where allocations land.
        // SAFETY: closes fds nothing in this process uses.
        let closed = unsafe { libc::syscall(libc::SYS_close_range, 3, u32::MAX, 0) };
        ensure!(closed == 0, "close_range failed");
        // dup2 places every fd exactly, whatever the workload inherited, and does not go
        // through fd allocation. /dev/null opens as fd 3, or as one of 0-2 when closed.
        let null = std::fs::File::open("/dev/null")?.into_raw_fd();
        let dup2 = |fd: RawFd| -> Result<()> {
            // SAFETY: dup2 onto an fd number this process owns from now on.
            let placed = unsafe { libc::syscall(libc::SYS_dup2, null, fd) };
            ensure!(placed == libc::c_long::from(fd), "dup2 to {fd} failed");
            Ok(())
        };
        let mut kept = 0;
        for fd in 0..=layout.highest_pool_fd {
            // Fds 0-2 stay as inherited when open (a run without stdin has them closed).
            // SAFETY: F_GETFD only reads the fd's flags.
            let open = unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
            if fd < 3 && open {
                kept += 1;
            } else if fd != null {
                dup2(fd)?;
            }
        }
        // One more dup2 for each of fds 0-2 kept as inherited: the set-up then makes
        // `highest_pool_fd` dup2 calls, each of two fds, whatever it inherited (the counts
        // `workload::expected` gives its exec).
        for _ in 0..kept {
            dup2(layout.highest_pool_fd)?;
        }
        let epoll = layout.epoll.then(ready_epoll).transpose()?;
        // An allocation and its release leave next_fd at the first fd past the layout,
        // whatever fd the first open got.
        let probe = std::fs::File::open("/dev/null")?.into_raw_fd();
        ensure!(
            probe == layout.not_open(),
            "fd {probe} is not past the layout"
        );
        // SAFETY: closes the fd just opened.
        let closed = unsafe { libc::syscall(libc::SYS_close, probe) };
        ensure!(closed == 0, "close failed");
        ensure!(
            epoll.is_none_or(|fd| fd == layout.highest_fd()),
            "the epoll fd is not where the layout puts it"
        );
        Ok(Fds {
            pool: (3..=layout.highest_pool_fd).collect(),
            not_open: layout.not_open(),
            epoll,
        })
    }

    fn fd(&self, i: usize) -> RawFd {
        self.pool[i % self.pool.len()]
    }
}

/// An epoll fd watching an eventfd that is readable.
fn ready_epoll() -> Result<RawFd> {
    use nix::sys::{
        epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags},
        eventfd::{EfdFlags, EventFd},
    };
    let event = EventFd::from_value_and_flags(1, EfdFlags::empty())?;
    let epoll = Epoll::new(EpollCreateFlags::empty())?;
    epoll.add(&event, EpollEvent::new(EpollFlags::EPOLLIN, 0))?;
    let fd = epoll.0.as_raw_fd();
    // Both stay open until the process ends (see `Fds`).
    std::mem::forget(event);
    std::mem::forget(epoll);
    Ok(fd)
}

/// A non-blocking listening socket on 127.0.0.1 (port chosen by the kernel), then
/// `calls` accepts that find no connection.
fn accept_none(calls: u32) -> Result<()> {
    // SAFETY: plain socket calls on a socket this function owns; the address outlives them.
    unsafe {
        let socket = libc::syscall(
            libc::SYS_socket,
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
            0,
        );
        ensure!(socket >= 0, "socket failed");
        let address = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        let size = std::mem::size_of::<libc::sockaddr_in>();
        ensure!(
            libc::syscall(libc::SYS_bind, socket, &raw const address, size) == 0,
            "bind failed"
        );
        ensure!(
            libc::syscall(libc::SYS_listen, socket, 1) == 0,
            "listen failed"
        );
        let null = std::ptr::null_mut::<libc::c_void>();
        repeat(calls, Some(libc::EAGAIN), || {
            libc::syscall(libc::SYS_accept4, socket, null, null, 0)
        })
    }
}

/// Runs `body` with the soft RLIMIT_NOFILE at the first free fd, then restores it.
fn with_nofile_at_next_free(body: impl FnOnce() -> Result<()>) -> Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    // The lowest free fd: what an open would get (F_GETFD allocates nothing).
    // SAFETY: F_GETFD only reads the fd's flags.
    let free = (0..).find(|&fd: &i32| unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0);
    let free = free.context("no free fd")?;
    setrlimit(Resource::RLIMIT_NOFILE, free as u64, hard)?;
    let result = body();
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard)?;
    result
}

/// Issues `calls` calls, each of which must fail with `errno` (or succeed, for None).
fn repeat(calls: u32, errno: Option<i32>, call: impl Fn() -> libc::c_long) -> Result<()> {
    for _ in 0..calls {
        let ret = call();
        let got = (ret < 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        ensure!(
            got == errno,
            "returned {ret} (errno {got:?}), expected errno {errno:?}"
        );
    }
    Ok(())
}

/// dup2 or dup3 (dup2 ignores `flags`) of fd 3 onto `newfd`, 3 or 4.
fn dup(syscall: libc::c_long, newfd: RawFd, flags: libc::c_int) -> libc::c_long {
    // SAFETY: fds 3 and 4 are the workload's own, both /dev/null: a copy of fd 3 onto fd
    // 4 replaces one with the other.
    unsafe { libc::syscall(syscall, 3, newfd, flags) }
}

/// Milliseconds as a timespec, NULL for a negative timeout.
fn timespec(timeout_ms: i32) -> Option<libc::timespec> {
    (timeout_ms >= 0).then(|| libc::timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    })
}

fn pointer<T>(value: &mut Option<T>) -> *mut T {
    value.as_mut().map_or(std::ptr::null_mut(), |v| v as *mut T)
}

fn run_select(
    fds: &Fds,
    syscall: Syscall,
    calls: u32,
    n: i32,
    timeout_ms: i32,
    set_below: i32,
) -> Result<()> {
    let words = (n.max(0) as usize).div_ceil(64);
    let mut template = vec![0u64; words.max(1)];
    for &fd in &fds.pool {
        if fd < n.min(set_below) {
            template[fd as usize / 64] |= 1 << (fd % 64);
        }
    }
    let errno = (n < 0).then_some(libc::EINVAL);
    repeat(calls, errno, || {
        let mut read_set = template.clone();
        let set = read_set.as_mut_ptr();
        let null = std::ptr::null_mut::<libc::c_void>();
        let mut timespec = timespec(timeout_ms);
        // SAFETY: the set holds n bits; the timeout structs live across the call.
        unsafe {
            if syscall == Syscall::Select {
                let mut timeval = timespec.map(|t| libc::timeval {
                    tv_sec: t.tv_sec,
                    tv_usec: t.tv_nsec / 1000,
                });
                libc::syscall(libc::SYS_select, n, set, null, null, pointer(&mut timeval))
            } else {
                libc::syscall(
                    libc::SYS_pselect6,
                    n,
                    set,
                    null,
                    null,
                    pointer(&mut timespec),
                    null,
                )
            }
        }
    })
}

fn run_poll(fds: &Fds, poll: PollStep) -> Result<()> {
    let PollStep {
        syscall,
        calls,
        nfds,
        negative,
        not_open,
        timeout_ms,
    } = poll;
    // Entry i is negative when it is the k-th of `negative` spread evenly; the first
    // `not_open` of the others name an fd that is not open.
    let mut left_not_open = not_open;
    let entries: Vec<libc::pollfd> = (0..nfds as usize)
        .map(|i| {
            let spread = (i as u64 * u64::from(negative)) % u64::from(nfds.max(1));
            let fd = if negative > 0 && spread < u64::from(negative) {
                -1
            } else if left_not_open > 0 {
                left_not_open -= 1;
                fds.not_open
            } else {
                fds.fd(i)
            };
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }
        })
        .collect();
    let counted = entries.iter().filter(|e| e.fd < 0).count();
    ensure!(
        counted == negative as usize,
        "spread {counted} negative entries, not {negative}"
    );
    repeat(calls, None, || {
        let mut array = entries.clone();
        let array = array.as_mut_ptr();
        // SAFETY: the array holds nfds entries; the timeout lives across the call.
        unsafe {
            if syscall == Syscall::Poll {
                libc::syscall(libc::SYS_poll, array, nfds, timeout_ms)
            } else {
                let mut timeout = timespec(timeout_ms);
                let null = std::ptr::null::<libc::c_void>();
                libc::syscall(libc::SYS_ppoll, array, nfds, pointer(&mut timeout), null, 8)
            }
        }
    })
}

fn run_epoll(
    fds: &Fds,
    syscall: Syscall,
    calls: u32,
    maxevents: i32,
    timeout_ms: i32,
) -> Result<()> {
    let Some(epoll) = fds.epoll else {
        bail!("no epoll fd");
    };
    let errno = (maxevents <= 0).then_some(libc::EINVAL);
    repeat(calls, errno, || {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; maxevents.max(1) as usize];
        let events = events.as_mut_ptr();
        let null = std::ptr::null::<libc::c_void>();
        // SAFETY: the buffer holds maxevents events; the timeout lives across the call.
        unsafe {
            match syscall {
                Syscall::EpollWait => {
                    libc::syscall(libc::SYS_epoll_wait, epoll, events, maxevents, timeout_ms)
                }
                Syscall::EpollPwait => libc::syscall(
                    libc::SYS_epoll_pwait,
                    epoll,
                    events,
                    maxevents,
                    timeout_ms,
                    null,
                    8,
                ),
                _ => {
                    let mut timeout = timespec(timeout_ms);
                    libc::syscall(
                        libc::SYS_epoll_pwait2,
                        epoll,
                        events,
                        maxevents,
                        pointer(&mut timeout),
                        null,
                        8,
                    )
                }
            }
        }
    })
}

fn thread_rest(fds: &Fds, rest: &[Step]) -> Result<()> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| run_steps(fds, rest))
            .join()
            .map_err(|_| RunError::new("the workload thread panicked"))?
    })
}

/// Runs `rest` in a new thread and exits the main thread alone; the process ends when the
/// new thread does.
fn leader_exit_rest(fds: &Fds, rest: &[Step]) -> ! {
    let (fds, rest) = (fds.clone(), rest.to_vec());
    std::thread::spawn(move || {
        let code = match run_steps(&fds, &rest) {
            Ok(()) => 0,
            Err(error) => {
                eprintln!("auditor-workload (last thread): {error:#}");
                1
            }
        };
        std::process::exit(code)
    });
    // SAFETY: SYS_exit ends only the calling thread; nothing of its stack is borrowed by
    // the thread above, which owns what it uses.
    unsafe { libc::syscall(libc::SYS_exit, 0) };
    unreachable!("SYS_exit returned")
}

fn fork_rest(fds: &Fds, rest: &[Step]) -> Result<()> {
    use nix::{
        sys::wait::{WaitStatus, waitpid},
        unistd::{ForkResult, fork},
    };
    // SAFETY: the child runs the remaining steps and leaves with _exit, never returning into
    // the caller. Should a `thread` step come first, glibc's fork keeps malloc usable in the
    // child, and the steps use nothing else another thread could hold.
    match unsafe { fork() }? {
        ForkResult::Child => {
            let code = match run_steps(fds, rest) {
                Ok(()) => 0,
                Err(error) => {
                    eprintln!("auditor-workload (child): {error:#}");
                    1
                }
            };
            // SAFETY: ends the child without running the parent's exit handlers twice.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => match waitpid(child, None)? {
            WaitStatus::Exited(_, 0) => Ok(()),
            status => bail!("forked child ended with {status:?}"),
        },
    }
}
