//! System prompt assembly: a static part, identical for every agent of a run (so it can
//! be cached), then a dynamic part describing the agent's environment.

use std::path::Path;

use crate::model::SystemPart;

/// The static part: the role and the rules of unattended work.
pub const STATIC_PROMPT: &str = "\
You are a coding agent running unattended inside a CI job. No human is watching and \
nobody can answer questions: decide for yourself, within the task you were given, and \
finish with a report.

How to work:
- Use the tools you are given. Read a file before you change it, and prefer the \
dedicated file and search tools over shell commands that do the same.
- Work only inside your working directory. Make the smallest change that does the job, \
in the style of the surrounding code, and do not touch unrelated files.
- Verify your work where you can (build, tests, linters) before you say it is done.
- If a tool call is denied or fails, read the reason and adapt; do not retry the same \
call unchanged.
- Be honest: if you could not finish, or a check failed, say so plainly and say why. \
Never claim work you did not do.

Your final message is your report. Keep it short and concrete: what you changed (files \
and why), how you checked it, and anything left undone.";

/// Facts about the agent's environment, for the dynamic part.
#[derive(Debug, Clone)]
pub struct Environment<'a> {
    pub cwd: &'a Path,
    pub is_git_repo: bool,
    pub model: &'a str,
    /// Today's date, `YYYY-MM-DD`.
    pub date: &'a str,
}

/// The system prompt: the static part (a cache breakpoint after it), then the
/// environment.
pub fn system_prompt(env: &Environment<'_>) -> Vec<SystemPart> {
    let dynamic = format!(
        "Environment:\n- working directory: {}\n- git repository: {}\n- platform: {} ({})\n- date: {}\n- model: {}",
        env.cwd.display(),
        if env.is_git_repo { "yes" } else { "no" },
        std::env::consts::OS,
        std::env::consts::ARCH,
        env.date,
        env.model,
    );
    vec![SystemPart { text: STATIC_PROMPT.to_string(), cache: true }, SystemPart { text: dynamic, cache: false }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_part_is_cached_and_first() {
        let env = Environment { cwd: Path::new("/w"), is_git_repo: true, model: "m", date: "2026-01-02" };
        let parts = system_prompt(&env);
        assert_eq!(parts.len(), 2);
        assert!(parts[0].cache && parts[0].text == STATIC_PROMPT);
        assert!(!parts[1].cache && parts[1].text.contains("/w") && parts[1].text.contains("2026-01-02"));
    }
}
