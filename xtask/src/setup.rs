//! `cargo xtask setup`: makes a fresh machine able to build the probe, as measured in
//! shared/ebpf-toolchain.md: rust-src for nightly, Debian's LLVM 22, and bpf-linker built
//! against it. Idempotent: when everything is there it only checks.

use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, bail};

use crate::exec;

/// The eBPF toolchain: nightly builds the probe with `-Z build-std=core`.
const TOOLCHAIN: &str = "nightly";
const LLVM_BIN: &str = "/usr/lib/llvm-22/bin";
const LLVM_PACKAGES: [&str; 4] = [
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
];
const BPF_LINKER_VERSION: &str = "0.13.0";

#[derive(clap::Args)]
pub struct Options {
    /// Only check, install nothing; fail naming what is missing.
    #[arg(long)]
    check: bool,
}

fn nightly_sysroot() -> Option<PathBuf> {
    let output = Command::new("rustup")
        .args(["run", TOOLCHAIN, "rustc", "--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

fn has_rust_src() -> bool {
    nightly_sysroot().is_some_and(|root| root.join("lib/rustlib/src/rust/library/core").is_dir())
}

/// The probe is linted with clippy on nightly (`cargo xtask test`).
fn has_nightly_clippy() -> bool {
    Command::new("rustup")
        .args(["run", TOOLCHAIN, "cargo-clippy", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn has_bpf_linker() -> bool {
    Command::new("bpf-linker")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether Debian's packages for building against LLVM 22 are all installed (llvm-config
/// alone comes with llvm-22, without the library bpf-linker links to).
fn has_llvm() -> bool {
    LLVM_PACKAGES.iter().all(|package| installed(package))
}

/// Whether Debian's `package` is installed.
fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "install ok installed")
}

/// Installs those of Debian's `packages` that are missing (as root), for `what`.
pub fn ensure_packages(packages: &[&str], what: &str) -> anyhow::Result<()> {
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "{what} needs Debian's {}: run `apt-get install -y {}` as root",
            missing.join(", "),
            missing.join(" ")
        );
    }
    println!(
        "setup: installing {} from Debian ({what})",
        missing.join(", ")
    );
    apt_install(&missing)
}

/// `apt-get install` of Debian's `packages` (as root), with its lists updated first. What
/// apt and dpkg print is shown only when they fail: the caller names what it installs.
pub fn apt_install(packages: &[&str]) -> anyhow::Result<()> {
    let quiet = |command: &mut Command| -> anyhow::Result<()> {
        let output = command
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .with_context(|| format!("cannot run {command:?}"))?;
        if !output.status.success() {
            bail!(
                "{command:?} failed: {}\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    };
    quiet(Command::new("apt-get").args(["update", "-qq"])).context("apt-get update")?;
    quiet(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(packages),
    )
    .with_context(|| format!("installing {}", packages.join(", ")))
}

/// Whether this runs as root (installs need it, and so do the privileged tests).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// What `setup` would still have to do; empty when the toolchain is complete.
pub fn missing() -> Vec<&'static str> {
    let mut missing = Vec::new();
    if nightly_sysroot().is_none() {
        missing.push("the nightly toolchain");
    } else {
        if !has_rust_src() {
            missing.push("rust-src for nightly");
        }
        if !has_nightly_clippy() {
            missing.push("clippy for nightly");
        }
    }
    if !has_bpf_linker() {
        missing.push("bpf-linker");
    }
    missing
}

/// Runs setup when anything is missing (used by build, run and test).
pub fn ensure() -> anyhow::Result<()> {
    if missing().is_empty() {
        return Ok(());
    }
    run(&Options { check: false })
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let missing = missing();
    if missing.is_empty() {
        println!("setup: eBPF toolchain complete (nightly rust-src and clippy, bpf-linker)");
        return Ok(());
    }
    if options.check {
        bail!("missing: {}; run `cargo xtask setup`", missing.join(", "));
    }
    if nightly_sysroot().is_none() {
        println!("setup: installing the nightly toolchain");
        exec(Command::new("rustup").args([
            "toolchain",
            "install",
            TOOLCHAIN,
            "--profile",
            "minimal",
        ]))
        .context("installing nightly (needed to build the probe with -Z build-std)")?;
    }
    if !has_rust_src() {
        println!("setup: adding rust-src to nightly");
        exec(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            TOOLCHAIN,
        ]))
        .context("adding rust-src to nightly")?;
    }
    if !has_nightly_clippy() {
        println!("setup: adding clippy to nightly");
        exec(Command::new("rustup").args(["component", "add", "clippy", "--toolchain", TOOLCHAIN]))
            .context("adding clippy to nightly")?;
    }
    if !has_bpf_linker() {
        install_bpf_linker()?;
    }
    let still = self::missing();
    if !still.is_empty() {
        bail!("setup finished, yet still missing: {}", still.join(", "));
    }
    println!("setup: eBPF toolchain complete");
    Ok(())
}

fn install_bpf_linker() -> anyhow::Result<()> {
    if !has_llvm() {
        if !is_root() {
            bail!(
                "bpf-linker needs LLVM 22 development files, and installing them needs root: \
                 run `apt-get install -y {}` as root, then `cargo xtask setup` again",
                LLVM_PACKAGES.join(" ")
            );
        }
        ensure_packages(&LLVM_PACKAGES, "building bpf-linker against LLVM 22")?;
    }
    println!("setup: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (a few minutes)");
    // Without Debian's LLVM first on PATH, the build looks for libLLVM in /usr/lib64.
    let path = format!("{LLVM_BIN}:{}", std::env::var("PATH").unwrap_or_default());
    exec(
        Command::new("cargo")
            .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION])
            .args(["--no-default-features", "--features", "llvm-22"])
            .env("PATH", path),
    )
    .context("building bpf-linker")
}
