//! The JSON renderer: the report as it is, versioned (`version`), for merging and scripts.

use std::io::Write;

use super::Report;

pub fn write_json(report: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    writeln!(out)
}
