//! Driving a workload's steps, above the steps: running them in this process (forking and
//! starting threads where the steps say), or working out what they must count, step by
//! step, on a table of the oracle's own. The steps use `run.rs` and `expected.rs` below
//! them; only this module walks a list of steps.

use auditor_common::Syscall;

use super::{
    Layout, Step,
    expected::{DEFAULT_NR_OPEN, Expected, Table},
    in_family,
    run::{Context as _, Fds, Result, RunError, bail},
    steps::{self, Family},
};

/// Runs the steps in this process.
pub fn run(steps: &[Step]) -> Result<()> {
    raise_nofile_limit(nofile_needed(steps))?;
    let fds = Fds::open(&Layout::of(steps)).context("cannot open the workload's fds")?;
    run_steps(&fds, steps)
}

fn run_steps(fds: &Fds, steps: &[Step]) -> Result<()> {
    for (index, step) in steps.iter().enumerate() {
        let rest = &steps[index + 1..];
        match step {
            Step::Fork => return fork_rest(fds, rest),
            Step::Thread => return thread_rest(fds, rest),
            Step::LeaderExit => leader_exit_rest(fds, rest),
            _ => in_family!(step, family => family.run(fds))
                .unwrap_or(Ok(()))
                .map_err(|error| error.within(&format!("workload step `{step}`")))?,
        }
    }
    Ok(())
}

/// The RLIMIT_NOFILE the steps need: the kernel refuses a poll of more entries.
fn nofile_needed(steps: &[Step]) -> u64 {
    let largest_poll = steps.iter().map(|step| match step {
        Step::Poll(poll) => poll.entries(),
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

/// What each process of the workload must count: index 0 is the process started, index i
/// the child created by the i-th `fork`.
pub fn expected(steps: &[Step]) -> Vec<Expected> {
    let layout = Layout::of(steps);
    let mut processes = expected_on_table(steps, layout.max_fds(), DEFAULT_NR_OPEN);
    // The set-up after exec places the layout's fds with `highest_pool_fd` dup2 calls,
    // each of two fds (see `run::Fds::open`).
    steps::dup::dup2s(&mut processes[0], layout.highest_pool_fd as u32, 0);
    // ... and adds an eventfd to the epoll fd of the epoll steps.
    if layout.epoll {
        steps::epoll::added(&mut processes[0], 1);
    }
    processes
}

/// [`expected`], for a workload whose fd table has `max_fds` slots after set-up (a table
/// never shrinks, and a process starts with one sized like its parent's, so a workload
/// started by a process with many fds has a larger one than its own fds need), on a
/// machine whose fs.nr_open is `nr_open`.
pub fn expected_on_table(steps: &[Step], max_fds: u32, nr_open: u32) -> Vec<Expected> {
    let layout = Layout::of(steps);
    let mut processes = vec![Expected::default()];
    // The table after set-up: fds 0 up to the layout's last open, the search starting
    // right after. No test allocates near RLIMIT_NOFILE.
    let mut table = Table::with_open_fds(layout.not_open() as u32, max_fds, nr_open);
    for step in steps {
        match step {
            // A forked child has a table of its own (next_fd back at 0), copied by glibc's
            // fork: a clone without CLONE_FILES.
            Step::Fork => {
                let parent = processes.last_mut().expect("never empty");
                parent.calls[Syscall::Clone] += 1;
                table = table.fork(parent);
                processes.push(Expected::default());
            }
            // The steps after `thread` run in a second thread sharing the table: a clone3
            // with CLONE_FILES (glibc's pthread_create), which copies nothing.
            Step::Thread => {
                processes.last_mut().expect("never empty").calls[Syscall::Clone3] += 1;
                table.shared = true;
            }
            // The main thread is gone: the table is the remaining thread's alone (after
            // the clone3 of the thread that stays).
            Step::LeaderExit => {
                processes.last_mut().expect("never empty").calls[Syscall::Clone3] += 1;
                table.shared = false;
            }
            step => {
                let expected = processes.last_mut().expect("never empty");
                in_family!(step, family => family.expect(expected, &layout, &mut table));
            }
        }
    }
    processes
}
