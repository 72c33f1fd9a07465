//! Debian packages of another suite, fetched through an apt state of their own under
//! `target/` (a source list, lists, cache and an empty status file), so the machine's own
//! packages are left as they are. The archive is the one the machine's apt sources name
//! (`apt-get indextargets`), never a host written here: an admin's mirror may differ.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::exec;

/// An apt state for one suite, in `dir`.
pub struct Suite {
    dir: PathBuf,
}

/// The URI of the Debian archive the machine's apt sources use for its own suite (the one
/// that carries `main` for the release in /etc/os-release, not its security archive).
pub fn machine_archive() -> anyhow::Result<String> {
    let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let codename = os_release
        .lines()
        .find_map(|line| line.strip_prefix("VERSION_CODENAME="))
        .map(|name| name.trim_matches('"').to_string())
        .context("/etc/os-release names no VERSION_CODENAME: which Debian is this?")?;
    let indextargets = || -> anyhow::Result<Option<String>> {
        let output = Command::new("apt-get")
            .args([
                "indextargets",
                "--format",
                "$(REPO_URI) $(RELEASE)",
                "Created-By: Packages",
            ])
            .output()
            .context("cannot run apt-get indextargets")?;
        Ok(archive_of(
            &String::from_utf8_lossy(&output.stdout),
            &codename,
        ))
    };
    let archive = match indextargets()? {
        Some(archive) => Some(archive),
        // It lists only the indexes apt has fetched: a fresh machine has none yet.
        None => {
            exec(Command::new("apt-get").args(["-qq", "update"]))?;
            indextargets()?
        }
    };
    archive.with_context(|| {
        format!(
            "the machine's apt sources name no archive for {codename} (apt-get indextargets \
             lists none, even after apt-get update)"
        )
    })
}

/// From `apt-get indextargets` lines (`URI RELEASE`), the URI that serves `codename`.
fn archive_of(indextargets: &str, codename: &str) -> Option<String> {
    indextargets.lines().find_map(|line| {
        let (uri, release) = line.split_once(' ')?;
        (release.trim() == codename).then(|| uri.to_string())
    })
}

impl Suite {
    /// An apt state in `dir` for `suite` of the machine's archive, its lists updated.
    pub fn update(dir: &Path, suite: &str) -> anyhow::Result<Suite> {
        let archive = machine_archive()?;
        std::fs::create_dir_all(dir.join("lists/partial"))?;
        std::fs::create_dir_all(dir.join("sources"))?;
        std::fs::create_dir_all(dir.join("cache/archives/partial"))?;
        std::fs::write(
            dir.join("sources/suite.sources"),
            format!(
                "Types: deb\nURIs: {archive}\nSuites: {suite}\nComponents: main\n\
                 Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
            ),
        )?;
        std::fs::write(dir.join("status"), "")?;
        let apt = Suite {
            dir: dir.to_path_buf(),
        };
        exec(apt.command("apt-get").args(["-qq", "update"]))?;
        Ok(apt)
    }

    /// `program` (apt-get, apt-cache) on this state alone.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        for (key, value) in [
            ("Dir::Etc::SourceList", PathBuf::from("/dev/null")),
            ("Dir::Etc::SourceParts", self.dir.join("sources")),
            ("Dir::State::Lists", self.dir.join("lists")),
            ("Dir::State::status", self.dir.join("status")),
            ("Dir::Cache", self.dir.join("cache")),
            // Downloads land in a directory root owns: apt's sandbox user could not write.
            ("APT::Sandbox::User", PathBuf::from("root")),
        ] {
            command.arg("-o").arg(format!("{key}={}", value.display()));
        }
        command
    }

    /// The packages `package` depends on, as far down as names matching `keep` go (the
    /// first name of each alternative).
    pub fn depends(
        &self,
        package: &str,
        keep: &dyn Fn(&str) -> bool,
    ) -> anyhow::Result<Vec<String>> {
        let mut found = Vec::new();
        let mut todo = vec![package.to_string()];
        while let Some(name) = todo.pop() {
            let output = self
                .command("apt-cache")
                .args([
                    "depends",
                    "--no-recommends",
                    "--no-suggests",
                    "--no-conflicts",
                ])
                .args(["--no-breaks", "--no-replaces", "--no-enhances", &name])
                .output()
                .with_context(|| format!("cannot run apt-cache depends {name}"))?;
            if !output.status.success() {
                bail!(
                    "apt-cache depends {name}: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                );
            }
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                let Some(dependency) = line.trim().strip_prefix("Depends: ") else {
                    continue;
                };
                if keep(dependency) && !found.iter().any(|f| f == dependency) {
                    found.push(dependency.to_string());
                    todo.push(dependency.to_string());
                }
            }
        }
        Ok(found)
    }

    /// Downloads `packages` into `into`: the paths of their .deb files.
    pub fn download(&self, packages: &[String], into: &Path) -> anyhow::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(into)?;
        exec(
            self.command("apt-get")
                .args(["-qq", "download"])
                .args(packages)
                .current_dir(into),
        )?;
        packages
            .iter()
            .map(|package| {
                let prefix = format!("{package}_");
                std::fs::read_dir(into)?
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .find(|path| {
                        path.file_name()
                            .and_then(|name| name.to_str())
                            .is_some_and(|name| name.starts_with(&prefix) && name.ends_with(".deb"))
                    })
                    .with_context(|| format!("apt-get download left no {package} .deb"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_of_the_machines_suite() {
        let lines = "http://security.example/debian-security/ bookworm-security\n\
                     http://mirror.example/debian/ bookworm\n\
                     http://mirror.example/debian/ bookworm-updates\n";
        assert_eq!(
            archive_of(lines, "bookworm").as_deref(),
            Some("http://mirror.example/debian/")
        );
        assert_eq!(archive_of(lines, "trixie"), None);
    }
}
