//! `auditor report`: saved JSON reports rendered again and merged. Needs no privileges:
//! the reports are made from the fixture logs.

#[allow(dead_code, reason = "each test crate uses part of the helpers")]
mod common;

use common::fixture;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

const AUDITOR: &str = env!("CARGO_BIN_EXE_auditor");

fn auditor(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(AUDITOR).args(args).output().unwrap()
}

/// Saves the JSON report of `ingest LOGS` in `dir` as `name`.
fn saved(dir: &Path, name: &str, logs: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let mut args: Vec<std::ffi::OsString> = ["ingest", "--format", "json", "-o"]
        .iter()
        .map(Into::into)
        .collect();
    args.push(path.clone().into());
    args.extend(logs.iter().map(|log| fixture(log).into_os_string()));
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    assert!(auditor(&args).status.success());
    path
}

fn json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// What a report counted and judged: calls, and per site the counts and the verdict.
fn counted(report: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut rows = vec![report["calls"].clone(), report["processes"].clone()];
    for site in report["sites"].as_array().unwrap() {
        rows.push(serde_json::json!([
            site["id"],
            site["taken"],
            site["not_taken"],
            site["unreadable"],
            site["verdict"]["kind"],
        ]));
    }
    rows
}

#[test]
fn a_saved_report_renders_again_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let ssh = saved(dir.path(), "ssh.json", &["ssh.log"]);
    let original: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&ssh).unwrap()).unwrap();
    let again = json(&auditor(&[
        "report".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        ssh.as_os_str(),
    ]));
    assert_eq!(counted(&again), counted(&original));
    assert_eq!(again["runs"], original["runs"]);
    assert_eq!(again["notes"], original["notes"]);
    let run = &again["runs"][0];
    assert_eq!(run["source"], "strace");
    assert!(
        run["traced"]
            .as_str()
            .unwrap()
            .ends_with("fixtures/ssh.log")
    );
    for key in [
        "auditor_version",
        "catalogue_version",
        "kernel_release",
        "host",
        "started_at",
    ] {
        assert!(!run[key].as_str().unwrap().is_empty(), "{key}");
    }
    // Every format renders it.
    for format in ["table", "markdown"] {
        let output = auditor(&[
            "report".as_ref(),
            "--format".as_ref(),
            format.as_ref(),
            ssh.as_os_str(),
        ]);
        assert!(output.status.success());
        assert!(
            String::from_utf8(output.stdout)
                .unwrap()
                .contains("close.ok")
        );
    }
}

/// Reports merge exactly: two saved runs give the counts of reading both logs at once, in
/// either order; the same file twice counts once, and the notes say so.
#[test]
fn saved_reports_merge_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let ssh = saved(dir.path(), "ssh.json", &["ssh.log"]);
    let http = saved(dir.path(), "http.json", &["http-server-curl.log"]);
    let both = saved(
        dir.path(),
        "both.json",
        &["ssh.log", "http-server-curl.log"],
    );
    let both: serde_json::Value = serde_json::from_slice(&std::fs::read(both).unwrap()).unwrap();
    let report = |files: &[&Path]| {
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["report".as_ref(), "--format".as_ref(), "json".as_ref()];
        args.extend(files.iter().map(|f| f.as_os_str()));
        json(&auditor(&args))
    };
    let merged = report(&[&ssh, &http]);
    assert_eq!(counted(&merged)[2..], counted(&both)[2..]);
    assert_eq!(merged["calls"], both["calls"]);
    assert_eq!(merged["runs"].as_array().unwrap().len(), 2);
    assert_eq!(merged["target"], "2 runs merged");
    let reversed = report(&[&http, &ssh]);
    assert_eq!(counted(&reversed)[2..], counted(&merged)[2..]);
    // A merged report merges again: (ssh + http) + ssh is ssh + http, counted once.
    let merged_file = dir.path().join("merged.json");
    std::fs::write(&merged_file, serde_json::to_vec(&merged).unwrap()).unwrap();
    let twice = report(&[&merged_file, &ssh, &http, &ssh]);
    assert_eq!(counted(&twice)[2..], counted(&merged)[2..]);
    common::assert_note(&twice, |n| {
        n.ends_with("ssh.json was given more than once: counted once.")
    });
    common::assert_note(&twice, |n| {
        n.ends_with("http.json holds only runs already read: counted once.")
    });
}

/// A file that is not a report, is cut short or is of another schema version is named
/// with the problem; a report of another kernel release merges only with --force.
#[test]
fn what_cannot_be_merged_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let ssh = saved(dir.path(), "ssh.json", &["ssh.log"]);
    let text = std::fs::read_to_string(&ssh).unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let cut = write("cut.json", &text[..text.len() / 2]);
    let other = write("other.json", "{\"hello\": 1}");
    let old = write(
        "old.json",
        &text.replacen("\"version\": 2", "\"version\": 1", 1),
    );
    let kernel = write(
        "kernel.json",
        &text.replace("\"kernel_release\": \"", "\"kernel_release\": \"5.10-"),
    );
    let fails = |file: &Path, words: &str| {
        let output = auditor(&["report".as_ref(), ssh.as_os_str(), file.as_os_str()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("{}: {words}", file.display())) || stderr.contains(words),
            "{stderr}"
        );
    };
    fails(&cut, "not JSON, or cut short: EOF while parsing");
    fails(&other, "not an auditor report (it has no `version`)");
    fails(
        &old,
        "a report of schema version 1; this auditor reads version 2",
    );
    fails(&kernel, "is of another kernel release (5.10-");
    let output = auditor(&[
        "report".as_ref(),
        "--force".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        ssh.as_os_str(),
        kernel.as_os_str(),
    ]);
    let merged = json(&output);
    assert!(
        merged["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("merged as --force asked")),
        "{merged}"
    );
}

/// `--group-by program` gives every program its counts and verdict, on a log and on saved
/// reports alike.
#[test]
fn verdicts_per_program() {
    let dir = tempfile::tempdir().unwrap();
    let http = saved(dir.path(), "http.json", &["http-server-curl.log"]);
    let log = fixture("http-server-curl.log");
    let from_log = json(&auditor(&[
        "ingest".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--group-by".as_ref(),
        "program".as_ref(),
        log.as_os_str(),
    ]));
    let from_saved = json(&auditor(&[
        "report".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--group-by".as_ref(),
        "program".as_ref(),
        http.as_os_str(),
    ]));
    assert_eq!(from_log["grouped_by"], "program");
    assert_eq!(from_log["groups"], from_saved["groups"]);
    let programs = from_log["groups"].as_array().unwrap();
    let curl = programs.iter().find(|p| p["name"] == "curl").unwrap();
    // Three curl processes, one program; their polls add up.
    assert_eq!(curl["pids"].as_array().unwrap().len(), 3);
    let poll = curl["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "poll.fd_negative")
        .unwrap();
    assert_eq!(
        (poll["taken"].as_u64(), poll["not_taken"].as_u64()),
        (Some(0), Some(24))
    );
    assert_eq!(poll["verdict"]["kind"], "unclear");
    // Every program's rows sum to the pooled counts of the site.
    for site in from_log["sites"].as_array().unwrap() {
        let id = &site["id"];
        let sum: u64 = programs
            .iter()
            .flat_map(|p| p["sites"].as_array().unwrap())
            .filter(|row| &row["id"] == id)
            .map(|row| row["taken"].as_u64().unwrap() + row["not_taken"].as_u64().unwrap())
            .sum();
        let pooled = site["taken"].as_u64().unwrap() + site["not_taken"].as_u64().unwrap();
        assert_eq!(sum, pooled, "{id}");
    }
    common::assert_note(&from_log, |n| {
        n.starts_with("close.ok: holds pooled; per program: holds for")
    });
}

/// `--format text` is what a reviewer pastes into a mail: ASCII, no line over 72 columns,
/// a line per site with its rare evaluations and verdict.
#[test]
fn text_for_a_mail_reply() {
    // Named from the fixtures' folder: the header names the logs, and a checkout's depth
    // must not decide where it wraps.
    let output = Command::new(AUDITOR)
        .current_dir(fixture(""))
        .args(["ingest", "--format", "text", "--group-by", "program"])
        .args(["http-server-curl.log", "ssh.log"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    for line in text.lines() {
        assert!(line.len() <= 72, "{} columns: {line}", line.len());
        assert!(
            line.bytes().all(|b| b == b' ' || b.is_ascii_graphic()),
            "{line:?}"
        );
        assert_eq!(line.trim_end(), line, "trailing spaces");
    }
    assert!(
        text.starts_with("Traced: strace log http-server-curl.log ssh.log, for "),
        "{text}"
    );
    // A site's evidence that does not fit wraps below it (4 columns in, 6 per program): a
    // site and its evidence, joined.
    let joined = text.replace("\n      ", " ").replace("\n    ", " ");
    for wanted in [
        "poll.fd_negative       unlikely  holds                0 of 53 entries (<= 6.76%)",
        "close.ok               likely    holds                0 of 604 calls (<= 0.63%)",
        "close.fd_not_open      none      candidate: unlikely  0 of 604 calls (<= 0.63%)",
        "curl (3 processes)",
        "  poll.fd_negative       unclear              0 of 24 entries (0.00% .. 13.80%)",
        "poll.zero_timeout      none      no hint              12 of 37 calls (>= 19.63%)",
        "- poll.zero_timeout: its rare direction, taken (the minority), came from",
        "  curl (pid 22022): 4, curl (pid 22024): 4, curl (pid 22026): 4.",
    ] {
        assert!(
            joined.lines().any(|l| l == wanted),
            "no line `{wanted}` in:\n{text}"
        );
    }
    // The notes, as every format carries them: one for all the sites never reached.
    let notes = text.split_once("\nNotes:\n").expect("a notes section").1;
    assert_eq!(notes.matches("- Never reached: ").count(), 1, "{notes}");
    assert!(!notes.contains("no data"), "{notes}");
}

/// The Markdown report is a valid table to a real Markdown parser: every row has the
/// header's cells, and a `|` in a process name stays inside its cell.
#[test]
fn markdown_tables_parse_as_tables() {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("pipe.log");
    std::fs::write(&log, "101<a|b> poll([{fd=-1}], 1, 0) = 0 (Timeout)\n").unwrap();
    let mut args: Vec<&std::ffi::OsStr> = vec!["ingest".as_ref(), "--per-process".as_ref()];
    args.extend(["--group-by", "program", "--format", "markdown"].map(std::ffi::OsStr::new));
    args.push(log.as_os_str());
    let output = auditor(&args);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let (mut tables, mut cells, mut rows) = (0, Vec::new(), Vec::<Vec<String>>::new());
    let mut cell = String::new();
    for event in Parser::new_ext(&text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Table(_)) => {
                tables += 1;
                rows.clear();
            }
            Event::Start(Tag::TableCell) => cell.clear(),
            Event::Text(t) | Event::Code(t) => cell.push_str(&t),
            Event::End(TagEnd::TableCell) => cells.push(cell.clone()),
            Event::End(TagEnd::TableHead | TagEnd::TableRow) => {
                rows.push(std::mem::take(&mut cells))
            }
            Event::End(TagEnd::Table) => {
                let width = rows[0].len();
                assert!(
                    rows.len() > 1 && rows.iter().all(|r| r.len() == width),
                    "{rows:?}"
                );
                if rows[0][0] == "pid" {
                    assert!(rows.iter().any(|r| r[1] == "a|b"), "{rows:?}");
                }
            }
            _ => {}
        }
    }
    // A table per kernel file, per program and per process.
    let files: std::collections::BTreeSet<&str> = auditor_common::catalogue::SITES
        .iter()
        .map(|site| site.file)
        .collect();
    assert_eq!(tables, files.len() + 1 + 1, "{text}");
}

/// `--svg FILE`: valid SVG with one mark per shown site (and per program with
/// `--group-by`), that renders to a picture with something on it.
#[test]
fn the_picture_has_a_mark_per_site_and_renders() {
    common::packages::require("fonts-dejavu-core");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("report.svg");
    let log = fixture("http-server-curl.log");
    for group in [false, true] {
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["ingest".as_ref(), "--format".as_ref(), "json".as_ref()];
        if group {
            args.extend(["--group-by", "program"].map(std::ffi::OsStr::new));
        }
        args.extend([
            std::ffi::OsStr::new("--svg"),
            svg.as_os_str(),
            log.as_os_str(),
        ]);
        let report = json(&auditor(&args));
        let shown = report["sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                s["measured"] == true
                    && s["taken"].as_u64().unwrap()
                        + s["not_taken"].as_u64().unwrap()
                        + s["unreadable"].as_u64().unwrap()
                        > 0
            })
            .count();
        let per_program: usize = report["groups"].as_array().map_or(0, |programs| {
            programs
                .iter()
                .map(|p| p["sites"].as_array().unwrap().len())
                .sum()
        });
        let text = std::fs::read_to_string(&svg).unwrap();
        assert_eq!(
            text.matches("<circle").count(),
            shown + per_program,
            "group: {group}"
        );
        assert!(text.contains("poll.fd_negative") && text.contains("10% bar"));
        // A real SVG parser reads it, and the rendered pixels are not all white.
        let mut options = resvg::usvg::Options::default();
        options.fontdb_mut().load_system_fonts();
        options.fontdb_mut().set_sans_serif_family("DejaVu Sans");
        let tree = resvg::usvg::Tree::from_str(&text, &options).unwrap();
        let size = tree.size().to_int_size();
        let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
        resvg::render(
            &tree,
            resvg::tiny_skia::Transform::default(),
            &mut pixmap.as_mut(),
        );
        let inked = pixmap
            .pixels()
            .iter()
            .filter(|p| p.red() < 128 || p.green() < 128)
            .count();
        assert!(inked > 1000, "only {inked} dark pixels");
        if let Some(keep) = std::env::var_os("AUDITOR_KEEP_PNG") {
            pixmap
                .save_png(Path::new(&keep).join(format!("report-{group}.png")))
                .unwrap();
        }
    }
}

/// Merged reports group by host and by source: each input's runs give its group.
#[test]
fn merged_reports_group_by_host_and_source() {
    let dir = tempfile::tempdir().unwrap();
    let ssh = saved(dir.path(), "ssh.json", &["ssh.log"]);
    let http = saved(dir.path(), "http.json", &["http-server-curl.log"]);
    // The same report as if taken on another host, by the probe.
    let text = std::fs::read_to_string(&http).unwrap();
    let host = serde_json::from_str::<serde_json::Value>(&text).unwrap()["runs"][0]["host"]
        .as_str()
        .unwrap()
        .to_string();
    let elsewhere = dir.path().join("elsewhere.json");
    let moved = text
        .replace(&format!("\"host\": \"{host}\""), "\"host\": \"db-7\"")
        .replace("\"source\": \"strace\"", "\"source\": \"ebpf\"");
    std::fs::write(&elsewhere, moved).unwrap();
    for (by, names) in [
        ("host", ["db-7", host.as_str()]),
        ("source", ["ebpf", "strace"]),
    ] {
        let report = json(&auditor(&[
            "report".as_ref(),
            "--format".as_ref(),
            "json".as_ref(),
            "--group-by".as_ref(),
            by.as_ref(),
            ssh.as_os_str(),
            elsewhere.as_os_str(),
        ]));
        assert_eq!(report["grouped_by"], by);
        let groups = report["groups"].as_array().unwrap();
        let mut got: Vec<&str> = groups.iter().map(|g| g["name"].as_str().unwrap()).collect();
        got.sort_unstable();
        let mut want = names.to_vec();
        want.sort_unstable();
        assert_eq!(got, want, "{by}");
        // The moved report's group holds exactly its counts.
        let moved = groups.iter().find(|g| g["name"] == names[0]).unwrap();
        let close = moved["sites"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "close.ok")
            .unwrap();
        let alone: serde_json::Value = serde_json::from_str(&text).unwrap();
        let alone = alone["sites"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "close.ok")
            .unwrap()
            .clone();
        assert_eq!(close["taken"], alone["taken"], "{by}");
    }
}

/// One report in every format carries the same notes: each of JSON's `notes` is in the
/// table, the Markdown and the text (there wrapped at words: compared with the lines
/// joined), once.
#[test]
fn every_format_carries_the_same_notes() {
    let logs = [fixture("http-server-curl.log"), fixture("ssh.log")];
    let render = |format: &str| {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "ingest".as_ref(),
            "--format".as_ref(),
            format.as_ref(),
            "--group-by".as_ref(),
            "program".as_ref(),
        ];
        args.extend(logs.iter().map(|l| l.as_os_str()));
        let output = auditor(&args);
        assert!(output.status.success(), "{format}");
        String::from_utf8(output.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&render("json")).unwrap();
    let notes: Vec<&str> = json["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(notes.len() > 3, "{notes:?}");
    // Whitespace and Markdown's escapes aside.
    let plain = |text: &str| {
        text.replace('\\', "")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    for format in ["table", "markdown", "text", "annotated"] {
        let rendered = plain(&render(format));
        for note in &notes {
            assert_eq!(
                rendered.matches(&plain(note)).count(),
                1,
                "{format} does not carry once: {note}"
            );
        }
    }
}
