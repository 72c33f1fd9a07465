//! The catalogue's facts against the newest kernel tree, Debian's linux-source-7.2, when it
//! is there (`cargo xtask kernel-src` fetches it into target/kernel-src; CI does not): every
//! site is found in its function, with the catalogue's hint.

use std::path::Path;

use auditor::kernel_src::{TreeHint, tree_hint};
use auditor_common::catalogue::SITES;

#[test]
fn every_site_has_its_hint_in_the_7_2_tree() {
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kernel-src/linux-source-7.2");
    if !tree.join("fs").is_dir() {
        eprintln!(
            "NOT CHECKED: no Linux 7.2 tree at {} (`cargo xtask kernel-src` fetches it)",
            tree.display()
        );
        return;
    }
    for site in SITES {
        match tree_hint(&tree, site) {
            TreeHint::Found { hint, line } => assert_eq!(
                hint,
                site.hint,
                "{}: {}:{line} carries `{}`",
                site.id,
                site.file,
                hint.name()
            ),
            TreeHint::NotFound { why } => panic!("{}: {why}", site.id),
        }
    }
}
