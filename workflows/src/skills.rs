//! Skills in Claude Code's format: `<root>/<name>/SKILL.md`, where the root is
//! `.orch/skills` or `.claude/skills`. The front matter gives the `description` (and
//! optionally `allowed-tools`, `model`, `when_to_use`, `disable-model-invocation`); the
//! body is the skill's full text, loaded only when the model asks for it, and the files
//! beside `SKILL.md` are there for the model to read.
//!
//! Pure parsing: callers pass (path, contents) pairs, the way agent files are read from
//! git blobs. The front matter is read with Claude Code's leniency
//! ([`crate::frontmatter`]); as in Claude Code a skill whose front matter does not parse
//! still loads, under its directory's name, with the body's first line as description.

use serde::Serialize;
use serde_json::Value;

use crate::diagnostic::Diagnostic;
use crate::frontmatter;
use crate::plan::{Plan, PlanNode};
use crate::schema::Workflow;
use crate::yaml::Seg;

/// Where a repository keeps skills, searched in this order: on a name clash the first
/// one wins.
pub const SKILL_DIRS: [&str; 2] = [".orch/skills", ".claude/skills"];

/// The longest description taken from the body when the front matter gives none.
const BODY_DESCRIPTION_CHARS: usize = 100;

/// One skill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skill {
    /// The directory's name: what the `Skill` tool is called with.
    pub name: String,
    /// What the model reads in the list of skills.
    pub description: String,
    /// `when_to_use`, added to the description in the list when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when_to_use: Option<String>,
    /// `allowed-tools`: tools the skill may use without asking; `None` when not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `false` with `disable-model-invocation: true`: the skill is not offered to the model.
    pub model_invocable: bool,
    /// The Markdown after the front matter: the skill's full text.
    pub body: String,
    /// The skill's directory in the repository (`.claude/skills/pdf`).
    pub directory: String,
    /// The `SKILL.md` file.
    pub source: String,
}

impl Skill {
    /// The line the model sees for this skill in the list of skills.
    pub fn listing(&self) -> String {
        match &self.when_to_use {
            Some(when) => format!("{}: {} {}", self.name, self.description, when),
            None => format!("{}: {}", self.name, self.description),
        }
    }
}

/// A file that is not a skill.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct SkillError {
    pub file: String,
    pub message: String,
}

/// The skill directory and name of `path` (`<root>/<name>/SKILL.md`).
fn place(path: &str) -> Option<(&str, &str)> {
    let directory = path.strip_suffix("/SKILL.md")?;
    let name = directory.rsplit('/').next()?;
    Some((directory, name))
}

/// The first non-empty line of `body`, without heading marks, cut to a short length.
fn description_from_body(body: &str) -> Option<String> {
    let line = body.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line.trim_start_matches('#').trim();
    if line.is_empty() {
        return None;
    }
    if line.chars().count() > BODY_DESCRIPTION_CHARS {
        let cut: String = line.chars().take(BODY_DESCRIPTION_CHARS - 3).collect();
        return Some(format!("{cut}..."));
    }
    Some(line.to_string())
}

fn truthy(value: Option<&Value>) -> bool {
    match value {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.trim().eq_ignore_ascii_case("true"),
        _ => false,
    }
}

/// Parses the `SKILL.md` at `path` (`<root>/<name>/SKILL.md`) from its contents. The
/// warnings say what was ignored.
pub fn parse_skill(text: &str, path: &str) -> Result<(Skill, Vec<String>), SkillError> {
    let bad = |message: &str| SkillError { file: path.to_string(), message: message.to_string() };
    let (directory, name) =
        place(path).ok_or_else(|| bad("a skill is a `SKILL.md` file in a directory named after the skill"))?;
    if name.is_empty() || name.starts_with('.') || name.chars().any(char::is_control) {
        return Err(bad("the skill directory's name cannot be used as a skill name; rename the directory"));
    }
    let front = frontmatter::parse(text);
    let mut warnings = Vec::new();
    if let Some(problem) = &front.problem {
        warnings.push(format!("{path}: {problem}; the skill loads without its front matter settings"));
    }
    let fields = &front.fields;
    if let Some(given) = frontmatter::text(fields, "name")
        && given != name
    {
        warnings.push(format!("{path}: `name: {given}` differs from the directory name; the skill is called `{name}`"));
    }
    let body = front.body.trim().to_string();
    let description = match frontmatter::text(fields, "description").map(str::trim).filter(|d| !d.is_empty()) {
        Some(d) => d.replace("\\n", "\n"),
        None => match description_from_body(&body) {
            Some(d) => {
                warnings.push(format!("{path}: no `description`; the body's first line stands in for it"));
                d
            }
            None => return Err(bad("the skill has neither a `description` nor any text; write what it is for")),
        },
    };
    let allowed_tools = frontmatter::name_list(fields, "allowed-tools");
    let model = frontmatter::text(fields, "model")
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .and_then(crate::subagents::model_id);
    let skill = Skill {
        name: name.to_string(),
        description,
        when_to_use: frontmatter::text(fields, "when_to_use").map(|w| w.trim().to_string()).filter(|w| !w.is_empty()),
        allowed_tools,
        model,
        model_invocable: !truthy(fields.get("disable-model-invocation")),
        body,
        directory: directory.to_string(),
        source: path.to_string(),
    };
    Ok((skill, warnings))
}

/// The skills of a repository.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Skills {
    pub skills: Vec<Skill>,
    /// What was ignored, one line each.
    pub warnings: Vec<String>,
}

impl Skills {
    /// Reads `files` (path and contents): the `SKILL.md` directly inside a directory of
    /// [`SKILL_DIRS`]; other files are ignored, as they are the skills' own files. On a
    /// name clash `.orch/skills` wins over `.claude/skills`, then the first by order.
    pub fn from_files(files: &[(String, String)]) -> Skills {
        let mut out = Skills::default();
        let mut found: Vec<(usize, Skill)> = Vec::new();
        for (path, text) in files {
            let Some(rank) = SKILL_DIRS.iter().position(|root| {
                path.strip_prefix(root)
                    .and_then(|rest| rest.strip_prefix('/'))
                    .is_some_and(|rest| rest.split('/').count() == 2 && rest.ends_with("/SKILL.md"))
            }) else {
                continue;
            };
            match parse_skill(text, path) {
                Ok((skill, warnings)) => {
                    out.warnings.extend(warnings);
                    found.push((rank, skill));
                }
                Err(e) => out.warnings.push(format!("{e}; the skill is ignored")),
            }
        }
        found.sort_by_key(|(rank, _)| *rank);
        for (_, skill) in found {
            if let Some(used) = out.skills.iter().find(|s| s.name == skill.name) {
                out.warnings.push(format!(
                    "{}: the skill `{}` is also defined in {}, which is used; this one is ignored",
                    skill.source, skill.name, used.source
                ));
            } else {
                out.skills.push(skill);
            }
        }
        out
    }

    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// Replaces every planned agent's `skills` with the names it is offered here (for
    /// `orch plan`: `None`, all skills, becomes the list; an agent without the `Skill`
    /// tool gets none).
    pub fn apply_to_plan(&self, plan: &mut Plan) {
        for node in plan.stages.iter_mut().flat_map(|s| s.agents.iter_mut()) {
            let spec = match node {
                PlanNode::Agent(spec) => spec,
                PlanNode::DynamicFanOut(d) => &mut d.template,
            };
            // Without the `Skill` tool an agent is offered none.
            let names = if spec.tools.iter().any(|t| t == "Skill") {
                self.visible(spec.skills.as_deref()).map(|s| s.name.clone()).collect()
            } else {
                Vec::new()
            };
            spec.skills = Some(names);
        }
    }

    /// A diagnostic, at its position, for every name in `defaults.skills` and
    /// `agents.<id>.skills` that is not a skill of the repository.
    pub fn check_workflow(&self, workflow: &Workflow) -> Vec<Diagnostic> {
        let mut lists = vec![(vec![Seg::key("defaults"), Seg::key("skills")], workflow.defaults.skills.as_ref())];
        for agent in &workflow.agents {
            lists.push((vec![Seg::key("agents"), Seg::key(&agent.id), Seg::key("skills")], agent.skills.as_ref()));
        }
        let known: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
        let mut out = Vec::new();
        for (base, names) in lists {
            for (i, name) in names.into_iter().flatten().enumerate() {
                if known.contains(&name.as_str()) {
                    continue;
                }
                let mut path = base.clone();
                path.push(Seg::Index(i));
                let location = workflow.source.locate(&path);
                let mut hint = crate::load::did_you_mean(name, known.iter().copied());
                let listed = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                crate::load::push_sentence(
                    &mut hint,
                    &format!(
                        "the repository's skills ({}/<name>/SKILL.md, at the commit the run reads) are: {listed}",
                        SKILL_DIRS.join(" and ")
                    ),
                );
                out.push(Diagnostic::new(format!("unknown skill `{name}`"), location, hint));
            }
        }
        out
    }

    /// The skills an agent is offered: those the model may invoke, limited to `allowed`
    /// (an agent's `skills:` list) when given.
    pub fn visible<'a>(&'a self, allowed: Option<&'a [String]>) -> impl Iterator<Item = &'a Skill> + 'a {
        self.skills
            .iter()
            .filter(|s| s.model_invocable)
            .filter(move |s| allowed.is_none_or(|names| names.contains(&s.name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> (String, String) {
        (path.to_string(), text.to_string())
    }

    #[test]
    fn reads_a_skill() {
        let text = "---\nname: pdf\ndescription: Fill in PDF forms. Use when: a form arrives\nallowed-tools: Read, Bash(python:*)\n---\n\n# PDF\n\nSteps.\n";
        let (skill, warnings) = parse_skill(text, ".claude/skills/pdf/SKILL.md").unwrap();
        assert_eq!(skill.name, "pdf");
        assert_eq!(skill.description, "Fill in PDF forms. Use when: a form arrives");
        assert_eq!(skill.directory, ".claude/skills/pdf");
        assert_eq!(skill.allowed_tools, Some(vec!["Read".to_string(), "Bash(python:*)".into()]));
        assert_eq!(skill.body, "# PDF\n\nSteps.");
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn broken_front_matter_still_loads_under_the_directory_name() {
        let text = "---\nname: x\ndescription: one\n<example>\nuser: two\n---\n# Release notes helper\n\nbody";
        let (skill, warnings) = parse_skill(text, ".orch/skills/notes/SKILL.md").unwrap();
        assert_eq!(skill.name, "notes");
        assert_eq!(skill.description, "Release notes helper");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(parse_skill("---\nname: x\n---\n", ".claude/skills/x/SKILL.md").is_err());
        assert!(parse_skill("text", ".claude/skills/SKILL.md.bak").is_err());
    }

    #[test]
    fn orch_skills_win_and_other_files_are_ignored() {
        let files = vec![
            file(".claude/skills/lint/SKILL.md", "---\ndescription: claude's\n---\nA"),
            file(".orch/skills/lint/SKILL.md", "---\ndescription: orch's\n---\nB"),
            file(".claude/skills/lint/reference.md", "not a skill"),
            file(".claude/skills/lint/deep/SKILL.md", "---\ndescription: nested\n---\nC"),
            file(".claude/skills/hidden/SKILL.md", "---\ndescription: d\ndisable-model-invocation: true\n---\nD"),
        ];
        let skills = Skills::from_files(&files);
        assert_eq!(skills.skills.len(), 2);
        assert_eq!(skills.get("lint").unwrap().description, "orch's");
        assert_eq!(skills.warnings.len(), 1, "{:?}", skills.warnings);
        assert_eq!(skills.visible(None).count(), 1);
        let only = vec!["other".to_string()];
        assert_eq!(skills.visible(Some(&only)).count(), 0);
    }
}
