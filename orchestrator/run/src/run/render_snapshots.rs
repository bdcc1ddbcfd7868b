//! Snapshots of what is rendered from one fixed report (`testdata/report.json`, a real
//! run of `examples/review` with paths, times and one failed and one skipped agent
//! fixed by hand): `report.md`, the GitHub step summary and the JUnit XML.
#![allow(clippy::unwrap_used)]

use super::report::{RunReport, markdown};

fn fixed() -> RunReport {
    serde_json::from_str(include_str!("testdata/report.json")).unwrap()
}

#[test]
fn report_md() {
    insta::assert_snapshot!("report_md", markdown(&fixed()));
}

#[test]
fn step_summary() {
    insta::assert_snapshot!("step_summary", super::github::summary(&fixed(), Some("https://github.com/o/r")));
}

#[test]
fn junit_xml() {
    let xml = super::junit::render(&fixed());
    assert!(xml.contains("<failure ") && xml.contains("<skipped "), "{xml}");
    insta::assert_snapshot!("junit_xml", xml);
}
