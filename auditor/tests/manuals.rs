//! The manual pages (`docs/man/`) and shell completions (`docs/completions/`) are generated
//! from the command line's definition (`auditor generate`): this test keeps the files
//! current (`AUDITOR_WRITE_MANUALS=1 cargo test -p auditor --test manuals` writes them),
//! and checks that they describe every command.

use std::{path::Path, process::Command};

const AUDITOR: &str = env!("CARGO_BIN_EXE_auditor");

/// The docs/ directory of the repository.
fn docs() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

/// `kept` must equal `generated`, or is written when asked.
fn current(kept: &Path, generated: &[u8]) {
    if std::env::var_os("AUDITOR_WRITE_MANUALS").is_some() {
        std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
        std::fs::write(kept, generated).unwrap();
    }
    let text = std::fs::read(kept).unwrap_or_default();
    assert!(
        text == generated,
        "{} is stale: run `AUDITOR_WRITE_MANUALS=1 cargo test -p auditor --test manuals`",
        kept.display()
    );
}

#[test]
fn the_manual_pages_are_current_and_cover_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(AUDITOR)
        .args(["generate", "man", "--out"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for command in ["trace", "sites", "hints", "strace", "ingest", "report"] {
        let page = format!("auditor-{command}.1");
        assert!(pages.contains(&page), "no {page} in {pages:?}");
    }
    assert!(pages.contains(&"auditor.1".to_string()), "{pages:?}");
    for page in &pages {
        let text = std::fs::read(dir.path().join(page)).unwrap();
        current(&docs().join("man").join(page), &text);
    }
    // No page is kept that is no longer made.
    for kept in std::fs::read_dir(docs().join("man")).unwrap() {
        let name = kept.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            pages.contains(&name),
            "docs/man/{name} is no command's page"
        );
    }
    let trace = std::fs::read_to_string(dir.path().join("auditor-trace.1")).unwrap();
    assert!(trace.contains("Examples:"), "{trace}");
    assert!(trace.contains("kernel\\-src"), "{trace}");
}

#[test]
fn the_completions_are_current() {
    for (shell, file, mentions) in [
        ("bash", "auditor.bash", "--kernel-src"),
        ("zsh", "_auditor", "--kernel-src"),
        ("fish", "auditor.fish", "kernel-src"),
    ] {
        let output = Command::new(AUDITOR)
            .args(["generate", shell])
            .output()
            .unwrap();
        assert!(output.status.success(), "{shell}");
        let text = String::from_utf8(output.stdout.clone()).unwrap();
        assert!(text.contains(mentions), "{shell}: {text}");
        current(&docs().join("completions").join(file), &output.stdout);
    }
}
