//! `orch validate` and `orch plan`: load a workflow, report every diagnostic with its
//! position, and print what a run would do. Both make every check `orch run` makes
//! before it starts (the same loader, against the repository's `.mcp.json`); neither
//! touches the network, a sandbox or a model.

use std::io::Write;
use std::path::Path;

use orch_run::workflow::plan;
use orch_workflows::{Plan, Workflow};

use crate::cli::{PlanArgs, PlanFormat, ValidateArgs};
use crate::exit::{Code, UsageError};

/// Loads `path` with every check `orch run` makes before it starts anything, against
/// the repository of the current directory (its `.mcp.json`, read under the same trust
/// rule as a run's), or prints why not.
fn load(path: &Path) -> Result<Workflow, Code> {
    let trust = orch_run::repo_config::Trust::from_env(false, None);
    let config = orch_run::workflow::repo_config(None, &trust);
    match config.and_then(|config| orch_run::workflow::load_checked(path, &config)) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("error: {e}");
            Err(Code::Usage)
        }
    }
}

/// `orch validate`: exit 0 and one line on stderr when the file is valid.
pub fn validate(args: &ValidateArgs) -> Code {
    match load(&args.workflow) {
        Ok(workflow) => {
            for warning in orch_workflows::publish::findings_warnings(&workflow) {
                eprintln!("warning: {}: {warning}", args.workflow.display());
            }
            let agents = workflow.agents.len();
            eprintln!(
                "orch: {} is valid: workflow `{}`, {agents} agent{}",
                args.workflow.display(),
                workflow.name,
                if agents == 1 { "" } else { "s" }
            );
            let denies = workflow.agents.iter().flat_map(|a| a.permissions.deny.iter());
            let denies = workflow.defaults.permissions.deny.iter().chain(denies).map(String::as_str);
            if let Some(note) = orch_run::settings_permissions::bash_gap_note(denies) {
                eprintln!("orch: {note}");
            }
            Code::Success
        }
        Err(code) => code,
    }
}

/// One entry per shard: `shard` (`K/N`, for `orch run --shard`) and the `agents` it runs
/// that are known now (a dynamic fan-out's instances are assigned when it expands, by the
/// same hash).
fn matrix(plan: &Plan, shards: u32) -> serde_json::Value {
    let include: Vec<serde_json::Value> = (1..=shards)
        .map(|k| {
            let agents: Vec<&str> = plan
                .nodes()
                .filter_map(|n| match n {
                    orch_workflows::PlanNode::Agent(spec) => Some(spec.id.as_str()),
                    orch_workflows::PlanNode::DynamicFanOut(_) => None,
                })
                .filter(|id| orch_run::run::shard_of(id, shards) == k)
                .collect();
            serde_json::json!({ "shard": format!("{k}/{shards}"), "agents": agents.join(" ") })
        })
        .collect();
    serde_json::json!({ "include": include })
}

/// `orch plan`: the plan on stdout, as text or JSON.
pub fn show(args: &PlanArgs) -> anyhow::Result<Code> {
    let workflow = match load(&args.workflow) {
        Ok(w) => w,
        Err(code) => return Ok(code),
    };
    let plan = match plan(&workflow, &args.inputs) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let mut out = std::io::stdout().lock();
    match (args.format, args.shards) {
        (PlanFormat::GithubMatrix, None) => {
            return Err(UsageError("--format github-matrix needs --shards N".into()).into());
        }
        (PlanFormat::GithubMatrix, Some(n)) => {
            serde_json::to_writer(&mut out, &matrix(&plan, n))?;
            writeln!(out)?;
        }
        (PlanFormat::Text, shards) => {
            out.write_all(orch_workflows::render_text(&plan).as_bytes())?;
            if let Some(n) = shards {
                for entry in matrix(&plan, n)["include"].as_array().into_iter().flatten() {
                    writeln!(out, "shard {}: {}", entry["shard"].as_str().unwrap_or_default(), entry["agents"])?;
                }
            }
        }
        (PlanFormat::Json, _) => {
            serde_json::to_writer_pretty(&mut out, &plan)?;
            writeln!(out)?;
        }
    }
    out.flush()?;
    Ok(Code::Success)
}
