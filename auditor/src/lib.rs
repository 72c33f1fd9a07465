//! auditor: does a kernel `likely()`/`unlikely()` hint match what real programs do?
//!
//! Sources ([`source`]) count how often each catalogued branch ([`catalogue::SITES`]) goes each
//! way into a [`tally::Tally`]; [`report`] judges each hint ([`verdict`]) and renders the
//! result. [`trace`] runs a traced session end to end; [`workload`] holds the bundled
//! workloads with their exact expected counts.

/// Writes a line of the auditor's own (a diagnostic, never the report) to stderr, as
/// `eprintln!` does, except that a stderr that cannot be written (closed, full) loses the
/// line instead of panicking: the report fails on its own, with exit status 1.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes `text` to stderr, ignoring a failure (see [`say!`]).
pub fn write_stderr(text: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_fmt(text).and_then(|()| stderr.flush());
}

pub mod btf;
pub mod kernel;
pub mod kernel_src;
pub mod metrics;
pub mod observation;
pub mod output;
pub mod report;
pub mod session;
pub mod source;
pub mod stacks;
pub mod status;
pub mod tally;
pub mod trace;
pub mod tracefs;
pub mod verdict;
pub mod workload;

/// Errors a traced session reports to its user.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "this auditor binary was built without its eBPF probe (bpf-linker or nightly rust-src \
         was missing at build time). Run `cargo xtask setup`, then rebuild with `cargo xtask build`."
    )]
    NoProbe,
    /// The running kernel lacks BPF helpers the probe calls.
    #[error("{0}")]
    KernelTooOld(String),
    #[error(
        "tracing with eBPF needs root: the probe is loaded with CAP_BPF and CAP_PERFMON (or \
         CAP_SYS_ADMIN), and this process lacks {0}. Run it as root, e.g. `sudo auditor trace …`."
    )]
    NotPrivileged(String),
    #[error(
        "tracefs is not mounted at {mount} and mounting it failed ({0}). Tracepoints attach \
         through it: mount it as root with `mount -t tracefs tracefs {mount}`.",
        mount = tracefs::MOUNT_POINT
    )]
    Tracefs(String),
    #[error(
        "tracefs is mounted at {mount}, but this user cannot read it ({0}). Tracepoints attach \
         through it: run as root, or make it readable (e.g. remount it with `-o mode=0755`).",
        mount = tracefs::MOUNT_POINT
    )]
    TracefsUnreadable(String),
    #[error("cannot read the tracepoint layout {path}: {why}")]
    TraceFormat { path: String, why: String },
    #[error(
        "the kernel verifier rejected probe program {program} ({error}); {kept}; its end:\n{log}"
    )]
    Verifier {
        program: &'static str,
        error: String,
        /// Where the whole log was kept (or why it was not).
        kept: String,
        log: String,
    },
    #[error("{0}")]
    Probe(String),
    #[error("no process with pid {0}")]
    NoSuchProcess(u32),
    #[error("pid {pid} is a thread of process {process}: give --pid {process}")]
    ThreadNotProcess { pid: u32, process: u32 },
    #[error(
        "{given} process names given (--comm and --thread-comm together); the probe holds at \
         most {limit}"
    )]
    TooManyNames { given: usize, limit: u32 },
    #[error("{given} pids given; the probe holds at most {limit}")]
    TooManyPids { given: usize, limit: u32 },
    #[error("cannot run `{command}`: {why}")]
    Spawn { command: String, why: String },
    #[error("stopped by a signal while the probe was being loaded")]
    Interrupted,
    #[error(transparent)]
    Metrics(#[from] metrics::server::ExporterError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
