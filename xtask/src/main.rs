//! `cargo xtask`: sets the eBPF toolchain up, builds, runs the auditor, runs every test.

mod apt;
mod bench;
mod build;
mod fixtures;
mod fuzz;
mod install;
mod kernel_src;
#[cfg(test)]
mod layers;
mod oracle;
mod releases;
mod run;
mod setup;
mod test;
mod test_packages;
mod vm;

use std::process::{Command, ExitCode};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Project tasks for auditor")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building the probe needs: nightly rust-src, LLVM 22, bpf-linker.
    Setup(setup::Options),
    /// Build the release auditor with its probe embedded.
    Build,
    /// Build, then install `auditor`, its manual pages and completions (under /usr/local).
    Install(install::Options),
    /// Build, then run `auditor` (by default `auditor trace`: the default workload).
    Run(run::Options),
    /// Run every test: lints, unit tests, and (as root) the privileged eBPF tests.
    Test(test::Options),
    /// Record fixtures: real programs under strace, with the probe's counts (needs root).
    RecordFixtures,
    /// Benchmarks, measured side by side with a reference (`ingest`, `probe`).
    Bench(bench::Options),
    /// Fuzz the strace parser for a bounded time (cargo-fuzz, nightly).
    Fuzz(fuzz::Options),
    /// Fetch Debian's kernel source of a release (fs/ and include/) into target/kernel-src.
    KernelSrc(kernel_src::Options),
    /// Build (once) a 7.2 kernel with the likely/unlikely profiler: the oracle of
    /// `cargo xtask test --oracle`.
    OracleKernel(oracle::Options),
}

/// Runs `command`, failing with the command line when it fails.
pub fn exec(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Setup(options) => setup::run(&options),
        Task::Build => build::run().map(drop),
        Task::Install(options) => install::run(&options),
        Task::Run(options) => run::run(&options),
        Task::Test(options) => test::run(&options),
        Task::RecordFixtures => fixtures::run(),
        Task::Bench(options) => bench::run(&options),
        Task::Fuzz(options) => fuzz::run(&options),
        Task::KernelSrc(options) => kernel_src::run(&options),
        Task::OracleKernel(options) => oracle::run(&options),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: {error:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
#[path = "../../auditor/tests/common/doc_commands.rs"]
mod doc_commands;

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// Every `cargo xtask` command the README and docs/ show is one xtask takes.
    #[test]
    fn every_task_the_docs_show_parses() {
        let refused = doc_commands::refused(&workspace_root(), "cargo xtask", |words| {
            Cli::try_parse_from(words)
                .map(|_| ())
                .map_err(|error| error.render())
        });
        assert!(refused.is_empty(), "{}", refused.join("\n"));
    }
}
