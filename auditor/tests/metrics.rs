//! `auditor trace --metrics ADDRESS`: the live counts a scrape gets are the session's
//! report's, site by site and arm by arm.

#[allow(dead_code, reason = "each test crate uses part of the helpers")]
mod common;

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read, Write},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{WORKLOAD, require_privileges};

const AUDITOR: &str = env!("CARGO_BIN_EXE_auditor");

/// `GET /metrics` of `address`: the body, or None if the connection closed unanswered.
fn scrape(address: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: auditor\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then(|| body.to_string())
}

/// `sum by (site, arm) (auditor_branch_evaluations_total)` of an OpenMetrics text.
fn by_site_and_arm(text: &str) -> BTreeMap<(String, String), u64> {
    let mut sums = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("auditor_branch_evaluations_total{") else {
            continue;
        };
        let (labels, value) = rest.rsplit_once("} ").unwrap();
        let label = |name: &str| {
            let start = labels.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
            labels[start..][..labels[start..].find('"').unwrap()].to_string()
        };
        *sums.entry((label("site"), label("arm"))).or_default() += value.parse::<u64>().unwrap();
    }
    sums
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn a_scrape_during_the_session_has_the_reports_counts() {
    require_privileges();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    // The workload's last step sleeps: the counts stand still while it is scraped.
    let mut auditor = Command::new(AUDITOR)
        .args([
            "trace",
            "--metrics",
            "127.0.0.1:0",
            "--format",
            "json",
            "-o",
        ])
        .arg(&report)
        .args([
            "--",
            WORKLOAD,
            "select:5:-1",
            "poll:3:8:2",
            "close:2:1",
            "sleep:3000",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(auditor.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix("auditor: metrics at http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no address in `{line}`"))
        .to_string();
    // Scrape until the workload's polls are in and two scrapes agree (it is asleep).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    let scraped = loop {
        assert!(Instant::now() < deadline, "no stable scrape");
        std::thread::sleep(Duration::from_millis(200));
        let Some(text) = scrape(&address) else {
            continue;
        };
        if !text.contains("auditor_calls_total{syscall=\"poll\"} 3") {
            continue;
        }
        let sums = by_site_and_arm(&text);
        if last.as_ref() == Some(&sums) {
            assert!(text.contains("auditor_info{"), "{text}");
            assert!(text.ends_with("# EOF\n"), "{text}");
            break sums;
        }
        last = Some(sums);
    };
    assert!(auditor.wait().unwrap().success());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    for site in report["sites"].as_array().unwrap() {
        let id = site["id"].as_str().unwrap();
        for arm in ["taken", "not_taken", "unreadable"] {
            let scraped = scraped
                .get(&(id.to_string(), arm.to_string()))
                .copied()
                .unwrap_or(0);
            assert_eq!(scraped, site[arm].as_u64().unwrap(), "{id} {arm}");
        }
    }
    // After the session nothing answers.
    assert_eq!(scrape(&address), None);
}

#[test]
fn a_bad_metrics_address_is_refused_before_the_probe_loads() {
    for (address, says) in [
        ("localhost:x", "expected ADDRESS:PORT or PORT"),
        ("192.0.2.1:9", "cannot listen there"),
    ] {
        let output = Command::new(AUDITOR)
            .args(["trace", "--metrics", address, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{stderr}");
    }
}
