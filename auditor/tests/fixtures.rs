//! Golden tests on real programs: every fixture log (recorded by `cargo xtask
//! record-fixtures` while the probe watched the same processes) parses to exactly the
//! probe's counts for each site a log decides; the rest are reported as not measured.

use std::path::Path;

use auditor::{
    readiness,
    report::Report,
    source::strace::replay::{self, Replay},
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
        let report = Report::new(
            "strace",
            String::new(),
            Default::default(),
            &tally,
            replay::decides,
        );
        for site in Site::ALL {
            let id = readiness::info(site).id;
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
    }
}
