//! `cargo xtask bench ingest`: throughput of `auditor ingest` on a large log built from the
//! real fixtures, side by side with `wc -l` on the same file (medians of alternating runs),
//! and its peak memory on two log sizes (it must not grow with the log).

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, bail};

use super::median;
use crate::{build, workspace_root};

#[derive(clap::Args)]
pub struct Options {
    /// Size of the large log, in MB.
    #[arg(long, default_value_t = 512)]
    megabytes: u64,
    /// Runs of each command (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// A log of at least `megabytes` MB: the fixtures' logs repeated.
fn build_log(path: &Path, megabytes: u64) -> anyhow::Result<u64> {
    let fixtures = workspace_root().join("fixtures");
    let mut text = String::new();
    for entry in std::fs::read_dir(&fixtures)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "log") {
            text.push_str(&std::fs::read_to_string(&path)?);
        }
    }
    if text.is_empty() {
        bail!("no fixture logs in {}", fixtures.display());
    }
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut written = 0;
    while written < megabytes << 20 {
        file.write_all(text.as_bytes())?;
        written += text.len() as u64;
    }
    file.flush()?;
    Ok(written)
}

/// Seconds and peak resident KiB of one run (GNU time's %e and %M).
fn timed(command: &[&str], log: &Path) -> anyhow::Result<(f64, u64)> {
    let started = Instant::now();
    let output = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .args(command)
        .arg(log)
        .output()
        .context("running /usr/bin/time (Debian package time)")?;
    let seconds = started.elapsed().as_secs_f64();
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let peak = stderr
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    Ok((seconds, peak))
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let auditor = build::run()?;
    let auditor = auditor.to_str().context("non-UTF-8 path")?;
    let dir: PathBuf = workspace_root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let small = dir.join("ingest-small.log");
    let large = dir.join("ingest-large.log");
    let small_bytes = build_log(&small, options.megabytes / 8)?;
    let bytes = build_log(&large, options.megabytes)?;
    let ingest = [auditor, "ingest", "--format", "json"];
    let wc = ["wc", "-l"];
    let (mut ours, mut theirs, mut peaks) = (Vec::new(), Vec::new(), Vec::new());
    // Alternate, so that both see the same machine load.
    for _ in 0..options.runs {
        let (seconds, peak) = timed(&ingest, &large)?;
        ours.push(seconds);
        peaks.push(peak);
        theirs.push(timed(&wc, &large)?.0);
    }
    let (_, small_peak) = timed(&ingest, &small)?;
    let mb = bytes as f64 / 1e6;
    let (ours, theirs) = (median(&ours), median(&theirs));
    println!(
        "log: {mb:.0} MB ({} MB for the memory check)",
        small_bytes / 1_000_000
    );
    println!(
        "auditor ingest: {ours:.2} s, {:.0} MB/s (median of {})",
        mb / ours,
        options.runs
    );
    println!("wc -l:          {theirs:.2} s, {:.0} MB/s", mb / theirs);
    println!(
        "ratio: auditor ingest runs at {:.2} of wc -l's throughput (target >= 0.33)",
        theirs / ours
    );
    let peak = peaks.into_iter().max().unwrap_or(0);
    println!(
        "peak memory: {} KiB on {:.0} MB, {} KiB on {:.0} MB",
        peak,
        mb,
        small_peak,
        small_bytes as f64 / 1e6
    );
    Ok(())
}
