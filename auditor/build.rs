//! Builds the probe (`auditor-ebpf`) for the BPF target with aya-build and leaves it in
//! OUT_DIR, where `source::ebpf` embeds it. Without the eBPF toolchain (bpf-linker, nightly
//! rust-src) it leaves an empty stub instead, so that check, clippy and docs still work; the
//! binary then refuses to trace and says how to set the toolchain up.

use std::{env, fs, path::PathBuf, process::Command};

use anyhow::Context as _;

/// Why the probe cannot be built here, if it cannot.
fn missing_toolchain() -> Option<String> {
    if env::var_os("AYA_BUILD_SKIP").is_some_and(|v| v == "1" || v == "true") {
        return Some("AYA_BUILD_SKIP is set".into());
    }
    if which::which("bpf-linker").is_err() {
        return Some("bpf-linker is not on PATH".into());
    }
    let sysroot = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match sysroot {
        None => Some("the nightly toolchain is not installed".into()),
        Some(root) if !root.join("lib/rustlib/src/rust/library/core").is_dir() => {
            Some("rust-src is not installed for nightly".into())
        }
        Some(_) => None,
    }
}

fn main() -> anyhow::Result<()> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let workspace = manifest.parent().context("workspace root")?;
    let probe = workspace.join("auditor-ebpf");
    let out = PathBuf::from(env::var("OUT_DIR")?).join("auditor-probe");
    // The probe compiles auditor-common too; aya-build only watches the probe's own dir.
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("auditor-common").display()
    );
    println!("cargo:rerun-if-env-changed=PATH");

    if let Some(reason) = missing_toolchain() {
        println!(
            "cargo:warning=building auditor without its eBPF probe: {reason}; run `cargo xtask setup`"
        );
        fs::write(&out, []).context("writing the stub probe")?;
        return Ok(());
    }
    let root_dir = probe.to_str().context("non-UTF-8 path")?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "auditor-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Nightly,
    )
}
