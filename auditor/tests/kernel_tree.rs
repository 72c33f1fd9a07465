//! The catalogue's facts against the newest kernel tree, Debian's linux-source-7.2, when it
//! is there (`cargo xtask kernel-src` fetches it into target/kernel-src; CI does not): every
//! site is found in its function, with the catalogue's hint.

use std::path::Path;

use auditor::kernel_src::{HintStatus, TreeHint, hints, tree_hint};
use auditor_common::catalogue::SITES;

/// The 7.2 tree, or `None` (said loudly) when it has not been fetched.
fn tree() -> Option<std::path::PathBuf> {
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kernel-src/linux-source-7.2");
    if tree.join("fs").is_dir() {
        return Some(tree);
    }
    eprintln!(
        "NOT CHECKED: no Linux 7.2 tree at {} (`cargo xtask kernel-src` fetches it)",
        tree.display()
    );
    None
}

#[test]
fn every_hint_of_the_7_2_tree_is_accounted_for() {
    let Some(tree) = tree() else { return };
    let hints = hints(&tree);
    let unclassified: Vec<String> = hints
        .hints
        .iter()
        .filter(|row| row.status == HintStatus::Unclassified)
        .map(|row| {
            format!(
                "{}:{} {} `{}`",
                row.file, row.line, row.function, row.condition
            )
        })
        .collect();
    assert!(unclassified.is_empty(), "not classified: {unclassified:#?}");
    // Counted with grep: 70 lines of the six files carry `likely(`, one call each.
    assert_eq!(hints.summary.hints, 70);
    for row in &hints.hints {
        assert_eq!(
            row.status == HintStatus::Measured,
            row.site.is_some(),
            "{row:?}"
        );
        assert_eq!(
            row.status != HintStatus::Measured,
            row.why.is_some(),
            "{row:?}"
        );
    }
}

#[test]
fn every_site_has_its_hint_in_the_7_2_tree() {
    let Some(tree) = tree() else { return };
    for site in SITES {
        match tree_hint(&tree, site) {
            TreeHint::Found {
                hint, file, line, ..
            } => assert_eq!(
                hint,
                site.hint,
                "{}: {file}:{line} carries `{}`",
                site.id,
                hint.name()
            ),
            TreeHint::NotFound { why } => panic!("{}: {why}", site.id),
        }
    }
}
