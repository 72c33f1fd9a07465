//! `cargo xtask install [--prefix DIR]`: the release `auditor` and the `auditor-workload`
//! it runs into PREFIX/bin, the manual pages (`docs/man/`) into PREFIX/share/man/man1 and
//! the shell completions (`docs/completions/`) where bash, zsh and fish look under
//! PREFIX/share, so that `man auditor` and tab completion work. Both sets of files are
//! generated from the command line's definition and kept current by
//! `auditor/tests/manuals.rs`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::{build, workspace_root};

#[derive(clap::Args)]
pub struct Options {
    /// Where to install (bin/, share/man/, share/bash-completion/, ...).
    #[arg(long, default_value = "/usr/local")]
    prefix: PathBuf,
}

/// What goes where: (the file, its directory under the prefix, its name there).
fn files(release: &Path) -> Vec<(PathBuf, PathBuf, String)> {
    let docs = workspace_root().join("docs");
    let mut files = vec![
        (release.join("auditor"), "bin".into(), "auditor".into()),
        (
            release.join("auditor-workload"),
            "bin".into(),
            "auditor-workload".into(),
        ),
        (
            docs.join("completions/auditor.bash"),
            "share/bash-completion/completions".into(),
            "auditor".into(),
        ),
        (
            docs.join("completions/_auditor"),
            "share/zsh/site-functions".into(),
            "_auditor".into(),
        ),
        (
            docs.join("completions/auditor.fish"),
            "share/fish/vendor_completions.d".into(),
            "auditor.fish".into(),
        ),
    ];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(docs.join("man"))
        .map(|dir| dir.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    pages.sort();
    for page in pages {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        files.push((page, "share/man/man1".into(), name));
    }
    files
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let binary = build::run()?;
    let release = binary.parent().context("the binary's directory")?;
    for (from, dir, name) in files(release) {
        let dir = options.prefix.join(dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let to = dir.join(name);
        // A new file renamed over the old: a running auditor keeps its own.
        let temporary = dir.join(format!(
            ".{}.new",
            to.file_name().unwrap().to_string_lossy()
        ));
        std::fs::copy(&from, &temporary).with_context(|| {
            format!("cannot copy {} to {}", from.display(), temporary.display())
        })?;
        std::fs::rename(&temporary, &to)
            .with_context(|| format!("cannot install {}", to.display()))?;
        println!("installed {}", to.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file installed exists in the tree (after a build, the binaries too), and the
    /// main manual page goes where `man auditor` looks.
    #[test]
    fn the_files_installed_are_in_the_tree() {
        let files = files(Path::new("/nonexistent"));
        for (from, _, _) in files
            .iter()
            .filter(|(from, _, _)| !from.starts_with("/nonexistent"))
        {
            assert!(from.is_file(), "{} is missing", from.display());
        }
        assert!(
            files
                .iter()
                .any(|(_, dir, name)| dir == Path::new("share/man/man1") && name == "auditor.1")
        );
    }
}
