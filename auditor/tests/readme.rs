//! The README's table of sites is generated from the catalogue (how many sites in which
//! files; a row per site: id, function, condition, hint and since when, what one
//! evaluation is), between its
//! `sites:begin` and `sites:end` markers: the test fails when the catalogue changed and the
//! README did not. `AUDITOR_WRITE_README=1 cargo test -p auditor --test readme` writes it.

use std::path::Path;

use auditor_common::catalogue::{Hint, SITES};

const BEGIN: &str = "<!-- sites:begin (generated: AUDITOR_WRITE_README=1 cargo test -p auditor --test readme) -->\n";
const END: &str = "<!-- sites:end -->\n";

/// The sentence and the table, from the catalogue.
fn generated() -> String {
    let mut files: Vec<&str> = Vec::new();
    for site in SITES {
        if !files.contains(&site.file) {
            files.push(site.file);
        }
    }
    let (last, first) = files.split_last().expect("sites in files");
    let sentence = format!(
        "The catalogue has {} sites across {} and {last}, all measured by the probe \
         (`auditor sites` lists them with their conditions, hints, units, the syscalls \
         counted and where the probe decides each):",
        SITES.len(),
        first.join(", ")
    );
    let mut table = format!(
        "{}\n\n| site | kernel function | taken when | mainline hint | counted per |\n\
         |---|---|---|---|---|\n",
        textwrap::fill(&sentence, 90)
    );
    for site in SITES {
        let hint = match site.hint {
            Hint::None => "none".to_string(),
            hint => format!("`{}` ({})", hint.name(), site.hint_since),
        };
        table.push_str(&format!(
            "| `{}` | `{}` | {} | {hint} | {} |\n",
            site.id,
            site.function,
            site.condition.replace('|', "\\|"),
            site.unit.name()
        ));
    }
    table.push_str("\nSyscalls that allocate fds and are not followed (their allocations are missing from\nthe fd sites' counts):\n\n");
    for (syscalls, why) in auditor_common::syscalls::NOT_FOLLOWED {
        table.push_str(&format!("- {syscalls}: {why}.\n"));
    }
    table
}

#[test]
fn the_readme_lists_the_catalogue() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let start = readme
        .find(BEGIN)
        .expect("the README has the sites:begin marker")
        + BEGIN.len();
    let end = readme[start..].find(END).expect("and the sites:end marker") + start;
    let table = generated();
    if std::env::var_os("AUDITOR_WRITE_README").is_some() {
        let written = format!("{}{table}{}", &readme[..start], &readme[end..]);
        std::fs::write(&path, written).unwrap();
        return;
    }
    assert_eq!(
        readme[start..end],
        table,
        "{} is stale: run `AUDITOR_WRITE_README=1 cargo test -p auditor --test readme`",
        path.display()
    );
    // Every row is one of the catalogue's, once.
    for site in SITES {
        assert_eq!(
            readme[start..end]
                .matches(&format!("| `{}` |", site.id))
                .count(),
            1,
            "{}",
            site.id
        );
    }
}

/// The PromQL the README gives for the share against the hint is the one
/// `tests/metrics.rs` checks against a Prometheus server.
#[test]
fn the_readme_promql_is_the_tested_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let tests =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/metrics.rs"))
            .unwrap();
    let start = readme.find("```promql\n").expect("a promql block") + "```promql\n".len();
    let block = &readme[start..start + readme[start..].find("\n```").unwrap()];
    assert!(
        tests.contains(block),
        "the README's PromQL is not the tested one:\n{block}"
    );
}
