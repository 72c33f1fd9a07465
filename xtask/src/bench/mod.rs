//! `cargo xtask bench …`: benchmarks measured side by side with a reference in one run
//! (alternating, medians), never timed tests.

mod ingest;
mod probe;
mod programs;
mod quiet;

#[derive(clap::Subcommand)]
pub enum Bench {
    /// Throughput and memory of `auditor ingest`, against `wc -l`.
    Ingest(ingest::Options),
    /// What tracing costs a traced program, per call, under the probe and its references.
    Probe(probe::Options),
}

#[derive(clap::Args)]
pub struct Options {
    #[command(subcommand)]
    bench: Bench,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    match &options.bench {
        Bench::Ingest(options) => ingest::run(options),
        Bench::Probe(options) => probe::run(options),
    }
}

/// The median of `values` (the upper one of an even count); NaN when empty.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}
