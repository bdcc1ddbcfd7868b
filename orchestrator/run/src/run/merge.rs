//! `orch merge DIR...`: joins the run directories of shards (or of a run and its
//! resumption) into one report, and runs synthesis once over all the agents.
//!
//! Agents are taken in the order of the directories given, each id once: a later copy
//! replaces an earlier one only if it succeeded and the earlier did not. Their
//! transcripts and patches are copied into the merged directory. Overlaps, totals,
//! the status and the exit code are computed again over the whole; fetched branches and
//! merges are listed as each shard reported them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::error::Context as _;
use tokio_util::sync::CancellationToken;

use super::report::{self, AgentReport, AgentStatus};
use super::{conclude, events, github, publish, synthesis};
use crate::exit::{Code, UsageError};
use crate::options::MergeOptions;
use crate::{clock, provider, signals, workflow};

/// `orch merge`.
pub async fn run(args: MergeOptions) -> crate::error::Result<Code> {
    let started_at = SystemTime::now();
    let clock_start = Instant::now();
    let mut reports = Vec::new();
    for dir in &args.dirs {
        let r = report::read(dir)?;
        reports.push((dir.clone(), r));
    }
    let Some((_, first)) = reports.first() else {
        return Err(UsageError("give at least one run directory to merge".into()).into());
    };
    let publishing = !matches!(args.publish, None | Some(crate::publish::PublishMode::Off));
    if publishing && args.workflow.is_none() {
        return Err(
            UsageError("--publish needs --workflow: what to publish is the workflow's `publish:`".into()).into()
        );
    }
    let (loaded, plan) = match &args.workflow {
        Some(path) => {
            // The trust rule of `orch run`: off the trusted ref the workflow (whose
            // synthesis prompt and model are used here) comes from that ref. No
            // agent runs here, so its sandbox settings are not checked.
            let trust = crate::repo_config::Trust::from_env(args.trust_repo_config, args.config_ref.clone());
            let workflow = match crate::workflow_trust::load(path, None, &trust)? {
                Ok(loaded) => loaded.workflow,
                Err(code) => return Ok(code),
            };
            match workflow::plan(&workflow, &args.inputs) {
                Ok(p) => (Some(workflow), Some(p)),
                Err(code) => return Ok(code),
            }
        }
        None => (None, None),
    };
    let run_id = format!("merge-{}", clock::run_id());
    let mut fresh = super::run_dir(args.out.as_deref(), &run_id)?;
    let out = fresh.path().to_path_buf();

    // Each id once, in the order given.
    let mut agents: Vec<AgentReport> = Vec::new();
    let mut sources: Vec<PathBuf> = Vec::new();
    for (dir, r) in &reports {
        for a in &r.agents {
            match agents.iter().position(|b| b.id == a.id) {
                Some(i) if agents[i].status != AgentStatus::Succeeded && a.status == AgentStatus::Succeeded => {
                    agents[i] = a.clone();
                    sources[i] = dir.clone();
                }
                Some(_) => {}
                None => {
                    agents.push(a.clone());
                    sources.push(dir.clone());
                }
            }
        }
    }
    if let Some(plan) = &plan {
        let order: Vec<&str> = plan.nodes().map(|n| n.id()).collect();
        let rank = |a: &AgentReport| {
            order.iter().position(|o| *o == a.id).or_else(|| order.iter().position(|o| *o == a.agent))
        };
        let mut paired: Vec<(AgentReport, PathBuf)> = agents.into_iter().zip(sources).collect();
        paired.sort_by_key(|(a, _)| rank(a).unwrap_or(usize::MAX));
        (agents, sources) = paired.into_iter().unzip();
    }
    for (a, dir) in agents.iter_mut().zip(&sources) {
        for rel in [&mut a.transcript, &mut a.patch].into_iter().flatten() {
            copy_into(dir, &out, rel)?;
        }
    }

    let mut merged = first.clone();
    merged.run_id = run_id.clone();
    merged.run_dir = out.clone();
    merged.started_at = clock::rfc3339(started_at);
    merged.setup = None;
    merged.synthesis = None;
    merged.stopped = None;
    merged.integration.fetched = reports.iter().flat_map(|(_, r)| r.integration.fetched.clone()).collect();
    merged.integration.merge = None;
    merged.integration.error =
        reports.iter().filter_map(|(_, r)| r.integration.error.clone()).reduce(|a, b| a + "; " + &b);
    merged.timings = report::RunTimings {
        agents_ms: reports.iter().map(|(_, r)| r.timings.agents_ms).max().unwrap_or(0),
        ..Default::default()
    };
    let changed: Vec<(String, Vec<PathBuf>)> = agents
        .iter()
        .filter(|a| a.commit.is_some())
        .map(|a| (a.id.clone(), a.changed_files.iter().map(|f| f.path.clone()).collect()))
        .collect();
    // The shards' run clones are gone; their branches were fetched into the repository.
    let user_git = git2::Repository::discover(&merged.repo).ok().map(|r| r.path().to_path_buf());
    merged.overlaps = super::overlaps_of(user_git, &agents, changed).await;
    // From here on the merge changes the repository (an integration branch), and the
    // directory holds its record.
    fresh.keep();
    if let Some(plan) = &plan {
        integrate_shards(&args, plan, &reports, &agents, &sources, &mut merged).await;
    }

    // Synthesis once, over everything.
    let custom = plan.as_ref().and_then(|p| p.synthesis.prompt.clone());
    let ran = agents.iter().filter(|a| a.status != AgentStatus::Skipped).count();
    let mut interrupted = None;
    if ran > 0 && (agents.len() >= 2 || custom.is_some()) {
        let model_args = args.models.with_default(|| {
            plan.as_ref()
                .and_then(|p| p.synthesis.model.clone().or_else(|| p.model.clone()))
                .unwrap_or_else(|| super::DEFAULT_MODEL.into())
        });
        let provider = provider::build(&model_args)?;
        let cancel = CancellationToken::new();
        let interrupts = signals::watch(cancel.clone())?;
        let task =
            merged.workflow.description.clone().unwrap_or_else(|| format!("The workflow `{}`.", merged.workflow.name));
        let env = synthesis::SynthesisEnv {
            provider: provider.as_ref(),
            prices: provider::prices(&model_args)?,
            fallback_model: model_args.fallback_model.clone(),
            run_dir: &out,
            meter: Arc::new(events::Meter::new(orch_workflows::Limits::default())),
            stop: Arc::new(super::Stop::default()),
            run_cancel: cancel,
            reporter: args.reporter.clone(),
            json: args.json,
        };
        let at = Instant::now();
        let spec = plan.as_ref().map(|p| p.synthesis.clone()).unwrap_or_else(|| orch_workflows::SynthesisSpec {
            model: None,
            prompt: None,
            strategy: Default::default(),
            group_size: None,
            context_window: None,
        });
        let concurrency = plan.as_ref().and_then(|p| p.concurrency).unwrap_or(super::DEFAULT_CONCURRENCY).max(1);
        let settings = synthesis::Settings::of(&spec, model_args.model.clone(), concurrency as usize);
        merged.synthesis = Some(synthesis::run(&env, &task, &agents, &settings).await);
        merged.timings.synthesis_ms = at.elapsed().as_millis() as u64;
        env.reporter.finish();
        interrupted = interrupts.code();
    }
    merged.agents = agents;
    let code = Code::for_run(&merged, false, interrupted);
    conclude(&mut merged, code, clock_start);
    // The merged result is published as `orch run` publishes a whole run.
    merged.publish = None;
    let code = match &loaded {
        Some(w) => super::publish_to_github(w, args.publish, None, &mut merged, code, clock_start).await,
        None => code,
    };
    publish(&merged, args.junit.as_deref(), github::Actions::detect().as_ref())?;
    crate::notice::note(format_args!(
        "merged {} run directories, {} agents: {}; report: {}",
        reports.len(),
        merged.agents.len(),
        super::status_word(merged.status),
        out.join("report.md").display()
    ));
    if args.json {
        args.reporter.json_line(&crate::run_event::RunEvent::run_finished(&merged).to_value());
    } else if let Some(s) = &merged.synthesis {
        args.reporter.answer(s.text.trim_end()).context("cannot write the answer to stdout")?;
    }
    Ok(code)
}

/// With `integrate: merge` or `squash`: the integration branch across the shards,
/// `orch/<merge run>/integration` in the repository (`--repo`, else the current
/// directory), built from the agents' patches in agent order (see
/// [`crate::git::integrate_patches`]). What fails is reported in the integration
/// section, never as an error of the merge.
async fn integrate_shards(
    args: &MergeOptions,
    plan: &orch_workflows::Plan,
    reports: &[(PathBuf, report::RunReport)],
    agents: &[AgentReport],
    sources: &[PathBuf],
    merged: &mut report::RunReport,
) {
    use orch_workflows::IntegrateMode;
    if !matches!(plan.integrate.mode, IntegrateMode::Merge | IntegrateMode::Squash) {
        return;
    }
    let fail = |merged: &mut report::RunReport, why: String| {
        let before = merged.integration.error.take().map(|e| format!("{e}; ")).unwrap_or_default();
        merged.integration.error =
            Some(format!("{before}cannot build the integration branch across the shards: {why}"));
    };
    let base = merged.base.clone();
    if let Some((dir, other)) = reports.iter().find(|(_, r)| r.base != base) {
        let why =
            format!("{} started from {} and the first from {base}; merge runs of one base", dir.display(), other.base);
        return fail(merged, why);
    }
    let mut items = Vec::new();
    for (a, dir) in agents.iter().zip(sources) {
        let Some(rel) = &a.patch else { continue };
        if !matches!(a.status, AgentStatus::Succeeded | AgentStatus::Partial) {
            continue;
        }
        if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            return fail(merged, format!("the report of `{}` names a patch outside its run directory", a.id));
        }
        match std::fs::read(dir.join(rel)) {
            Ok(patch) => items.push(crate::git::PatchItem {
                agent: a.id.clone(),
                patch,
                from_base: a.start.is_none(),
                message: super::integration_message(plan.integrate.message.as_deref(), a),
            }),
            Err(e) => return fail(merged, format!("cannot read the patch of `{}`: {e}", a.id)),
        }
    }
    let repo = match &args.repo {
        Some(repo) => repo.clone(),
        None => match std::env::current_dir() {
            Ok(dir) => dir,
            Err(e) => return fail(merged, format!("cannot read the current directory: {e}")),
        },
    };
    let branch = format!("orch/{}/integration", merged.run_id);
    match crate::git::integrate_patches(&repo, &base, items, &branch, &crate::git::Author::orch()).await {
        Ok((outcomes, tip)) => {
            let merges = outcomes
                .into_iter()
                .map(|o| {
                    let branch = agents.iter().find(|a| a.id == o.branch).and_then(|a| a.branch.clone());
                    report::MergeEntry {
                        agent: o.branch.clone(),
                        branch: branch.unwrap_or(o.branch),
                        merged: o.merged,
                        conflicts: o.conflicts,
                    }
                })
                .collect();
            merged.integration.merge = Some(report::MergeReport { branch: branch.clone(), merges });
            merged.integration.fetched.push(report::FetchedBranch { branch, commit: tip.to_string() });
        }
        Err(e) => fail(merged, e.to_string()),
    }
}

/// Copies `src_dir/rel` to `out/rel`.
fn copy_into(src_dir: &Path, out: &Path, rel: &Path) -> crate::error::Result<()> {
    if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(crate::error::Error::Message(format!(
            "a report names the file {} outside its run directory; refusing to copy it",
            rel.display()
        )));
    }
    let (from, to) = (src_dir.join(rel), out.join(rel));
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    match std::fs::copy(&from, &to) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!(file = %from.display(), "a file the report names is missing; not copied");
            Ok(())
        }
        Err(e) => {
            Err(crate::error::Error::Failed { what: format!("cannot copy {}", from.display()), cause: Box::new(e) })
        }
    }
}
