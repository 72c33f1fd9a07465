//! The JSON report's schema, `auditor/report.schema.json`, is generated from the report's
//! types: this test keeps the file current (`AUDITOR_WRITE_SCHEMA=1 cargo test --test
//! schema` writes it) and checks a real report against its top-level shape.

use std::path::Path;

#[test]
fn the_schema_file_is_current_and_describes_real_reports() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("report.schema.json");
    let generated = auditor::report::json_schema();
    if std::env::var_os("AUDITOR_WRITE_SCHEMA").is_some() {
        std::fs::write(&file, &generated).unwrap();
    }
    let kept = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        kept == generated,
        "{} is stale: run `AUDITOR_WRITE_SCHEMA=1 cargo test -p auditor --test schema`",
        file.display()
    );
    let schema: serde_json::Value = serde_json::from_str(&generated).unwrap();
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ssh.log");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_auditor"))
        .args(["ingest", "--format", "json", "--group-by", "program"])
        .arg(log)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let properties = schema["properties"].as_object().unwrap();
    for key in report.as_object().unwrap().keys() {
        assert!(properties.contains_key(key), "`{key}` is not in the schema");
    }
    for key in schema["required"].as_array().unwrap() {
        assert!(report.get(key.as_str().unwrap()).is_some(), "no {key}");
    }
}
