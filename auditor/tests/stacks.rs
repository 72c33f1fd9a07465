//! Who takes the rare arm: a program built without frame pointers whose fd = -1 entries
//! come from one known function and whose other polls come from another. The probe
//! (`auditor trace --stacks`, unwinding with DWARF call-frame information) and strace
//! (`auditor strace --stacks`, `-k`) must name the same function, and stacks change no
//! count.

#[allow(dead_code, reason = "each test crate uses part of the helpers")]
mod common;

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
};

use auditor_common::{Counts, stacks};
use common::{assert_note, json_counts, json_report, json_site, require_privileges};

/// Calls of poll_with_holes (one fd = -1 entry each) and of poll_open (none): more rare
/// calls than sampling takes whole, so that the 1-in-N part is checked too.
const HOLES: u64 = 200;
const OPEN: u64 = 30;
const CALLER: &str = "rare_polls(poll_with_holes)";

/// Builds tests/programs/rare_polls.c as Debian builds its code: -O2, no frame pointers.
fn build_program() -> (tempfile::TempDir, PathBuf) {
    build("rare_polls")
}

/// Builds tests/programs/NAME.c as Debian builds its code: -O2, no frame pointers.
fn build(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join(name);
    let source = format!("{}/tests/programs/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let status = std::process::Command::new("gcc")
        .args(["-O2", "-fomit-frame-pointer", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("gcc runs");
    assert!(status.success(), "gcc failed on {source}");
    (dir, binary)
}

fn report(args: &[&str], program: &Path) -> serde_json::Value {
    let mut argv: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    argv.extend([OsStr::new("--format"), OsStr::new("json"), OsStr::new("--")]);
    argv.push(program.as_os_str());
    let (holes, open) = (HOLES.to_string(), OPEN.to_string());
    argv.extend([OsStr::new(&holes), OsStr::new(&open)]);
    json_report(&argv)
}

/// The callers of a site's rare arm, by name.
fn rare_callers(report: &serde_json::Value, id: &str) -> Vec<(String, u64)> {
    json_site(report, id)["rare_callers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let caller = c["caller"].as_str().unwrap().to_string();
            (caller, c["evaluations"].as_u64().unwrap())
        })
        .collect()
}

const FD_NEGATIVE: &str = "poll.fd_negative";

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn the_probe_names_the_function_behind_the_rare_arm() {
    common::packages::require("gcc");
    require_privileges();
    let (_dir, program) = build_program();
    // Only the site shown takes stacks (the loader's opens take some elsewhere).
    let with = report(&["trace", "--stacks", "--site", FD_NEGATIVE], &program);
    // Each call of poll_with_holes has one entry of each kind; poll_open's are all open.
    assert_eq!(
        json_counts(&with, FD_NEGATIVE),
        Counts::new(HOLES, HOLES + OPEN, 0)
    );
    let sampled = (0..HOLES).filter(|&seen| stacks::sampled(seen)).count() as u64;
    assert!(sampled < HOLES);
    assert_eq!(
        rare_callers(&with, FD_NEGATIVE),
        [(CALLER.to_string(), sampled)]
    );
    assert_note(&with, |n| {
        n.starts_with("poll.fd_negative: its rare direction")
            && n.contains(&format!(
                "Called from {CALLER}: {sampled} ({sampled} of {HOLES} with a stack)"
            ))
    });
    assert_note(&with, |n| {
        n.starts_with("Stacks (--stacks)")
            && n.contains(&format!("{sampled} taken"))
            && n.contains(&format!("{} let go by sampling", HOLES - sampled))
    });
    // The whole stacks: the C library's wrapper, the function, main.
    let stacks = with["stacks"].as_array().unwrap();
    let of_site: Vec<_> = stacks.iter().filter(|s| s["site"] == FD_NEGATIVE).collect();
    assert_eq!(of_site.len(), 1, "{of_site:?}");
    let symbols: Vec<&str> = of_site[0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["symbol"].as_str())
        .collect();
    let at = symbols.iter().position(|s| *s == "poll_with_holes");
    assert!(
        at.is_some_and(|at| at > 0 && symbols.get(at + 1) == Some(&"main")),
        "{symbols:?}"
    );
    // Stacks change no count.
    let without = report(&["trace"], &program);
    for site in with["sites"].as_array().unwrap() {
        let id = site["id"].as_str().unwrap();
        assert_eq!(json_counts(&with, id), json_counts(&without, id), "{id}");
    }
    assert!(without["stacks"].as_array().unwrap().is_empty());
}

/// strace `-k` sees every call: the same function, with every rare evaluation.
#[test]
fn strace_names_the_same_function() {
    common::packages::require("gcc");
    common::packages::require("strace");
    let (_dir, program) = build_program();
    let report = report(&["strace", "--stacks"], &program);
    assert_eq!(
        json_counts(&report, FD_NEGATIVE),
        Counts::new(HOLES, HOLES + OPEN, 0)
    );
    assert_eq!(
        rare_callers(&report, FD_NEGATIVE),
        [(CALLER.to_string(), HOLES)]
    );
}

/// Code that a JIT writes where a file was mapped before (tests/programs/jit_polls.c:
/// libm's code mapped, unmapped, anonymous memory mapped at its address and made
/// executable) is named as unknown code, never after the file that was there.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_jit_in_the_place_of_a_file_is_not_named_after_it() {
    common::packages::require("gcc");
    require_privileges();
    let (_dir, program) = build("jit_polls");
    let calls = "20";
    let report = json_report(
        &[
            "trace",
            "--stacks",
            "--site",
            FD_NEGATIVE,
            "--format",
            "json",
            "--",
        ]
        .map(OsStr::new)
        .into_iter()
        .chain([program.as_os_str(), OsStr::new(calls)])
        .collect::<Vec<_>>(),
    );
    // Its 20 calls from the JIT, and the one from main while libm was mapped.
    assert_eq!(json_counts(&report, FD_NEGATIVE).taken, 21);
    let callers = rare_callers(&report, FD_NEGATIVE);
    assert!(
        callers.iter().all(|(caller, _)| !caller.contains("libm")),
        "{callers:?}"
    );
    assert!(
        callers.contains(&("jit_polls(main)".to_string(), 1)),
        "{callers:?}"
    );
    let unknown: u64 = callers
        .iter()
        .filter(|(caller, _)| caller.starts_with("?("))
        .map(|(_, evaluations)| evaluations)
        .sum();
    assert_eq!(unknown, 20, "{callers:?}");
}
