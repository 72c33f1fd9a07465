//! `cargo xtask record-fixtures` (as root): runs real programs under strace while the probe
//! watches the same process tree, and stores each strace log with the probe's counts as
//! its expected result, so the strace parser is checked against numbers it did not make.

use std::{collections::BTreeSet, path::Path, process::Command};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use crate::{build, exec, workspace_root};

/// strace's `-e trace=` list: the syscalls the strace source decodes (the syscall table's
/// logged ones) and the clones that say which threads belong to which process, as
/// `auditor strace` traces them but for its execs.
pub fn traced() -> String {
    let logged: Vec<&str> = auditor_common::syscalls::LOGGED
        .iter()
        .map(|syscall| syscall.name())
        .collect();
    format!("trace={},clone,clone3", logged.join(","))
}

/// Where the throwaway sshd of the ssh fixture keeps its keys and configuration.
const SSH_DIR: &str = "target/fixture-sshd";
const SSH_PORT: &str = "2222";

/// Name and shell command of each fixture; traffic stays on 127.0.0.1.
const PROGRAMS: [(&str, &str); 3] = [
    (
        "ssh",
        "ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=no \
         -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -i target/fixture-sshd/id \
         -p 2222 root@127.0.0.1 true",
    ),
    (
        "python-asyncio",
        "python3 fixtures/programs/asyncio_echo.py",
    ),
    (
        "http-server-curl",
        "python3 -m http.server 8767 --bind 127.0.0.1 >/dev/null 2>&1 & server=$!; sleep 1; \
         for i in 1 2 3; do curl -s http://127.0.0.1:8767/ >/dev/null; done; kill $server; wait",
    ),
];

/// Pids that have lines in a strace -f -Y log (`PID<comm> ...`).
fn logged_pids(log: &str) -> BTreeSet<u64> {
    log.lines()
        .filter_map(|line| line.split([' ', '<']).next()?.parse().ok())
        .collect()
}

/// The probe's counts over the processes strace logged (its own and its child's calls
/// before exec run under the name `strace`): per site, and per process and site.
fn expected(report: &Value, pids: &BTreeSet<u64>) -> anyhow::Result<(Value, Value)> {
    let mut sites = serde_json::Map::new();
    let mut processes = Vec::new();
    for row in report["processes"]
        .as_array()
        .context("no processes in the report")?
    {
        let pid = row["pid"].as_u64().unwrap_or(0);
        if !pids.contains(&pid) || row["comm"] == "strace" {
            continue;
        }
        processes.push(row.clone());
        let site = row["site"].as_str().context("row without a site")?;
        let entry = sites
            .entry(site.to_string())
            .or_insert_with(|| json!({"taken": 0, "not_taken": 0, "unreadable": 0}));
        for key in ["taken", "not_taken", "unreadable"] {
            let sum = entry[key].as_u64().unwrap_or(0) + row[key].as_u64().unwrap_or(0);
            entry[key] = json!(sum);
        }
    }
    Ok((Value::Object(sites), Value::Array(processes)))
}

/// Starts a throwaway sshd on 127.0.0.1 that takes a throwaway key (installing
/// openssh-server when missing); returns its pid.
fn start_sshd(root: &Path) -> anyhow::Result<String> {
    if !Path::new("/usr/sbin/sshd").exists() {
        exec(Command::new("apt-get").args(["install", "-y", "-qq", "openssh-server"]))?;
    }
    let dir = root.join(SSH_DIR);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    std::fs::create_dir_all("/run/sshd")?;
    for key in ["host", "id"] {
        exec(
            Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(key)),
        )?;
    }
    std::fs::copy(dir.join("id.pub"), dir.join("authorized_keys"))?;
    let config = format!(
        "ListenAddress 127.0.0.1\nPort {SSH_PORT}\nHostKey {dir}/host\nPidFile {dir}/pid\n\
         AuthorizedKeysFile {dir}/authorized_keys\nStrictModes no\nUsePAM no\n\
         PermitRootLogin prohibit-password\nPasswordAuthentication no\n",
        dir = dir.display()
    );
    std::fs::write(dir.join("sshd_config"), config)?;
    exec(
        Command::new("/usr/sbin/sshd")
            .arg("-f")
            .arg(dir.join("sshd_config")),
    )?;
    // sshd writes its pid file once it listens.
    for _ in 0..100 {
        if let Ok(pid) = std::fs::read_to_string(dir.join("pid")) {
            return Ok(pid.trim().to_string());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    bail!("sshd did not start")
}

pub fn run() -> anyhow::Result<()> {
    let auditor = build::run()?;
    let root = workspace_root();
    let sshd = start_sshd(&root)?;
    let recorded = record_all(&auditor, &root);
    let _ = Command::new("kill").arg(&sshd).status();
    recorded
}

fn record_all(auditor: &Path, root: &Path) -> anyhow::Result<()> {
    let dir = root.join("fixtures");
    for (name, program) in PROGRAMS {
        let log = dir.join(format!("{name}.log"));
        let report = tempfile::NamedTempFile::new()?;
        println!("recording {name}: {program}");
        let output = Command::new(auditor)
            .args(["trace", "--format", "json", "--per-process", "-o"])
            .arg(report.path())
            .args(["--", "strace", "-f", "-Y", "-qq", "-v"])
            .args(["-s", "65536", "-e", &traced(), "-o"])
            .arg(&log)
            .args(["sh", "-c", program])
            .env("LANG", "C")
            .current_dir(root)
            .output()
            .context("running auditor trace")?;
        if !output.status.success() {
            bail!(
                "recording {name} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let report: Value = serde_json::from_slice(&std::fs::read(report.path())?)?;
        let text = std::fs::read_to_string(&log)?;
        let (sites, processes) = expected(&report, &logged_pids(&text))?;
        let expected = json!({
            "program": program,
            "recorded_with": "cargo xtask record-fixtures: auditor trace (the probe) around strace -f -Y -qq -v -s 65536",
            // The sites the probe counted: a site added later is not in its counts.
            "catalogue": auditor_common::catalogue::SITES.iter().map(|site| site.id).collect::<Vec<_>>(),
            "sites": sites,
            "processes": processes,
        });
        write_json(&dir.join(format!("{name}.expected.json")), &expected)?;
        println!("  {} lines, {} bytes", text.lines().count(), text.len());
    }
    Ok(())
}

fn write_json(path: &Path, value: &Value) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
