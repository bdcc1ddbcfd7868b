//! The sandbox enforces `Read` denies on Bash: a repository whose `.claude/settings.json`
//! denies `Read(.env*)` and `Read(secrets/**)`, and a scripted agent that reaches for
//! those files with commands the permission rules cannot see through (globs, copies,
//! symlinks, python, `grep -r`). Checked from outside: nothing of the secret in the
//! transcript (what the model is sent) or any file of the run (patch included), and the
//! masked files unchanged in the user's repository and on the agent's branch. Run with
//! the landlock backend (as root: empty mounts; as a normal user: Landlock rules around
//! the denied paths) and the container backend.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use std::path::Path;

use support::Fixture;

const SECRET: &str = "sk-live-DAMSON-9183";

const SETTINGS: &str = r#"{
  "permissions": {
    "deny": [
      "Read(.env*)",
      "Read(secrets/**)"
    ]
  }
}
"#;

/// The workflow, with `{sandbox}` to fill in.
const WORKFLOW: &str = r#"
version: 1
name: masking
defaults:
  tools: [Bash, Read, Write]
  limits: { max_turns: 15, timeout: 3m }
  sandbox: {sandbox}
agents:
  a:
    prompt: Look around.
"#;

/// Each command prints a marker first, so an empty result still shows the command ran.
/// One call per turn, so no call's failure cancels another.
const SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls: [{ name: Bash, input: { command: "cat .env" } }]
    - tool_calls: [{ name: Bash, input: { command: "cat secrets/k" } }]
    - tool_calls: [{ name: Bash, input: { command: "echo ran-1; cat .e?v" } }]
    - tool_calls: [{ name: Bash, input: { command: "echo ran-2; cat secre?s/k; ls -a secre?s" } }]
    - tool_calls: [{ name: Bash, input: { command: "echo ran-3; cp .e?v x; cat x" } }]
    - tool_calls: [{ name: Bash, input: { command: "echo ran-4; ln -s .e?v y && cat y" } }]
    - tool_calls: [{ name: Bash, input: { command: "echo ran-5; command -v python3 >/dev/null && python3 -c \"print(open('.e' + 'nv').read())\"" } }]
    - tool_calls: [{ name: Bash, input: { command: "echo ran-6; grep -r TOKEN . ; cat sub/.e*" } }]
    - tool_calls: [{ name: Bash, input: { command: "echo ran-7; cat README.md; cat src/lib.rs" } }]
    - tool_calls: [{ name: Bash, input: { command: "echo made > new.txt && echo ran-8" } }]
    - text: Done.
  synthesis:
    - text: Summary.
"#;

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

fn masked_run(run_id: &str, sandbox: &str) {
    let env = format!("TOKEN={SECRET}\n");
    let fx = Fixture::new(
        run_id,
        &[
            (".claude/settings.json", SETTINGS),
            (".env", &env),
            ("secrets/k", &env),
            ("sub/.env.test", &env),
            ("README.md", "hello readme\n"),
            ("src/lib.rs", "pub fn visible() {}\n"),
        ],
    );
    let run = fx.run(&WORKFLOW.replace("{sandbox}", sandbox), SCRIPT, &[]);
    run.expect_code(0);

    let transcript = run.transcript_text("a");
    assert!(!transcript.contains("DAMSON"), "the secret reached the model:\n{transcript}");
    assert_eq!(files_containing(&run.out, "DAMSON"), Vec::<String>::new(), "the secret is in a file of the run");

    let results = run.tool_results("a");
    assert_eq!(results.len(), 10, "{results:#?}");
    // The commands ran (each printed its marker): the sandbox, not a rule, kept the
    // secret out.
    for n in 1..=8 {
        let marker = format!("ran-{n}");
        assert!(results.iter().any(|(_, _, out)| out.contains(&marker)), "{marker} did not run: {results:#?}");
    }
    // The positive controls: what is not denied stays readable.
    let control = results.iter().find(|(_, _, out)| out.contains("ran-7")).unwrap();
    assert!(control.2.contains("hello readme") && control.2.contains("pub fn visible"), "{control:?}");

    // The masks hid the files from the sandbox only: the user's repository and the
    // agent's branch keep them unchanged, and the agent's own write was committed.
    assert_eq!(std::fs::read_to_string(fx.repo.join(".env")).unwrap(), env);
    assert_eq!(std::fs::read_to_string(fx.repo.join("secrets/k")).unwrap(), env);
    let branch = fx.branch("a");
    assert_eq!(fx.show(&branch, ".env"), env);
    assert_eq!(fx.show(&branch, "secrets/k"), env);
    assert_eq!(fx.show(&branch, "sub/.env.test"), env);
    assert_eq!(fx.show(&branch, "new.txt"), "made\n");
}

#[test]
fn landlock_hides_denied_paths_from_bash() {
    masked_run("t-mask-ll", "{ backend: landlock }");
}

#[test]
fn containers_hide_denied_paths_from_bash() {
    // As the other container suites: skipped only on purpose; a missing engine fails.
    if std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("ORCH_SKIP_DOCKER_TESTS=1: skipping the container masking test");
        return;
    }
    let image = std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:tools".into());
    masked_run("t-mask-ct", &format!("{{ backend: container, image: \"{image}\" }}"));
}

/// Git inside the sandbox sees the masked paths as unchanged (not deleted), and no
/// commit, patch, branch or integration deletes or changes them: the agent runs `git
/// status`, `git add -A && git commit` (its git cannot commit: its repository is
/// read-only) and deletes what it can reach; orch's own commit takes the masked paths
/// from the base.
fn masked_git_run(run_id: &str, sandbox: &str) {
    let env = format!("TOKEN={SECRET}\n");
    let fx = Fixture::new(
        run_id,
        &[
            (".claude/settings.json", SETTINGS),
            ("secrets/k", &env),
            ("secrets/deep/k2", &env),
            ("README.md", "hello readme\n"),
        ],
    );
    let workflow = WORKFLOW.replace("{sandbox}", sandbox) + "integrate: squash\n";
    let script = r#"
version: 1
agents:
  a:
    - tool_calls: [{ name: Bash, input: { command: "echo status-begin; git status --porcelain; echo status-end" } }]
    - tool_calls: [{ name: Bash, input: { command: "echo made > new.txt; git add -A && git -c user.name=a -c user.email=a@a commit -q -m x; echo commit=$?; rm -rf secre?s; true" } }]
    - tool_calls: [{ name: Bash, input: { command: "echo status2-begin; git status --porcelain; echo status2-end" } }]
    - text: Done.
  synthesis:
    - text: Summary.
"#;
    let run = fx.run(&workflow, script, &[]);
    run.expect_code(0);
    let results = run.tool_results("a");
    for (begin, end) in [("status-begin", "status-end"), ("status2-begin", "status2-end")] {
        let out = &results.iter().find(|(_, _, o)| o.contains(begin)).unwrap().2;
        let status = &out[out.find(begin).unwrap() + begin.len()..out.find(end).unwrap()];
        assert!(!status.contains("secrets"), "git in the sandbox sees the masked paths changed:\n{out}");
    }
    assert!(results[1].2.contains("commit="), "{results:#?}");
    // The branch, the patch and the integration keep the masked files as the base has
    // them, and hold the agent's own work.
    for branch in [fx.branch("a"), fx.branch("integration")] {
        assert_eq!(fx.show(&branch, "secrets/k"), env, "{branch}");
        assert_eq!(fx.show(&branch, "secrets/deep/k2"), env, "{branch}");
        assert_eq!(fx.show(&branch, "new.txt"), "made\n", "{branch}");
    }
    let patch = std::fs::read_to_string(run.out.join(run.agent("a")["patch"].as_str().unwrap())).unwrap();
    assert!(!patch.contains("secrets"), "{patch}");
    let changed = run.agent("a")["changed_files"].to_string();
    assert!(!changed.contains("secrets"), "{changed}");
    assert_eq!(std::fs::read_to_string(fx.repo.join("secrets/k")).unwrap(), env);
}

#[test]
fn landlock_masks_stay_intact_in_git() {
    masked_git_run("t-mask-git-ll", "{ backend: landlock }");
}

#[test]
fn container_masks_stay_intact_in_git() {
    if std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("ORCH_SKIP_DOCKER_TESTS=1: skipping the container masking test");
        return;
    }
    let image = std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:tools".into());
    masked_git_run("t-mask-git-ct", &format!("{{ backend: container, image: \"{image}\" }}"));
}
