//! Debian's kernel packages of a release: the image (`vmlinuz`) and the modules a guest
//! needs to mount the host's file system over virtio 9p, fetched once into
//! `target/vm/SUITE/` through an apt state of their own.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::{apt, exec, releases::Release, workspace_root};

/// The modules the guest loads, in an order their dependencies allow, from the package.
const GUEST_MODULES: [&str; 3] = ["virtio_pci", "9pnet_virtio", "9p"];

/// A fetched kernel.
pub struct Kernel {
    /// `uname -r` of the package, e.g. `6.1.0-50-amd64`.
    pub name: String,
    pub vmlinuz: PathBuf,
    /// Uncompressed, in load order (builtin ones have none).
    pub modules: Vec<PathBuf>,
}

/// Fetches `release` (once: later calls find it under target/).
pub fn fetch(release: Release) -> anyhow::Result<Kernel> {
    let dir = workspace_root().join("target/vm").join(release.suite);
    let root = dir.join("root");
    if find_vmlinuz(&root).is_none() {
        let suite = apt::Suite::update(&dir.join("apt"), release.suite)?;
        let wanted = format!("-{}.", release.version);
        let packages = suite.depends("linux-image-amd64", &|name| {
            ["linux-image-", "linux-binary-", "linux-modules-"]
                .iter()
                .any(|prefix| name.starts_with(prefix))
        })?;
        if !packages.iter().any(|p| p.contains(&wanted)) {
            bail!(
                "{}'s linux-image-amd64 is not Linux {}: it depends on {}",
                release.suite,
                release.version,
                packages.join(", ")
            );
        }
        let _ = std::fs::remove_dir_all(&root);
        for deb in suite.download(&packages, &dir.join("debs"))? {
            exec(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
            std::fs::remove_file(&deb)?;
        }
    }
    let (name, vmlinuz) = find_vmlinuz(&root)
        .with_context(|| format!("the {} packages hold no vmlinuz", release.suite))?;
    let modules_dir = ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|d| root.join(d).join(&name))
        .find(|d| d.is_dir())
        .with_context(|| format!("the {} packages hold no modules for {name}", release.suite))?;
    let modules = guest_modules(&modules_dir, &dir.join("modules"))?;
    Ok(Kernel {
        name,
        vmlinuz,
        modules,
    })
}

/// `boot/vmlinuz-NAME` (older packages) or `usr/lib/modules/NAME/vmlinuz` (7.x).
fn find_vmlinuz(root: &Path) -> Option<(String, PathBuf)> {
    let boot = std::fs::read_dir(root.join("boot"))
        .ok()
        .into_iter()
        .flatten();
    let from_boot = boot.filter_map(Result::ok).find_map(|entry| {
        let file = entry.file_name().to_str()?.to_string();
        Some((file.strip_prefix("vmlinuz-")?.to_string(), entry.path()))
    });
    from_boot.or_else(|| {
        let modules = std::fs::read_dir(root.join("usr/lib/modules")).ok()?;
        modules.filter_map(Result::ok).find_map(|entry| {
            let vmlinuz = entry.path().join("vmlinuz");
            vmlinuz
                .is_file()
                .then(|| (entry.file_name().to_string_lossy().into_owned(), vmlinuz))
        })
    })
}

/// The module's name as the kernel knows it: the file name without `.ko[.xz|.zst]`,
/// dashes as underscores.
fn module_name(file: &str) -> Option<String> {
    let stem = file
        .strip_suffix(".ko")
        .or_else(|| file.strip_suffix(".ko.xz"))
        .or_else(|| file.strip_suffix(".ko.zst"))?;
    Some(stem.replace('-', "_"))
}

/// Every module file under `dir`, by name.
fn module_files(dir: &Path, into: &mut HashMap<String, PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            module_files(&path, into)?;
        } else if let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(module_name)
        {
            into.insert(name, path);
        }
    }
    Ok(())
}

/// The `depends=` of a module's `.modinfo` section.
fn depends(module: &[u8]) -> anyhow::Result<Vec<String>> {
    use object::{Object as _, ObjectSection as _};
    let elf = object::File::parse(module)?;
    let info = elf
        .section_by_name(".modinfo")
        .context("no .modinfo section")?
        .data()?;
    Ok(info
        .split(|&b| b == 0)
        .filter_map(|entry| entry.strip_prefix(b"depends="))
        .flat_map(|list| list.split(|&b| b == b','))
        .filter(|name| !name.is_empty())
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect())
}

/// [`GUEST_MODULES`] and what they depend on, uncompressed into `into`, dependencies
/// first. A module the package has no file for is built in.
fn guest_modules(modules_dir: &Path, into: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = HashMap::new();
    module_files(modules_dir, &mut files)?;
    std::fs::create_dir_all(into)?;
    let mut ordered = Vec::new();
    for name in GUEST_MODULES {
        add_module(name, &files, into, &mut ordered)?;
    }
    Ok(ordered)
}

fn add_module(
    name: &str,
    files: &HashMap<String, PathBuf>,
    into: &Path,
    ordered: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    let out = into.join(format!("{name}.ko"));
    if ordered.contains(&out) {
        return Ok(());
    }
    let Some(file) = files.get(name) else {
        return Ok(());
    };
    let bytes = match file.extension().and_then(|e| e.to_str()) {
        Some("xz") => decompress("xz", file)?,
        Some("zst") => decompress("zstd", file)?,
        _ => std::fs::read(file)?,
    };
    for dependency in depends(&bytes).with_context(|| format!("module {}", file.display()))? {
        add_module(&dependency, files, into, ordered)?;
    }
    std::fs::write(&out, &bytes)?;
    ordered.push(out);
    Ok(())
}

fn decompress(tool: &str, file: &Path) -> anyhow::Result<Vec<u8>> {
    let output = Command::new(tool)
        .arg("-dc")
        .arg(file)
        .output()
        .with_context(|| format!("cannot run {tool}"))?;
    if !output.status.success() {
        bail!("{tool} -dc {} failed", file.display());
    }
    Ok(output.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names() {
        assert_eq!(
            module_name("9pnet_virtio.ko.xz").as_deref(),
            Some("9pnet_virtio")
        );
        assert_eq!(module_name("virtio-pci.ko").as_deref(), Some("virtio_pci"));
        assert_eq!(module_name("modules.dep"), None);
    }
}
