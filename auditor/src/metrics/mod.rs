//! Live counts for Prometheus (`auditor trace --metrics ADDR`): the OpenMetrics text of a
//! session's tally ([`text`]), and the HTTP endpoint that serves it ([`server`]). The maps
//! are read when a scrape comes, by the session's loop, never per event.

pub mod server;

use std::collections::BTreeMap;

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, info::Info},
    registry::Registry,
};

use auditor_common::{Counts, Site};

use crate::tally::Tally;

/// Distinct programs that get a label of their own; the rest are summed under
/// [`OTHER_PROGRAMS`], so that a fleet's series stay bounded.
pub const PROGRAM_LABELS: usize = 64;

/// The `program` label of the programs past [`PROGRAM_LABELS`].
pub const OTHER_PROGRAMS: &str = "(other)";

/// The `program` label of evaluations the probe could not attribute (its per-process table
/// was full).
pub const UNATTRIBUTED: &str = "(unattributed)";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BranchLabels {
    site: &'static str,
    file: &'static str,
    function: &'static str,
    hint: &'static str,
    arm: &'static str,
    program: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    syscall: &'static str,
}

/// What the `auditor_info` series says of the session.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    pub source: &'static str,
    pub kernel_release: String,
}

/// The programs that have a label of their own: the first [`PROGRAM_LABELS`] seen, for the
/// life of the session (a program never moves between its label and the others', so every
/// series stays monotonic).
#[derive(Debug, Default)]
pub struct ProgramLabels {
    named: Vec<String>,
}

impl ProgramLabels {
    fn label(&mut self, program: &str) -> String {
        if self.named.iter().any(|named| named == program) {
            return program.to_string();
        }
        if self.named.len() < PROGRAM_LABELS {
            self.named.push(program.to_string());
            return program.to_string();
        }
        OTHER_PROGRAMS.to_string()
    }
}

/// The OpenMetrics text of `tally`: the branch evaluations per site, arm and program, the
/// calls per syscall, the probe runs missed and the evaluations not attributed, and the
/// session's info.
pub fn text(tally: &Tally, info: &SessionInfo, programs: &mut ProgramLabels) -> String {
    let mut registry = Registry::default();
    let branches = Family::<BranchLabels, Counter>::default();
    registry.register(
        "auditor_branch_evaluations",
        "Evaluations of catalogued kernel branches, by the arm they took (unreadable: not decided)",
        branches.clone(),
    );
    // Per (site, program): processes of one name are summed.
    let mut per_program: BTreeMap<(Site, String), Counts> = BTreeMap::new();
    for (process, site, counts) in tally.per_process() {
        let program = programs.label(&process.comm);
        per_program.entry((site, program)).or_default().add(counts);
    }
    let mut unattributed = 0;
    for (site, counts) in tally.unattributed() {
        unattributed += counts.total();
        per_program
            .entry((site, UNATTRIBUTED.to_string()))
            .or_default()
            .add(counts);
    }
    for ((site, program), counts) in per_program {
        let info = site.info();
        for (arm, count) in [
            ("taken", counts.taken),
            ("not_taken", counts.not_taken),
            ("unreadable", counts.unreadable),
        ] {
            let labels = BranchLabels {
                site: info.id,
                file: info.file,
                function: info.function,
                hint: info.hint.name(),
                arm,
                program: program.clone(),
            };
            branches.get_or_create(&labels).inc_by(count);
        }
    }
    let calls = Family::<CallLabels, Counter>::default();
    registry.register("auditor_calls", "Calls of followed syscalls", calls.clone());
    for (syscall, count) in tally.calls() {
        calls.get_or_create(&CallLabels { syscall }).inc_by(count);
    }
    let missed = Counter::<u64>::default();
    missed.inc_by(tally.missed_probe_runs());
    registry.register(
        "auditor_missed_probe_runs",
        "Runs of the probe's programs the kernel skipped (their calls are not counted)",
        missed,
    );
    let not_attributed = Counter::<u64>::default();
    not_attributed.inc_by(unattributed);
    registry.register(
        "auditor_unattributed",
        "Evaluations counted with no process (the probe's per-process table was full)",
        not_attributed,
    );
    registry.register(
        "auditor",
        "The auditor and what it counts",
        Info::new(vec![
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            (
                "catalogue",
                format!("{:016x}", auditor_common::catalogue::fingerprint()),
            ),
            ("kernel_release", info.kernel_release.clone()),
            ("source", info.source.to_string()),
        ]),
    );
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tally::Process;

    fn process(pid: u32, comm: &str) -> Process {
        Process {
            pid,
            comm: comm.into(),
        }
    }

    fn info() -> SessionInfo {
        SessionInfo {
            source: "ebpf",
            kernel_release: "6.18.0".into(),
        }
    }

    #[test]
    fn families_carry_the_counts_by_site_arm_and_program() {
        let mut tally = Tally::default();
        tally.add(
            process(1, "ssh"),
            Site::PollFdNegative,
            &Counts::new(2, 30, 1),
        );
        tally.add(
            process(2, "ssh"),
            Site::PollFdNegative,
            &Counts::new(1, 10, 0),
        );
        tally.add(process(3, "a\"b"), Site::CloseOk, &Counts::new(5, 0, 0));
        tally.add_unattributed(Site::CloseOk, &Counts::new(0, 4, 0));
        tally.add_calls(auditor_common::Syscall::Poll, 7);
        tally.add_missed_probe_runs(3);
        let text = text(&tally, &info(), &mut ProgramLabels::default());
        let line = |prefix: &str| {
            text.lines()
                .find(|line| line.starts_with(prefix))
                .unwrap_or_else(|| panic!("no `{prefix}` in\n{text}"))
                .to_string()
        };
        // Two processes of one program are summed; the hint and the function are labels.
        assert!(
            line(r#"auditor_branch_evaluations_total{site="poll.fd_negative",file="fs/select.c",function="do_pollfd",hint="unlikely",arm="taken",program="ssh"}"#)
                .ends_with(" 3")
        );
        assert!(line(r#"auditor_branch_evaluations_total{site="poll.fd_negative",file="fs/select.c",function="do_pollfd",hint="unlikely",arm="unreadable",program="ssh"}"#).ends_with(" 1"));
        // A program's name is escaped as a label value.
        assert!(text.contains(r#"program="a\"b""#), "{text}");
        assert!(
            line(r#"auditor_branch_evaluations_total{site="close.ok",file="fs/open.c",function="sys_close",hint="likely",arm="not_taken",program="(unattributed)"}"#)
                .ends_with(" 4")
        );
        assert!(line(r#"auditor_calls_total{syscall="poll"}"#).ends_with(" 7"));
        assert!(line("auditor_missed_probe_runs_total").ends_with(" 3"));
        assert!(line("auditor_unattributed_total").ends_with(" 4"));
        assert!(line("auditor_info{").contains(r#"source="ebpf""#));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn programs_past_the_bound_share_one_label_for_good() {
        let mut labels = ProgramLabels::default();
        for n in 0..PROGRAM_LABELS {
            assert_eq!(labels.label(&format!("p{n}")), format!("p{n}"));
        }
        assert_eq!(labels.label("late"), OTHER_PROGRAMS);
        // Those named keep their label.
        assert_eq!(labels.label("p0"), "p0");
        assert_eq!(labels.label("late"), OTHER_PROGRAMS);
    }
}
