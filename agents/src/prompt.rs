//! System prompt assembly. First a static part, identical for every agent of a run (its
//! role in unattended CI work and the rules for tools, edits, verification, honesty and
//! the report), ending in a cache breakpoint: the boundary. Then a dynamic part: the
//! environment, a git status snapshot and the project's instructions. Tool
//! descriptions travel with the tools, so a tool that is absent is never mentioned.

use std::path::Path;

use crate::instructions::Instructions;
use crate::model::SystemPart;

/// The static part: the role and the rules of unattended work.
pub const STATIC_PROMPT: &str = "\
You are a coding agent running unattended inside a CI job. No human is watching and \
nobody can answer questions: decide for yourself, within the task you were given, and \
finish with a report.

How to work:
- Use the tools you are given, and only those. Prefer a dedicated file or search tool \
over a shell command that does the same thing. Independent lookups can be asked for \
together in one answer.
- Always read a file before you change it. Make the smallest change that does the job, in the \
style of the surrounding code (names, formatting, comments, error handling), and leave \
unrelated files and lines alone. Do not add files nobody asked for.
- Work only inside your working directory.
- Verify your work where you can (build, tests, linters) before you say it is done, and \
fix what the checks report.
- If a tool call is denied or fails, read the reason and adapt; do not retry the same \
call unchanged.
- Long tasks may outgrow your context: old tool results can be cleared and the \
conversation summarized. When a result you need is gone, run the call again.
- Be honest: if you could not finish, or a check failed, say so plainly and say why. \
Never claim work you did not do, and never present a guess as a checked fact.

Your final message is your report. Keep it short and concrete: what you changed (files \
and why), how you checked it, and anything left undone.";

/// A snapshot of the working tree's git state when the agent starts, computed by the
/// caller (this crate runs no git).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitSnapshot {
    pub branch: String,
    /// `git status --short` lines.
    pub status: Vec<String>,
    /// The last commits, newest first, as `<short id> <subject>`.
    pub commits: Vec<String>,
}

/// Facts about the agent's environment, for the dynamic part.
#[derive(Debug, Clone)]
pub struct Environment<'a> {
    pub cwd: &'a Path,
    pub is_git_repo: bool,
    pub model: &'a str,
    /// Today's date, `YYYY-MM-DD`.
    pub date: &'a str,
    pub git: Option<&'a GitSnapshot>,
    /// The project's instructions; `None` when they are turned off.
    pub instructions: Option<&'a Instructions>,
}

/// Status lines shown at most; the rest are counted.
const MAX_STATUS_LINES: usize = 40;

/// The system prompt: the static part (a cache breakpoint after it, the boundary), then
/// the dynamic part.
pub fn system_prompt(env: &Environment<'_>) -> Vec<SystemPart> {
    let mut dynamic = format!(
        "Environment:\n- working directory: {}\n- git repository: {}\n- platform: {} ({})\n- date: {}\n- model: {}",
        env.cwd.display(),
        if env.is_git_repo { "yes" } else { "no" },
        std::env::consts::OS,
        std::env::consts::ARCH,
        env.date,
        env.model,
    );
    if let Some(git) = env.git {
        dynamic.push_str("\n\n");
        dynamic.push_str(&render_git(git));
    }
    if let Some(found) = env.instructions.filter(|i| !i.is_empty()) {
        dynamic.push_str("\n\n");
        dynamic.push_str(&render_instructions(found));
    }
    vec![SystemPart { text: STATIC_PROMPT.to_string(), cache: true }, SystemPart { text: dynamic, cache: false }]
}

/// Adds the list of `skills` (names and descriptions; the `Skill` tool loads the rest)
/// to the dynamic part of `parts`, so the cached static part stays the same for every
/// agent.
pub fn add_skills(parts: &mut Vec<SystemPart>, skills: &[crate::tools::skill::SkillEntry]) {
    let Some(section) = crate::tools::skill::listing(skills) else { return };
    match parts.iter_mut().rev().find(|p| !p.cache) {
        Some(dynamic) => {
            dynamic.text.push_str("\n\n");
            dynamic.text.push_str(&section);
        }
        None => parts.push(SystemPart { text: section, cache: false }),
    }
}

fn render_git(git: &GitSnapshot) -> String {
    let mut out = format!(
        "Git status when you started (a snapshot; it does not update as you work):\n- branch: {}\n- status:",
        git.branch
    );
    if git.status.is_empty() {
        out.push_str(" clean");
    }
    for line in git.status.iter().take(MAX_STATUS_LINES) {
        out.push_str(&format!("\n    {line}"));
    }
    if git.status.len() > MAX_STATUS_LINES {
        out.push_str(&format!("\n    ... and {} more", git.status.len() - MAX_STATUS_LINES));
    }
    out.push_str("\n- recent commits:");
    if git.commits.is_empty() {
        out.push_str(" none");
    }
    for c in &git.commits {
        out.push_str(&format!("\n    {c}"));
    }
    out
}

fn render_instructions(found: &Instructions) -> String {
    let mut out = String::from(
        "Project instructions, from the repository's instruction files. Follow them. They are listed from the \
         repository root down to your working directory; where they disagree, the later (nearer) file wins.",
    );
    for f in &found.files {
        let from = match &f.imported_by {
            Some(by) => format!(" imported-by=\"{by}\""),
            None => String::new(),
        };
        out.push_str(&format!("\n\n<instructions path=\"{}\"{from}>\n{}\n</instructions>", f.path, f.text.trim_end()));
    }
    if !found.skipped.is_empty() {
        out.push_str("\n\nNot loaded:");
        for s in &found.skipped {
            out.push_str(&format!("\n- {s}"));
        }
    }
    out
}

/// The block attached to a tool result when the call reached a subdirectory with its
/// own instruction files (see [`crate::instructions::Nested`]): the files, labelled as
/// in the system prompt, inside a `<system-reminder>` so the model reads them as
/// context rather than as the tool's output.
pub fn render_nested(found: &Instructions) -> String {
    let mut out = String::from(
        "<system-reminder>\nThis call reached a directory with its own instruction files. They apply to work in \
         that directory and below it, on top of the project instructions you already have; where they disagree, \
         these (nearer) ones win.",
    );
    for f in &found.files {
        let from = match &f.imported_by {
            Some(by) => format!(" imported-by=\"{by}\""),
            None => String::new(),
        };
        out.push_str(&format!("\n\n<instructions path=\"{}\"{from}>\n{}\n</instructions>", f.path, f.text.trim_end()));
    }
    if !found.skipped.is_empty() {
        out.push_str("\n\nNot loaded:");
        for s in &found.skipped {
            out.push_str(&format!("\n- {s}"));
        }
    }
    out.push_str("\n</system-reminder>");
    out
}

/// Where an agent works; it sets the opening of the static part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// A CI job or a workflow run: nobody is watching.
    Ci,
    /// `orch exec` started by a person at a terminal.
    Terminal,
}

/// The opening paragraph of [`STATIC_PROMPT`] for work started from a terminal.
const TERMINAL_OPENING: &str = "\
You are a coding agent started by a person from their terminal with `orch exec`. They \
gave you one task and will read your report when you finish; they cannot answer \
questions while you work: decide for yourself, within the task you were given, and \
finish with a report.";

/// The static part for `setting`.
pub fn static_prompt(setting: Setting) -> String {
    match (setting, STATIC_PROMPT.split_once("\n\n")) {
        (Setting::Terminal, Some((_, rest))) => format!("{TERMINAL_OPENING}\n\n{rest}"),
        _ => STATIC_PROMPT.to_string(),
    }
}

/// Gives a system prompt built by [`system_prompt`] the static part of `setting`.
pub fn set_setting(parts: &mut [SystemPart], setting: Setting) {
    if let Some(first) = parts.first_mut()
        && first.text == STATIC_PROMPT
    {
        first.text = static_prompt(setting);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_setting_changes_only_the_opening() {
        let mut parts = system_prompt(&Environment {
            cwd: Path::new("/w"),
            is_git_repo: true,
            model: "m",
            date: "2026-01-02",
            git: None,
            instructions: None,
        });
        set_setting(&mut parts, Setting::Terminal);
        assert!(parts[0].text.starts_with("You are a coding agent started by a person"), "{}", parts[0].text);
        assert!(!parts[0].text.contains("CI job"), "{}", parts[0].text);
        assert!(parts[0].text.ends_with(STATIC_PROMPT.split_once("\n\n").unwrap().1));
        assert!(parts[0].cache);
        assert_eq!(static_prompt(Setting::Ci), STATIC_PROMPT);
    }
    use crate::instructions::InstructionFile;

    fn env<'a>(git: Option<&'a GitSnapshot>, instructions: Option<&'a Instructions>) -> Environment<'a> {
        Environment { cwd: Path::new("/w"), is_git_repo: true, model: "m", date: "2026-01-02", git, instructions }
    }

    #[test]
    fn static_part_is_cached_and_first() {
        let parts = system_prompt(&env(None, None));
        assert_eq!(parts.len(), 2);
        assert!(parts[0].cache && parts[0].text == STATIC_PROMPT);
        assert!(!parts[1].cache && parts[1].text.contains("/w") && parts[1].text.contains("2026-01-02"));
        assert!(!parts[1].text.contains("Git status") && !parts[1].text.contains("Project instructions"));
    }

    #[test]
    fn skills_go_into_the_dynamic_part_only() {
        let mut parts = system_prompt(&env(None, None));
        let skill = crate::tools::skill::SkillEntry {
            name: "pdf".into(),
            summary: "pdf: fill in forms".into(),
            body: "FULL TEXT".into(),
            directory: "/s/pdf".into(),
            allowed_tools: None,
        };
        add_skills(&mut parts, std::slice::from_ref(&skill));
        assert_eq!(parts[0].text, STATIC_PROMPT);
        assert!(parts[1].text.ends_with("\n- pdf: fill in forms"), "{}", parts[1].text);
        assert!(!parts[1].text.contains("FULL TEXT"));
        let before = parts.clone();
        add_skills(&mut parts, &[]);
        assert_eq!(parts, before);
    }

    #[test]
    fn static_part_names_no_tool() {
        for name in crate::tools::CORE_TOOL_NAMES {
            assert!(!STATIC_PROMPT.contains(name), "the static prompt mentions {name}");
        }
    }

    #[test]
    fn dynamic_part_has_git_and_labelled_instructions() {
        let git = GitSnapshot {
            branch: "orch/run/a".into(),
            status: vec![" M src/lib.rs".into()],
            commits: vec!["abc1234 first".into()],
        };
        let found = Instructions {
            files: vec![
                InstructionFile {
                    path: "AGENTS.md".into(),
                    imported_by: None,
                    text: "root rules".into(),
                    truncated: false,
                },
                InstructionFile {
                    path: "docs/x.md".into(),
                    imported_by: Some("AGENTS.md".into()),
                    text: "imported".into(),
                    truncated: false,
                },
            ],
            skipped: vec!["@~/x.md (imported by AGENTS.md): outside the repository, not read".into()],
        };
        let parts = system_prompt(&env(Some(&git), Some(&found)));
        let d = &parts[1].text;
        assert_eq!(parts[0].text, STATIC_PROMPT);
        assert!(d.contains("branch: orch/run/a") && d.contains(" M src/lib.rs") && d.contains("abc1234 first"), "{d}");
        let root = d.find("<instructions path=\"AGENTS.md\">\nroot rules").unwrap();
        let imported = d.find("<instructions path=\"docs/x.md\" imported-by=\"AGENTS.md\">").unwrap();
        assert!(root < imported);
        assert!(d.contains("Not loaded:\n- @~/x.md"));
    }
}
