//! `cargo xtask test`: every test. Formatting and clippy (host crates and the probe), unit
//! and integration tests, and, as root, the privileged eBPF tests (`#[ignore]`d for a plain
//! `cargo test`), which run one at a time since they share the kernel.

use std::process::Command;

use anyhow::bail;

use crate::{exec, setup, workspace_root};

#[derive(clap::Args)]
pub struct Options {
    /// Skip formatting and clippy.
    #[arg(long)]
    no_lint: bool,
}

fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new("cargo");
    command.args(args).current_dir(workspace_root());
    command
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
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
    let mut test = cargo(&["test", "--workspace", "--exclude", "auditor-ebpf", "--"]);
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
    exec(&mut test)
}
