//! Hostile clients of a root session's `--metrics` endpoint: the session goes on counting,
//! other scrapes are answered promptly, and it ends on time with its report.

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

use crate::common::{json_site, raise_nofile, require_privileges, session_with_metrics};

/// The number of idle connections a hostile client holds open.
const IDLE: usize = 2000;

/// `Threads:` and `VmRSS:` (KiB) of process `pid`.
fn threads_and_rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.split_whitespace().next()?.parse().ok())
            .unwrap()
    };
    (field("Threads:"), field("VmRSS:"))
}

/// Sends `request` and reads the answer to its end (bounded by a 10 s read timeout).
fn exchange(address: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

/// A connection to `address`; a SYN the kernel's full queue dropped is sent again, as a
/// client would.
fn connect(address: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect(address) {
            Ok(stream) => return stream,
            Err(error) if Instant::now() < deadline => {
                eprintln!("connect: {error}; again");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => panic!("cannot connect to {address}: {error}"),
        }
    }
}

/// How long a `GET /metrics` takes, and whether it had the counts.
fn timed_scrape(address: &str) -> (Duration, bool) {
    let started = Instant::now();
    let response = exchange(address, b"GET /metrics HTTP/1.1\r\nHost: auditor\r\n\r\n");
    (
        started.elapsed(),
        response.starts_with("HTTP/1.1 200") && response.ends_with("# EOF\n"),
    )
}

/// The median of `samples`.
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[test]
#[ignore = "needs root and tracefs: run `cargo xtask test` as root"]
fn hostile_clients_neither_kill_nor_hold_a_session() {
    require_privileges();
    raise_nofile(IDLE as u64 + 256);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let planned = Duration::from_secs(12);
    let duration = format!("{}s", planned.as_secs());
    let (mut auditor, address) = session_with_metrics(
        &["--duration", &duration],
        &["poll:3:8:2", "sleep:60000"],
        &report,
    );
    let pid = auditor.id();
    // Until the probe is loaded the loop does not answer (16 s on 7.2 under TCG); the
    // duration counts from then.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !timed_scrape(&address).1 {
        assert!(Instant::now() < deadline, "no scrape answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let started = Instant::now();
    let quiet: Vec<_> = (0..5).map(|_| timed_scrape(&address).0).collect();
    let (threads_before, rss_before) = threads_and_rss(pid);

    // An announced body of a terabyte, and one of 5 bytes never sent: refused unread.
    for announced in ["Content-Length: 1000000000000", "Content-Length: 5"] {
        let response = exchange(
            &address,
            format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{announced}\r\n\r\n").as_bytes(),
        );
        assert!(
            response.starts_with("HTTP/1.1 413"),
            "{announced}: {response}"
        );
    }
    // A client that never reads its answer, one that stalls in its head.
    let mut deaf = TcpStream::connect(&address).unwrap();
    deaf.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut stalled = TcpStream::connect(&address).unwrap();
    stalled.write_all(b"GET /metr").unwrap();
    // Thousands of idle connections.
    let idle: Vec<_> = (0..IDLE).map(|_| connect(&address)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let (threads_idle, rss_idle) = threads_and_rss(pid);
    let loaded: Vec<_> = (0..5)
        .map(|_| {
            let (took, answered) = timed_scrape(&address);
            assert!(
                answered,
                "a scrape got no counts among {IDLE} idle connections"
            );
            took
        })
        .collect();
    eprintln!(
        "{IDLE} idle connections: threads {threads_before} -> {threads_idle}, \
         RSS {rss_before} -> {rss_idle} KiB, scrape median {:?} -> {:?}",
        median(quiet.clone()),
        median(loaded.clone())
    );
    assert!(
        threads_idle <= threads_before + 1,
        "threads {threads_before} -> {threads_idle}"
    );
    assert!(
        rss_idle < rss_before + 16 * 1024,
        "RSS {rss_before} -> {rss_idle} KiB"
    );
    assert!(median(loaded) < Duration::from_secs(1));

    // The session ends when it was planned to, whoever is still connected, with its report.
    let status = auditor.wait().unwrap();
    let took = started.elapsed();
    assert!(
        took < planned + Duration::from_secs(3),
        "ended after {took:?}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(
        json_site(&report, "poll.fd_negative")["taken"].as_u64(),
        Some(3 * 2),
        "{status:?}"
    );
    drop((deaf, stalled, idle));
}
