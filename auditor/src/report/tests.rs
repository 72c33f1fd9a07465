//! The report built from fixed tallies: verdicts, notes, proposals, filters, groups; and
//! every renderer, writing a fixed report into a `Vec<u8>`.

/// The Debian packages the tests need: the font of the SVG's labels.
#[path = "../../tests/common/packages.rs"]
#[allow(dead_code, reason = "the list serves every test crate")]
mod packages;

use super::{groups::GroupBy, *};
use crate::{
    tally::Process,
    verdict::{Arm, VerdictKind},
};

#[test]
fn proposals_are_parsed_and_named_when_wrong() {
    let proposal: Proposal = "poll.fd_not_open=unlikely".parse().unwrap();
    assert_eq!(
        (proposal.site, proposal.hint),
        (Site::PollFdNotOpen, Hint::Unlikely)
    );
    assert!(
        "poll.fd_not_open"
            .parse::<Proposal>()
            .unwrap_err()
            .contains("SITE=HINT")
    );
    assert!(
        "nope=likely"
            .parse::<Proposal>()
            .unwrap_err()
            .contains("not a site")
    );
    assert!(
        "close.ok=maybe"
            .parse::<Proposal>()
            .unwrap_err()
            .contains("not a hint")
    );
}

/// A test source's observation of `tally`, deciding the sites `measured` says.
pub(crate) fn observed(tally: &Tally, measured: fn(Site) -> bool) -> Observation {
    Observation {
        source: "test",
        target: String::new(),
        elapsed: std::time::Duration::ZERO,
        tally: tally.clone(),
        notes: Vec::new(),
        measured,
    }
}

#[test]
fn counts_read_as_english() {
    assert_eq!(counted(1, "line is", "lines are"), "1 line is");
    assert_eq!(counted(0, "line is", "lines are"), "0 lines are");
    assert_eq!(counted(2, "evaluation", "evaluations"), "2 evaluations");
}

#[test]
fn only_some_sites_and_their_notes() {
    let mut tally = Tally::default();
    let process = Process {
        pid: 1,
        comm: "p".into(),
    };
    tally.add(process.clone(), Site::PollFdNotOpen, &Counts::new(1, 2, 3));
    tally.add(process, Site::CloseOk, &Counts::new(4, 0, 5));
    tally.add_calls(auditor_common::Syscall::Poll, 1);
    let observation = Observation {
        notes: vec!["from the source".into()],
        ..observed(&tally, |_| true)
    };
    let report = Report::of(&observation).only(&[Site::CloseOk]);
    assert_eq!(report.sites.len(), 1);
    assert!(report.processes.iter().all(|p| p.site == "close.ok"));
    assert_eq!(report.notes.len(), 4, "{:?}", report.notes);
    assert_eq!(report.notes[0], "from the source");
    assert_eq!(
        report.notes[2],
        "close.ok: unclear: 0 of 9 evaluations went against `likely`, and 5 could not be \
         decided (up to 81.12%); with no more against it, it holds at the 10% bar from 113 \
         evaluations on."
    );
    assert!(report.notes[3].starts_with("close.ok: 5 evaluations"));
}

#[test]
fn a_proposed_hint_is_judged_instead() {
    let mut tally = Tally::default();
    let process = Process {
        pid: 1,
        comm: "p".into(),
    };
    tally.add(process, Site::SelectFdNotOpen, &Counts::new(0, 1000, 0));
    let report = Report::of(&observed(&tally, |_| true));
    assert_eq!(
        report.site(Site::SelectFdNotOpen).verdict.kind,
        VerdictKind::Candidate
    );
    let proposal = Proposal {
        site: Site::SelectFdNotOpen,
        hint: Hint::Unlikely,
    };
    let report = report.with_proposals(&[proposal]);
    let site = report.site(Site::SelectFdNotOpen);
    assert_eq!(
        (site.proposed_hint, site.verdict.kind),
        (Some(Hint::Unlikely), VerdictKind::Holds)
    );
    // A site the source does not measure stays unmeasured.
    let report = Report::of(&observed(&tally, |_| false)).with_proposals(&[proposal]);
    assert_eq!(
        report.site(Site::SelectFdNotOpen).verdict.kind,
        VerdictKind::NotMeasured
    );
}

#[test]
fn the_processes_that_took_the_rare_arm_are_named() {
    let mut tally = Tally::default();
    for (pid, comm, taken, not_taken) in [
        (10, "ssh", 2, 500),
        (11, "", 0, 90),
        (12, "curl", 7, 30),
        (13, "nginx", 1, 0),
        (14, "redis", 1, 5),
    ] {
        let process = Process {
            pid,
            comm: comm.into(),
        };
        tally.add(
            process,
            Site::PollFdNegative,
            &Counts::new(taken, not_taken, 0),
        );
    }
    let report = Report::of(&observed(&tally, |_| true));
    let site = report.site(Site::PollFdNegative);
    assert_eq!(site.rare_arm, Arm::Taken);
    let from: Vec<(u32, u64)> = site
        .rare_from
        .iter()
        .map(|r| (r.pid, r.evaluations))
        .collect();
    assert_eq!(from, [(12, 7), (10, 2), (13, 1), (14, 1)]);
    let note = report
        .notes
        .iter()
        .find(|n| n.starts_with("poll.fd_negative: its rare"));
    assert_eq!(
        note.map(String::as_str),
        Some(
            "poll.fd_negative: its rare direction, taken (against `unlikely`), came from \
             curl (pid 12): 7, ssh (pid 10): 2, nginx (pid 13): 1, and 1 more process (1)."
        )
    );
    // Proposing `likely` makes the other direction the rare one.
    let proposal = Proposal {
        site: Site::PollFdNegative,
        hint: Hint::Likely,
    };
    let report = report.with_proposals(&[proposal]);
    let site = report.site(Site::PollFdNegative);
    assert_eq!(site.rare_arm, Arm::NotTaken);
    assert_eq!(site.rare_from[0].pid, 10);
    assert_eq!(site.rare_from.len(), 4);
    assert!(
        report.notes.iter().any(|n| n.contains("pid 11: 90")),
        "{:?}",
        report.notes
    );
}

/// A fixed report: two processes (one with a name that would drive a terminal, and a `|`
/// that would split a Markdown cell), a hinted site against its hint and one for it.
fn fixed_report() -> Report {
    let mut tally = Tally::default();
    let plain = Process {
        pid: 100,
        comm: "sshd".into(),
    };
    let hostile = Process {
        pid: 200,
        comm: "x|y\u{1b}[2J".into(),
    };
    tally.add(
        plain.clone(),
        Site::PollFdNegative,
        &Counts::new(40, 960, 0),
    );
    tally.add(hostile.clone(), Site::PollFdNegative, &Counts::new(7, 0, 3));
    tally.add(plain, Site::CloseOk, &Counts::new(500, 0, 0));
    tally.add(hostile, Site::Dup2SameFd, &Counts::new(2, 98, 0));
    tally.add_calls(auditor_common::Syscall::Poll, 1000);
    tally.add_calls(auditor_common::Syscall::Close, 500);
    tally.add_calls(auditor_common::Syscall::Dup2, 100);
    Report::of(&observed(&tally, |site| site != Site::FdEmfile))
}

fn rendered(format: Format, layout: Layout) -> String {
    let mut out = Vec::new();
    fixed_report().render(format, layout, &mut out).unwrap();
    String::from_utf8(out).expect("renderers write UTF-8")
}

const NARROW: Layout = Layout {
    per_process: true,
    columns: Columns::ConditionsBelow,
};

#[test]
fn the_table_names_every_site_and_escapes_process_names() {
    let table = rendered(Format::Table, NARROW);
    for info in catalogue::SITES {
        assert!(table.contains(info.id), "{} missing:\n{table}", info.id);
    }
    assert!(!table.contains('\u{1b}'), "{table}");
    assert!(table.contains("x|y\\u{1b}[2J"), "{table}");
    // 47 of 1010 entries against `unlikely`, 3 unreadable.
    let row = table
        .lines()
        .find(|l| l.contains("poll.fd_negative"))
        .unwrap();
    for cell in ["47", "960", "3", "unlikely"] {
        assert!(row.contains(cell), "{row}");
    }
    let wide = rendered(
        Format::Table,
        Layout {
            per_process: false,
            columns: Columns::Every,
        },
    );
    assert!(wide.contains("pollfd.fd < 0 (entry ignored)"), "{wide}");
    assert!(
        !wide.lines().any(|l| l.contains(" | sshd")),
        "no process rows: {wide}"
    );
    assert!(table.lines().any(|l| l.contains(" | sshd")), "{table}");
}

#[test]
fn markdown_parses_to_tables_whose_cells_stay_whole() {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let markdown = rendered(Format::Markdown, NARROW);
    let (mut tables, mut cells_per_row, mut row) = (0, Vec::new(), 0);
    let (mut cells, mut cell) = (Vec::new(), String::new());
    for event in Parser::new_ext(&markdown, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Table(_)) => tables += 1,
            Event::Start(Tag::TableRow | Tag::TableHead) => row = 0,
            Event::Start(Tag::TableCell) => cell.clear(),
            Event::End(TagEnd::TableCell) => {
                row += 1;
                cells.push(std::mem::take(&mut cell));
            }
            Event::End(TagEnd::TableRow | TagEnd::TableHead) => cells_per_row.push(row),
            Event::Text(text) | Event::Code(text) => cell.push_str(&text),
            _ => {}
        }
    }
    assert!(tables >= 2, "{markdown}");
    // The hostile name is one cell, shown escaped; no row has a cell more than its head.
    assert!(cells.iter().any(|c| c == "x|y\\u{1b}[2J"), "{cells:?}");
    assert!(!markdown.contains('\u{1b}'));
    let widest = cells_per_row.iter().max().unwrap();
    assert!(cells_per_row.iter().all(|n| n <= widest));
}

#[test]
fn json_carries_the_counts_and_names_as_they_are() {
    let json: serde_json::Value =
        serde_json::from_str(&rendered(Format::Json, NARROW)).expect("valid JSON");
    let sites = json["sites"].as_array().unwrap();
    assert_eq!(sites.len(), auditor_common::SITE_COUNT);
    let site = |id: &str| sites.iter().find(|s| s["id"] == id).unwrap().clone();
    let negative = site("poll.fd_negative");
    assert_eq!(
        (negative["taken"].as_u64(), negative["not_taken"].as_u64()),
        (Some(47), Some(960))
    );
    assert_eq!(negative["syscalls"], serde_json::json!(["poll", "ppoll"]));
    assert_eq!(site("fd.emfile")["measured"], false);
    assert_eq!(site("dup2.same_fd")["hint_since"], "2.6.27");
    // JSON escapes by its own rules: the name is the process's, byte for byte.
    let processes = json["processes"].as_array().unwrap();
    assert!(processes.iter().any(|p| p["comm"] == "x|y\u{1b}[2J"));
    assert_eq!(json["calls"]["dup2"], 100);
}

#[test]
fn text_fits_a_mail_reply() {
    let text = rendered(Format::Text, NARROW);
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    assert!(text.is_ascii(), "{text}");
    assert!(text.contains("poll.fd_negative"), "{text}");
    assert!(text.contains("dup2.same_fd"), "{text}");
    assert!(text.contains("x|y\\u{1b}[2J"), "{text}");
}

/// A probe run on a kernel older than a site's branch: the site lists that kernel, the
/// table marks its hint and a note says what the kernel does instead; a strace run (whose
/// kernel is not the traced one) or a newer kernel marks nothing.
#[test]
fn sites_whose_branch_the_runs_kernel_lacks() {
    let run = |source: &str, kernel: &str| {
        let mut run = saved::Run::here(source, "t".into(), std::time::Duration::ZERO);
        run.kernel_release = kernel.into();
        run
    };
    let tally = Tally::default();
    let old = Report::of_runs(vec![run("ebpf", "6.1.0-50-amd64")], &tally, |_| true);
    let site = |report: &Report, site| report.site(site).absent_in_kernels.clone();
    assert_eq!(site(&old, Site::CloseOk), ["6.1.0-50-amd64"]);
    assert_eq!(site(&old, Site::FdPrepareFdOk), ["6.1.0-50-amd64"]);
    assert!(site(&old, Site::PollFdNegative).is_empty());
    let note = old
        .notes
        .iter()
        .find(|n| n.contains("fd_prepare.fd_ok"))
        .expect("a note on FD_PREPARE");
    assert!(note.contains("Linux 6.19"), "{note}");
    assert!(note.contains("fd_add.ok"), "{note}");
    let mut table = Vec::new();
    old.render(Format::Table, NARROW, &mut table).unwrap();
    let table = String::from_utf8(table).unwrap();
    let close = table.lines().find(|l| l.contains("close.ok")).unwrap();
    assert!(close.contains("not in 6.1"), "{close}");
    for report in [
        Report::of_runs(vec![run("ebpf", "7.2.13+deb14-amd64")], &tally, |_| true),
        Report::of_runs(vec![run("strace", "6.1.0-50-amd64")], &tally, |_| true),
    ] {
        assert!(report.sites.iter().all(|s| s.absent_in_kernels.is_empty()));
    }
}

/// Names from traced programs (controls, XML's own characters) make a valid SVG document,
/// as an XML parser reads it.
#[test]
fn the_svg_of_hostile_names_is_valid_xml() {
    packages::require("fonts-dejavu-core");
    let report = fixed_report().grouped(Some(super::groups::GroupBy::Program));
    let text = super::svg::render(&report, super::Sort::Miss).unwrap();
    let tree = resvg::usvg::Tree::from_str(&text, &resvg::usvg::Options::default());
    assert!(tree.is_ok(), "{:?}", tree.err());
    assert!(
        text.contains("x|y\\u{1b}[2J"),
        "the name, escaped, is in the picture"
    );
    assert!(!text.contains('\u{1b}'));
}

/// The annotated view turns taken and not taken into correct and incorrect by each site's
/// hint, puts the largest share against the hint first and keeps unhinted sites apart.
#[test]
fn the_annotated_view_counts_against_the_hint() {
    // As the options shape it: the largest share against the hint first.
    let order = Options::default().order(Format::Annotated);
    assert_eq!(order, Sort::Miss);
    let mut out = Vec::new();
    fixed_report()
        .sorted(order)
        .render(Format::Annotated, NARROW, &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains('\u{1b}'), "{text}");
    let row = |id: &str| {
        text.lines()
            .find(|l| l.split_whitespace().last() == Some(id))
            .unwrap_or_else(|| panic!("no row for {id}:\n{text}"))
            .split_whitespace()
            .filter(|cell| *cell != "|")
            .collect::<Vec<_>>()
    };
    // unlikely(fd < 0): 47 taken are incorrect, 960 not taken are correct, 3 unreadable.
    assert_eq!(row("poll.fd_negative")[..4], ["960", "47", "3", "4.67%"]);
    // likely(retval == 0): the 500 taken are correct.
    assert_eq!(row("close.ok")[..4], ["500", "0", "0", "0.00%"]);
    assert_eq!(row("dup2.same_fd")[..4], ["98", "2", "0", "2.00%"]);
    // A site the source does not decide has no counts.
    assert_eq!(row("fd.emfile")[..4], ["-", "-", "-", "-"]);
    let position = |id: &str| text.find(&format!(" {id}\n")).unwrap();
    assert!(position("poll.fd_negative") < position("dup2.same_fd"));
    assert!(position("dup2.same_fd") < position("close.ok"));
    assert!(position("close.ok") < position("fd.emfile"), "{text}");
    // Unhinted sites come after, in a table of their own.
    let unhinted = text.find("Unhinted branches").expect("an unhinted table");
    assert!(position("fd.emfile") < unhinted);
    assert!(position("select.fd_not_open") > unhinted, "{text}");
    // The deciding bound is beside each verdict.
    assert!(row("poll.fd_negative").contains(&"(<="), "{text}");
}

/// The sites in each order `--sort` offers.
#[test]
fn sites_in_each_order() {
    let ids = |order: Sort| -> Vec<&'static str> {
        fixed_report()
            .only(&[Site::PollFdNegative, Site::CloseOk, Site::Dup2SameFd])
            .sorted(order)
            .sites
            .iter()
            .map(|s| s.info.id)
            .collect()
    };
    assert_eq!(
        ids(Sort::Miss),
        ["poll.fd_negative", "dup2.same_fd", "close.ok"]
    );
    assert_eq!(
        ids(Sort::Evaluations),
        ["poll.fd_negative", "close.ok", "dup2.same_fd"]
    );
    // By file: fs/file.c (dup2), fs/open.c (close), fs/select.c (poll).
    assert_eq!(
        ids(Sort::Line),
        ["dup2.same_fd", "close.ok", "poll.fd_negative"]
    );
    assert_eq!(
        ids(Sort::Catalogue),
        ["poll.fd_negative", "dup2.same_fd", "close.ok"]
    );
}

#[test]
fn only_some_sites_lists_only_their_calls() {
    let report = fixed_report().only(&[Site::CloseOk]);
    let calls: Vec<&str> = report.calls.keys().map(String::as_str).collect();
    assert_eq!(calls, ["close"]);
}

/// `--kernel-src`: the hints a tree carries are judged, at its lines, and the notes say
/// which tree, where it differs from the catalogue and what it lacks.
#[test]
fn a_tree_judges_its_own_hints() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("fs")).unwrap();
    std::fs::write(
        dir.path().join("Makefile"),
        "VERSION = 7\nPATCHLEVEL = 2\nSUBLEVEL = 0\nEXTRAVERSION =\n",
    )
    .unwrap();
    // This tree's close() has no hint on its success.
    std::fs::write(
        dir.path().join("fs/open.c"),
        "SYSCALL_DEFINE1(close, unsigned int, fd)\n{\n\tint retval;\n\n\
         \tif (retval == 0)\n\t\treturn 0;\n}\n",
    )
    .unwrap();
    let tree = crate::kernel_src::TreeHints::read(dir.path()).unwrap();
    let report = fixed_report().with_tree(&tree);
    let close = report.site(Site::CloseOk);
    assert_eq!(close.judged_hint(), Hint::None);
    assert_eq!(close.location(), ("fs/open.c", Some(5), "sys_close"));
    // 500 of 500 taken, unhinted: a candidate for likely.
    assert_eq!(close.verdict.kind, VerdictKind::Candidate);
    // A site the tree lacks is judged on the catalogue's hint.
    let negative = report.site(Site::PollFdNegative);
    assert_eq!(negative.judged_hint(), Hint::Unlikely);
    assert_eq!(negative.location().1, None);
    let name = format!("{} (Linux 7.2.0)", dir.path().display());
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.starts_with("Hints judged are those") && n.contains(&name)),
        "{:?}",
        report.notes
    );
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("close.ok (none there; the catalogue: likely since")),
        "{:?}",
        report.notes
    );
    assert!(
        report.notes.iter().any(|n| n.starts_with("Not found in")
            && n.contains("poll.fd_negative, poll.fd_not_open (cannot read")),
        "{:?}",
        report.notes
    );
    let mut out = Vec::new();
    report.render(Format::Annotated, NARROW, &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("fs/open.c:5"), "{out}");
    assert!(out.lines().next().unwrap().contains(&name), "{out}");
    // The annotated view's close.ok row: unhinted there, so in the second table.
    let unhinted = out.find("Unhinted branches").unwrap();
    assert!(out.find("fs/open.c:5").unwrap() > unhinted, "{out}");
    // For a mail reply: the tree's hint on the site's line, and where it is below it.
    let mut text = Vec::new();
    report.render(Format::Text, NARROW, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    let close = text
        .lines()
        .position(|l| l.starts_with("close.ok "))
        .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[close].contains(" none "), "{text}");
    assert_eq!(
        lines[close + 1],
        "    at fs/open.c:5 in sys_close()",
        "{text}"
    );
    assert!(text.lines().all(|l| l.len() <= 72), "{text}");
}

/// `--site` keeps the source's notes about the sites shown and those about no site.
#[test]
fn only_some_sites_keeps_the_notes_about_them() {
    let report = fixed_report()
        .with_notes(vec![
            "fchmodat.bad_flags: the calls of fchmodat2 are not counted.".into(),
            "Evaluations not attributed to a process: poll.fd_negative 3, close.ok 2.".into(),
            "The session ended at a signal.".into(),
        ])
        .only(&[Site::CloseOk]);
    let kept: Vec<bool> = ["fchmodat.", "Evaluations not", "The session"]
        .iter()
        .map(|start| report.notes.iter().any(|n| n.starts_with(start)))
        .collect();
    assert_eq!(kept, [false, true, true], "{:?}", report.notes);
    let all = fixed_report().with_notes(vec!["fchmodat.bad_flags: x.".into()]);
    assert!(all.notes.iter().any(|n| n.starts_with("fchmodat.")));
    assert_eq!(
        super::notes::sites_named("dup2.same_fd and fd.emfile. Not xfd.emfile or fd.emfile_2"),
        ["fd.emfile", "dup2.same_fd"]
    );
}

/// `--min-evaluations` and `--top` leave rows of the groups out, say so in one note, and
/// leave the pooled rows and their notes as they were.
#[test]
fn group_limits_leave_rows_out_and_say_so() {
    use super::groups::{GroupBy, Limits};
    let all = fixed_report().grouped(Some(GroupBy::Program));
    let rows = |r: &Report| -> Vec<(String, usize)> {
        r.groups
            .iter()
            .map(|g| (escape_text(&g.name).into_owned(), g.sites.len()))
            .collect()
    };
    assert_eq!(
        rows(&all),
        [("sshd".to_string(), 2), ("x|y\\u{1b}[2J".to_string(), 2)]
    );
    // x|y's 10 poll entries are under 50.
    let some = fixed_report().grouped_within(
        Some(GroupBy::Program),
        Limits {
            min_evaluations: 50,
            top: None,
        },
    );
    assert_eq!(
        rows(&some),
        [("sshd".to_string(), 2), ("x|y\\u{1b}[2J".to_string(), 1)]
    );
    let note = |r: &Report| {
        r.notes
            .iter()
            .find(|n| n.starts_with("Per program:"))
            .cloned()
    };
    assert_eq!(
        note(&some).as_deref(),
        Some(
            "Per program: 1 row left out (rows of fewer than 50 evaluations), 10 evaluations \
             in all; the pooled rows count them."
        )
    );
    // The busiest program alone: sshd's 1500 evaluations against x|y's 110.
    let top = fixed_report().grouped_within(
        Some(GroupBy::Program),
        Limits {
            min_evaluations: 0,
            top: Some(1),
        },
    );
    assert_eq!(rows(&top), [("sshd".to_string(), 2)]);
    assert_eq!(
        note(&top).as_deref(),
        Some(
            "Per program: 2 rows left out (1 program past the 1 with the most evaluations), \
             110 evaluations in all; the pooled rows count them."
        )
    );
    assert_eq!(note(&all), None);
    // The pooled counts and the notes judged over every group are the same.
    let counts = |r: &Report| r.sites.iter().map(|s| s.counts).collect::<Vec<_>>();
    assert_eq!(counts(&top), counts(&all));
    for pooled in all.notes.iter().filter(|n| n.contains("pooled")) {
        assert!(top.notes.contains(pooled), "{pooled}");
    }
}

/// `--label` is what every format says was traced, the run's own record included.
#[test]
fn a_label_stands_for_the_command_line() {
    let report = fixed_report().labelled(Some("ssh to a local sshd"));
    assert_eq!(report.target, "ssh to a local sshd");
    assert_eq!(report.runs[0].traced, "ssh to a local sshd");
    for format in [Format::Table, Format::Markdown, Format::Text, Format::Json] {
        let mut out = Vec::new();
        report.render(format, NARROW, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("ssh to a local sshd"), "{format:?}: {out}");
    }
    let argv: Vec<std::ffi::OsString> = ["sh", "-c", "nc -l 9 & nc 127.0.0.1 9"]
        .map(Into::into)
        .to_vec();
    assert_eq!(shell_quoted(&argv), "sh -c 'nc -l 9 & nc 127.0.0.1 9'");
}

/// The picture holds one page: rows past the limit are named as left out, not drawn; each
/// row says its evaluations and verdict, and the title what was traced.
#[test]
fn the_svg_is_one_page_with_rows_labelled() {
    packages::require("fonts-dejavu-core");
    let report = fixed_report().grouped(Some(super::groups::GroupBy::Program));
    let all = super::svg::render(&report, Sort::Miss).unwrap();
    // 3 sites, and 4 rows of their programs.
    assert_eq!(all.matches("<circle").count(), 7, "{all}");
    assert!(!all.contains("more rows not drawn"));
    assert!(all.contains("poll.fd_negative  n 1010  holds"), "{all}");
    assert!(all.contains("holds") && all.contains("costly") && all.contains("wrong"));
    assert!(
        all.contains(" on Linux ") && all.contains("(test)"),
        "{all}"
    );
    let cut = super::svg::render_rows(&report, Sort::Miss, 3).unwrap();
    assert_eq!(cut.matches("<circle").count(), 3);
    assert!(cut.contains("4 more rows not drawn"), "{cut}");
}

/// A terminal gets every column when the tables with every column fit it, measured, not
/// from a fixed threshold; one column less and the tables narrow, and fit.
#[test]
fn a_terminal_gets_every_column_when_they_fit() {
    let report = fixed_report();
    let render = |columns| {
        let mut text = Vec::new();
        let layout = Layout {
            per_process: false,
            columns,
        };
        report.render(Format::Table, layout, &mut text).unwrap();
        String::from_utf8(text).unwrap()
    };
    let every = render(Columns::Every);
    let widest = every.lines().map(|l| l.chars().count()).max().unwrap();
    assert_eq!(render(Columns::Terminal(widest)), every);
    let narrower = render(Columns::Terminal(widest - 1));
    assert_ne!(narrower, every);
    assert!(
        narrower.lines().all(|l| l.chars().count() < widest),
        "{narrower}"
    );
}

/// Every format that fits a terminal fits 80, 120 and 200 columns, with groups and rows
/// per process, and loses no site, count or verdict: what leaves a table is said below it.
#[test]
fn every_table_fits_80_120_and_200_columns() {
    let report = fixed_report().grouped(Some(GroupBy::Program));
    for format in [Format::Table, Format::Annotated] {
        for width in [80, 120, 200] {
            let layout = Layout {
                per_process: true,
                columns: Columns::Terminal(width),
            };
            let mut text = Vec::new();
            report.render(format, layout, &mut text).unwrap();
            let text = String::from_utf8(text).unwrap();
            for line in text.lines() {
                assert!(
                    line.chars().count() <= width,
                    "{format:?} at {width}: {} columns: {line}",
                    line.chars().count()
                );
            }
            for info in catalogue::SITES {
                assert!(
                    text.contains(info.id),
                    "{format:?} at {width}: no {}",
                    info.id
                );
            }
            // poll.fd_negative: 47 taken, 960 not taken, 3 unreadable, and its verdict.
            for wanted in ["47", "960", "holds", "x|y\\u{1b}[2J"] {
                assert!(
                    text.contains(wanted),
                    "{format:?} at {width}: no {wanted}:\n{text}"
                );
            }
            assert!(text.contains("per program"), "{format:?} at {width}");
        }
    }
    // At 80 the site tables keep the site, its hint and verdict, the rest below them.
    let mut text = Vec::new();
    let layout = Layout {
        per_process: false,
        columns: Columns::Terminal(80),
    };
    report.render(Format::Table, layout, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with(" poll.fd_negative "))
        .unwrap();
    assert!(
        row.contains("| unlikely ") && row.contains("| holds"),
        "{row}"
    );
    assert!(
        text.contains("- `poll.fd_negative` (do_pollfd) is taken when pollfd.fd < 0"),
        "{text}"
    );
}
