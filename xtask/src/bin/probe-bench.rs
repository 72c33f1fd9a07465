//! The probe benchmark's workload (`cargo xtask bench probe` runs it under each tracer):
//! tight loops of raw syscalls — no libc wrapper decides which syscall runs — each timed
//! in the loop itself, so a tracer's start and stop are not in the figures.
//!
//! `probe-bench run --cpu N --seconds S` prints one JSON line per workload:
//! `{"workload": "poll1", "calls": 123, "ns_per_call": 272.1, "mean_ns_per_call": 280.0}`:
//! the median over batches of calls (a batch an interrupt or a stolen time slice hit does
//! not move it), and the plain mean.
//! `probe-bench stamp FILE` makes one poll call and writes the CLOCK_MONOTONIC times just
//! before and just after it (ns), for the start and stop latencies.
//! `probe-bench idle` sleeps until killed: a process for a tracer to target instead.

use std::time::{Duration, Instant};

/// fds of the select workload: 3..SELECT_NFDS, all /dev/null.
const SELECT_NFDS: usize = 1000;
/// Entries of the big poll; every POLL_NEGATIVE_EVERY-th has fd = -1 (`do_pollfd` skips it).
const POLL_ENTRIES: usize = 1024;
const POLL_NEGATIVE_EVERY: usize = 16;

fn check(ret: libc::c_long, what: &str) -> libc::c_long {
    if ret < 0 {
        eprintln!("probe-bench: {what}: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    ret
}

fn open_null() -> libc::c_int {
    // SAFETY: a NUL-terminated path; the raw openat syscall.
    check(
        unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                c"/dev/null".as_ptr(),
                libc::O_RDONLY,
            )
        },
        "openat /dev/null",
    ) as libc::c_int
}

fn close(fd: libc::c_int) {
    // SAFETY: the raw close syscall on an fd this program opened.
    check(unsafe { libc::syscall(libc::SYS_close, fd) }, "close");
}

fn poll(fds: &mut [libc::pollfd]) {
    // SAFETY: `fds` is a valid array of fds.len() entries; timeout 0.
    check(
        unsafe { libc::syscall(libc::SYS_poll, fds.as_mut_ptr(), fds.len(), 0) },
        "poll",
    );
}

/// What one workload measured.
struct Figures {
    calls: u64,
    /// Median over batches, ns per call.
    median: f64,
    mean: f64,
}

/// Runs `body` (which makes `batch` calls) until `seconds` have passed.
fn timed(seconds: f64, batch: u64, mut body: impl FnMut()) -> Figures {
    let warm_up = Instant::now();
    while warm_up.elapsed() < Duration::from_secs_f64(seconds / 10.0) {
        body();
    }
    let limit = Duration::from_secs_f64(seconds);
    let mut batches: Vec<u64> = Vec::with_capacity(1 << 20);
    let started = Instant::now();
    let mut last = started;
    loop {
        body();
        let now = Instant::now();
        batches.push((now - last).as_nanos() as u64);
        last = now;
        if now - started >= limit {
            let calls = batches.len() as u64 * batch;
            let mean = (now - started).as_nanos() as f64 / calls as f64;
            batches.sort_unstable();
            let median = batches[batches.len() / 2] as f64 / batch as f64;
            return Figures {
                calls,
                median,
                mean,
            };
        }
    }
}

fn pollfd(fd: libc::c_int) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Polls `entries` entries (every POLL_NEGATIVE_EVERY-th, from the first, with fd = -1
/// when there are more than one) of an open /dev/null, `batch` calls a batch.
fn poll_entries(seconds: f64, entries: usize, batch: u64) -> Figures {
    let null = open_null();
    let negative = |i: usize| entries > 1 && i.is_multiple_of(POLL_NEGATIVE_EVERY);
    let mut fds: Vec<libc::pollfd> = (0..entries)
        .map(|i| pollfd(if negative(i) { -1 } else { null }))
        .collect();
    let result = timed(seconds, batch, || {
        for _ in 0..batch {
            poll(&mut fds);
        }
    });
    close(null);
    result
}

fn open_close(seconds: f64) -> Figures {
    timed(seconds, 64, || {
        for _ in 0..64 {
            close(open_null());
        }
    })
}

/// open+close on two threads at once (a shared fd table): ns per pair, averaged over the
/// threads, each pinned to its own CPU when there are two.
fn open_close_two_threads(seconds: f64, cpu: usize) -> Figures {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<_> = (0..2)
        .map(|i| {
            std::thread::spawn(move || {
                pin((cpu + i) % cpus.max(1));
                open_close(seconds)
            })
        })
        .collect();
    let results: Vec<Figures> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let threads = results.len() as f64;
    Figures {
        calls: results.iter().map(|r| r.calls).sum(),
        median: results.iter().map(|r| r.median).sum::<f64>() / threads,
        mean: results.iter().map(|r| r.mean).sum::<f64>() / threads,
    }
}

/// A syscall no tracer here follows: what every other syscall of the machine pays.
fn getppid(seconds: f64) -> Figures {
    timed(seconds, 64, || {
        for _ in 0..64 {
            // SAFETY: the raw getppid syscall has no arguments.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
    })
}

/// An ioctl the auditor does not count (FIONREAD on /dev/null: ENOTTY): what a traced
/// program's other ioctls pay for the programs on ioctl's tracepoints.
fn ioctl(seconds: f64) -> Figures {
    let null = open_null();
    let mut unread: libc::c_int = 0;
    let figures = timed(seconds, 64, || {
        for _ in 0..64 {
            // SAFETY: FIONREAD writes one int, which `unread` is.
            unsafe { libc::ioctl(null, libc::FIONREAD, &raw mut unread) };
        }
    });
    close(null);
    figures
}

fn select_many(seconds: f64) -> Figures {
    let null = open_null();
    let mut opened = Vec::new();
    for fd in 3..SELECT_NFDS as libc::c_int {
        if fd != null {
            // SAFETY: dup2 onto a free fd number of this process.
            check(
                unsafe { libc::syscall(libc::SYS_dup2, null, fd) },
                "dup2 for select",
            );
            opened.push(fd);
        }
    }
    // SAFETY: an all-zero fd_set is the empty set.
    let mut wanted: libc::fd_set = unsafe { std::mem::zeroed() };
    for fd in 3..SELECT_NFDS as libc::c_int {
        // SAFETY: fd < FD_SETSIZE.
        unsafe { libc::FD_SET(fd, &mut wanted) };
    }
    let result = timed(seconds, 8, || {
        for _ in 0..8 {
            // select overwrites the set with the ready fds: start from the wanted ones.
            let mut readfds = wanted;
            let mut timeout = libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            };
            // SAFETY: valid fd_set and timeval for the raw select syscall.
            check(
                unsafe {
                    libc::syscall(
                        libc::SYS_select,
                        SELECT_NFDS,
                        &mut readfds,
                        std::ptr::null_mut::<libc::fd_set>(),
                        std::ptr::null_mut::<libc::fd_set>(),
                        &mut timeout,
                    )
                },
                "select",
            );
        }
    });
    for fd in opened {
        close(fd);
    }
    close(null);
    result
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one CPU set, for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            eprintln!(
                "probe-bench: cannot pin to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            );
            std::process::exit(1);
        }
    }
}

fn monotonic_ns() -> u128 {
    // SAFETY: a valid timespec for clock_gettime (vDSO: no syscall).
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u128 * 1_000_000_000 + now.tv_nsec as u128
}

fn value_at(args: &[String], at: usize) -> &str {
    args.get(at).map_or_else(|| usage(), String::as_str)
}

fn usage() -> ! {
    eprintln!(
        "usage: probe-bench run --cpu N --seconds S [--only W,..] [--rounds R] | stamp FILE | idle"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => {
            let value = |flag: &str| {
                let at = args
                    .iter()
                    .position(|a| a == flag)
                    .unwrap_or_else(|| usage());
                value_at(&args, at + 1)
            };
            let cpu: usize = value("--cpu").parse().unwrap_or_else(|_| usage());
            let seconds: f64 = value("--seconds").parse().unwrap_or_else(|_| usage());
            pin(cpu);
            type Workload = (&'static str, Box<dyn Fn() -> Figures>);
            let workloads: [Workload; 8] = [
                ("poll1", Box::new(move || poll_entries(seconds, 1, 64))),
                ("pollneg", Box::new(move || poll_entries(seconds, 2, 64))),
                (
                    "poll1024",
                    Box::new(move || poll_entries(seconds, POLL_ENTRIES, 8)),
                ),
                ("openclose", Box::new(move || open_close(seconds))),
                (
                    "openclose2",
                    Box::new(move || open_close_two_threads(seconds, cpu)),
                ),
                ("select1000", Box::new(move || select_many(seconds))),
                ("getppid", Box::new(move || getppid(seconds))),
                ("ioctl", Box::new(move || ioctl(seconds))),
            ];
            // `--only A,B`: these workloads alone.
            let only: Option<Vec<&str>> = args
                .iter()
                .position(|a| a == "--only")
                .map(|i| value_at(&args, i + 1).split(',').collect());
            let rounds: usize = args.iter().position(|a| a == "--rounds").map_or(1, |i| {
                value_at(&args, i + 1).parse().unwrap_or_else(|_| usage())
            });
            let chosen: Vec<&Workload> = workloads
                .iter()
                .filter(|(name, _)| only.as_ref().is_none_or(|only| only.contains(name)))
                .collect();
            // Round after round of every workload, each workload's fastest round kept: the
            // machine's speed takes one of two levels for a while at a time (select of
            // 1000 fds 12 or 18 µs), and rounds spread each workload's runs over the run.
            let mut fastest: Vec<Option<Figures>> = chosen.iter().map(|_| None).collect();
            for _ in 0..rounds.max(1) {
                for ((_, workload), best) in chosen.iter().zip(&mut fastest) {
                    let figures = workload();
                    if best.as_ref().is_none_or(|b| figures.median < b.median) {
                        *best = Some(figures);
                    }
                }
            }
            for ((name, _), best) in chosen.iter().zip(fastest) {
                let Some(Figures {
                    calls,
                    median,
                    mean,
                }) = best
                else {
                    continue;
                };
                println!(
                    r#"{{"workload": "{name}", "calls": {calls}, "ns_per_call": {median:.1}, "mean_ns_per_call": {mean:.1}}}"#
                );
            }
        }
        Some("stamp") => {
            let path = args.get(1).unwrap_or_else(|| usage());
            let null = open_null();
            let mut fds = [pollfd(null)];
            let before = monotonic_ns();
            poll(&mut fds);
            let after = monotonic_ns();
            std::fs::write(path, format!("{before} {after}\n")).unwrap_or_else(|e| {
                eprintln!("probe-bench: writing {path}: {e}");
                std::process::exit(1)
            });
        }
        Some("idle") => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        _ => usage(),
    }
}
