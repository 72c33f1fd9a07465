//! `auditor trace --metrics ADDRESS`: the live counts a scrape gets are the session's
//! report's, site by site and arm by arm.

#[allow(dead_code, reason = "each test crate uses part of the helpers")]
mod common;

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{require_privileges, session_with_metrics};

const AUDITOR: &str = env!("CARGO_BIN_EXE_auditor");

/// `GET path` of `address`: the body of a 200 answer, or None.
fn get(address: &str, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: auditor\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    (head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200")).then(|| body.to_string())
}

/// `GET /metrics` of `address`: the body, or None if the connection closed unanswered.
fn scrape(address: &str) -> Option<String> {
    get(address, "/metrics")
}

/// The counts of `address`'s scrapes once the workload's polls (`polls` calls) are in and
/// two scrapes agree.
fn stable_scrape(address: &str, polls: u64) -> BTreeMap<(String, String), u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    loop {
        assert!(Instant::now() < deadline, "no stable scrape");
        std::thread::sleep(Duration::from_millis(200));
        let Some(text) = scrape(address) else {
            continue;
        };
        if !text.contains(&format!("auditor_calls_total{{syscall=\"poll\"}} {polls}")) {
            continue;
        }
        let sums = by_site_and_arm(&text);
        if last.as_ref() == Some(&sums) {
            assert!(text.contains("auditor_info{"), "{text}");
            assert!(text.ends_with("# EOF\n"), "{text}");
            return sums;
        }
        last = Some(sums);
    }
}

/// Asserts that `sums` (by site and arm) are the report's counts, every site.
fn assert_report_counts(report: &std::path::Path, sums: &BTreeMap<(String, String), u64>) {
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    for site in report["sites"].as_array().unwrap() {
        let id = site["id"].as_str().unwrap();
        for arm in ["taken", "not_taken", "unreadable"] {
            let got = sums
                .get(&(id.to_string(), arm.to_string()))
                .copied()
                .unwrap_or(0);
            assert_eq!(got, site[arm].as_u64().unwrap(), "{id} {arm}");
        }
    }
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
    let (mut auditor, address) = session_with_metrics(
        &[],
        &["select:5:-1", "poll:3:8:2", "close:2:1", "sleep:3000"],
        &report,
    );
    let scraped = stable_scrape(&address, 3);
    assert!(auditor.wait().unwrap().success());
    assert_report_counts(&report, &scraped);
    // After the session nothing answers.
    assert_eq!(scrape(&address), None);
}

#[test]
fn a_bad_metrics_address_is_refused_before_the_probe_loads() {
    // A malformed address is a usage error; one that cannot be listened on is the machine's.
    for (address, says, code) in [
        ("localhost:x", "expected ADDRESS:PORT or PORT", 2),
        ("192.0.2.1:9", "cannot listen there", 1),
    ] {
        let output = Command::new(AUDITOR)
            .args(["trace", "--metrics", address, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(code), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{stderr}");
    }
}

/// A free loopback port (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `text` as a URL query value.
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Debian's Prometheus server scrapes the auditor every second; once it has scraped the
/// still workload twice, `sum by (site, arm) (auditor_branch_evaluations_total)` from its
/// HTTP API equals the auditor's own report of the session, exactly, for every site.
#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn prometheus_sums_are_the_reports_counts() {
    require_privileges();
    common::packages::require("prometheus");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let (mut auditor, address) = session_with_metrics(
        &[],
        &["select:4:-1", "poll:5:16:3:2", "close:3:2", "sleep:8000"],
        &report,
    );
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: auditor\n    static_configs:\n      \
             - targets: ['{address}']\n"
        ),
    )
    .unwrap();
    let web = format!("127.0.0.1:{}", free_port());
    let mut prometheus = Command::new("/usr/bin/prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ours = stable_scrape(&address, 5);
    let query = |promql: &str| -> Option<serde_json::Value> {
        let body = get(
            &web,
            &format!("/api/v1/query?query={}", url_encoded(promql)),
        )?;
        let answer: serde_json::Value = serde_json::from_str(&body).ok()?;
        (answer["status"] == "success").then(|| answer["data"]["result"].clone())
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let theirs = loop {
        assert!(
            Instant::now() < deadline,
            "Prometheus never had two scrapes of the counts"
        );
        std::thread::sleep(Duration::from_millis(500));
        // Two scrapes at least, the counts standing still.
        let scrapes = query("count_over_time(up{job=\"auditor\"}[1m])")
            .and_then(|result| result[0]["value"][1].as_str()?.parse::<u32>().ok());
        if scrapes.is_none_or(|n| n < 2) {
            continue;
        }
        let Some(result) = query("sum by (site, arm) (auditor_branch_evaluations_total)") else {
            continue;
        };
        let sums: BTreeMap<(String, String), u64> = result
            .as_array()
            .unwrap()
            .iter()
            .map(|series| {
                let key = (
                    series["metric"]["site"].as_str().unwrap().to_string(),
                    series["metric"]["arm"].as_str().unwrap().to_string(),
                );
                (key, series["value"][1].as_str().unwrap().parse().unwrap())
            })
            .collect();
        if sums == ours {
            break sums;
        }
    };
    // The guide's share against the hint, per site, from the same counts.
    let share = query(AGAINST_THE_HINT).unwrap();
    let shares: BTreeMap<String, f64> = share
        .as_array()
        .unwrap()
        .iter()
        .map(|series| {
            (
                series["metric"]["site"].as_str().unwrap().to_string(),
                series["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    // Prometheus is stopped by its pid.
    prometheus.kill().unwrap();
    prometheus.wait().unwrap();
    assert!(auditor.wait().unwrap().success());
    assert_report_counts(&report, &theirs);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let mut hinted_and_decided = 0;
    for site in report["sites"].as_array().unwrap() {
        let count = |arm: &str| site[arm].as_u64().unwrap() as f64;
        let against = match site["hint"].as_str().unwrap() {
            "unlikely" => count("taken"),
            "likely" => count("not_taken"),
            _ => continue,
        };
        let decided = count("taken") + count("not_taken");
        let id = site["id"].as_str().unwrap();
        if decided > 0.0 {
            hinted_and_decided += 1;
            let share = shares
                .get(id)
                .unwrap_or_else(|| panic!("no share for {id}"));
            assert!((share - against / decided).abs() < 1e-12, "{id}: {share}");
        }
    }
    assert!(hinted_and_decided > 0);
}

/// The guide's PromQL: the share of decided evaluations against each site's hint.
const AGAINST_THE_HINT: &str = r#"  sum by (site) (auditor_branch_evaluations_total{hint="unlikely", arm="taken"})
/ sum by (site) (auditor_branch_evaluations_total{hint="unlikely", arm!="unreadable"})
or
  sum by (site) (auditor_branch_evaluations_total{hint="likely", arm="not_taken"})
/ sum by (site) (auditor_branch_evaluations_total{hint="likely", arm!="unreadable"})"#;
