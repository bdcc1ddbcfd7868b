//! Issue 17 through the real binary: pipelines that pass code (`base: needs`),
//! integration modes (`squash`, `merge` with the agents' summaries, pruning) and
//! `expect: { changes: true }`. The history is read back with git2 from the user's
//! repository.

use std::path::Path;

use git2::{Oid, Repository};
use serde_json::json;

use crate::support::Fixture;

/// The three-stage pipeline: `fix` writes a file, `test` (base: needs) copies what it
/// sees of `fix`, `docs` (base: needs on `test`) copies what it sees of both.
const PIPELINE: &str = r#"
version: 1
name: pipeline
defaults:
  tools: [Read, Write, Bash]
  limits: { max_turns: 4 }
agents:
  fix:
    prompt: Fix the bug.
  test:
    needs: [fix]
    base: needs
    prompt: Test the fix.
  docs:
    needs: [test]
    base: needs
    prompt: Document it.
"#;

const PIPELINE_SCRIPT: &str = r#"
version: 1
agents:
  fix:
    - tool_calls: [{name: Write, input: {file_path: fix.txt, content: "fixed\n"}}]
    - text: "Fixed the off-by-one.\nDetails: the loop bound."
  test:
    - tool_calls: [{name: Bash, input: {command: "cat fix.txt > test.txt && echo tested >> test.txt"}}]
    - text: Added a test for the fix.
  docs:
    - tool_calls: [{name: Bash, input: {command: "cat fix.txt test.txt > docs.txt"}}]
    - text: Documented the change.
  synthesis:
    - text: all three stages ran
"#;

/// Subjects (first lines) of the commits of `branch` that are not on `main`, oldest
/// first, and the full messages.
fn history(repo: &Path, branch: &str) -> Vec<(String, String, usize)> {
    let repo = Repository::open(repo).unwrap();
    let tip = repo.refname_to_id(&format!("refs/heads/{branch}")).unwrap();
    let main = repo.refname_to_id("refs/heads/main").unwrap();
    let mut walk = repo.revwalk().unwrap();
    walk.push(tip).unwrap();
    walk.hide(main).unwrap();
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE).unwrap();
    walk.map(|id| {
        let commit = repo.find_commit(id.unwrap()).unwrap();
        let message = commit.message().unwrap_or("").to_owned();
        (message.lines().next().unwrap_or("").to_owned(), message, commit.parent_count())
    })
    .collect()
}

/// The files a commit changes against its first parent.
fn files_of(repo: &Path, commit: Oid) -> Vec<String> {
    let repo = Repository::open(repo).unwrap();
    let commit = repo.find_commit(commit).unwrap();
    let parent = commit.parent(0).unwrap().tree().unwrap();
    let diff = repo.diff_tree_to_tree(Some(&parent), Some(&commit.tree().unwrap()), None).unwrap();
    diff.deltas().map(|d| d.new_file().path().unwrap().display().to_string()).collect()
}

#[test]
fn a_three_stage_pipeline_passes_code_and_squashes_one_commit_per_agent() {
    let fx = Fixture::new("t-pipe", &[("README.md", "readme\n")]);
    let workflow = format!("{PIPELINE}integrate: {{ mode: squash, prune: true }}\n");
    let run = fx.run(&workflow, PIPELINE_SCRIPT, &[]);
    run.expect_code(0);
    // Each stage saw the work before it.
    assert_eq!(fx.show(&fx.branch("integration"), "test.txt"), "fixed\ntested\n");
    assert_eq!(fx.show(&fx.branch("integration"), "docs.txt"), "fixed\nfixed\ntested\n");
    // Each agent's changed files and patch hold only its own work.
    for (agent, file) in [("fix", "fix.txt"), ("test", "test.txt"), ("docs", "docs.txt")] {
        let a = run.agent(agent);
        assert_eq!(a["changed_files"], json!([{"path": file, "kind": "added"}]), "{agent}: {a:#}");
        let patch = std::fs::read_to_string(run.out.join(a["patch"].as_str().unwrap())).unwrap();
        let touched: Vec<&str> = patch.lines().filter_map(|l| l.strip_prefix("+++ b/")).collect();
        assert_eq!(touched, [file], "{agent}: {patch}");
    }
    assert!(run.agent("fix")["start"].is_null());
    assert!(run.agent("test")["start"].is_string());
    // Squash: one commit per agent, in order, each with the agent's summary.
    let log = history(&fx.repo, &fx.branch("integration"));
    let subjects: Vec<&str> = log.iter().map(|(s, _, _)| s.as_str()).collect();
    assert_eq!(
        subjects,
        ["fix: Fixed the off-by-one.", "test: Added a test for the fix.", "docs: Documented the change."]
    );
    assert_eq!(log[0].1, "fix: Fixed the off-by-one.\n\nFixed the off-by-one.\nDetails: the loop bound.\n");
    assert!(log.iter().all(|(_, _, parents)| *parents == 1), "{log:?}");
    let repo = Repository::open(&fx.repo).unwrap();
    let tip = repo.refname_to_id(&format!("refs/heads/{}", fx.branch("integration"))).unwrap();
    assert_eq!(files_of(&fx.repo, tip), ["docs.txt"]);
    // Pruned: the agents' branches, all held by the integration branch, are not left.
    assert_eq!(fx.orch_branches(), [fx.branch("integration")]);
    let pruned = &run.report["integration"]["pruned"];
    assert_eq!(pruned.as_array().map(Vec::len), Some(3), "{:#}", run.report["integration"]);
}

#[test]
fn merge_mode_makes_merge_commits_that_carry_each_summary() {
    let fx = Fixture::new("t-pipe-merge", &[("README.md", "readme\n")]);
    let workflow =
        format!("{PIPELINE}{}", "integrate:\n  mode: merge\n  message: \"{{ agent.id }} did: {{ agent.text }}\"\n");
    let run = fx.run(&workflow, PIPELINE_SCRIPT, &["--prune-branches"]);
    run.expect_code(0);
    let log = history(&fx.repo, &fx.branch("integration"));
    let merges: Vec<&str> = log.iter().filter(|(_, _, p)| *p == 2).map(|(_, m, _)| m.as_str()).collect();
    assert_eq!(
        merges,
        [
            "fix did: Fixed the off-by-one.\nDetails: the loop bound.\n",
            "test did: Added a test for the fix.\n",
            "docs did: Documented the change.\n"
        ],
        "{log:#?}"
    );
    assert_eq!(fx.orch_branches(), [fx.branch("integration")]);
}

#[test]
fn branches_mode_keeps_every_branch_and_prunes_nothing() {
    let fx = Fixture::new("t-pipe-br", &[("README.md", "readme\n")]);
    let run = fx.run(&format!("{PIPELINE}integrate: branches\n"), PIPELINE_SCRIPT, &["--prune-branches"]);
    run.expect_code(0);
    let mut want = vec![fx.branch("docs"), fx.branch("fix"), fx.branch("test")];
    want.sort();
    assert_eq!(fx.orch_branches(), want);
}

#[test]
fn a_conflict_between_needed_branches_fails_the_agent_before_any_model_request() {
    let fx = Fixture::new("t-pipe-conflict", &[("shared.txt", "one\n")]);
    let workflow = r#"
version: 1
name: conflict
defaults:
  tools: [Read, Write, Bash]
  limits: { max_turns: 4 }
agents:
  left:
    prompt: Change it.
  right:
    prompt: Change it too.
  join:
    needs: [left, right]
    base: needs
    prompt: Build on both.
"#;
    let script = r#"
version: 1
agents:
  left:
    - tool_calls: [{name: Bash, input: {command: "echo LEFT > shared.txt"}}]
    - text: left
  right:
    - tool_calls: [{name: Bash, input: {command: "echo RIGHT > shared.txt"}}]
    - text: right
  join:
    - text: should never be asked
  synthesis:
    - text: done
"#;
    let run = fx.run(workflow, script, &[]);
    run.expect_code(1);
    let join = run.agent("join");
    assert_eq!(join["status"], "failed", "{join:#}");
    let reason = join["reason"].as_str().unwrap();
    assert!(reason.contains("`right`") && reason.contains("shared.txt"), "{reason}");
    assert_eq!(join["turns"], 0);
    assert!(join["branch"].is_null() && join["commit"].is_null(), "{join:#}");
    // No worktree or branch was made for it.
    assert!(!fx.orch_branches().contains(&fx.branch("join")), "{:?}", fx.orch_branches());
    assert!(!run.transcript_text("join").contains("\"prompt\""));
}

#[test]
fn an_agent_expected_to_change_files_that_changed_none_fails_with_no_changes() {
    let fx = Fixture::new("t-expect", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: expect
defaults:
  tools: [Read, Write]
  limits: { max_turns: 4 }
  expect: { changes: true }
agents:
  lazy:
    prompt: Fix a.txt.
  busy:
    prompt: Fix a.txt properly.
  survey:
    prompt: Only look.
    expect: { changes: false }
"#;
    let script = r#"
version: 1
agents:
  lazy:
    - text: I fixed everything.
  busy:
    - tool_calls: [{name: Write, input: {file_path: b.txt, content: "b\n"}}]
    - text: done
  survey:
    - text: looked
  synthesis:
    - text: summary
"#;
    let junit = fx.dir.path().join("junit.xml");
    let run = fx.run(workflow, script, &["--junit", junit.to_str().unwrap()]);
    run.expect_code(1);
    assert_eq!(run.agent("lazy")["status"], "failed");
    assert_eq!(run.agent("lazy")["reason"], "no changes");
    assert_eq!(run.agent("busy")["status"], "succeeded");
    assert_eq!(run.agent("survey")["status"], "succeeded");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let case = xml.split("<testcase").find(|c| c.contains("name=\"lazy\"")).unwrap_or_else(|| panic!("{xml}"));
    assert!(case.contains("<failure") && case.contains("no changes"), "{case}");
    let md = std::fs::read_to_string(run.out.join("report.md")).unwrap();
    assert!(md.contains("no changes"), "{md}");
}

#[test]
fn pruning_never_deletes_a_branch_the_integration_branch_does_not_hold() {
    let fx = Fixture::new("t-prune", &[("shared.txt", "one\n")]);
    let workflow = r#"
version: 1
name: prune
concurrency: 1
defaults:
  tools: [Bash]
  limits: { max_turns: 4 }
agents:
  left:
    prompt: Change it.
  right:
    prompt: Change it too.
integrate: { mode: squash, prune: true }
"#;
    let script = r#"
version: 1
agents:
  left:
    - tool_calls: [{name: Bash, input: {command: "echo LEFT > shared.txt"}}]
    - text: left
  right:
    - tool_calls: [{name: Bash, input: {command: "echo RIGHT > shared.txt"}}]
    - text: right
  synthesis:
    - text: done
"#;
    let run = fx.run(workflow, script, &[]);
    run.expect_code(0);
    let merges = run.report["integration"]["merge"]["merges"].as_array().unwrap().clone();
    assert_eq!(merges[1]["conflicts"], json!(["shared.txt"]), "{merges:#?}");
    assert_eq!(run.report["integration"]["pruned"], json!([fx.branch("left")]));
    let mut want = vec![fx.branch("integration"), fx.branch("right")];
    want.sort();
    assert_eq!(fx.orch_branches(), want);
    assert_eq!(fx.show(&fx.branch("right"), "shared.txt"), "RIGHT\n");
    assert_eq!(history(&fx.repo, &fx.branch("integration")).len(), 1);
}

/// `orch plan --shards N --format github-matrix` of a workflow with `n` static agents.
fn matrix_of(fx: &Fixture, workflow: &str, shards: u32) -> Vec<serde_json::Value> {
    let path = fx.write("matrix.yaml", workflow);
    let out = crate::support::orch()
        .arg("plan")
        .arg(&path)
        .args(["--shards", &shards.to_string(), "--format", "github-matrix"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let matrix: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    matrix["include"].as_array().unwrap().clone()
}

fn agents_workflow(n: usize) -> String {
    let mut text = String::from("version: 1\nname: many\nagents:\n");
    for i in 0..n {
        text.push_str(&format!("  a{i}: {{ prompt: task {i} }}\n"));
    }
    text
}

#[test]
fn the_matrix_is_balanced_and_never_lists_an_empty_shard() {
    let fx = Fixture::new("t-matrix", &[("a.txt", "a\n")]);
    let sizes = |entries: &[serde_json::Value]| {
        let mut s: Vec<usize> =
            entries.iter().map(|e| e["agents"].as_str().unwrap().split_whitespace().count()).collect();
        s.sort_unstable_by(|a, b| b.cmp(a));
        s
    };
    assert_eq!(sizes(&matrix_of(&fx, &agents_workflow(10), 4)), [3, 3, 2, 2]);
    let few = matrix_of(&fx, &agents_workflow(3), 20);
    assert_eq!(sizes(&few), [1, 1, 1], "{few:#?}");
    // A dynamic fan-out: every shard is listed, and says what it will run of it.
    let dynamic = r#"
version: 1
name: dynamic
agents:
  survey:
    prompt: List the files.
    output: { schema: { type: object, required: [files], properties: { files: { type: array, items: { type: string } } } } }
  fix:
    needs: [survey]
    for_each: "{{ agents.survey.output.files }}"
    prompt: Fix {{ item }}.
"#;
    let entries = matrix_of(&fx, dynamic, 3);
    assert_eq!(entries.len(), 3, "{entries:#?}");
    for entry in &entries {
        let note = entry["fan_out"].as_str().unwrap();
        assert!(
            note.contains("fix") && note.contains("agents.survey.output.files") && note.contains("3 shards"),
            "{note}"
        );
    }
}

#[test]
fn orch_merge_builds_one_integration_branch_across_shards_from_the_patches() {
    let fx = Fixture::new("t-shard-int", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: batch
concurrency: 3
agents:
  fix:
    for_each: [f1, f2, f3, f4, f5, f6]
    prompt: Fix {{ item }}.
    tools: [Bash]
integrate: squash
"#;
    let script = r#"
version: 1
agents:
  "fix/*":
    - tool_calls: [{name: Bash, input: {command: "echo done > \"out-$(basename \"$PWD\").txt\""}}]
    - text: "Fixed one file.\nIt was easy."
  synthesis:
    - text: all fixed
"#;
    let workflow_path = fx.write("workflow.yaml", workflow);
    let script_path = fx.write("script.yaml", script);
    let mut dirs = Vec::new();
    for k in 1..=2 {
        let out = fx.dir.path().join(format!("shard{k}"));
        let run = crate::support::orch()
            .arg("run")
            .arg(&workflow_path)
            .args(["--provider", "scripted", "--script"])
            .arg(&script_path)
            .arg("--repo")
            .arg(&fx.repo)
            .arg("--out")
            .arg(&out)
            .args(["--run-id", &format!("t-shard-int-{k}"), "--shard", &format!("{k}/2")])
            .output()
            .unwrap();
        crate::support::Run::from_output(&out, run).expect_code(0);
        dirs.push(out);
    }
    let merged_dir = fx.dir.path().join("merged");
    let merged = crate::support::orch()
        .arg("merge")
        .args(&dirs)
        .arg("--workflow")
        .arg(&workflow_path)
        .args(["--provider", "scripted", "--script"])
        .arg(&script_path)
        .arg("--repo")
        .arg(&fx.repo)
        .arg("--out")
        .arg(&merged_dir)
        .output()
        .unwrap();
    let merged = crate::support::Run::from_output(&merged_dir, merged);
    merged.expect_code(0);
    let integration = &merged.report["integration"]["merge"];
    let branch = integration["branch"].as_str().unwrap().to_owned();
    assert!(branch.starts_with("orch/merge-") && branch.ends_with("/integration"), "{branch}");
    let entries = integration["merges"].as_array().unwrap();
    assert_eq!(entries.len(), 6);
    assert!(entries.iter().all(|e| e["merged"] == true), "{integration:#}");
    // Six squash commits, one per agent in plan order, each with its summary.
    let log = history(&fx.repo, &branch);
    let subjects: Vec<&str> = log.iter().map(|(s, _, _)| s.as_str()).collect();
    let want: Vec<String> = (1..=6).map(|i| format!("fix/f{i}: Fixed one file.")).collect();
    assert_eq!(subjects, want);
    assert!(log.iter().all(|(_, m, p)| *p == 1 && m.ends_with("Fixed one file.\nIt was easy.\n")), "{log:?}");
    let repo = Repository::open(&fx.repo).unwrap();
    let tree = repo.revparse_single(&branch).unwrap().peel_to_tree().unwrap();
    let files = tree.iter().filter(|e| e.name().unwrap().starts_with("out-fix-f")).count();
    assert_eq!(files, 6);
}

/// Issue 17's nightly batch at its real size: 50 files, one agent each, from a
/// newline-separated `--input` (as `git ls-files` prints it), at concurrency 8 in the
/// default sandbox. Each agent edits its own file. The squash integration branch holds
/// 50 commits, one per agent in plan order, each titled and explained by the agent's
/// summary and touching only that agent's file; the 50 agent branches are pruned.
#[test]
fn a_fifty_file_batch_squashes_to_fifty_commits_with_summaries() {
    const N: usize = 50;
    let sources: Vec<(String, String)> =
        (1..=N).map(|i| (format!("src/m{i}.rs"), format!("pub fn f{i}() -> u32 {{ manual({i}) }}\n"))).collect();
    let files: Vec<(&str, &str)> = sources.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let fx = Fixture::new("t-batch50", &files);
    let workflow = r#"
version: 1
name: batch
concurrency: 8
inputs:
  files: { description: "The files to fix, one per line" }
agents:
  fix:
    for_each: "{{ inputs.files }}"
    prompt: Replace the manual loop in src/{{ item }}.rs.
    tools: [Bash]
    expect: { changes: true }
integrate: { mode: squash, prune: true }
"#;
    // The worktree is named after the agent (`fix-m7-<hash>`): the command finds its file from it.
    let script = r#"
version: 1
agents:
  "fix/*":
    - tool_calls: [{name: Bash, input: {command: "n=$(basename \"$PWD\"); n=${n#fix-}; sed -i 's/manual/iterator/' \"src/${n%%-*}.rs\""}}]
    - text: "Replaced the manual loop with an iterator.\nOne file, tests pass."
  synthesis:
    - text: all fixed
"#;
    let stems: String = (1..=N).map(|i| format!("m{i}\n")).collect();
    let run = fx.run(workflow, script, &["--input", &format!("files={stems}")]);
    run.expect_code(0);
    let agents = run.report["agents"].as_array().unwrap();
    assert_eq!(agents.len(), N);
    assert!(agents.iter().all(|a| a["status"] == "succeeded"), "{:#}", run.report["agents"]);

    let integration = fx.branch("integration");
    let log = history(&fx.repo, &integration);
    assert_eq!(log.len(), N, "{log:#?}");
    let repo = Repository::open(&fx.repo).unwrap();
    let mut walk = repo.revwalk().unwrap();
    walk.push(repo.refname_to_id(&format!("refs/heads/{integration}")).unwrap()).unwrap();
    walk.hide(repo.refname_to_id("refs/heads/main").unwrap()).unwrap();
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE).unwrap();
    let commits: Vec<Oid> = walk.map(Result::unwrap).collect();
    for (i, ((subject, message, parents), commit)) in log.iter().zip(&commits).enumerate() {
        let n = i + 1;
        assert_eq!(subject, &format!("fix/m{n}: Replaced the manual loop with an iterator."));
        assert!(message.ends_with("One file, tests pass.\n"), "{message}");
        assert_eq!(*parents, 1);
        assert_eq!(files_of(&fx.repo, *commit), [format!("src/m{n}.rs")]);
    }
    for n in 1..=N {
        assert_eq!(
            fx.show(&integration, &format!("src/m{n}.rs")),
            format!("pub fn f{n}() -> u32 {{ iterator({n}) }}\n")
        );
    }
    assert_eq!(fx.orch_branches(), [integration]);
}

/// A later stage changes the file the stage before it wrote: no conflict. An agent
/// beside the pipeline that changes one of its files is one.
const STAGES_AND_A_NEIGHBOUR: &str = r#"
version: 1
name: stages
defaults:
  tools: [Write, Bash]
  limits: { max_turns: 4 }
agents:
  fix:
    prompt: Fix it.
  test:
    needs: [fix]
    base: needs
    prompt: Test it.
  other:
    prompt: Something else.
integrate: none
"#;

const STAGES_SCRIPT: &str = r#"
version: 1
agents:
  fix:
    - tool_calls: [{name: Write, input: {file_path: a.txt, content: "fixed\n"}}]
    - text: Fixed.
  test:
    - tool_calls: [{name: Bash, input: {command: "echo tested >> a.txt && echo test > b.txt"}}]
    - text: Tested.
  other:
    - tool_calls: [{name: Write, input: {file_path: b.txt, content: "other\n"}}]
    - text: Done.
  synthesis:
    - text: Fixed, tested, and something else.
"#;

#[test]
fn a_stage_that_builds_on_the_one_before_is_no_likely_conflict() {
    let fx = Fixture::new("t-pipe-overlap", &[("README.md", "readme\n")]);
    let run = fx.run(STAGES_AND_A_NEIGHBOUR, STAGES_SCRIPT, &[]);
    run.expect_code(0);
    let files = |id: &str| run.agent(id)["changed_files"].clone();
    assert_eq!(files("fix"), json!([{"path": "a.txt", "kind": "added"}]));
    assert_eq!(files("test"), json!([{"path": "a.txt", "kind": "modified"}, {"path": "b.txt", "kind": "added"}]));
    assert_eq!(run.report["overlaps"], json!([{"path": "b.txt", "agents": ["other", "test"]}]), "{}", run.stderr);
    let md = std::fs::read_to_string(run.out.join("report.md")).unwrap();
    let conflicts = md.split("## Likely conflicts").nth(1).and_then(|s| s.split("\n## ").next()).unwrap_or_default();
    assert!(conflicts.contains("`b.txt`: `other`, `test`"), "{md}");
    assert!(!conflicts.contains("a.txt"), "a.txt is listed as a likely conflict:\n{md}");
}
