//! `--junit FILE`: the run as JUnit XML for CI test reporters: one `testsuite` (the
//! workflow), one `testcase` per agent (and one for synthesis). Failed agents carry a
//! `<failure>`, partial ones a `<failure type="partial">`, skipped and cancelled ones a
//! `<skipped>`; the final answer goes to `<system-out>`. The attributes follow
//! junit-10.xsd: `<testsuites>` has `errors` but no `skipped`; both levels have
//! `errors="0"`, since an agent's failure is a `<failure>`.
//!
//! Hand-written rather than `quick-junit`: its 0.8.0 (the newest) always writes
//! `skipped` on `<testsuites>`, which junit-10.xsd refuses.

use std::fmt::Write as _;

use super::report::{AgentStatus, RunReport};

/// The XML document.
pub fn render(r: &RunReport) -> String {
    let failures = r.agents.iter().filter(|a| matches!(a.status, AgentStatus::Failed | AgentStatus::Partial)).count();
    let skipped = r.agents.iter().filter(|a| matches!(a.status, AgentStatus::Skipped | AgentStatus::Cancelled)).count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"orch\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" time=\"{:.3}\">",
        r.agents.len(),
        r.duration_ms as f64 / 1000.0
    );
    let _ = writeln!(
        x,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" errors=\"0\" \
         time=\"{:.3}\" \
         timestamp=\"{}\">",
        esc(&r.workflow.name),
        r.agents.len(),
        r.duration_ms as f64 / 1000.0,
        esc(&r.started_at)
    );
    for a in &r.agents {
        let _ = write!(
            x,
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\">",
            esc(&r.workflow.name),
            esc(&a.id),
            a.duration_ms as f64 / 1000.0
        );
        let reason = esc(a.reason.as_deref().unwrap_or(a.status.as_str()));
        match a.status {
            AgentStatus::Succeeded => {}
            AgentStatus::Failed => {
                let _ = write!(x, "\n      <failure message=\"{reason}\" type=\"failed\">{reason}</failure>");
            }
            AgentStatus::Partial => {
                let _ = write!(x, "\n      <failure message=\"{reason}\" type=\"partial\">{reason}</failure>");
            }
            AgentStatus::Skipped | AgentStatus::Cancelled | AgentStatus::Running | AgentStatus::Pending => {
                let _ = write!(x, "\n      <skipped message=\"{reason}\"/>");
            }
        }
        if !a.text.trim().is_empty() {
            let _ = write!(x, "\n      <system-out>{}</system-out>", esc(a.text.trim()));
        }
        x.push_str(if a.status == AgentStatus::Succeeded && a.text.trim().is_empty() { "" } else { "\n    " });
        x.push_str("</testcase>\n");
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

/// XML text and attribute escaping; characters XML 1.0 cannot hold are dropped.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes() {
        assert_eq!(super::esc("a<b & \"c\"\u{1}\n"), "a&lt;b &amp; &quot;c&quot;&#10;");
        assert_eq!(super::esc("x\u{FFFE}\u{FFFF}y'"), "xy&apos;");
    }
}
