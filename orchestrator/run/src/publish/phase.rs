//! The run's publishing phase: what the coordinator calls after integration. It reads
//! the run's report (as JSON, so it depends on the report's documented shape only),
//! builds the answer, the template context and the commit a pull request carries, and
//! publishes.

use std::path::PathBuf;

use orch_workflows::Workflow;
use serde_json::{Map, Value, json};

use super::{GitHubContext, PublishInputs, PublishMode, PublishReport, publish};

/// Publishes what `workflow.publish` declares for the run `report` describes; `None`
/// when the workflow publishes nothing or `mode` is off. `diff_base` is the run's
/// `--diff-base`.
pub async fn publish_run(
    workflow: &Workflow,
    report: &Value,
    mode: Option<PublishMode>,
    diff_base: Option<&str>,
) -> Option<PublishReport> {
    let declared = workflow.publish.clone().filter(|p| !p.is_empty())?;
    let ctx = GitHubContext::from_env();
    let mode = mode.unwrap_or_else(|| PublishMode::default_for(&ctx));
    if mode == PublishMode::Off {
        return None;
    }
    let mut inputs = inputs_of(workflow, declared, report);
    inputs.diff_base = diff_base.map(str::to_string);
    let published = publish(&inputs, mode, &ctx).await;
    for line in published.lines() {
        crate::notice::note(format_args!("publish {line}"));
    }
    if let Some(file) = &published.requests_file {
        crate::notice::note(format_args!(
            "publish dry run: the requests are in {}",
            inputs.run_dir.join(file).display()
        ));
    }
    Some(published)
}

/// Says, when the workflow publishes, that a share of it (`--shard`, `--only`) does not:
/// `orch merge --workflow` of the shares publishes the whole.
pub fn left_to_merge(workflow: &Workflow, mode: Option<PublishMode>) {
    if workflow.publish.as_ref().is_some_and(|p| !p.is_empty()) && mode != Some(PublishMode::Off) {
        crate::notice::note(format_args!(
            "publish skipped: this run is a share of the workflow (--shard or --only); `orch merge --workflow \
             FILE` of the run directories publishes the whole"
        ));
    }
}

fn inputs_of(workflow: &Workflow, publish: orch_workflows::publish::Publish, report: &Value) -> PublishInputs {
    let agents = report["agents"].as_array().cloned().unwrap_or_default();
    let answer = match (report["synthesis"]["text"].as_str(), agents.as_slice()) {
        (Some(text), _) => text.to_string(),
        (None, [only]) => only["text"].as_str().unwrap_or("").to_string(),
        _ => String::new(),
    };
    let mut by_key: Map<String, Value> = Map::new();
    for a in &agents {
        let key = a["agent"].as_str().unwrap_or("").to_string();
        let result =
            json!({"id": a["id"], "item": a["item"], "text": a["text"], "output": a["output"], "status": a["status"]});
        let fan_out = a["id"] != a["agent"];
        match by_key.get_mut(&key) {
            Some(Value::Array(list)) => list.push(result),
            _ if fan_out => {
                by_key.insert(key, Value::Array(vec![result]));
            }
            _ => {
                by_key.insert(key, result);
            }
        }
    }
    let date = report["started_at"].as_str().unwrap_or("").chars().take(10).collect::<String>();
    let context = json!({
        "run": {"id": report["run_id"], "date": date},
        "workflow": {"name": workflow.name},
        "inputs": report["inputs"].as_object().cloned().map(Value::Object).unwrap_or_else(|| json!({})),
        "answer": answer,
        "agents": by_key,
    });
    let outputs = agents.iter().filter(|a| a["output"].is_object()).map(|a| a["output"].clone()).collect();
    let (commit, no_commit_reason) = commit_of(report);
    PublishInputs {
        workflow: workflow.name.clone(),
        publish,
        answer,
        template_context: context,
        outputs,
        run_failed: !matches!(report["status"].as_str(), Some("succeeded" | "partial")),
        repo: PathBuf::from(report["repo"].as_str().unwrap_or(".")),
        commit,
        no_commit_reason,
        run_dir: PathBuf::from(report["run_dir"].as_str().unwrap_or(".")),
        diff_base: None,
    }
}

/// The commit a pull request carries: the integration branch's, else the only agent
/// commit fetched into the repository.
fn commit_of(report: &Value) -> (Option<String>, Option<String>) {
    let fetched = report["integration"]["fetched"].as_array().cloned().unwrap_or_default();
    let commit_of_branch = |branch: &str| {
        fetched
            .iter()
            .find(|f| f["branch"].as_str() == Some(branch))
            .and_then(|f| f["commit"].as_str())
            .map(str::to_string)
    };
    if let Some(branch) = report["integration"]["merge"]["branch"].as_str() {
        return match commit_of_branch(branch) {
            Some(c) => (Some(c), None),
            None => (None, Some(format!("the integration branch `{branch}` is not in the repository"))),
        };
    }
    let committed: Vec<&Value> =
        report["agents"].as_array().map(|a| a.iter().filter(|a| a["commit"].is_string()).collect()).unwrap_or_default();
    match committed.as_slice() {
        [] => (None, Some("the run changed nothing".to_string())),
        [one] => match one["branch"].as_str().and_then(commit_of_branch) {
            Some(c) => (Some(c), None),
            None => (
                None,
                Some(
                    "the agent's branch was not fetched into the repository: set `integrate: branches` or `merge`"
                        .to_string(),
                ),
            ),
        },
        _ => (
            None,
            Some(
                "several agents changed files and there is no single integration branch to publish: set `integrate: \
                 merge` (`orch merge` of shards does not merge their branches into one)"
                    .to_string(),
            ),
        ),
    }
}
