//! Synthesis: the aggregation prompt over every agent's report, answered through the
//! same query loop with no tools at all (so nothing can be written).
//!
//! The prompt is, in this order: the original task (the workflow's `description`, else
//! its name), each agent's final report in agent order (with its status and structured
//! output), then the instructions: the default ones below, or `synthesis.prompt`,
//! which replaces them but never the reports.

use std::fmt::Write as _;

use super::report::{AgentReport, AgentStatus};

/// The default instructions.
pub const DEFAULT_INSTRUCTIONS: &str = "\
You are the coordinator of the agents above. Each worked on its own part of the task, \
in its own copy of the repository. Write one answer to the original task from their reports:
- combine what they found and did into a single, unified answer instead of repeating each report;
- where reports disagree, work out which is right from the evidence they give, and say so;
- keep the details that matter to the reader: file paths, names, numbers, and any failure or \
unfinished work with its reason;
- stay on the original task and leave out anything that does not serve it.";

/// The aggregation prompt.
pub fn prompt(task: &str, agents: &[AgentReport], custom: Option<&str>) -> String {
    let mut p = String::new();
    let _ = writeln!(p, "# The original task\n\n{}\n", task.trim());
    let _ = writeln!(p, "# The agents' reports\n");
    for a in agents {
        let _ = write!(p, "## Agent `{}`", a.id);
        if a.status != AgentStatus::Succeeded {
            let _ = write!(p, " ({}", a.status.as_str());
            if let Some(reason) = &a.reason {
                let _ = write!(p, ": {}", reason.lines().next().unwrap_or_default());
            }
            p.push(')');
        }
        p.push_str("\n\n");
        if let Some(item) = &a.item {
            let _ = writeln!(p, "Item: {}\n", serde_json::to_string(item).unwrap_or_default());
        }
        if a.status == AgentStatus::Skipped {
            p.push_str("This agent did not run.\n\n");
            continue;
        }
        if !a.changed_files.is_empty() {
            let files: Vec<String> = a.changed_files.iter().map(|f| f.path.display().to_string()).collect();
            let _ = writeln!(p, "Files changed: {}\n", files.join(", "));
        }
        match &a.output {
            Some(output) => {
                let _ = writeln!(p, "```json\n{}\n```\n", serde_json::to_string_pretty(output).unwrap_or_default());
            }
            None if a.text.trim().is_empty() => p.push_str("(no final report)\n\n"),
            None => {
                let _ = writeln!(p, "{}\n", a.text.trim());
            }
        }
    }
    let _ = writeln!(p, "# Instructions\n\n{}", custom.unwrap_or(DEFAULT_INSTRUCTIONS).trim());
    p
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn agent(id: &str, status: AgentStatus, text: &str) -> AgentReport {
        let mut a = AgentReport::empty(id, id, None, status, "hit the turn limit".into());
        a.text = text.into();
        if status == AgentStatus::Succeeded {
            a.reason = None;
        }
        a
    }

    #[test]
    fn task_then_reports_in_order_then_instructions() {
        let mut b = agent("b", AgentStatus::Partial, "half done");
        b.output = Some(json!({"ok": false}));
        let agents = [agent("a", AgentStatus::Succeeded, "all good"), b, agent("c", AgentStatus::Skipped, "")];
        let p = prompt("Fix it", &agents, None);
        let order = [
            "# The original task",
            "Fix it",
            "## Agent `a`",
            "all good",
            "## Agent `b` (partial: hit the turn limit)",
            "\"ok\": false",
            "## Agent `c` (skipped",
            "did not run",
            "# Instructions",
            "unified answer",
        ];
        let mut at = 0;
        for needle in order {
            let found = p[at..].find(needle).unwrap_or_else(|| panic!("`{needle}` missing after {at} in:\n{p}"));
            at += found + needle.len();
        }
        assert!(!p.contains("half done"), "the structured output stands for the text");
    }

    #[test]
    fn a_custom_prompt_replaces_only_the_instructions() {
        let p = prompt("Task", &[agent("a", AgentStatus::Succeeded, "report a")], Some("Only list the files."));
        assert!(p.contains("report a"));
        assert!(p.ends_with("Only list the files.\n"));
        assert!(!p.contains("unified answer"));
    }
}
