//! `cargo xtask kernel-src`: Debian's kernel source of a release, fs/, include/ and the top
//! Makefile only, into `target/kernel-src/linux-source-VERSION` (what `auditor sites --kernel-src` reads
//! and the catalogue's test against the newest tree looks for). The release says which
//! suite carries it ([`crate::releases`]); the package is fetched through an apt state of
//! its own ([`crate::apt`]), so the machine's packages are left as they are. Never run by
//! CI: it downloads ~160 MB.

use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, bail};

use crate::{apt, exec, releases, workspace_root};

#[derive(clap::Args)]
pub struct Options {
    /// The kernel release, as Debian names its package (`linux-source-VERSION`).
    #[arg(default_value = "7.2")]
    version: String,
    /// The Debian suite that carries it; by default the one the release is known in
    /// (5.10 bullseye, 6.1 bookworm, 6.12 bookworm-backports, 7.2 sid).
    #[arg(long)]
    suite: Option<String>,
}

/// Where the tree of `version` goes.
pub fn tree(version: &str) -> PathBuf {
    workspace_root()
        .join("target/kernel-src")
        .join(format!("linux-source-{version}"))
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let tree = tree(&options.version);
    if tree.join("fs").is_dir() && tree.join("Makefile").is_file() {
        println!("{} is there already", tree.display());
        return Ok(());
    }
    let suite = match &options.suite {
        Some(suite) => suite.clone(),
        None => releases::release(&options.version)
            .with_context(|| {
                format!(
                    "which suite carries linux-source-{}? name it with --suite",
                    options.version
                )
            })?
            .suite
            .to_string(),
    };
    // One apt state per suite: lists of one suite are not mistaken for another's.
    let apt = workspace_root().join("target/kernel-src/apt").join(&suite);
    let package = format!("linux-source-{}", options.version);
    println!("kernel-src: {package} from Debian's {suite}");
    let suite = apt::Suite::update(&apt, &suite)?;
    let deb = suite
        .download(std::slice::from_ref(&package), &apt)?
        .pop()
        .context("apt-get download left no .deb")?;
    // The .deb holds usr/src/linux-source-VERSION.tar.xz; only fs/ and include/ are kept.
    let unpacked = apt.join("unpacked");
    std::fs::create_dir_all(&unpacked)?;
    exec(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
    let tarball = unpacked.join("usr/src").join(format!("{package}.tar.xz"));
    if !tarball.is_file() {
        bail!("{} has no {}", deb.display(), tarball.display());
    }
    let parent = tree.parent().expect("a parent");
    exec(
        Command::new("tar")
            .arg("xf")
            .arg(&tarball)
            .arg("-C")
            .arg(parent)
            .arg("--wildcards")
            // The top Makefile states the release a report names the tree by.
            .arg(format!("{package}/Makefile"))
            .arg(format!("{package}/fs/*"))
            .arg(format!("{package}/include/*")),
    )?;
    std::fs::remove_dir_all(&unpacked)?;
    println!("{}: fs/, include/ and the Makefile", tree.display());
    Ok(())
}
