//! Fencing of untrusted text in GitHub Actions logs. The runner reads a line that
//! starts with `::` as a workflow command, on stdout and stderr alike, so text written
//! by a model or a tool (answers, synthesis, tool output, reasons) could forge
//! annotations, masks or outputs. [`fence`] wraps such text in
//! `::stop-commands::<token>` … `::<token>::`, GitHub's mechanism that turns command
//! processing off until the token comes back; the token is random per fence and never
//! occurs in the text, so the text cannot end the fence early. Every print site of
//! untrusted text goes through [`fence`] (or [`untrusted`], which fences in GitHub mode
//! only); orch's own workflow commands stay outside.

use rand::Rng as _;

/// Whether this process runs as a GitHub Actions step (`GITHUB_ACTIONS=true`).
pub fn github_mode() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// `text` between `::stop-commands::<token>` and `::<token>::`, each on a line of its
/// own; the result ends with a line break.
pub fn fence(text: &str) -> String {
    let token = loop {
        let token = format!("orch-{:032x}", rand::rng().random::<u128>());
        if !text.contains(&token) {
            break token;
        }
    };
    let newline = if text.ends_with('\n') { "" } else { "\n" };
    format!("::stop-commands::{token}\n{text}{newline}::{token}::\n")
}

/// `text` fenced in GitHub mode; as it is (with a final line break) elsewhere.
pub fn untrusted(text: &str) -> String {
    if github_mode() {
        fence(text)
    } else if text.ends_with('\n') {
        text.to_string()
    } else {
        format!("{text}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workflow commands a GitHub runner would act on in `log`: lines starting with
    /// `::` (after leading spaces) outside an active `::stop-commands::` block.
    fn runner_commands(log: &str) -> Vec<String> {
        let mut commands = Vec::new();
        let mut stopped: Option<String> = None;
        for line in log.lines() {
            let line = line.trim_start();
            if let Some(token) = &stopped {
                if line == format!("::{token}::") {
                    stopped = None;
                }
                continue;
            }
            if let Some(token) = line.strip_prefix("::stop-commands::") {
                stopped = Some(token.trim_end().to_string());
                commands.push(line.to_string());
            } else if line.starts_with("::") {
                commands.push(line.to_string());
            }
        }
        commands
    }

    #[test]
    fn forged_commands_stay_inside_the_fence() {
        let forged = "::error file=x::forged\n::stop-commands::x\n::x::\n::warning::still forged";
        let log = format!("::group::a\n{}::endgroup::\n", fence(forged));
        let commands = runner_commands(&log);
        assert_eq!(commands.len(), 3, "{commands:?}");
        assert_eq!(commands[0], "::group::a");
        assert!(commands[1].starts_with("::stop-commands::orch-"), "{commands:?}");
        assert_eq!(commands[2], "::endgroup::");
        // Unfenced, the forged text gives the runner commands of its own.
        assert_eq!(runner_commands(forged).len(), 3, "the x block swallows one");
    }

    #[test]
    fn the_token_is_fresh_and_not_in_the_text() {
        let a = fence("x");
        let b = fence("x");
        assert_ne!(a, b);
        let token = a.lines().next().unwrap().strip_prefix("::stop-commands::").unwrap();
        assert!(token.len() > 30);
        assert_eq!(a, format!("::stop-commands::{token}\nx\n::{token}::\n"));
    }
}
