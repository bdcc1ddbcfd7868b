//! The plain-text view of a [`Plan`] for `orch plan` and `orch validate`: stages in order,
//! each agent with its model, tools, sandbox, limits, permissions, needs and prompt, a
//! dynamic fan-out as a placeholder that names its source.

use std::fmt::Write as _;

use crate::plan::{AgentSpec, DynamicFanOut, Plan, PlanNode, Prompt};
use crate::schema::{Backend, Limits, SynthesisStrategy};

/// Renders `plan` as text, ending with a newline.
pub fn render_text(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "workflow: {} ({})", plan.name, plan.file);
    if let Some(description) = &plan.description {
        field(&mut out, 0, "description", &indent_rest(description.trim_end(), 13));
    }
    field(&mut out, 0, "model", plan.model.as_deref().unwrap_or("(orch's default)"));
    field(&mut out, 0, "concurrency", &plan.concurrency.map_or("(orch's default)".to_string(), |c| c.to_string()));
    field(&mut out, 0, "run limits", &limits(&plan.limits));
    field(&mut out, 0, "integrate", &serde_plain(&plan.integrate));
    field(&mut out, 0, "fail_fast", &plan.fail_fast.to_string());
    if !plan.inputs.is_empty() {
        let _ = writeln!(out, "inputs:");
        for input in &plan.inputs {
            let origin = if input.default { " (default)" } else { "" };
            let _ = writeln!(out, "  {} = {}{origin}", input.name, input.value);
        }
    }
    if let Some(pr) = &plan.builtins.pr {
        pull_request(&mut out, pr);
    }
    if !plan.setup.is_empty() {
        let network = match &plan.setup_network {
            orch_types::NetworkSetting::Full => "network allowed".to_string(),
            other => format!("network {}", other.describe()),
        };
        let _ = writeln!(out, "setup (once, before the agents, {network}):");
        for command in &plan.setup {
            let _ = writeln!(out, "  $ {}", indent_rest(command.trim_end(), 4));
        }
    }
    for stage in &plan.stages {
        let _ = writeln!(out);
        let _ = writeln!(out, "stage {}", stage.stage);
        for node in &stage.agents {
            match node {
                PlanNode::Agent(spec) => agent(&mut out, spec),
                PlanNode::DynamicFanOut(fan_out) => dynamic(&mut out, fan_out),
            }
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "synthesis");
    field(&mut out, 2, "model", plan.synthesis.model.as_deref().unwrap_or("(orch's default)"));
    let strategy = match (plan.synthesis.strategy, plan.synthesis.group_size) {
        (SynthesisStrategy::Single, _) => "single (one prompt with every report)".to_string(),
        (s, Some(n)) => format!("{} (groups of at most {n}, each within half the context window)", s.as_str()),
        (SynthesisStrategy::Tree, None) => "tree (groups of at most 8, each within half the context window)".into(),
        (SynthesisStrategy::Auto, None) => {
            "auto (one prompt; groups in a tree when the reports pass half the context window)".into()
        }
    };
    field(&mut out, 2, "strategy", &strategy);
    match &plan.synthesis.prompt {
        None => field(&mut out, 2, "prompt", "(the default aggregation prompt)"),
        Some(prompt) => {
            let _ = writeln!(out, "  prompt (instructions; the agents' reports come first):");
            block(&mut out, 4, prompt);
        }
    }
    out
}

/// The built-in `pr`: which commits, and the files templates see.
fn pull_request(out: &mut String, pr: &serde_json::Value) {
    let number = pr["number"].as_u64().map(|n| format!(" #{n}")).unwrap_or_default();
    let _ = writeln!(out, "pr{number} (the changes templates read as `pr`):");
    for key in ["base", "head", "merge_base"] {
        field(out, 2, key, pr[key].as_str().unwrap_or_default());
    }
    for key in ["changed_files", "deleted_files"] {
        let files: Vec<&str> = pr[key].as_array().into_iter().flatten().filter_map(|f| f.as_str()).collect();
        let shown = if files.is_empty() { "(none)".to_string() } else { files.join(", ") };
        let _ = writeln!(out, "  {key} ({}): {shown}", files.len());
    }
}

fn agent(out: &mut String, spec: &AgentSpec) {
    match &spec.fan_out {
        None => {
            let _ = writeln!(out, "  agent {}", spec.id);
        }
        Some(fan_out) => {
            let item = serde_json::to_string(&fan_out.item).unwrap_or_default();
            let _ = writeln!(
                out,
                "  agent {}  (item {} of {}: {} = {item})",
                spec.id, fan_out.index, spec.agent, fan_out.as_name
            );
        }
    }
    settings(out, spec);
    match &spec.prompt {
        None => field(out, 4, "prompt", "(from the agent definition)"),
        Some(Prompt::Rendered { text }) => {
            let _ = writeln!(out, "    prompt:");
            block(out, 6, text);
        }
        Some(Prompt::Deferred { template, reads }) => {
            let _ = writeln!(out, "    prompt (template, rendered when {} {} done):", list(reads), verb(reads.len()));
            block(out, 6, template);
        }
    }
}

fn dynamic(out: &mut String, node: &DynamicFanOut) {
    let _ = writeln!(
        out,
        "  agent {}  <placeholder: one agent per item of {}, as `{}`>",
        node.id, node.source, node.as_name
    );
    settings(out, &node.template);
    match &node.template.prompt {
        None => field(out, 4, "prompt", "(from the agent definition)"),
        Some(prompt) => {
            let _ = writeln!(out, "    prompt (template, per item):");
            block(out, 6, prompt.text());
        }
    }
}

fn settings(out: &mut String, spec: &AgentSpec) {
    if !spec.needs.is_empty() {
        field(out, 4, "needs", &spec.needs.join(", "));
    }
    if let Some(uses) = &spec.uses {
        match &spec.uses_source {
            Some(source) => field(out, 4, "uses", &format!("{uses} (from {source})")),
            None => field(out, 4, "uses", uses),
        }
    }
    if let Some(command) = &spec.command_source {
        field(out, 4, "command", command);
    }
    field(out, 4, "model", spec.model.as_deref().unwrap_or("(orch's default)"));
    field(out, 4, "tools", &if spec.tools.is_empty() { "(none)".to_string() } else { spec.tools.join(", ") });
    if let Some(skills) = &spec.skills {
        field(out, 4, "skills", &if skills.is_empty() { "(none)".to_string() } else { skills.join(", ") });
    }
    let sandbox = &spec.sandbox;
    let mut text = format!(
        "{}, network {}",
        match sandbox.backend {
            Backend::Landlock => "landlock",
            Backend::Container => "container",
            Backend::None => "none (UNCONFINED)",
        },
        sandbox.network.describe()
    );
    if let Some(image) = &sandbox.image {
        let _ = write!(text, ", image {image}");
    }
    if !sandbox.read.is_empty() {
        let _ = write!(text, ", read {}", sandbox.read.join(" "));
    }
    if !sandbox.write.is_empty() {
        let _ = write!(text, ", write {}", sandbox.write.join(" "));
    }
    field(out, 4, "sandbox", &text);
    field(out, 4, "limits", &limits(&spec.limits));
    let permissions = &spec.permissions;
    let mut text = format!("mode {}", permissions.mode.map_or("orch-default", |m| m.as_str()));
    for (name, rules) in [("allow", &permissions.allow), ("deny", &permissions.deny), ("ask", &permissions.ask)] {
        if !rules.is_empty() {
            let _ = write!(text, "; {name} {}", rules.join(", "));
        }
    }
    field(out, 4, "permissions", &text);
    if let Some(schema) = &spec.output_schema {
        field(out, 4, "output", &format!("JSON matching {}", serde_json::to_string(schema).unwrap_or_default()));
    }
    if spec.continue_on_failure {
        field(out, 4, "on failure", "continue (the run goes on and dependents still start)");
    }
    if spec.base == crate::schema::Base::Needs {
        field(out, 4, "base", "a merge of the branches of what it needs, in order");
    }
    if spec.expect.changes == Some(true) {
        field(out, 4, "expect", "changed files (none: failed, \"no changes\")");
    }
}

fn field(out: &mut String, indent: usize, name: &str, value: &str) {
    let label = format!("{name}:");
    let _ = writeln!(out, "{}{label:<13}{value}", " ".repeat(indent));
}

/// Multi-line text, every line indented; blank lines stay blank.
fn block(out: &mut String, indent: usize, text: &str) {
    let pad = " ".repeat(indent);
    for line in text.trim_end_matches('\n').split('\n') {
        if line.trim().is_empty() {
            let _ = writeln!(out);
        } else {
            let _ = writeln!(out, "{pad}{line}");
        }
    }
}

fn indent_rest(text: &str, indent: usize) -> String {
    text.replace('\n', &format!("\n{}", " ".repeat(indent)))
}

fn limits(limits: &Limits) -> String {
    let mut parts = Vec::new();
    if let Some(n) = limits.max_turns {
        parts.push(format!("max_turns {n}"));
    }
    if let Some(n) = limits.max_tokens {
        parts.push(format!("max_tokens {n}"));
    }
    if let Some(n) = limits.max_cost_usd {
        parts.push(format!("max_cost_usd {n}"));
    }
    if let Some(t) = limits.timeout {
        parts.push(format!("timeout {t}"));
    }
    if let Some(s) = limits.max_disk {
        parts.push(format!("max_disk {s}"));
    }
    if let Some(s) = limits.max_file_size {
        parts.push(format!("max_file_size {s}"));
    }
    if parts.is_empty() { "(none)".to_string() } else { parts.join(", ") }
}

fn list(ids: &[String]) -> String {
    if ids.is_empty() {
        return "the item".to_string();
    }
    ids.join(", ")
}

fn verb(n: usize) -> &'static str {
    if n == 1 { "is" } else { "are" }
}

fn serde_plain<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}
