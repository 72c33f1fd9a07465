//! `auditor hints --kernel-src DIR`: every `likely()` / `unlikely()` in the followed files
//! of a tree, each with its status — measured by a catalogue site, not yet measured but
//! decidable, or not decidable and why — and the catalogued branches the tree lacks.

use std::{collections::BTreeMap, path::Path};

use serde::Serialize;

use auditor_common::catalogue::{Hint, SITES};

use super::{Anchor, Tree, unmeasured::UNMEASURED};

/// The files whose every hint is accounted for: those of the readiness and fd paths.
pub const FOLLOWED: [&str; 6] = [
    "fs/select.c",
    "fs/eventpoll.c",
    "fs/file.c",
    "fs/open.c",
    "fs/fcntl.c",
    "include/linux/file.h",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HintStatus {
    /// A catalogue site counts it.
    Measured,
    /// Decidable from syscall arguments, results, user memory or task state; no site yet.
    NotYet,
    /// Nothing a tracepoint shows decides it.
    NotDecidable,
    /// Neither the catalogue nor the classification names it: code this tree added.
    Unclassified,
}

impl HintStatus {
    pub const fn name(self) -> &'static str {
        match self {
            HintStatus::Measured => "measured",
            HintStatus::NotYet => "not yet",
            HintStatus::NotDecidable => "not decidable",
            HintStatus::Unclassified => "UNCLASSIFIED",
        }
    }
}

/// One hint call of the tree.
#[derive(Debug, Serialize)]
pub struct HintRow {
    pub file: String,
    pub line: usize,
    pub function: String,
    pub hint: Hint,
    /// The condition inside the hint, as written (white space folded).
    pub condition: String,
    pub status: HintStatus,
    /// The site that measures it (the first, when several do).
    pub site: Option<&'static str>,
    pub sites: Vec<&'static str>,
    /// Why it is not measured.
    pub why: Option<&'static str>,
}

/// A catalogued branch (site or classified hint) that the tree does not carry as a hint.
#[derive(Debug, Serialize)]
pub struct Missing {
    /// A site's id, or the function of a classified hint.
    pub what: String,
    pub file: &'static str,
    pub why: String,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub hints: usize,
    pub measured: usize,
    pub not_yet: usize,
    pub not_decidable: usize,
    pub unclassified: usize,
    /// Measured among the decidable ones (measured or not yet), in percent.
    pub measured_of_decidable: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Hints {
    pub tree: String,
    pub files: Vec<&'static str>,
    pub summary: Summary,
    pub hints: Vec<HintRow>,
    pub missing: Vec<Missing>,
}

/// The files to list: the followed ones, and any other a site or a row lives in.
fn files() -> Vec<&'static str> {
    let mut files = FOLLOWED.to_vec();
    let others = SITES
        .iter()
        .map(|site| site.file)
        .chain(UNMEASURED.iter().map(|row| row.file));
    for file in others {
        if !files.contains(&file) {
            files.push(file);
        }
    }
    files
}

/// What the tree at `root` says of every hint of the followed files.
pub fn hints(root: &Path) -> Hints {
    let files = files();
    let mut tree = Tree::new(root);
    for file in &files {
        tree.load(file);
    }
    type Call = (String, usize);
    let mut measured: BTreeMap<Call, Vec<&'static str>> = BTreeMap::new();
    let mut classified: BTreeMap<Call, (HintStatus, &'static str)> = BTreeMap::new();
    let mut missing = Vec::new();
    for site in SITES {
        match tree.locate(site.into()) {
            Ok(found) => match found.call {
                Some(call) => measured.entry(call).or_default().push(site.id),
                None if site.hint != Hint::None => missing.push(Missing {
                    what: site.id.to_string(),
                    file: site.file,
                    why: format!(
                        "{}:{} in {} carries no hint (the catalogue says {})",
                        found.file,
                        found.line,
                        found.function,
                        site.hint.name()
                    ),
                }),
                None => {}
            },
            Err(why) if site.hint != Hint::None => missing.push(Missing {
                what: site.id.to_string(),
                file: site.file,
                why,
            }),
            Err(_) => {}
        }
    }
    for row in UNMEASURED {
        match tree.locate(Anchor::from(row)) {
            Ok(found) if found.call.is_some() => {
                let call = found.call.unwrap_or_default();
                classified.entry(call).or_insert((row.status, row.why));
            }
            Ok(_) | Err(_) => missing.push(Missing {
                what: row.function.to_string(),
                file: row.file,
                why: format!(
                    "no hint written as {}",
                    row.source
                        .iter()
                        .map(|f| format!("`{}`", f.text))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            }),
        }
    }
    let mut rows = Vec::new();
    for file in &files {
        let Ok(source) = tree.file(file) else {
            missing.push(Missing {
                what: "(file)".to_string(),
                file,
                why: tree.file(file).err().unwrap_or_default(),
            });
            continue;
        };
        for call in &source.hints {
            let key = (file.to_string(), call.at);
            let sites = measured.get(&key).cloned().unwrap_or_default();
            let (status, why) = match (sites.is_empty(), classified.get(&key)) {
                (false, _) => (HintStatus::Measured, None),
                (true, Some(&(status, why))) => (status, Some(why)),
                (true, None) => (HintStatus::Unclassified, None),
            };
            rows.push(HintRow {
                file: file.to_string(),
                line: source.line(call.at),
                function: source
                    .enclosing(call.at)
                    .map_or_else(|| "(file scope)".to_string(), |d| d.name.clone()),
                hint: call.hint,
                condition: source.condition(call),
                status,
                site: sites.first().copied(),
                sites,
                why,
            });
        }
    }
    let count = |status| rows.iter().filter(|row| row.status == status).count();
    let (measured, not_yet) = (count(HintStatus::Measured), count(HintStatus::NotYet));
    let decidable = measured + not_yet;
    Hints {
        tree: root.display().to_string(),
        files,
        summary: Summary {
            hints: rows.len(),
            measured,
            not_yet,
            not_decidable: count(HintStatus::NotDecidable),
            unclassified: count(HintStatus::Unclassified),
            measured_of_decidable: (decidable > 0)
                .then(|| 100.0 * measured as f64 / decidable as f64),
        },
        hints: rows,
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hint_is_listed_with_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("fs")).unwrap();
        std::fs::write(
            root.join("fs/select.c"),
            "int core_sys_select(int n)\n{\n\tif (unlikely(n < 0))\n\t\treturn -EINVAL;\n\
             \t/* unlikely(in a comment) */\n\tif (likely(brand_new))\n\t\treturn 0;\n}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("fs/eventpoll.c"),
            "static int ep_alloc(struct eventpoll **pep)\n{\n\tif (unlikely(!ep))\n\t\treturn -ENOMEM;\n}\n",
        )
        .unwrap();
        let hints = hints(root);
        let listed: Vec<(&str, usize, &str, HintStatus, Option<&str>)> = hints
            .hints
            .iter()
            .map(|row| {
                (
                    row.file.as_str(),
                    row.line,
                    row.function.as_str(),
                    row.status,
                    row.site,
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                (
                    "fs/select.c",
                    3,
                    "core_sys_select",
                    HintStatus::Measured,
                    Some("select.n_negative")
                ),
                (
                    "fs/select.c",
                    6,
                    "core_sys_select",
                    HintStatus::Unclassified,
                    None
                ),
                (
                    "fs/eventpoll.c",
                    3,
                    "ep_alloc",
                    HintStatus::NotDecidable,
                    None
                ),
            ]
        );
        assert!(
            hints.hints[2]
                .why
                .is_some_and(|why| why.contains("allocation"))
        );
        assert_eq!(
            (
                hints.summary.hints,
                hints.summary.measured,
                hints.summary.unclassified
            ),
            (3, 1, 1)
        );
        assert_eq!(hints.summary.measured_of_decidable, Some(100.0));
        // What the catalogue declares with a hint and the tree lacks is said, file by file.
        let missing: Vec<&str> = hints.missing.iter().map(|m| m.what.as_str()).collect();
        assert!(missing.contains(&"poll.fd_negative"), "{missing:?}");
        assert!(missing.contains(&"(file)"), "{missing:?}");
        let json = serde_json::to_value(&hints).unwrap();
        let row = &json["hints"][0];
        for field in ["file", "line", "status", "site", "why"] {
            assert!(row.get(field).is_some(), "{field}: {row}");
        }
        assert_eq!(row["status"], "measured");
    }
}
