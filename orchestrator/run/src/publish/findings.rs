//! The findings a run publishes: by default every `findings` array in the agents'
//! structured outputs, or what `publish.review.findings` evaluates to. Items that are not
//! findings are counted and left out, never posted half-read.

use orch_workflows::publish::{Finding, eval_findings};
use serde_json::Value;

/// The findings, and how many items were left out because they were not findings.
#[derive(Debug, Default, Clone)]
pub struct Findings {
    pub items: Vec<Finding>,
    pub rejected: usize,
}

impl Findings {
    /// Every agent output's `findings` array, in the agents' order.
    pub fn from_outputs<'a>(outputs: impl IntoIterator<Item = &'a Value>) -> Findings {
        let mut out = Findings::default();
        for output in outputs {
            if let Some(items) = output.get("findings").and_then(Value::as_array) {
                out.extend(items);
            }
        }
        out
    }

    /// What the `findings` template gives (a list, lists inside it flattened once).
    pub fn from_template(template: &str, context: &Value) -> Result<Findings, String> {
        let value = eval_findings(template, context)?;
        let Value::Array(items) = value else {
            return Err(format!("`publish.review.findings` gave {value}, not a list of findings"));
        };
        let mut out = Findings::default();
        for item in &items {
            match item {
                Value::Array(inner) => out.extend(inner),
                other => out.extend(std::slice::from_ref(other)),
            }
        }
        Ok(out)
    }

    fn extend(&mut self, items: &[Value]) {
        for item in items {
            match serde_json::from_value::<Finding>(item.clone()) {
                Ok(f) if f.line >= 1 && !f.path.is_empty() && f.end_line.is_none_or(|e| e >= f.line) => {
                    self.items.push(normalise(f))
                }
                _ => self.rejected += 1,
            }
        }
    }
}

/// Paths as GitHub wants them: relative, `/`-separated, no leading `./`.
fn normalise(mut f: Finding) -> Finding {
    f.path = f.path.replace('\\', "/").trim_start_matches("./").trim_start_matches('/').to_string();
    f
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_every_output_and_counts_bad_items() {
        let a = json!({"findings": [{"path": "./src/a.rs", "line": 2, "severity": "error", "message": "m"}, {"path": "x"}]});
        let b = json!({"other": 1});
        let found = Findings::from_outputs([&a, &b]);
        assert_eq!(found.items.len(), 1);
        assert_eq!(found.items[0].path, "src/a.rs");
        assert_eq!(found.rejected, 1);
    }
}
