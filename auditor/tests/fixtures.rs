//! Golden tests on real programs: every fixture log (recorded by `cargo xtask
//! record-fixtures` while the probe watched the same processes) parses to exactly the
//! probe's counts for each site a log decides, in total and per process (pid and command
//! name); the rest are reported as not measured.

use std::{collections::BTreeMap, path::Path};

use auditor::{
    report::Report,
    source::strace::replay::{self, Replay},
    tally::Tally,
};
use auditor_common::{Counts, Site};

fn fixtures() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let mut logs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

#[test]
fn every_fixture_parses_to_the_probes_counts() {
    let logs = fixtures();
    assert!(logs.len() >= 2, "fixtures: {logs:?}");
    for log in logs {
        let expected_path = log.with_extension("expected.json");
        let expected: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&expected_path).unwrap()).unwrap();
        let mut replay = Replay::default();
        let file = std::fs::File::open(&log).unwrap();
        replay.ingest(&log.display().to_string(), file, None);
        assert_eq!(
            replay.unreadable(),
            0,
            "{}: {:?}",
            log.display(),
            replay.notes()
        );
        let tally = replay.tally();
        let report = Report::of(&replay.observe(String::new(), Default::default()));
        for site in Site::ALL {
            let id = site.info().id;
            // A site added since the fixture was recorded: the probe did not count it then
            // (`cargo xtask record-fixtures` records it; the workload's cases count it both
            // ways meanwhile).
            if !recorded(&expected, id) {
                continue;
            }
            let counts = &expected["sites"][id];
            let count = |key: &str| counts[key].as_u64().unwrap_or(0);
            let want = Counts::new(count("taken"), count("not_taken"), count("unreadable"));
            if replay::decides(site) {
                assert_eq!(tally.site_total(site), want, "{}: {id}", log.display());
            } else {
                // The probe measured it; a log cannot, and the report says so.
                assert!(!report.site(site).measured, "{id}");
            }
        }
        let logged: Rows = logged_processes(&tally)
            .into_iter()
            .filter(|((_, _, id), _)| recorded(&expected, id))
            .collect();
        assert_eq!(
            logged,
            probed_processes(&expected),
            "{}: per process",
            log.display()
        );
    }
}

type Rows = BTreeMap<(u64, String, String), (u64, u64, u64)>;

/// (pid, comm, site) -> (taken, not taken, unreadable) for the sites a log decides.
fn logged_processes(tally: &Tally) -> Rows {
    tally
        .per_process()
        .filter(|(_, site, counts)| replay::decides(*site) && counts.total() > 0)
        .map(|(process, site, c)| {
            let key = (
                u64::from(process.pid),
                process.comm.clone(),
                site.info().id.to_string(),
            );
            (key, (c.taken, c.not_taken, c.unreadable))
        })
        .collect()
}

/// Whether the probe counted site `id` when the fixture was recorded (the catalogue of its
/// day had it).
fn recorded(expected: &serde_json::Value, id: &str) -> bool {
    expected["catalogue"]
        .as_array()
        .expect("the fixture names the catalogue it was recorded with")
        .iter()
        .any(|recorded| recorded == id)
}

/// The same rows from the probe's report, as the fixture recorded them.
fn probed_processes(expected: &serde_json::Value) -> Rows {
    let decided = |id: &str| {
        Site::ALL
            .into_iter()
            .any(|site| site.info().id == id && replay::decides(site))
    };
    let rows = expected["processes"].as_array().expect("per-process rows");
    rows.iter()
        .filter(|row| decided(row["site"].as_str().unwrap()))
        .map(|row| {
            let count = |key: &str| row[key].as_u64().unwrap();
            let key = (
                count("pid"),
                row["comm"].as_str().unwrap().to_string(),
                row["site"].as_str().unwrap().to_string(),
            );
            (
                key,
                (count("taken"), count("not_taken"), count("unreadable")),
            )
        })
        .filter(|(_, (taken, not_taken, unreadable))| taken + not_taken + unreadable > 0)
        .collect()
}
