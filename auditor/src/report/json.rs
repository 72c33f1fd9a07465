//! The JSON renderer: the report as it is, versioned (`version`), for merging and scripts.

use std::io::Write;

use super::Report;

pub fn write_json(report: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    writeln!(out)
}

/// The JSON schema of the report, generated from its types (`auditor/report.schema.json`
/// holds it; a test keeps that file current).
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(Report);
    let mut text = serde_json::to_string_pretty(&schema).expect("a schema serializes");
    text.push('\n');
    text
}
