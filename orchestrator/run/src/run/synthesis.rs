//! Synthesis: the aggregation prompt over every agent's report, answered through the
//! same query loop with no tools at all (so nothing can be written).
//!
//! The prompt is, in this order: the original task (the workflow's `description`, else
//! its name), each agent's final report in agent order (with its status and structured
//! output), then the instructions: the default ones below, or `synthesis.prompt`,
//! which replaces them but never the reports.
//!
//! When the reports do not fit the budget (half the synthesis model's context window,
//! by the loop's token estimate) or `synthesis.group_size`, synthesis runs as a tree
//! (see [`tree`]): the reports are split, in agent order, into groups that fit; each
//! group is condensed by its own request; the group answers are grouped again, level
//! after level, until one prompt holds them all. The agents that did not succeed are
//! carried up outside the model's answers, their reasons verbatim, so no level can
//! drop them. This module owns the prompts and the grouping (pure); `tree` drives the
//! requests.

mod tree;

use std::fmt::Write as _;

use orch_workflows::{SynthesisSpec, SynthesisStrategy};

use super::report::{AgentReport, AgentStatus};

pub use tree::{SynthesisEnv, run};

/// The default instructions.
pub const DEFAULT_INSTRUCTIONS: &str = "\
You are the coordinator of the agents above. Each worked on its own part of the task, \
in its own copy of the repository. Write one answer to the original task from their reports:
- combine what they found and did into a single, unified answer instead of repeating each report;
- where reports disagree, work out which is right from the evidence they give, and say so;
- keep the details that matter to the reader: file paths, names, numbers, and any failure or \
unfinished work with its reason;
- stay on the original task and leave out anything that does not serve it.";

/// The instructions of a group's request (a level below the final one).
pub const GROUP_INSTRUCTIONS: &str = "\
The reports above are one slice of a larger batch. Your answer is not the final one: it \
replaces these reports in the input of a later step that combines every slice, and that \
step will see nothing else from them. So condense without losing facts:
- keep every file path, identifier, number, command and result exactly as written;
- keep every failure, error and unfinished piece of work, with its reason and the agent it \
belongs to;
- merge what several reports say alike into one statement, naming the agents it covers;
- leave out greetings, restated instructions and reasoning that led nowhere;
- write plain Markdown, with no preamble and no closing remarks.";

/// The group size of `strategy: tree` without a `group_size`.
pub const DEFAULT_TREE_GROUP_SIZE: usize = 8;

/// How one run synthesizes: the workflow's `synthesis:` settings with the model and
/// concurrency resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub model: String,
    pub strategy: SynthesisStrategy,
    /// Most items one request combines (`None`: as many as fit the budget).
    pub group_size: Option<usize>,
    /// Replaces the model's known context window when set.
    pub context_window: Option<u64>,
    /// Group requests of one level running at once.
    pub concurrency: usize,
    /// `synthesis.prompt`, rendered.
    pub custom: Option<String>,
}

impl Settings {
    pub fn of(spec: &SynthesisSpec, model: String, concurrency: usize) -> Settings {
        let group_size = spec.group_size.map(|n| (n as usize).max(2)).or(match spec.strategy {
            SynthesisStrategy::Tree => Some(DEFAULT_TREE_GROUP_SIZE),
            _ => None,
        });
        Settings {
            model,
            strategy: spec.strategy,
            group_size,
            context_window: spec.context_window.filter(|&w| w > 0),
            concurrency: concurrency.max(1),
            custom: spec.prompt.clone(),
        }
    }

    /// The model's context window (or the configured one).
    pub fn window(&self) -> u64 {
        self.context_window.unwrap_or_else(|| orch_agents::model::limits_for(&self.model).context_window)
    }

    /// Tokens one synthesis request may hold: half the window.
    pub fn budget(&self) -> u64 {
        self.window() / 2
    }
}

/// The token estimate the loop uses: about four bytes of JSON a token, so `text` is
/// counted as the JSON string it is sent as (escapes included).
pub fn tokens(text: &str) -> u64 {
    let json = serde_json::to_string(text).unwrap_or_default();
    orch_agents::context::estimate_text(&json)
}

/// The aggregation prompt (one request with every report).
pub fn prompt(task: &str, agents: &[AgentReport], custom: Option<&str>) -> String {
    let sections: Vec<String> = agents.iter().map(agent_section).collect();
    render(task, REPORTS_HEADING, &sections, custom.unwrap_or(DEFAULT_INSTRUCTIONS))
}

const REPORTS_HEADING: &str = "# The agents' reports\n";

const TREE_HEADING: &str = "# The agents' reports, condensed by group\n\n\
Each section below condenses the reports of a group of agents, in agent order. Under each, \
the agents that did not succeed are listed with their reasons exactly as they were reported.\n";

/// Task, heading, sections, instructions.
fn render(task: &str, heading: &str, sections: &[String], instructions: &str) -> String {
    let mut p = String::new();
    let _ = writeln!(p, "# The original task\n\n{}\n", task.trim());
    let _ = writeln!(p, "{heading}");
    for s in sections {
        p.push_str(s);
    }
    let _ = writeln!(p, "# Instructions\n\n{}", instructions.trim());
    p
}

/// One agent's part of a prompt.
fn agent_section(a: &AgentReport) -> String {
    let mut p = String::new();
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
        return p;
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
    p
}

/// What stands for one or more agents in a request: an agent's report, or a group's
/// answer with the agents under it that did not succeed.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    /// The agent's id, or the group's (`L1-G3`).
    pub label: String,
    /// The agents it stands for, in order.
    pub agents: Vec<String>,
    /// Its section, heading included, without `carried`.
    pub body: String,
    /// One line per agent under it that did not succeed (and per group whose request
    /// failed), the reasons verbatim. Never shortened by a model.
    pub carried: Vec<String>,
}

impl Item {
    pub fn of_agent(a: &AgentReport) -> Item {
        let mut carried = Vec::new();
        if a.status != AgentStatus::Succeeded {
            carried.push(match &a.reason {
                Some(reason) => format!("- `{}` ({}): {}", a.id, a.status.as_str(), reason.trim()),
                None => format!("- `{}` ({})", a.id, a.status.as_str()),
            });
        }
        Item { label: a.id.clone(), agents: vec![a.id.clone()], body: agent_section(a), carried }
    }

    /// A group's answer standing for `members`.
    pub fn of_group(id: &str, members: &[Item], answer: Result<&str, &str>) -> Item {
        let agents: Vec<String> = members.iter().flat_map(|m| m.agents.iter().cloned()).collect();
        let mut carried: Vec<String> = members.iter().flat_map(|m| m.carried.iter().cloned()).collect();
        let span = match (agents.first(), agents.last()) {
            (Some(first), Some(last)) if agents.len() > 1 => format!("agents `{first}` to `{last}`"),
            (Some(only), _) => format!("agent `{only}`"),
            _ => "no agents".to_string(),
        };
        let mut body = format!("## Group `{id}`: {span} ({} agents)\n\n", agents.len());
        match answer {
            Ok(text) if !text.trim().is_empty() => {
                let _ = writeln!(body, "{}\n", text.trim());
            }
            Ok(_) => body.push_str("(the group's synthesis gave no answer)\n\n"),
            Err(reason) => {
                let _ = writeln!(
                    body,
                    "(the synthesis of this group failed, so its reports are not summarized here: {reason})\n"
                );
                carried.push(format!("- group `{id}` (synthesis failed): {reason}"));
            }
        }
        Item { label: id.to_string(), agents, body, carried }
    }

    /// Its whole section: the body, then the carried lines.
    pub fn section(&self) -> String {
        if self.carried.is_empty() {
            return self.body.clone();
        }
        let mut s = self.body.clone();
        s.push_str("Not succeeded in this group (reasons as reported):\n");
        for line in &self.carried {
            s.push_str(line);
            s.push('\n');
        }
        s.push('\n');
        s
    }

    /// Cuts the body (then, if it must, the carried lines) so the section, as the JSON
    /// string it is sent as, fits in `max_bytes`; says what was cut.
    pub fn cap(&mut self, max_bytes: usize) {
        if json_len(&self.section()) <= max_bytes {
            return;
        }
        let (body, carried) = (self.body.clone(), self.carried.clone());
        let mut target = max_bytes;
        for _ in 0..8 {
            self.cut_to(target);
            let len = json_len(&self.section());
            if len <= max_bytes || target == 0 {
                return;
            }
            // Escapes made it longer than its bytes: start again, aiming lower.
            (self.body, self.carried) = (body.clone(), carried.clone());
            target = target.saturating_sub(len - max_bytes + 16);
        }
        self.cut_to(target);
    }

    /// [`Item::cap`] by raw bytes.
    fn cut_to(&mut self, max_bytes: usize) {
        if self.section().len() <= max_bytes {
            return;
        }
        const NOTE_ROOM: usize = 160;
        let carried_len: usize = self.carried.iter().map(|l| l.len() + 1).sum::<usize>() + 64;
        let room = max_bytes.saturating_sub(carried_len + NOTE_ROOM);
        let keep = floor_char_boundary(&self.body, room.max(max_bytes / 4));
        let cut = self.body.len() - keep;
        if cut > 0 {
            self.body.truncate(keep);
            let _ = write!(
                self.body,
                "\n\n[{cut} more bytes cut here to keep the request within the synthesis budget; the full text is in report.json]\n\n"
            );
        }
        // Carried lines go only when they alone are past the budget: then the last ones
        // are counted instead of shown (report.json has every one).
        let mut dropped = 0;
        while self.section().len() > max_bytes && self.carried.len() > 1 {
            self.carried.pop();
            dropped += 1;
        }
        if dropped > 0 {
            self.carried.push(format!("- and {dropped} more (see report.json)"));
        }
    }
}

/// The length of `text` as a JSON string.
fn json_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(text.len(), |j| j.len())
}

fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    let mut at = at;
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The final request over `items`: the classic prompt at the first level, the
/// condensed one above it.
pub(crate) fn final_prompt(task: &str, items: &[Item], condensed: bool, custom: Option<&str>) -> String {
    let sections: Vec<String> = items.iter().map(Item::section).collect();
    let heading = if condensed { TREE_HEADING } else { REPORTS_HEADING };
    render(task, heading, &sections, custom.unwrap_or(DEFAULT_INSTRUCTIONS))
}

/// The request of group `id` (`n` of the level's `of` groups) over `items`.
pub(crate) fn group_prompt(task: &str, id: &str, items: &[Item], custom: Option<&str>) -> String {
    let sections: Vec<String> = items.iter().map(Item::section).collect();
    let agents: usize = items.iter().map(|i| i.agents.len()).sum();
    let heading = format!("# Reports to condense (group `{id}`, {agents} agents)\n");
    render(task, &heading, &sections, &group_instructions(custom))
}

fn group_instructions(custom: Option<&str>) -> String {
    match custom {
        None => GROUP_INSTRUCTIONS.to_string(),
        Some(custom) => format!(
            "{GROUP_INSTRUCTIONS}\n\nThe final answer will be written to these instructions, so keep what they \
             need:\n\n{}",
            custom.trim()
        ),
    }
}

/// Splits `items` into groups, in order: each group's request (its `overhead`
/// tokens plus its sections) stays within `budget`, and holds at most `max` items.
/// Every group holds at least one item; two or more when the items were capped to
/// half the room (see [`Item::cap`]).
pub(crate) fn split(items: Vec<Item>, overhead: u64, budget: u64, max: Option<usize>) -> Vec<Vec<Item>> {
    let max = max.unwrap_or(usize::MAX).max(2);
    let mut groups = Vec::new();
    let mut current: Vec<Item> = Vec::new();
    let mut used = overhead;
    for item in items {
        let t = tokens(&item.section());
        if !current.is_empty() && (used + t > budget || current.len() >= max) {
            groups.push(std::mem::take(&mut current));
            used = overhead;
        }
        used += t;
        current.push(item);
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

#[cfg(test)]
mod tests;
