//! `cargo xtask build`: the release `auditor` (with the probe embedded by auditor/build.rs)
//! and the bundled `auditor-workload` beside it.

use std::{path::PathBuf, process::Command};

use crate::{exec, setup, workspace_root};

/// Builds and returns the path of the `auditor` binary.
pub fn run() -> anyhow::Result<PathBuf> {
    setup::ensure()?;
    exec(
        Command::new("cargo")
            .args(["build", "--release", "--package", "auditor", "--bins"])
            .current_dir(workspace_root()),
    )?;
    let binary = workspace_root().join("target/release/auditor");
    println!("built {}", binary.display());
    Ok(binary)
}
