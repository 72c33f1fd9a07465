//! The Debian packages the tests need, from their one list
//! (`auditor/tests/common/packages.rs`): `cargo xtask test` installs the missing ones
//! before it runs the tests, one line naming each, and says nothing when all are there.
//! Without root it cannot install them: it names each missing package with the tests that
//! need it, and those tests are skipped, and counted as skipped in the closing line.

#[path = "../../auditor/tests/common/packages.rs"]
#[allow(dead_code, reason = "require is the tests' side of the list")]
mod packages;

pub use packages::{PACKAGES, Package};

use crate::setup;

/// What to do about the packages that are missing.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing is missing.
    Ready,
    /// As root: install these.
    Install(Vec<&'static Package>),
    /// Not root: these are missing, and the tests that need them are skipped.
    Skip(Vec<&'static Package>),
}

impl PartialEq for Package {
    fn eq(&self, other: &Package) -> bool {
        self.name == other.name
    }
}

impl Eq for Package {}

impl std::fmt::Debug for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The plan for the listed packages of which `is_installed` says which are there.
pub fn plan(root: bool, is_installed: &dyn Fn(&Package) -> bool) -> Plan {
    let missing: Vec<&'static Package> = PACKAGES.iter().filter(|p| !is_installed(p)).collect();
    match (missing.is_empty(), root) {
        (true, _) => Plan::Ready,
        (false, true) => Plan::Install(missing),
        (false, false) => Plan::Skip(missing),
    }
}

/// Makes the machine ready for the tests: the `--skip` filters of those that cannot run.
pub fn ensure() -> anyhow::Result<Vec<&'static str>> {
    match plan(setup::is_root(), &packages::is_installed) {
        Plan::Ready => Ok(Vec::new()),
        Plan::Install(missing) => {
            for package in &missing {
                println!(
                    "test: installing {} from Debian ({})",
                    package.name, package.used_for
                );
            }
            let names: Vec<&str> = missing.iter().map(|p| p.name).collect();
            setup::apt_install(&names)?;
            let still: Vec<&str> = missing
                .iter()
                .filter(|p| !packages::is_installed(p))
                .map(|p| p.provides)
                .collect();
            if !still.is_empty() {
                anyhow::bail!(
                    "installed {}, yet {} is still missing",
                    names.join(", "),
                    still.join(", ")
                );
            }
            Ok(Vec::new())
        }
        Plan::Skip(missing) => {
            for package in &missing {
                eprintln!(
                    "\n*** NOT ROOT: Debian's {} is missing ({}); installing it needs root \
                     (`apt-get install {}`). Skipped without it: {}. ***",
                    package.name,
                    package.used_for,
                    package.name,
                    if package.tests.is_empty() {
                        "none".to_string()
                    } else {
                        package.tests.join(", ")
                    }
                );
            }
            Ok(missing
                .iter()
                .flat_map(|p| p.tests.iter().copied())
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::workspace_root;

    #[test]
    fn root_installs_what_is_missing_and_others_skip_its_tests() {
        let all = |_: &Package| true;
        let no_prometheus = |p: &Package| p.name != "prometheus";
        assert_eq!(plan(true, &all), Plan::Ready);
        assert_eq!(plan(false, &all), Plan::Ready);
        let prometheus = packages::package("prometheus");
        assert_eq!(plan(true, &no_prometheus), Plan::Install(vec![prometheus]));
        assert_eq!(plan(false, &no_prometheus), Plan::Skip(vec![prometheus]));
    }

    /// Every `.rs` file under `dir`.
    fn sources(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }

    /// The Debian packages `text` names in `require("…")` calls and `apt-get install …`
    /// lines.
    fn named_packages(text: &str) -> Vec<String> {
        let mut names = Vec::new();
        for (marker, end) in [("require(\"", '"'), ("apt-get install ", '\n')] {
            for (at, _) in text.match_indices(marker) {
                let rest = &text[at + marker.len()..];
                let words = &rest[..rest.find(end).unwrap_or(rest.len())];
                names.extend(
                    words
                        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
                        .skip_while(|w| w.starts_with('-'))
                        .take_while(|w| !w.is_empty() && !w.starts_with('-'))
                        .filter(|w| w.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
                        .map(str::to_string),
                );
            }
        }
        names
    }

    #[test]
    fn named_packages_are_read_from_calls_and_install_lines() {
        let text = "require(\"prometheus\");\n// Debian: apt-get install fonts-dejavu-core)\n\
                    `apt-get install -y x`";
        assert_eq!(
            named_packages(text),
            ["prometheus", "fonts-dejavu-core", "x"]
        );
    }

    /// The tests of a source file: their names as libtest prints them below `module`, and
    /// their bodies (up to the brace that closes them, as rustfmt places it).
    fn tests_of(text: &str, module: &str) -> Vec<(String, String)> {
        let mut tests = Vec::new();
        let mut lines = text.lines();
        let mut is_test = false;
        // The inline modules the line is in: their closing lines and names.
        let mut modules: Vec<(String, String)> = Vec::new();
        while let Some(line) = lines.next() {
            let trimmed = line.trim_start();
            let indent = &line[..line.len() - trimmed.len()];
            if modules.last().is_some_and(|(close, _)| close == line) {
                modules.pop();
                continue;
            }
            if let Some(name) = trimmed
                .strip_prefix("mod ")
                .or_else(|| trimmed.strip_prefix("pub mod "))
                .and_then(|rest| rest.strip_suffix(" {"))
            {
                modules.push((format!("{indent}}}"), name.to_string()));
                continue;
            }
            if trimmed.starts_with("#[test]") {
                is_test = true;
                continue;
            }
            let Some(rest) = trimmed.strip_prefix("fn ") else {
                continue;
            };
            if !std::mem::take(&mut is_test) {
                continue;
            }
            let name = &rest[..rest.find(['(', '<']).unwrap_or(rest.len())];
            let close = format!("{indent}}}");
            let body: Vec<&str> = lines.by_ref().take_while(|l| *l != close).collect();
            let path: Vec<&str> = std::iter::once(module)
                .filter(|m| !m.is_empty())
                .chain(modules.iter().map(|(_, m)| m.as_str()))
                .chain([name])
                .collect();
            tests.push((path.join("::"), body.join("\n")));
        }
        tests
    }

    #[test]
    fn tests_are_read_with_their_bodies() {
        let text = "#[test]\n#[ignore = \"root\"]\nfn a() {\n    require(\"x\");\n}\n\n\
                    fn helper() {\n}\n\nmod inner {\n    #[test]\n    fn b() {\n        one();\n    }\n}\n";
        assert_eq!(
            tests_of(text, "m"),
            [
                ("m::a".to_string(), "    require(\"x\");".to_string()),
                ("m::inner::b".to_string(), "        one();".to_string())
            ]
        );
    }

    /// The check of the install step: a package a test of the auditor's names (a
    /// `require`, or an `apt-get install` in its message) is one `cargo xtask test`
    /// installs; a test that requires a package is listed with it (so it is skipped when
    /// the package cannot be installed), and a listed test exists and requires it.
    #[test]
    fn every_package_a_test_names_is_one_the_tests_install() {
        let auditor = workspace_root().join("auditor");
        let mut files = Vec::new();
        sources(&auditor.join("tests"), &mut files);
        sources(&auditor.join("src"), &mut files);
        let listed: Vec<&str> = PACKAGES.iter().map(|p| p.name).collect();
        let mut tests = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let test_code = file.starts_with(auditor.join("tests"))
                || file.file_name().is_some_and(|n| n == "tests.rs");
            if !test_code || file.ends_with("common/packages.rs") {
                continue;
            }
            for name in named_packages(&text) {
                assert!(
                    listed.contains(&name.as_str()),
                    "{} names Debian's {name}, which auditor/tests/common/packages.rs \
                     does not list, so `cargo xtask test` would not install it",
                    file.display()
                );
            }
            // Test names as libtest prints them: the module path below the crate's root
            // (a test binary's file is its root, as src/lib.rs is the library's).
            let (root, depth) = if file.starts_with(auditor.join("src")) {
                (auditor.join("src"), 0)
            } else {
                (auditor.join("tests"), 1)
            };
            let module = file
                .strip_prefix(root)
                .unwrap()
                .with_extension("")
                .iter()
                .skip(depth)
                .map(|p| p.to_string_lossy().into_owned())
                .filter(|p| p != "mod" && p != "lib" && p != "main")
                .collect::<Vec<_>>()
                .join("::");
            tests.extend(tests_of(&text, &module));
        }
        for package in PACKAGES {
            assert!(
                Path::new(package.provides).is_absolute(),
                "{}",
                package.provides
            );
            let call = format!("require(\"{}\")", package.name);
            for listed in package.tests {
                let body = tests
                    .iter()
                    .find(|(name, _)| name == listed)
                    .map(|(_, body)| body)
                    .unwrap_or_else(|| panic!("{} lists {listed}, which is no test", package.name));
                assert!(
                    body.contains(&call),
                    "{listed} is listed with {} but does not call {call}",
                    package.name
                );
            }
            for (name, body) in &tests {
                assert!(
                    !body.contains(&call) || package.tests.contains(&name.as_str()),
                    "{name} calls {call} but is not listed with {} in \
                     auditor/tests/common/packages.rs",
                    package.name
                );
            }
        }
    }
}
