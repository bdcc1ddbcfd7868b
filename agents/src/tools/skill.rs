//! The `Skill` tool: progressive disclosure of the repository's skills. The system
//! prompt lists only each skill's name and description ([`listing`]); when the model
//! calls `Skill` with a name, the call returns that skill's full text and the directory
//! that holds its other files, which the model then reads with its own tools inside the
//! sandbox.
//!
//! The call runs in the coordinator (a [`LocalTool`]): the skills are read by the
//! coordinator from trusted configuration, not from the agent's worktree, so the text
//! the model gets cannot have been changed by the agent.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::pipeline::{LocalTool, PoolError, ToolPool};
use crate::tool::{ToolCall, ToolOutput};
use crate::tools::{DynTool, Tool, ToolContext, ToolError};

/// The tool's name, as Claude Code calls it.
pub const SKILL_TOOL: &str = "Skill";

/// One skill an agent may load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillEntry {
    /// What the model passes as `skill`.
    pub name: String,
    /// The one line the model reads in the list (description and when to use it).
    pub summary: String,
    /// The full text (the Markdown after the front matter).
    pub body: String,
    /// Where the skill's files are, as the sandbox sees them (readable there).
    pub directory: PathBuf,
    /// `allowed-tools` of the skill, shown with its text.
    pub allowed_tools: Option<Vec<String>>,
}

/// The input of the `Skill` tool, in Claude Code's shape.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SkillInput {
    /// The name of the skill to load, as the list of skills in your instructions gives it
    /// (for example "pdf").
    pub skill: String,
    /// Optional arguments for the skill.
    #[serde(default)]
    pub args: Option<String>,
}

const DESCRIPTION: &str = "Loads one of the skills listed in your instructions: its full \
text, and the directory where the files it mentions (scripts, references, templates) are. \
Call it when a task matches a skill's description, before you start that task, and follow \
what the skill says. Load a skill once; its text stays in the conversation. Only the \
skills in the list exist.";

/// The metadata face of the `Skill` tool for the pipeline; [`SkillTool`] runs it.
#[derive(Debug, Clone, Copy, Default)]
pub struct SkillToolSpec;

#[async_trait]
impl Tool for SkillToolSpec {
    type Input = SkillInput;
    const NAME: &'static str = SKILL_TOOL;

    fn description(&self) -> &'static str {
        DESCRIPTION
    }

    fn is_read_only(&self, _input: &SkillInput) -> bool {
        true
    }

    fn is_concurrency_safe(&self, _input: &SkillInput) -> bool {
        true
    }

    fn is_destructive(&self, _input: &SkillInput) -> bool {
        false
    }

    fn validate(&self, input: &SkillInput) -> Result<(), String> {
        if input.skill.trim().is_empty() {
            return Err("`skill` is empty; give the name of a skill from the list in your instructions".into());
        }
        Ok(())
    }

    /// Permission rules can match `Skill(<name>)`.
    fn permission_subject(&self, input: &SkillInput) -> Option<String> {
        Some(input.skill.trim().trim_start_matches('/').to_string())
    }

    fn max_result_bytes(&self) -> usize {
        200_000
    }

    async fn call(&self, _input: SkillInput, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::new("the Skill tool runs in the coordinator, not in a tool host"))
    }
}

/// The skills of one agent, and the call that loads one.
#[derive(Debug, Clone)]
pub struct SkillTool {
    skills: Arc<Vec<SkillEntry>>,
}

impl SkillTool {
    pub fn new(skills: Vec<SkillEntry>) -> Self {
        Self { skills: Arc::new(skills) }
    }

    /// Adds the `Skill` tool to `pool`. With no skills to offer the tool is left out,
    /// and a call says why.
    pub fn install(self, pool: ToolPool) -> Result<ToolPool, PoolError> {
        if self.skills.is_empty() {
            return Ok(pool.with_withheld(
                SKILL_TOOL,
                "no skills are available to this agent (none in .orch/skills or .claude/skills, or `skills:` \
                 lists none); do the task without one",
            ));
        }
        let spec: Arc<dyn DynTool> = Arc::new(SkillToolSpec);
        pool.with_local(spec, Arc::new(self))
    }

    /// The result of loading `name` with `args`.
    pub fn load(&self, name: &str, args: Option<&str>) -> ToolOutput {
        // Claude Code's model sometimes writes the name as a slash command.
        let name = name.trim().trim_start_matches('/');
        let Some(skill) = self.skills.iter().find(|s| s.name == name) else {
            let known: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
            return ToolOutput::error(format!(
                "there is no skill `{name}`; the skills you can load are: {}",
                known.join(", ")
            ));
        };
        let directory = skill.directory.display();
        let mut text = format!(
            "Skill `{}` loaded. Its files are in {directory}; where the text below names a file by a relative \
             path, it is relative to that directory (read it there, or run its scripts from there).",
            skill.name
        );
        if let Some(tools) = &skill.allowed_tools {
            text.push_str(&format!("\nTools this skill expects to use: {}.", tools.join(", ")));
        }
        if let Some(args) = args.map(str::trim).filter(|a| !a.is_empty()) {
            text.push_str(&format!("\nArguments given: {args}"));
        }
        text.push_str(&format!("\n\n<skill name=\"{}\" directory=\"{directory}\">\n", skill.name));
        text.push_str(skill.body.trim_end());
        text.push_str("\n</skill>");
        ToolOutput::ok(text)
    }
}

#[async_trait]
impl LocalTool for SkillTool {
    async fn call(
        &self,
        _pool: &ToolPool,
        _ordinal: u64,
        _call: &ToolCall,
        input: Value,
        _cancel: CancellationToken,
    ) -> ToolOutput {
        match serde_json::from_value::<SkillInput>(input) {
            Ok(input) => self.load(&input.skill, input.args.as_deref()),
            Err(e) => ToolOutput::error(format!("invalid input for Skill: {e}")),
        }
    }
}

/// The section of the system prompt's dynamic part that lists `skills` (names and
/// summaries only); `None` when there are none.
pub fn listing(skills: &[SkillEntry]) -> Option<String> {
    if skills.is_empty() {
        return None;
    }
    let mut out = String::from(
        "Skills: instructions for particular kinds of task, kept in the repository. Only their names and \
         descriptions are shown here. When a task matches one, load its full text with the Skill tool \
         (`{\"skill\": \"<name>\"}`) before you start, and follow it.",
    );
    for skill in skills {
        out.push_str(&format!("\n- {}", one_line(&skill.summary)));
    }
    Some(out)
}

/// `text` on one line (a listing entry must not start a new one).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> SkillEntry {
        SkillEntry {
            name: name.into(),
            summary: format!("{name}: does {name}\nthings"),
            body: format!("# {name}\n\nRun scripts/{name}.py"),
            directory: PathBuf::from(format!("/run/skills/{name}")),
            allowed_tools: Some(vec!["Read".into()]),
        }
    }

    #[test]
    fn loads_a_skill_by_name_and_refuses_others() {
        let tool = SkillTool::new(vec![entry("pdf"), entry("lint")]);
        let out = tool.load("/pdf", Some("form.pdf"));
        assert!(!out.is_error, "{}", out.content);
        assert!(out.content.contains("/run/skills/pdf"), "{}", out.content);
        assert!(out.content.contains("# pdf\n\nRun scripts/pdf.py\n</skill>"), "{}", out.content);
        assert!(out.content.contains("Arguments given: form.pdf"), "{}", out.content);
        let missing = tool.load("docx", None);
        assert!(missing.is_error && missing.content.contains("pdf, lint"), "{}", missing.content);
    }

    #[test]
    fn listing_has_names_and_summaries_only() {
        assert_eq!(listing(&[]), None);
        let text = listing(&[entry("pdf")]).unwrap();
        assert!(text.contains("\n- pdf: does pdf things"), "{text}");
        assert!(!text.contains("scripts/pdf.py"), "{text}");
    }

    #[test]
    fn the_schema_is_claude_codes() {
        let schema = DynTool::input_schema(&SkillToolSpec);
        assert_eq!(schema["required"], serde_json::json!(["skill"]));
        assert!(schema["properties"]["args"].is_object(), "{schema}");
        assert!(DynTool::validate(&SkillToolSpec, &serde_json::json!({"skill": " "})).is_err());
        assert!(DynTool::is_read_only(&SkillToolSpec, &serde_json::json!({"skill": "pdf"})));
    }
}
