//! Skills in `orch exec`, through the real binary against the mock server: with the
//! `Skill` tool, the repository's `.claude/skills` are listed (names and descriptions
//! only) in the prompt and `Skill` loads one's full text with the directory of its
//! files (a copy in exec's private directory), as in `orch run`.

use orch_testkit::mock::{MockServer, Step};
use serde_json::{Value, json};

use crate::support::{Fixture, orch};

const SKILL: &str = "---\nname: changelog\ndescription: Writes changelog entries for this project.\n---\n\
# Changelog\n\nFollow the template in template.md. CHANGELOG-BODY\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_discovers_and_loads_the_repositorys_skills() {
    let fx = Fixture::new(
        "t-exec-skills",
        &[
            (".claude/skills/changelog/SKILL.md", SKILL),
            (".claude/skills/changelog/template.md", "TEMPLATE-TEXT\n"),
            ("a.txt", "alpha\n"),
        ],
    );
    let mock = MockServer::start().await;
    mock.push(Step::tool("Skill", json!({ "skill": "changelog" })));
    mock.push(Step::text("Entry written."));
    let mut cmd = orch();
    cmd.env("ANTHROPIC_API_KEY", "test").env("ANTHROPIC_BASE_URL", mock.url()).current_dir(&fx.repo).args([
        "exec",
        "--tools",
        "Read,Skill",
        "--max-turns",
        "4",
        "Write the changelog entry.",
    ]);
    // The mock server runs on this runtime: wait for the binary off it.
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let requests = mock.requests();
    assert!(!requests.is_empty(), "{stderr}");
    let system = requests[0].system().unwrap().to_string();
    assert!(system.contains("- changelog: Writes changelog entries for this project."), "{system}");
    assert!(!requests[0].json.to_string().contains("CHANGELOG-BODY"), "the full text was sent before the call");
    assert!(requests[0].tool_names().contains(&"Skill"), "{:?}", requests[0].tool_names());
    assert!(requests.len() >= 2, "{stderr}");
    let loaded = tool_results(requests[1].messages());
    assert!(loaded[0].contains("CHANGELOG-BODY"), "{}", loaded[0]);
    assert!(loaded[0].contains("/skills/changelog"), "{}", loaded[0]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Entry written."));
}

/// The text of every `tool_result` block in a request's messages.
fn tool_results(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| match &b["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}
