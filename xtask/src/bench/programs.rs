//! Where the probe's time goes: each program's runs and mean run time per workload, from
//! the kernel's BPF run statistics (`auditor trace --program-runs`), for the auditor and
//! for the floor's empty programs. Passes of their own, after the timed repetitions: the
//! statistics cost every program two clock reads per run, so they never run beside the
//! figures they explain.

use std::{collections::BTreeMap, path::Path, process::Command};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

/// One program's share of a workload's calls.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgramTime {
    pub program: String,
    /// Runs per call of the workload (an openat + close pair runs four programs once).
    pub runs_per_call: f64,
    pub ns_per_run: f64,
}

/// A program's line of `--program-runs`.
struct ProgramRuns {
    program: String,
    runs: u64,
    run_time_ns: u64,
}

/// Below this many runs per call a program is not the workload's (a startup's calls).
const NEGLIGIBLE_RUNS_PER_CALL: f64 = 0.01;

/// Runs `bench` (a `probe-bench run` of one workload) under `auditor trace` with `flags`
/// and the run statistics on: the workload's programs, busiest first.
pub fn pass(
    auditor: &Path,
    flags: &[&str],
    bench: &[String],
    dir: &Path,
) -> anyhow::Result<Vec<ProgramTime>> {
    let runs_file = dir.join("program-runs.json");
    let output = Command::new(auditor)
        .arg("trace")
        .args(flags)
        .arg("--program-runs")
        .arg(&runs_file)
        .args(["-o", "/dev/null", "--"])
        .args(bench)
        .output()
        .with_context(|| format!("running {}", auditor.display()))?;
    if !output.status.success() {
        bail!(
            "{} trace --program-runs failed ({}): {}",
            auditor.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let calls = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|line| line["calls"].as_u64())
        .context("the bench printed no count of calls")?;
    let text = std::fs::read_to_string(&runs_file)
        .with_context(|| format!("reading {}", runs_file.display()))?;
    let parsed: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", runs_file.display()))?;
    let runs = parsed
        .as_array()
        .into_iter()
        .flatten()
        .map(|line| {
            Some(ProgramRuns {
                program: line["program"].as_str()?.to_string(),
                runs: line["runs"].as_u64()?,
                run_time_ns: line["run_time_ns"].as_u64()?,
            })
        })
        .collect::<Option<Vec<_>>>()
        .with_context(|| format!("{}: not a list of program runs", runs_file.display()))?;
    Ok(per_call(runs, calls))
}

fn per_call(runs: Vec<ProgramRuns>, calls: u64) -> Vec<ProgramTime> {
    let mut times: Vec<ProgramTime> = runs
        .into_iter()
        .filter(|r| r.runs > 0 && r.runs as f64 / calls as f64 >= NEGLIGIBLE_RUNS_PER_CALL)
        .map(|r| ProgramTime {
            program: r.program,
            runs_per_call: r.runs as f64 / calls as f64,
            ns_per_run: r.run_time_ns as f64 / r.runs as f64,
        })
        .collect();
    times.sort_by(|a, b| {
        (b.runs_per_call * b.ns_per_run).total_cmp(&(a.runs_per_call * a.ns_per_run))
    });
    times
}

/// The programs' time per call of the workload.
pub fn ns_per_call(times: &[ProgramTime]) -> f64 {
    times.iter().map(|t| t.runs_per_call * t.ns_per_run).sum()
}

/// The table of one workload: each program of either configuration, its runs per call
/// and mean ns per run with the auditor's programs and with the floor's.
pub fn table(auditor: &[ProgramTime], floor: &[ProgramTime]) -> String {
    let floor_of: BTreeMap<&str, &ProgramTime> =
        floor.iter().map(|t| (t.program.as_str(), t)).collect();
    let mut out = format!(
        "  {:<24} {:>9} {:>11} {:>9}\n",
        "program (run statistics)", "runs/call", "auditor ns", "floor ns"
    );
    for time in auditor {
        let floor_ns = floor_of
            .get(time.program.as_str())
            .map_or("-".to_string(), |f| format!("{:.1}", f.ns_per_run));
        out.push_str(&format!(
            "  {:<24} {:>9.2} {:>11.1} {:>9}\n",
            time.program, time.runs_per_call, time.ns_per_run, floor_ns
        ));
    }
    out.push_str(&format!(
        "  {:<24} {:>9} {:>11.1} {:>9.1}\n",
        "in all, per call",
        "",
        ns_per_call(auditor),
        ns_per_call(floor)
    ));
    out
}

pub fn to_json(times: &[ProgramTime]) -> Value {
    Value::Array(
        times
            .iter()
            .map(|t| {
                json!({"program": t.program, "runs_per_call": t.runs_per_call,
                    "ns_per_run": t.ns_per_run})
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(program: &str, runs: u64, run_time_ns: u64) -> ProgramRuns {
        ProgramRuns {
            program: program.into(),
            runs,
            run_time_ns,
        }
    }

    #[test]
    fn programs_are_per_call_busiest_first_and_a_startups_are_left_out() {
        let times = per_call(
            vec![
                runs("poll_enter", 1000, 50_000),
                runs("poll_exit", 1000, 120_000),
                runs("openat_enter", 5, 5_000),
                runs("close_exit", 0, 0),
            ],
            1000,
        );
        assert_eq!(
            times,
            vec![
                ProgramTime {
                    program: "poll_exit".into(),
                    runs_per_call: 1.0,
                    ns_per_run: 120.0
                },
                ProgramTime {
                    program: "poll_enter".into(),
                    runs_per_call: 1.0,
                    ns_per_run: 50.0
                },
            ]
        );
        assert_eq!(ns_per_call(&times), 170.0);
    }

    #[test]
    fn the_table_sets_each_program_beside_its_floor() {
        let auditor = per_call(vec![runs("poll_exit", 10, 1200), runs("x", 10, 100)], 10);
        let floor = per_call(vec![runs("poll_exit", 10, 110)], 10);
        let table = table(&auditor, &floor);
        assert!(table.contains("poll_exit") && table.contains("120.0") && table.contains("11.0"));
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("  x ") && l.ends_with(" -"))
        );
        assert!(table.contains("in all, per call") && table.contains("130.0"));
    }
}
