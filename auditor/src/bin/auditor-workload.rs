//! The bundled workload: runs the steps given as arguments (see `auditor::workload`).
//!
//! It has no Rust `main`: std's start-up code polls fds 0-2 before `main`, and that
//! poll would be counted. With a C `main`, the process issues exactly the workload's calls.
#![no_main]

#[unsafe(no_mangle)]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if matches!(args.as_slice(), [flag] if flag == "--help" || flag == "-h") {
        print!(
            "Runs workload steps: exactly known syscalls, whose counts the auditor's tests \
             check.\n\nUsage: auditor-workload STEP...\n\nSteps (TIMEOUT_MS is 0 when left \
             out, and negative means none):\n{}",
            auditor::workload::grammar()
        );
        return 0;
    }
    let steps = match auditor::workload::parse(&args.join(" ")) {
        Ok(steps) => steps,
        Err(error) => {
            eprintln!("auditor-workload: {error}");
            return 2;
        }
    };
    match auditor::workload::run(&steps) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("auditor-workload: {error}");
            1
        }
    }
}
