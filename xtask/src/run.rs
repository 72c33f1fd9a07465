//! `cargo xtask run [ARGS]`: builds, then runs `auditor ARGS` (default: `trace`, an audit of
//! the bundled default workload).

use std::process::Command;

use crate::{build, exec};

#[derive(clap::Args)]
pub struct Options {
    /// Arguments for `auditor`; none runs `auditor trace`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let binary = build::run()?;
    let mut command = Command::new(binary);
    // cargo sets LD_LIBRARY_PATH for what it runs; passed on, it would send the traced
    // programs' dynamic loader through cargo's directories (dozens of failed opens).
    command.env_remove("LD_LIBRARY_PATH");
    if options.args.is_empty() {
        command.arg("trace");
    } else {
        command.args(&options.args);
    }
    exec(&mut command)
}
