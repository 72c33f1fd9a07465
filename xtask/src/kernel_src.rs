//! `cargo xtask kernel-src`: Debian's kernel source of a release, fs/ and include/ only,
//! into `target/kernel-src/linux-source-VERSION` (what `auditor sites --kernel-src` reads
//! and the catalogue's test against the newest tree looks for). A release the machine's
//! suite does not carry (7.2: Debian's unstable suite, sid) is fetched through a source
//! list and apt state of its own, so the machine's packages are left as they are. Never
//! run by CI: it downloads ~160 MB.

use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, bail};

use crate::{exec, workspace_root};

#[derive(clap::Args)]
pub struct Options {
    /// The kernel release, as Debian names its package (`linux-source-VERSION`).
    #[arg(default_value = "7.2")]
    version: String,
    /// The Debian suite that carries it.
    #[arg(long, default_value = "sid")]
    suite: String,
}

/// Where the tree of `version` goes.
pub fn tree(version: &str) -> PathBuf {
    workspace_root()
        .join("target/kernel-src")
        .join(format!("linux-source-{version}"))
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let tree = tree(&options.version);
    if tree.join("fs").is_dir() {
        println!("{} is there already", tree.display());
        return Ok(());
    }
    let apt = workspace_root().join("target/kernel-src/apt");
    let lists = apt.join("lists");
    std::fs::create_dir_all(lists.join("partial"))?;
    std::fs::create_dir_all(apt.join("sources"))?;
    std::fs::write(
        apt.join("sources/suite.sources"),
        format!(
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {}\nComponents: main\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
            options.suite
        ),
    )?;
    let apt_options = [
        "-o".to_string(),
        "Dir::Etc::SourceList=/dev/null".to_string(),
        "-o".to_string(),
        format!("Dir::Etc::SourceParts={}", apt.join("sources").display()),
        "-o".to_string(),
        format!("Dir::State::Lists={}", lists.display()),
        "-o".to_string(),
        format!("Dir::Cache={}", apt.join("cache").display()),
    ];
    exec(Command::new("apt-get").args(&apt_options).arg("update"))?;
    let package = format!("linux-source-{}", options.version);
    exec(
        Command::new("apt-get")
            .args(&apt_options)
            .args(["download", &package])
            .current_dir(&apt),
    )?;
    let deb = std::fs::read_dir(&apt)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(&package) && name.ends_with(".deb"))
        })
        .with_context(|| format!("apt-get download left no {package} .deb"))?;
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
            .arg(format!("{package}/fs/*"))
            .arg(format!("{package}/include/*")),
    )?;
    std::fs::remove_dir_all(&unpacked)?;
    println!("{}: fs/ and include/", tree.display());
    Ok(())
}
