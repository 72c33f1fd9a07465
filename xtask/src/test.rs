//! `cargo xtask test`: every test. Installs the Debian packages the tests need
//! ([`test_packages`]), then formatting and clippy (host crates and the probe), unit and
//! integration tests, and, as root, the privileged eBPF tests (`#[ignore]`d for a plain
//! `cargo test`), which run one at a time since they share the kernel.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

use crate::{exec, setup, setup::is_root, test_packages, vm, workspace_root};

#[derive(clap::Args)]
pub struct Options {
    /// Skip formatting and clippy.
    #[arg(long)]
    no_lint: bool,
    /// Instead of the host's tests: the privileged tests on these Debian kernels under
    /// QEMU (5.10, 6.1, 6.12, 7.2; `host` for the machine's own), as a matrix.
    #[arg(long, num_args = 1.., value_name = "VERSION")]
    kernel: Vec<String>,
    /// The test binaries (auditor/tests/NAME.rs) whose privileged tests run per kernel.
    #[arg(long, num_args = 1.., value_name = "NAME", default_values = ["trace", "session"])]
    vm_tests: Vec<String>,
    /// A guest still running after this long is killed and reported.
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = humantime::parse_duration)]
    vm_timeout: std::time::Duration,
    /// Instead of the host's tests: the kernel's own count of every hint (the oracle
    /// kernel, built once) against the auditor's, on the workload's steps and real
    /// programs under QEMU; the result goes to docs/oracle.md.
    #[arg(long, conflicts_with = "kernel")]
    oracle: bool,
    /// With --oracle: compare the last guest run's readings again, without a new boot.
    #[arg(long, requires = "oracle")]
    reuse_run: bool,
    /// With --kernel: write the matrix into docs/guide.md's kernels section.
    #[arg(long, requires = "kernel")]
    guide: bool,
}

fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new("cargo");
    command.args(args).current_dir(workspace_root());
    command
}

/// Tracepoints attach through tracefs, which a fresh machine does not mount.
fn mount_tracefs() -> anyhow::Result<()> {
    if std::path::Path::new("/sys/kernel/tracing/events").is_dir() {
        return Ok(());
    }
    exec(Command::new("mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]))
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    setup::ensure()?;
    if options.oracle {
        if !is_root() {
            bail!("the oracle's guest runs the auditor as root: run it as root");
        }
        return crate::oracle::test(options.vm_timeout, options.reuse_run);
    }
    if !options.kernel.is_empty() {
        if !is_root() {
            bail!("the kernel matrix runs its guests' tests as root: run it as root");
        }
        setup::ensure_packages(&vm::PACKAGES, "booting Debian's kernels under QEMU")?;
        return vm::run(&vm::Options {
            kernels: options.kernel.clone(),
            tests: options.vm_tests.clone(),
            timeout: options.vm_timeout,
            guide: options.guide,
        });
    }
    let skipped = test_packages::ensure()?;
    if !options.no_lint {
        exec(&mut cargo(&["fmt", "--all", "--check"]))?;
        exec(&mut cargo(&[
            "clippy",
            "--workspace",
            "--exclude",
            "auditor-ebpf",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))?;
        exec(
            cargo(&[
                "+nightly",
                "clippy",
                "--package",
                "auditor-ebpf",
                "--release",
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--",
                "-D",
                "warnings",
            ])
            .current_dir(workspace_root().join("auditor-ebpf")),
        )?;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    // Every test binary runs, whichever fails: one failure does not hide the rest.
    let mut test = cargo(&[
        "test",
        "--workspace",
        "--exclude",
        "auditor-ebpf",
        "--no-fail-fast",
        "--",
    ]);
    if !skipped.is_empty() {
        test.arg("--exact");
        for name in skipped {
            test.args(["--skip", name]);
        }
    }
    if is_root() {
        mount_tracefs()?;
        test.args(["--include-ignored", "--test-threads=1"]);
    } else if ci {
        bail!("CI must run the privileged eBPF tests, and they need root: run as root");
    } else {
        eprintln!(
            "\n*** NOT ROOT: the privileged eBPF tests are IGNORED in this run. ***\n\
             *** Run `cargo xtask test` as root to include them.              ***\n"
        );
    }
    run_counted(&mut test)
}

/// Totals over every `test result:` line of a cargo test run.
#[derive(Debug, Default, PartialEq, Eq)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
    /// Left out by `--skip`: the tests whose packages are missing.
    filtered_out: u64,
}

impl Totals {
    /// Adds `test result: ok. 8 passed; 0 failed; 1 ignored; …`.
    fn add_line(&mut self, line: &str) {
        let Some(rest) = line.strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split(';') {
            if let Some(count) = part.trim().strip_suffix(" filtered out") {
                self.filtered_out += count.parse::<u64>().unwrap_or(0);
                continue;
            }
            let mut words = part.split_whitespace().rev();
            let (Some(what), Some(count)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(count) = count.parse::<u64>() else {
                continue;
            };
            match what {
                "passed" => self.passed += count,
                "failed" => self.failed += count,
                "ignored" => self.ignored += count,
                _ => {}
            }
        }
    }
}

/// Runs cargo test, passing its output through, and closes with one line of totals over
/// all test binaries (cargo's own last line is that of the last binary, often doc tests).
fn run_counted(test: &mut Command) -> anyhow::Result<()> {
    let mut child = test
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {test:?}"))?;
    let mut totals = Totals::default();
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        println!("{line}");
        totals.add_line(&line);
    }
    let status = child.wait()?;
    println!(
        "\ntests: {} passed, {} failed, {} skipped",
        totals.passed,
        totals.failed,
        totals.ignored + totals.filtered_out
    );
    if !status.success() {
        bail!("{test:?} failed: {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_cargo_lines() {
        let mut totals = Totals::default();
        totals.add_line("test result: ok. 15 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s");
        totals.add_line(
            "test result: FAILED. 6 passed; 2 failed; 3 ignored; 0 measured; 4 filtered out",
        );
        totals.add_line("test foo ... ok");
        assert_eq!(
            totals,
            Totals {
                passed: 21,
                failed: 2,
                ignored: 3,
                filtered_out: 4,
            }
        );
    }
}
