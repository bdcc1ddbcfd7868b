//! `orch validate` and `orch plan`: load a workflow, report every diagnostic with its
//! position, and print what a run would do. Both make every check `orch run` makes
//! before it starts (the same loader, against the repository's `.mcp.json`); neither
//! touches the network, a sandbox or a model.
//!
//! Both read the workflow and the repository around the current directory by the trust
//! rule (the trusted ref unless it is checked out, see `orch_run::repo_config`), as
//! `orch run` does: its agent files, skills and slash commands. A workflow that names a
//! skill or command the repository does not have is invalid; `orch plan` shows each
//! agent with its agent definition applied (tools, model, source file), its skills and
//! its expanded slash command, which file won each name clash, and where each piece of
//! configuration came from.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use orch_run::repo_config::{RepoConfig, RepoFiles, Trust};
use orch_run::workflow::plan_with;
use orch_workflows::{Plan, Workflow};

use crate::cli::{PlanArgs, PlanFormat, ValidateArgs};
use crate::exit::{Code, UsageError};

/// Loads `path` with every check `orch run` makes before it starts anything, against
/// the repository of the current directory (the workflow and its `.mcp.json` read under
/// the same trust rule as a run's), or prints why not; with where the workflow came from.
fn load(path: &Path, trust: &Trust) -> Result<(Workflow, String), Code> {
    match orch_run::workflow_trust::load(path, None, trust) {
        Ok(loaded) => loaded.map(|l| (l.workflow, l.from)),
        Err(e) => {
            say!("error: {e}");
            Err(Code::Usage)
        }
    }
}

/// The agent files, skills and commands of the repository around the current
/// directory, and where they were read; `None` (with a warning) when they cannot be read.
fn repo_files(trust: &Trust) -> Option<(RepoFiles, String)> {
    let (files, config) = repo_config(trust)?;
    Some((files, config.describe()))
}

/// [`repo_files`], with the configuration they were read through.
fn repo_config(trust: &Trust) -> Option<(RepoFiles, RepoConfig)> {
    let cwd = std::env::current_dir().ok()?;
    let read = RepoConfig::resolve(&cwd, trust).and_then(|config| Ok((config.extension_files()?, config)));
    match read {
        Ok(found) => {
            // What Claude Code would not load either (a file that does not parse, with
            // its line) is named here, so that `validate` and `plan` do not hide it.
            for warning in found.0.warnings() {
                say!("warning: {warning}");
            }
            Some(found)
        }
        Err(e) => {
            say!("warning: the repository's agent files, skills and commands were not read: {e}");
            None
        }
    }
}

/// The diagnostics of what `workflow` names that `files` lack, printed; the exit code
/// when there are any.
fn check_names(workflow: &Workflow, files: Option<&(RepoFiles, String)>) -> Option<Code> {
    let (files, from) = files?;
    let diagnostics = files.check(workflow);
    if diagnostics.is_empty() {
        return None;
    }
    say_raw!("{}", orch_workflows::render_diagnostics(&diagnostics));
    let n = diagnostics.len();
    say!(
        "orch: the workflow is invalid ({n} error{}; the repository was read from {from})",
        if n == 1 { "" } else { "s" }
    );
    Some(Code::Usage)
}

/// `orch validate`: exit 0 and one line on stderr when the file is valid.
pub fn validate(args: &ValidateArgs) -> Code {
    let trust = Trust::from_env(args.trust_repo_config, args.config_ref.clone());
    match load(&args.workflow, &trust) {
        Ok((workflow, _)) => {
            let files = repo_files(&trust);
            if let Some(code) = check_names(&workflow, files.as_ref()) {
                return code;
            }
            for warning in orch_workflows::publish::findings_warnings(&workflow) {
                say!("warning: {}: {warning}", args.workflow.display());
            }
            let agents = workflow.agents.len();
            say!(
                "orch: {} is valid: workflow `{}`, {agents} agent{}",
                args.workflow.display(),
                workflow.name,
                if agents == 1 { "" } else { "s" }
            );
            let denies = workflow.agents.iter().flat_map(|a| a.permissions.deny.iter());
            let denies = workflow.defaults.permissions.deny.iter().chain(denies).map(String::as_str);
            if let Some(note) = orch_run::settings_permissions::bash_gap_note(denies) {
                say!("orch: {note}");
            }
            Code::Success
        }
        Err(code) => code,
    }
}

/// One entry per shard that has work: `shard` (`K/N`, for `orch run --shard`), the
/// `agents` it runs that are known now, and, when the plan has dynamic fan-outs,
/// `fan_out`: what it will run of them once their items are known (each fan-out's
/// instances are balanced over the N shards as one group, so every shard may get some
/// and every shard is listed). A shard with nothing to run is left out.
fn matrix(plan: &Plan, shards: u32) -> serde_json::Value {
    let known: Vec<&str> = plan.agents().map(|spec| spec.id.as_str()).collect();
    let assigned = orch_run::run::assign_shards(known.iter().copied(), shards);
    let dynamic: Vec<String> = plan
        .nodes()
        .filter_map(|n| match n {
            orch_workflows::PlanNode::DynamicFanOut(d) => Some(format!(
                "{}: its share of the items of `{}`, balanced over {shards} shards when `{}` is done",
                d.id, d.source, d.source_agent
            )),
            orch_workflows::PlanNode::Agent(_) => None,
        })
        .collect();
    let include: Vec<serde_json::Value> = (1..=shards)
        .filter_map(|k| {
            let agents: Vec<&str> = known.iter().copied().filter(|id| assigned.get(*id) == Some(&k)).collect();
            if agents.is_empty() && dynamic.is_empty() {
                return None;
            }
            let mut entry = serde_json::json!({ "shard": format!("{k}/{shards}"), "agents": agents.join(" ") });
            if !dynamic.is_empty() {
                entry["fan_out"] = serde_json::json!(dynamic.join("; "));
            }
            Some(entry)
        })
        .collect();
    serde_json::json!({ "include": include })
}

/// `orch plan`: the plan on stdout, as text or JSON.
pub fn show(args: &PlanArgs) -> anyhow::Result<Code> {
    let trust = Trust::from_env(args.trust_repo_config, args.config_ref.clone());
    let (workflow, workflow_from) = match load(&args.workflow, &trust) {
        Ok(w) => w,
        Err(code) => return Ok(code),
    };
    let config = repo_config(&trust);
    let files = config.as_ref().map(|(files, config)| (files.clone(), config.describe()));
    if let Some(code) = check_names(&workflow, files.as_ref()) {
        return Ok(code);
    }
    let changes = orch_run::changes::ChangesRequest { diff_base: args.diff_base.clone(), ..Default::default() };
    let mut plan = match plan_with(&workflow, &args.inputs, &changes) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    if let Some((files, _)) = &files {
        for id in files.agents.apply_to_plan(&workflow, &mut plan) {
            say!("warning: agent `{id}` says `uses:`, but no agent definition has that name");
        }
        for e in orch_workflows::commands::apply_to_plan(&files.commands, &mut plan) {
            say!("warning: {e}");
        }
        files.skills.apply_to_plan(&mut plan);
    }
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
            if let Some((files, from)) = &files {
                out.write_all(repo_section(files, from).as_bytes())?;
            }
            out.write_all(sources_section(&workflow_from, config.as_ref()).as_bytes())?;
            if let Some(n) = shards {
                for entry in matrix(&plan, n)["include"].as_array().into_iter().flatten() {
                    writeln!(out, "shard {}: {}", entry["shard"].as_str().unwrap_or_default(), entry["agents"])?;
                    if let Some(fan_out) = entry["fan_out"].as_str() {
                        writeln!(out, "  and {fan_out}")?;
                    }
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

/// Where each piece of configuration that can run code or widen the sandbox came from,
/// by the trust rule: the workflow, settings and hooks, MCP servers, agent files,
/// skills and commands.
fn sources_section(workflow: &str, config: Option<&(RepoFiles, RepoConfig)>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\nconfiguration sources:");
    let _ = writeln!(out, "  workflow (with backend, network, hooks, MCP servers): {workflow}");
    let Some((files, config)) = config else {
        let _ = writeln!(out, "  repository files: not read (see the warning on stderr)");
        return out;
    };
    let from = config.describe();
    let _ = writeln!(out, "  repository files from {from}: {}", config.why());
    let present = |paths: &[&str]| {
        let found: Vec<&str> = paths.iter().copied().filter(|p| matches!(config.read(p), Ok(Some(_)))).collect();
        if found.is_empty() { "(none)".to_string() } else { found.join(", ") }
    };
    let count = |n: usize| if n == 0 { "(none)".to_string() } else { n.to_string() };
    let _ = writeln!(out, "    settings and hooks: {}", present(&[".orch/settings.yaml", ".claude/settings.json"]));
    let _ = writeln!(out, "    MCP servers: {}", present(&[".mcp.json"]));
    let _ = writeln!(out, "    agent files: {}", count(files.agents.agents.len()));
    let _ = writeln!(out, "    skills: {}", count(files.skills.skills.len()));
    let _ = writeln!(out, "    slash commands: {}", count(files.commands.commands.len()));
    out
}

/// What `orch plan` shows of the repository's agent files, skills and commands: where
/// they come from, which definition each name resolves to (and which lost a clash, by
/// the precedence `.orch/agents` over `.claude/agents`, project over plugin).
fn repo_section(files: &RepoFiles, from: &str) -> String {
    let mut out = String::new();
    if files.agents.agents.is_empty() && files.skills.skills.is_empty() && files.commands.commands.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\nrepository configuration (from {from}):");
    if !files.agents.agents.is_empty() {
        let _ = writeln!(
            out,
            "  agent definitions (on a name clash .orch/agents wins over .claude/agents, project over plugin):"
        );
        for agent in &files.agents.agents {
            let tools = match &agent.tools {
                Some(tools) => tools.join(", "),
                None => "(the caller's)".to_string(),
            };
            let mut line = format!("    {}: {}  tools: {tools}", agent.name, agent.source);
            if !agent.disallowed_tools.is_empty() {
                let _ = write!(line, " minus {}", agent.disallowed_tools.join(", "));
            }
            let _ = write!(line, "  model: {}", agent.model.as_deref().unwrap_or("(the caller's)"));
            let _ = writeln!(out, "{line}");
            for clash in files.agents.clashes.iter().filter(|c| c.name == agent.name) {
                let _ = writeln!(out, "      also defined in {}: ignored", clash.ignored);
            }
        }
    }
    if !files.skills.skills.is_empty() {
        let _ = writeln!(out, "  skills (on a name clash .orch/skills wins over .claude/skills):");
        for skill in &files.skills.skills {
            let hidden = if skill.model_invocable { "" } else { "  (disable-model-invocation: not offered)" };
            let _ = writeln!(out, "    {}: {}{hidden}", skill.name, skill.source);
        }
    }
    if !files.commands.commands.is_empty() {
        let _ = writeln!(out, "  slash commands:");
        for command in &files.commands.commands {
            let mut line = format!("    /{}: {}", command.name, command.source);
            if let Some(d) = &command.description {
                let _ = write!(line, "  {}", d.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            let _ = writeln!(out, "{line}");
        }
    }
    out
}
