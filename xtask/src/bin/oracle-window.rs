//! `oracle-window OUT SCRIPT`: the window in which the oracle kernel's own counts are
//! compared with the auditor's. Run as the auditor's traced command, it reads
//! `trace_stat/branch_annotated` (the kernel's count of every likely()/unlikely()), runs
//! `sh -c SCRIPT`, waits until every process it started has ended (orphans included: it is
//! their subreaper), reads the file again, and only then writes both readings to
//! `OUT.before` and `OUT.after`, and the number of reads of each to `OUT.reads`.
//!
//! Between the two readings it makes only fork, wait4 and pread calls, and the same
//! ones whatever SCRIPT is (as long as both readings take as many reads as the run of
//! `:`'s, which `OUT.reads` tells), so a run of `:` measures them: the kernel's difference minus
//! that run's equals the auditor's count minus that run's, site by site, when the model is
//! right.

use std::{ffi::CString, io::Write as _};

const BRANCH_ANNOTATED: &str = "/sys/kernel/tracing/trace_stat/branch_annotated";

/// Large enough for the whole file.
const READING: usize = 64 << 20;

fn fail(what: &str) -> ! {
    let error = std::io::Error::last_os_error();
    let _ = writeln!(std::io::stderr(), "oracle-window: {what}: {error}");
    std::process::exit(125)
}

/// The whole file at `fd` from offset 0, into `buffer`: its length and the number of
/// reads it took. seq_file gives one page per read, and the rows are shown at the read
/// that returns them, so a row is read at the same call of both passes (the order is
/// fixed when the file is opened) and the window holds, for every row, exactly one
/// pass's worth of reads.
fn read_all(fd: libc::c_int, buffer: &mut [u8]) -> (usize, u32) {
    let mut length = 0;
    let mut reads = 0;
    loop {
        let rest = &mut buffer[length..];
        if rest.is_empty() {
            let _ = writeln!(
                std::io::stderr(),
                "oracle-window: branch_annotated is larger than {READING} bytes"
            );
            std::process::exit(125);
        }
        // SAFETY: `rest` is valid for its length; the fd is ours.
        let n = unsafe { libc::pread(fd, rest.as_mut_ptr().cast(), rest.len(), length as i64) };
        reads += 1;
        if n < 0 {
            fail("cannot read branch_annotated");
        }
        if n == 0 {
            return (length, reads);
        }
        length += n as usize;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, script] = &args[..] else {
        let _ = writeln!(std::io::stderr(), "usage: oracle-window OUT SCRIPT");
        std::process::exit(2);
    };
    let path = CString::new(BRANCH_ANNOTATED).expect("no NUL");
    let (sh, dash_c, script) = (
        CString::new("/bin/sh").expect("no NUL"),
        CString::new("-c").expect("no NUL"),
        CString::new(script.as_str()).unwrap_or_else(|_| fail("SCRIPT holds a NUL")),
    );
    let argv = [
        sh.as_ptr(),
        dash_c.as_ptr(),
        script.as_ptr(),
        std::ptr::null(),
    ];
    let mut before = vec![0u8; READING];
    let mut after = vec![0u8; READING];
    // Touched now, so that no fault of theirs falls in the window.
    before.fill(1);
    after.fill(1);
    // SAFETY: plain calls on our own process.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            fail("cannot become a subreaper");
        }
    }
    // SAFETY: a valid path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        fail(BRANCH_ANNOTATED);
    }
    let (before_len, before_reads) = read_all(fd, &mut before);
    // SAFETY: the child only execs (or exits).
    let child = unsafe { libc::fork() };
    if child < 0 {
        fail("cannot fork");
    }
    if child == 0 {
        // SAFETY: argv is NULL-terminated, its strings live until exec.
        unsafe {
            libc::execv(argv[0], argv.as_ptr());
            libc::_exit(127);
        }
    }
    let mut status = 0;
    let mut script_status = 0;
    loop {
        // SAFETY: a valid status pointer.
        let pid = unsafe { libc::wait(&mut status) };
        if pid < 0 {
            break;
        }
        if pid == child {
            script_status = status;
        }
    }
    let (after_len, after_reads) = read_all(fd, &mut after);
    for (suffix, reading) in [
        ("before", &before[..before_len]),
        ("after", &after[..after_len]),
    ] {
        if let Err(error) = std::fs::write(format!("{out}.{suffix}"), reading) {
            let _ = writeln!(std::io::stderr(), "oracle-window: {out}.{suffix}: {error}");
            std::process::exit(125);
        }
    }
    let reads = format!("{before_reads} {after_reads}\n");
    if let Err(error) = std::fs::write(format!("{out}.reads"), reads) {
        let _ = writeln!(std::io::stderr(), "oracle-window: {out}.reads: {error}");
        std::process::exit(125);
    }
    let code = if libc::WIFEXITED(script_status) {
        libc::WEXITSTATUS(script_status)
    } else {
        128 + libc::WTERMSIG(script_status)
    };
    std::process::exit(code);
}
