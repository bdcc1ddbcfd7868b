//! A repository's own `.claude/settings.json` permissions, used unchanged through the
//! real binary: a scripted agent tries every way to read a denied `.env` (the reading
//! tools, `Bash cat`, wrapped and bypassing command forms) and nothing of the secret
//! reaches the model, the transcript or any file of the run; the report lists each
//! effective rule with the file and line it came from.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use std::path::Path;

use support::Fixture;

const SECRET: &str = "sk-live-PLUMTREE-4471";

/// As a team would commit it: deny `.env*`, a few Bash prefixes, `dontAsk`.
const SETTINGS: &str = r#"{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "permissions": {
    "allow": [
      "Bash(git status:*)",
      "Bash(git diff:*)",
      "Bash(cat:*)",
      "Bash(ls:*)"
    ],
    "deny": [
      "Read(./.env)",
      "Read(./.env.*)",
      "Bash(git push:*)"
    ],
    "defaultMode": "dontAsk"
  }
}
"#;

const WORKFLOW: &str = r#"
version: 1
name: settings
defaults:
  tools: [Bash, Read, Grep, Glob]
  limits: { max_turns: 6, timeout: 2m }
agents:
  a:
    prompt: Look around.
"#;

const SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls:
        - { name: Read, input: { file_path: .env } }
        - { name: Read, input: { file_path: .env.local } }
        - { name: Grep, input: { pattern: TOKEN } }
        - { name: Grep, input: { pattern: sk-live, path: . } }
        - { name: Glob, input: { pattern: "**/.env*" } }
        - { name: Read, input: { file_path: README.md } }
        - { name: Bash, input: { command: "cat README.md" } }
    - tool_calls:
        - { name: Bash, input: { command: "cat .env" } }
        - { name: Bash, input: { command: "cat ./.env.local" } }
        - { name: Bash, input: { command: "bash -c 'cat .env'" } }
        - { name: Bash, input: { command: "git status && cat .env" } }
        - { name: Bash, input: { command: "git -C . push" } }
        - { name: Bash, input: { command: "bash -c 'git push'" } }
        - { name: Bash, input: { command: "timeout 5 git push" } }
        - { name: Bash, input: { command: "VAR=x /usr/bin/git push" } }
        - { name: Bash, input: { command: "touch x" } }
    - text: Done.
  synthesis:
    - text: Summary.
"#;

/// The finished calls of agent `a` by id (`toolu_a_<turn>_<n>`): (is_error, output).
fn results_by_id(run: &support::Run) -> std::collections::BTreeMap<String, (bool, String)> {
    run.events("a")
        .into_iter()
        .filter(|e| e["type"] == "tool_use_finished")
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                (e["is_error"].as_bool().unwrap(), e["output"].as_str().unwrap().to_owned()),
            )
        })
        .collect()
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && let Ok(bytes) = std::fs::read(&path)
                && String::from_utf8_lossy(&bytes).contains(needle)
            {
                out.push(path.display().to_string());
            }
        }
    }
    out
}

#[test]
fn claude_settings_deny_env_everywhere_and_hold_the_allow_list() {
    let fx = Fixture::new(
        "t-permset",
        &[
            (".claude/settings.json", SETTINGS),
            (".env", &format!("TOKEN={SECRET}\n")),
            (".env.local", &format!("TOKEN={SECRET}\n")),
            ("README.md", "hello readme\n"),
        ],
    );
    let run = fx.run(WORKFLOW, SCRIPT, &[]);
    run.expect_code(0);

    // Nothing of the secret in anything the model was sent, nor anywhere in the run.
    let transcript = run.transcript_text("a");
    assert!(!transcript.contains("PLUMTREE"), "the secret reached the model:\n{transcript}");
    assert!(!transcript.contains(".env.local\n"), "a listing named the denied file:\n{transcript}");
    assert_eq!(files_containing(&run.out, "PLUMTREE"), Vec::<String>::new());

    let results = results_by_id(&run);
    assert_eq!(results.len(), 16, "{results:#?}");
    let call = |turn: u32, n: u32| results[&format!("toolu_a_{turn}_{n}")].clone();
    // The reading tools: Read is denied; Grep and Glob run but leave the denied files out.
    assert!(call(1, 1).0 && call(1, 2).0, "{results:#?}");
    for n in 3..=5 {
        let (is_error, output) = call(1, n);
        assert!(!is_error, "{output}");
        assert!(!output.contains(".env"), "a search showed a denied file: {output}");
    }
    // Every Bash attempt on `.env`, every push form and `touch x` (no allow rule) are denied.
    for n in 1..=9 {
        let (is_error, output) = call(2, n);
        assert!(is_error, "call {n} was not denied: {output}");
        assert!(output.contains("permission denied"), "call {n}: {output}");
    }
    // `touch x` matches no allow rule in dontAsk: the agent changed nothing.
    assert_eq!(run.agent("a")["changed_files"], serde_json::json!([]), "{:#}", run.agent("a"));
    // The positive controls: allowed reads work.
    assert!(!call(1, 6).0 && call(1, 6).1.contains("hello readme"), "{:?}", call(1, 6));
    assert!(!call(1, 7).0 && call(1, 7).1.contains("hello readme"), "{:?}", call(1, 7));

    // The run says once what the sandbox cannot hide from Bash.
    assert_eq!(run.stderr.matches("cannot be enforced on Bash").count(), 1, "{}", run.stderr);

    // The report lists the effective rules with file:line, and the mode's source.
    let permissions = &run.agent("a")["permissions"];
    assert_eq!(permissions["mode"], "dontAsk", "{permissions:#}");
    assert_eq!(permissions["mode_source"], ".claude/settings.json:15", "{permissions:#}");
    let rules: Vec<(String, String, String)> = permissions["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["verdict"].as_str().unwrap().to_owned(),
                r["rule"].as_str().unwrap().to_owned(),
                r["source"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(rules.contains(&("deny".into(), "Read(./.env)".into(), ".claude/settings.json:11".into())), "{rules:?}");
    assert!(rules.contains(&("allow".into(), "Bash(cat:*)".into(), ".claude/settings.json:7".into())), "{rules:?}");
    assert_eq!(rules.len(), 7, "{rules:?}");
}

/// A pull request cannot loosen the rules: they come from the base ref.
#[test]
fn a_pull_request_run_takes_the_rules_from_the_base_ref() {
    let fx =
        Fixture::new("t-permset-pr", &[(".claude/settings.json", SETTINGS), (".env", &format!("TOKEN={SECRET}\n"))]);
    support::git(&fx.repo, &["checkout", "-q", "-b", "pr"]);
    std::fs::write(fx.repo.join(".claude/settings.json"), r#"{"permissions": {"defaultMode": "bypassPermissions"}}"#)
        .unwrap();
    support::git(&fx.repo, &["commit", "-qam", "loosen"]);
    let script = "version: 1\nagents:\n  a:\n    - tool_calls: [{ name: Read, input: { file_path: .env } }]\n    - text: Done.\n  synthesis:\n    - text: S.\n";
    let run = fx.run(WORKFLOW, script, &["--config-ref", "main"]);
    run.expect_code(0);
    let results = run.tool_results("a");
    assert!(results[0].1, "{results:?}");
    assert!(!run.transcript_text("a").contains("PLUMTREE"));
    assert_eq!(run.agent("a")["permissions"]["mode"], "dontAsk");
}
