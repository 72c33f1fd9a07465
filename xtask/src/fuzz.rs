//! `cargo xtask fuzz [--seconds N]`: a bounded cargo-fuzz run of the strace parser, seeded
//! with the fixtures' logs. Installs cargo-fuzz (from crates.io) when it is missing.

use std::process::Command;

use anyhow::Context as _;

use crate::{exec, workspace_root};

#[derive(clap::Args)]
pub struct Options {
    /// How long to fuzz.
    #[arg(long, default_value_t = 60)]
    seconds: u32,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let installed = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        exec(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
            .context("installing cargo-fuzz")?;
    }
    let root = workspace_root();
    let corpus = root.join("target/fuzz-corpus/strace_log");
    std::fs::create_dir_all(&corpus)?;
    for entry in std::fs::read_dir(root.join("fixtures"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "log") {
            std::fs::copy(&path, corpus.join(path.file_name().expect("a file")))?;
        }
    }
    exec(
        Command::new("cargo")
            .args(["+nightly", "fuzz", "run", "strace_log"])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={}", options.seconds))
            // The probe is not needed to fuzz the parser.
            .env("AYA_BUILD_SKIP", "1")
            .current_dir(&root),
    )
}
