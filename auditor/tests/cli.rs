//! The `auditor` binary end to end: argument handling, reports, and its errors.

#[allow(dead_code, reason = "each test crate uses part of the helpers")]
mod common;

use std::process::Command;

use auditor_common::Counts;
use common::{json_counts, json_report, json_site, require_privileges};

const AUDITOR: &str = env!("CARGO_BIN_EXE_auditor");

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn json_report_of_a_workload() {
    require_privileges();
    let report = json_report(&[
        "trace".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--workload".as_ref(),
        "select:3:-1 pselect6:2:4 poll:2:16:4".as_ref(),
    ]);
    assert_eq!(report["version"], auditor::report::JSON_VERSION);
    assert_eq!(
        json_counts(&report, "select.n_negative"),
        Counts::new(3, 2, 0)
    );
    assert_eq!(
        json_counts(&report, "poll.fd_negative"),
        Counts::new(8, 24, 0)
    );
    let poll = json_site(&report, "poll.fd_negative");
    assert_eq!(poll["hint"], "unlikely");
    // One process, a row per site it reached.
    let rows = report["processes"].as_array().unwrap();
    assert!(rows.iter().all(|row| row["pid"] == rows[0]["pid"]));
    let row = rows
        .iter()
        .find(|row| row["site"] == "select.n_negative")
        .unwrap();
    assert_eq!(
        (row["taken"].as_u64(), row["not_taken"].as_u64()),
        (Some(3), Some(2))
    );
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn table_report_of_the_default_workload() {
    require_privileges();
    let output = Command::new(AUDITOR).arg("trace").output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The workload is a started command: the report is on stderr, stdout is its own.
    assert!(output.stdout.is_empty());
    let text = String::from_utf8(output.stderr).unwrap();
    let row = |id: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(id))
            .unwrap();
        line.split('|').map(|c| c.trim().to_string()).collect()
    };
    // Columns: site, function, condition, hint, taken, not taken, unreadable, ...
    assert_eq!(&row("select.n_negative")[4..7], ["20", "2000", "0"]);
    assert_eq!(&row("poll.fd_negative")[4..7], ["6400", "2144000", "0"]);
    assert!(row("poll.fd_negative")[9].contains("holds"));
}

#[test]
#[ignore = "needs root to drop privileges for the check: run `cargo xtask test` as root"]
fn without_privileges_it_says_what_is_missing() {
    require_privileges();
    common::packages::require("util-linux");
    let output = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .args([AUDITOR, "trace"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("needs root") && stderr.contains("CAP_BPF"),
        "{stderr}"
    );
}

/// Usage errors exit 2 from every command, as the guide's table says: targets that
/// exclude each other, a bad --metrics address, strace with no target. `-p` is `--pid` for
/// both sources.
#[test]
fn usage_errors_exit_2() {
    for args in [
        &["trace", "--pid", "1", "--", "true"][..],
        &["trace", "-p", "1", "--all"],
        &["trace", "--all", "--", "true"],
        &["trace", "--metrics", "nonsense", "--", "true"],
        &["strace", "-p", "1", "--", "true"],
        &["strace"],
        &["report"],
        &["trace", "--no-such-option"],
    ] {
        let output = Command::new(AUDITOR).args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("error:"), "{args:?}: {stderr}");
    }
    let output = Command::new(AUDITOR)
        .args(["trace", "--metrics", "nonsense", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("expected ADDRESS:PORT or PORT"), "{stderr}");
}

/// The JSON report of fixtures/`log`, saved in `dir`.
fn saved_report(dir: &std::path::Path, log: &str) -> std::path::PathBuf {
    let saved = dir.join(log).with_extension("json");
    let log = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(log);
    let status = Command::new(AUDITOR)
        .args(["ingest", "--format", "json", "-o"])
        .arg(&saved)
        .arg(&log)
        .status()
        .unwrap();
    assert!(status.success());
    saved
}

/// `auditor report -` reads a saved report from standard input, as `ingest -` reads a log.
#[test]
fn a_saved_report_is_read_from_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let saved = saved_report(dir.path(), "ssh.log");
    let from_file = Command::new(AUDITOR)
        .args(["report", "--format", "text"])
        .arg(&saved)
        .output()
        .unwrap();
    let from_stdin = Command::new(AUDITOR)
        .args(["report", "--format", "text", "-"])
        .stdin(std::fs::File::open(&saved).unwrap())
        .output()
        .unwrap();
    assert!(
        from_stdin.status.success(),
        "{}",
        String::from_utf8_lossy(&from_stdin.stderr)
    );
    assert_eq!(from_stdin.stdout, from_file.stdout);
}

/// Report options that contradict each other fail at once, before anything is traced
/// (here before strace would start), as usage errors (status 2) that name the
/// contradiction.
#[test]
fn contradicting_report_options_fail_before_the_session() {
    for (options, says) in [
        (
            &[
                "--propose",
                "close.ok=unlikely",
                "--site",
                "poll.fd_negative",
            ][..],
            "--propose close.ok=unlikely: --site leaves close.ok out of the report",
        ),
        (
            &["--top", "3"],
            "--top limits the rows of --group-by: give --group-by too",
        ),
        (
            &["--min-evaluations", "30"],
            "--min-evaluations limits the rows of --group-by",
        ),
        (
            &["--group-by", "program", "--top", "0"],
            "--top 0 would show no group",
        ),
        (
            &["--kernel-src", "/nonexistent"],
            "is not a kernel source tree",
        ),
    ] {
        let output = Command::new(AUDITOR)
            .arg("strace")
            .args(options)
            .args(["--", "/nonexistent/never-started"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{options:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{options:?}: {stderr}");
        assert!(!stderr.contains("never-started"), "{stderr}");
    }
}

#[test]
fn a_bad_workload_step_is_named() {
    let output = Command::new(AUDITOR)
        .args(["trace", "--workload", "poll:1:2:3"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`poll:1:2:3`: NEGATIVE and NOTOPEN add up to more than NFDS"),
        "{stderr}"
    );
}

#[test]
fn sites_lists_the_catalogue() {
    let output = Command::new(AUDITOR)
        .args(["sites", "--format", "json"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let sites: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let sites = sites.as_array().unwrap();
    assert_eq!(sites.len(), auditor_common::SITE_COUNT);
    let fd_negative = sites
        .iter()
        .find(|s| s["id"] == "poll.fd_negative")
        .unwrap();
    assert_eq!(fd_negative["hint"], "unlikely");
    assert_eq!(fd_negative["hint_since"], "6.16");
    assert_eq!(fd_negative["unit"], "pollfd_entry");
    assert_eq!(fd_negative["decided"], "exit");

    // For a mail reply: every site, in lines of at most 72 columns.
    let output = Command::new(AUDITOR)
        .args(["sites", "--format", "text"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.lines().all(|l| l.len() <= 72), "{text}");
    for site in sites {
        let id = site["id"].as_str().unwrap();
        assert!(
            text.contains(&format!("\n{id}: ")) || text.starts_with(&format!("{id}: ")),
            "{id}"
        );
    }
    assert!(
        text.contains("poll.fd_negative: unlikely since 6.16\n    do_pollfd in fs/select.c:"),
        "{text}"
    );
}

#[test]
fn sites_compares_a_kernel_tree() {
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir(tree.path().join("fs")).unwrap();
    // An older release: no hint on n < 0.
    std::fs::write(
        tree.path().join("fs/select.c"),
        "int core_sys_select(int n)\n{\n\tif (n < 0)\n\t\tgoto out_nofds;\n}\n",
    )
    .unwrap();
    let output = Command::new(AUDITOR)
        .args(["sites", "--kernel-src"])
        .arg(tree.path())
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let row = |id: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(id))
            .unwrap()
            .to_string()
    };
    assert!(
        row("select.n_negative").contains("none (fs/select.c:3)"),
        "{text}"
    );
    assert!(row("select.n_negative").contains("DIFFERS"), "{text}");
    assert!(
        row("epoll.bad_args").contains("not found: cannot read"),
        "{text}"
    );

    let output = Command::new(AUDITOR)
        .args(["sites", "--kernel-src", "/nonexistent"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a kernel source tree"));
}

#[test]
fn hints_lists_every_hint_of_a_tree_with_its_status() {
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir(tree.path().join("fs")).unwrap();
    std::fs::write(
        tree.path().join("fs/select.c"),
        "int core_sys_select(int n)\n{\n\tif (unlikely(n < 0))\n\t\tgoto out_nofds;\n}\n",
    )
    .unwrap();
    std::fs::write(
        tree.path().join("fs/file.c"),
        "bool expand_files(struct files_struct *files, unsigned int nr)\n\
         \t__releases(files->file_lock)\n{\n\tif (unlikely(files->resize_in_progress))\n\t\treturn 0;\n}\n",
    )
    .unwrap();
    let run = |format: &str| {
        let output = Command::new(AUDITOR)
            .args(["hints", "--format", format, "--kernel-src"])
            .arg(tree.path())
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&run("json")).unwrap();
    let rows = json["hints"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{json}");
    assert_eq!(
        (
            &rows[0]["file"],
            &rows[0]["line"],
            &rows[0]["status"],
            &rows[0]["site"]
        ),
        (
            &"fs/select.c".into(),
            &3.into(),
            &"measured".into(),
            &"select.n_negative".into()
        )
    );
    assert_eq!(
        (&rows[1]["file"], &rows[1]["function"], &rows[1]["status"]),
        (
            &"fs/file.c".into(),
            &"expand_files".into(),
            &"not_decidable".into()
        )
    );
    assert!(rows[1]["why"].as_str().unwrap().contains("race"), "{json}");
    let table = run("table");
    assert!(table.contains("2 hints in"), "{table}");
    assert!(
        table.contains("Measured: 1 of the 1 decidable (100.0%)."),
        "{table}"
    );
    // For a mail reply: each hint on its line, what measures it below, 72 columns.
    let text = run("text");
    assert!(
        text.contains(
            "fs/select.c:3 core_sys_select: unlikely(n < 0)\n    measured by select.n_negative"
        ),
        "{text}"
    );
    assert!(
        text.contains("Measured: 1 of the 1 decidable (100.0%)."),
        "{text}"
    );
    assert!(text.lines().all(|l| l.len() <= 72), "{text}");
    assert_ne!(text, table);

    let output = Command::new(AUDITOR)
        .args(["hints", "--kernel-src", "/nonexistent"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a kernel source tree"));
}

#[test]
fn more_names_than_the_probe_holds_are_refused_with_the_limit() {
    let mut command = Command::new(AUDITOR);
    command.arg("trace");
    for n in 0..40 {
        command.args([
            "--comm",
            &format!("p{n}"),
            "--thread-comm",
            &format!("t{n}"),
        ]);
    }
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "80 process names given (--comm and --thread-comm together); the probe holds at most 64"
        ),
        "{stderr}"
    );
}

/// An input with nothing to count — a log that cannot be read, or that holds no strace
/// line — is one line on stderr naming it, exit 1, and no report.
#[test]
fn an_input_with_no_strace_output_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_log = dir.path().join("notes.txt");
    std::fs::write(&not_a_log, "hello\nworld\n").unwrap();
    let missing = dir.path().join("missing.log");
    for (input, says) in [
        (&missing, "missing.log cannot be read (No such file"),
        (&not_a_log, "2 lines are not strace output (the first, "),
    ] {
        let output = Command::new(AUDITOR)
            .arg("ingest")
            .arg(input)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        assert!(output.stdout.is_empty());
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("auditor: no strace output to count: "),
            "{stderr}"
        );
        assert!(stderr.contains(says), "{stderr}");
    }
    // One readable log among them: a report, and the partial read's status.
    let log = common::fixture("ssh.log");
    let output = Command::new(AUDITOR)
        .arg("ingest")
        .arg(&log)
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(!output.stdout.is_empty());
}

/// Verdicts are coloured on a terminal only (`--color auto`), always when asked, never in
/// text for a mail reply; a pipe gets plain text.
#[test]
fn verdicts_are_coloured_when_asked() {
    let log = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ssh.log");
    let run = |args: &[&str]| {
        let output = Command::new(AUDITOR)
            .args(["ingest", "--site", "close.ok"])
            .args(args)
            .arg(&log)
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    assert!(!run(&[]).contains('\u{1b}'));
    assert!(run(&["--color", "always"]).contains("\u{1b}[32mholds\u{1b}[0m"));
    assert!(run(&["--color", "always", "--format", "annotated"]).contains("\u{1b}[32mholds ("));
    assert!(!run(&["--color", "always", "--format", "text"]).contains('\u{1b}'));
    assert!(!run(&["--color", "never"]).contains('\u{1b}'));
}

/// On a terminal, the live status line is written only where no started command writes:
/// a traced command's output is never interleaved with it. With `--pid` there is one.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn the_status_line_keeps_off_a_commands_terminal() {
    require_privileges();
    common::packages::require("bsdutils");
    // `script` gives the auditor a terminal, and records all that reaches it.
    let on_a_terminal = |line: &str| {
        let output = Command::new("script")
            .args(["-qec", line, "/dev/null"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{line}: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let command = on_a_terminal(&format!(
        "{AUDITOR} trace --format json -o /dev/null -- sh -c 'sleep 1.5; echo the command wrote'"
    ));
    assert!(command.contains("the command wrote"), "{command}");
    assert!(!command.contains(" calls, "), "{command}");
    let sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let attached = on_a_terminal(&format!(
        "{AUDITOR} trace --format json -o /dev/null --duration 1500ms --pid {}",
        sleeper.id()
    ));
    let mut sleeper = sleeper;
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(attached.contains(" calls, "), "{attached}");
}

/// What `command` (a shell line) prints on a terminal `columns` wide, colours removed.
fn on_a_terminal_of(columns: usize, command: &str) -> String {
    let line = format!("stty cols {columns} rows 50; {command}");
    let output = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{line}: {output:?}");
    let text = String::from_utf8_lossy(&output.stdout).replace('\r', "");
    // SGR sequences take no columns.
    let mut plain = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find("\u{1b}[") {
        plain.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        rest = after.find('m').map_or("", |end| &after[end + 1..]);
    }
    plain.push_str(rest);
    plain
}

/// Asserts no line of `text` is wider than `columns`.
fn assert_fits(text: &str, columns: usize, what: &str) {
    for line in text.lines() {
        let width = line.chars().count();
        assert!(
            width <= columns,
            "{what} at {columns} columns: a line of {width}:\n{line}\n\nin:\n{text}"
        );
    }
}

/// Every command's output on a terminal of 80, 120 and 200 columns fits it: the report of
/// a strace log in each format a terminal gets, with groups and rows per process, a saved
/// report rendered again, the catalogue with and without a tree, and a tree's hints. With
/// more room the tables keep more columns.
#[test]
fn every_command_fits_80_120_and_200_columns() {
    common::packages::require("bsdutils");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let log = root.join("fixtures/http-server-curl.log");
    let dir = tempfile::tempdir().unwrap();
    let saved = saved_report(dir.path(), "http-server-curl.log");
    // A tree of one file whose hint's condition is long, beside Debian's 7.2 when fetched.
    let tree = dir.path().join("linux");
    std::fs::create_dir_all(tree.join("fs")).unwrap();
    std::fs::write(
        tree.join("fs/select.c"),
        "static inline __poll_t do_pollfd(struct pollfd *pollfd, poll_table *pwait,\n\
         \t\t\t\t     bool *can_busy_poll, __poll_t busy_flag)\n{\n\
         \tint fd = pollfd->fd;\n\
         \tif (unlikely(fd < 0 && pollfd->events != 0 && pollfd->revents == 0 && fd != -1 && busy_flag))\n\
         \t\treturn 0;\n}\n",
    )
    .unwrap();
    let mut trees = vec![tree];
    let debian = root.join("target/kernel-src/linux-source-7.2");
    if debian.join("fs").is_dir() {
        trees.push(debian);
    }
    let (log, saved) = (log.display(), saved.display());
    let mut commands = vec![
        format!("{AUDITOR} ingest {log}"),
        format!("{AUDITOR} ingest --group-by program --per-process {log}"),
        format!("{AUDITOR} ingest --format annotated {log}"),
        format!("{AUDITOR} ingest --format text {log}"),
        format!("{AUDITOR} report {saved}"),
        format!("{AUDITOR} sites"),
        format!("{AUDITOR} --help"),
        format!("{AUDITOR} trace --help"),
    ];
    for tree in &trees {
        let tree = tree.display();
        commands.push(format!("{AUDITOR} sites --kernel-src {tree}"));
        commands.push(format!("{AUDITOR} hints --kernel-src {tree}"));
        commands.push(format!("{AUDITOR} report --kernel-src {tree} {saved}"));
    }
    for columns in [80, 120, 200] {
        for command in &commands {
            let text = on_a_terminal_of(columns, command);
            assert!(text.lines().count() > 3, "{command}: {text}");
            assert_fits(&text, columns, command);
        }
    }
    // The site tables narrow with the terminal: two sites' whole at 200, the conditions
    // below at 120, the counts below too at 80.
    let report = |columns| {
        let sites = "--site poll.fd_negative --site close.ok";
        on_a_terminal_of(columns, &format!("{AUDITOR} report {sites} {saved}"))
    };
    let (wide, middle, narrow) = (report(200), report(120), report(80));
    let header = |text: &str| {
        text.lines()
            .find(|l| l.starts_with(" site "))
            .unwrap()
            .to_string()
    };
    assert!(header(&wide).contains("| condition "), "{wide}");
    assert!(!header(&middle).contains("condition") && header(&middle).contains("| taken |"));
    assert!(!header(&narrow).contains("| taken |"), "{narrow}");
    assert!(narrow.contains("0 unreadable"), "{narrow}");
}
