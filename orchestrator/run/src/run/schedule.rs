//! The dispatcher: which agent runs when. Agents run through an [`Executor`] as tasks on
//! a `JoinSet` and report back when they finish; only this loop decides what starts
//! next. It sees the run only through a [`DispatchEnv`] (reporter, meter, stop reason,
//! cancel token, live report), so it runs without git, a sandbox or a model (see
//! `schedule/tests.rs`, which drives it with a fake executor in paused time).
//!
//! - An agent starts when every agent it `needs` (all instances, for a fan-out) has
//!   finished and succeeded (or may fail: `continue_on_failure`), and fewer than
//!   `concurrency` agents run. Among ready agents, plan order wins.
//! - An agent whose need failed, stopped at a limit or was skipped is skipped, with the
//!   reason.
//! - A dynamic fan-out expands, in place, when its source agent has finished.
//! - Deferred prompts are rendered just before their agent starts, from the results
//!   recorded so far.
//! - When the run stops (interrupt, run limit, fail-fast), nothing new starts; running
//!   agents see their tokens cancelled and finish with their partial work; everything
//!   still pending is skipped.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use orch_workflows::{AgentSpec, Plan, PlanNode, RunContext, expand_dynamic, render_prompt};
use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::agent::Finished;
use super::events::Meter;
use super::live_report::{LiveReport, Snapshot};
use super::report::{AgentReport, AgentStatus};
use super::select::Selection;
use super::{Reporter, Stop, StopReason, Tally};

#[cfg(test)]
mod tests;

/// Runs one agent to its end. The real executor is [`super::agent::Runner`] (worktree,
/// sandbox, session, model); the tests use a fake whose agents take a given time.
pub trait Executor {
    /// Runs `spec` with its rendered `prompt` (empty when `uses:` supplies the task).
    /// The future never fails: every failure is in the report it returns. A task that
    /// panics is reported as an infrastructure failure.
    fn execute(&self, spec: AgentSpec, prompt: String) -> impl Future<Output = Finished> + Send + 'static;
}

/// Where the dispatcher tells what it knows while agents run.
pub trait Progress: Send {
    /// Where the agents stand: when dispatch starts and after agents end, at most once
    /// per [`Progress::min_interval`] (a change is told once the interval has passed,
    /// unless dispatch ended first: the final report follows then).
    fn progress(&mut self, now: Snapshot<'_>);
    /// The shortest time between two [`Progress::progress`] calls; zero tells every
    /// change at once.
    fn min_interval(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// `report` is an agent's final report, the moment it ends (before the next
    /// [`Progress::progress`]).
    fn finished(&mut self, _report: &AgentReport) {}
    /// The run was interrupted (not stopped by a limit or fail-fast); called once,
    /// before anything is torn down.
    fn interrupted(&mut self, now: Snapshot<'_>);
}

/// The report on disk in the run directory (see [`LiveReport`]).
pub struct OnDisk {
    pub live: LiveReport,
}

impl Progress for OnDisk {
    fn progress(&mut self, now: Snapshot<'_>) {
        self.live.progress(now);
    }

    /// Each rewrite holds every agent (a few MB with a thousand reports): at most one a
    /// second. The journal keeps each ended agent in the meantime.
    fn min_interval(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }

    fn finished(&mut self, report: &AgentReport) {
        self.live.finished(report);
    }

    fn interrupted(&mut self, now: Snapshot<'_>) {
        self.live.interrupted(now, None);
    }
}

/// What the dispatcher needs from the run, and nothing more.
pub struct DispatchEnv {
    pub reporter: Arc<dyn Reporter>,
    /// The run's meters: once a run limit is used up, nothing new starts.
    pub meter: Arc<Meter>,
    /// The first reason the run stopped (set here on a run limit or fail-fast).
    pub stop: Arc<Stop>,
    /// Cancelled when the run stops: nothing new starts, running agents wind down.
    pub run_cancel: CancellationToken,
    /// The report on disk while agents run.
    pub progress: Box<dyn Progress>,
}

/// Where a node's needs stand.
enum Needs {
    Waiting,
    Ready,
    Blocked(String),
}

/// How the dispatcher is limited besides the plan.
pub struct Dispatch {
    pub concurrency: usize,
    /// `--max-fail N`: no new agent starts after N failures (running ones finish).
    pub max_fail: Option<usize>,
    pub selection: Selection,
}

/// Task id -> (agent id, agent key) of each running agent.
type RunningMap = HashMap<tokio::task::Id, (String, String)>;

/// Runs every selected agent of `plan` through `executor`; returns their reports in
/// plan order.
pub async fn run<E: Executor + Sync>(
    executor: &E,
    mut env: DispatchEnv,
    plan: &Plan,
    dispatch: Dispatch,
) -> Vec<AgentReport> {
    let Dispatch { concurrency, max_fail, selection } = dispatch;
    let began = std::time::Instant::now();
    // Prior results that feed this run but do not belong in its report (`--from`).
    let mut hidden: HashSet<String> = HashSet::new();
    let mut failures = 0;
    let mut no_new: Option<String> = None;
    let mut pending: Vec<PlanNode> = plan.nodes().cloned().collect();
    let mut order: Vec<String> = pending.iter().map(|n| n.id().to_string()).collect();
    let mut context = RunContext::new(plan);
    let mut outputs: HashMap<String, Value> = HashMap::new();
    let mut done: Vec<AgentReport> = Vec::new();
    let mut running: RunningMap = HashMap::new();
    let mut tasks: JoinSet<Finished> = JoinSet::new();
    let mut stopping = false;
    // The report on disk is rewritten when dispatch starts and after agents end, at most
    // once per `min_interval`.
    let mut changed_on_disk = true;
    let interval = env.progress.min_interval();
    let mut last_told: Option<tokio::time::Instant> = None;
    // What the reporter was last told of where the agents stand.
    let mut tallied: Option<Tally> = None;
    let mut tally = |done: &[AgentReport], hidden: &HashSet<String>, running: usize, pending: usize| {
        // Every hidden id is one of `done` (a prior result reused).
        let now = Tally { finished: done.len().saturating_sub(hidden.len()), running, pending };
        if tallied != Some(now) {
            tallied = Some(now);
            env.reporter.tally(now);
        }
    };
    loop {
        loop {
            let reused = admit(&mut pending, &selection, &mut context, &mut outputs, &mut hidden);
            let (resolved, expanded) =
                resolve(&mut pending, &mut order, &running, &done, &outputs, env.reporter.as_ref());
            let changed = !reused.is_empty() || !resolved.is_empty() || expanded;
            done.extend(reused);
            done.extend(resolved);
            if !changed {
                break;
            }
        }
        if !stopping && let Some(reason) = env.meter.exhausted() {
            // A run limit is used up: nothing more starts.
            env.stop.set(reason);
            env.run_cancel.cancel();
        }
        // An agent that could not start ends at once: its dependents are resolved
        // again before the run can end.
        let mut ended_unstarted = false;
        // Once the run is cancelled (limit, fail-fast, signal), nothing new starts, even
        // before the `select!` below has seen it.
        if !stopping && !env.run_cancel.is_cancelled() && no_new.is_none() {
            let mut i = 0;
            while tasks.len() < concurrency && i < pending.len() {
                let ready = match &pending[i] {
                    PlanNode::Agent(spec) => matches!(needs(&spec.needs, &pending, &running, &done, &[]), Needs::Ready),
                    PlanNode::DynamicFanOut(_) => false,
                };
                if !ready {
                    i += 1;
                    continue;
                }
                let PlanNode::Agent(mut spec) = pending.remove(i) else { continue };
                if spec.base == orch_workflows::Base::Needs {
                    spec.start_from = needed_commits(&spec.needs, &done, &order);
                }
                let prompt = match render_prompt(&spec, &context) {
                    Ok(Some(prompt)) => prompt,
                    // The agent definition it uses supplies the task.
                    Ok(None) if spec.uses.is_some() => String::new(),
                    Ok(None) => {
                        done.push(not_started(&spec, "it has no prompt".into()));
                        ended_unstarted = true;
                        continue;
                    }
                    Err(d) => {
                        done.push(not_started(&spec, format!("cannot render its prompt: {}", d.message)));
                        ended_unstarted = true;
                        continue;
                    }
                };
                env.reporter.agent_started(&spec.id);
                let (id, key) = (spec.id.clone(), spec.agent.clone());
                let waited = began.elapsed().as_millis() as u64;
                let job = executor.execute(spec, prompt);
                let handle = tasks.spawn(async move {
                    let mut finished = job.await;
                    finished.report.timings.waiting_ms = waited;
                    finished
                });
                running.insert(handle.id(), (id, key));
            }
        }
        tally(&done, &hidden, running.len(), pending.len());
        if tasks.is_empty() {
            if ended_unstarted {
                continue;
            }
            let why = env
                .stop
                .get()
                .map(|s| s.to_string())
                .or_else(|| no_new.clone())
                .unwrap_or_else(|| "the run stopped".into());
            for node in pending.drain(..) {
                done.push(skipped(&node, why.clone()));
            }
            tally(&done, &hidden, 0, 0);
            break;
        }
        if changed_on_disk && last_told.is_none_or(|t| t.elapsed() >= interval) {
            changed_on_disk = false;
            last_told = Some(tokio::time::Instant::now());
            env.progress.progress(snapshot(&done, &running, &pending, &order));
        }
        let due = last_told.map_or_else(tokio::time::Instant::now, |t| t + interval);
        tokio::select! {
            () = tokio::time::sleep_until(due), if changed_on_disk => {}
            joined = tasks.join_next_with_id() => {
                changed_on_disk = true;
                let Some(joined) = joined else { continue };
                let finished = match joined {
                    Ok((task, finished)) => {
                        running.remove(&task);
                        finished
                    }
                    Err(e) => {
                        let Some((id, key)) = running.remove(&e.id()) else { continue };
                        let mut r = AgentReport::empty(&id, &key, None, AgentStatus::Failed,
                            format!("its task ended abnormally: {e}; this is a bug in orch, please report it"));
                        r.infrastructure = true;
                        done.push(r);
                        continue;
                    }
                };
                let Finished { report, spec } = finished;
                env.progress.finished(&report);
                env.reporter.agent_finished(&report);
                context.record(&spec, &report.text, report.output.as_ref());
                if spec.fan_out.is_none() && let Some(output) = &report.output {
                    outputs.insert(spec.agent.clone(), output.clone());
                }
                if report.status == AgentStatus::Failed && !report.continue_on_failure {
                    failures += 1;
                    if plan.fail_fast {
                        env.stop.set(StopReason::FailFast(report.id.clone()));
                        env.run_cancel.cancel();
                    }
                    if max_fail.is_some_and(|n| failures >= n) && no_new.is_none() {
                        let why = format!("--max-fail {failures} was reached: no new agent started");
                        env.reporter.note(&why);
                        no_new = Some(why);
                    }
                }
                done.push(report);
            }
            () = env.run_cancel.cancelled(), if !stopping => {
                stopping = true;
                if env.stop.get().is_none() {
                    // An interrupt: write what is known before anything is torn down.
                    env.progress.interrupted(snapshot(&done, &running, &pending, &order));
                }
            }
        }
    }
    done.retain(|r| !hidden.contains(&r.id));
    sorted(done, &order)
}

/// What the dispatcher knows now, for the report on disk.
fn snapshot<'a>(
    done: &'a [AgentReport],
    running: &'a RunningMap,
    pending: &'a [PlanNode],
    order: &'a [String],
) -> Snapshot<'a> {
    Snapshot { done, running: running.values().map(|(id, key)| (id.as_str(), key.as_str())).collect(), pending, order }
}

/// Takes out of `pending` the agents this process does not run: those with a prior
/// result (recorded as if they had just run; returned, and hidden from the report
/// unless resuming) and those not selected (dropped).
fn admit(
    pending: &mut Vec<PlanNode>,
    selection: &Selection,
    context: &mut RunContext,
    outputs: &mut HashMap<String, Value>,
    hidden: &mut HashSet<String>,
) -> Vec<AgentReport> {
    let mut reused = Vec::new();
    selection.assign_new(pending.iter().filter_map(|n| match n {
        PlanNode::Agent(spec) => Some(spec),
        PlanNode::DynamicFanOut(_) => None,
    }));
    pending.retain(|node| {
        let PlanNode::Agent(spec) = node else { return true };
        if let Some(prior) = selection.prior.get(&spec.id) {
            context.record(spec, &prior.text, prior.output.as_ref());
            if spec.fan_out.is_none()
                && let Some(output) = &prior.output
            {
                outputs.insert(spec.agent.clone(), output.clone());
            }
            if !selection.keep_prior {
                hidden.insert(spec.id.clone());
            }
            reused.push(prior.clone());
            return false;
        }
        selection.selects(&spec.id, &spec.agent)
    });
    reused
}

/// Skips nodes whose needs failed and expands dynamic fan-outs whose source finished,
/// until nothing changes.
fn resolve(
    pending: &mut Vec<PlanNode>,
    order: &mut Vec<String>,
    running: &RunningMap,
    done: &[AgentReport],
    outputs: &HashMap<String, Value>,
    reporter: &dyn Reporter,
) -> (Vec<AgentReport>, bool) {
    let mut finished: Vec<AgentReport> = Vec::new();
    let mut expanded = false;
    loop {
        let mut changed = false;
        let mut i = 0;
        while i < pending.len() {
            let wanted = match &pending[i] {
                PlanNode::Agent(spec) => &spec.needs,
                PlanNode::DynamicFanOut(d) => &d.needs,
            };
            match needs(wanted, pending, running, done, &finished) {
                Needs::Waiting => i += 1,
                Needs::Blocked(why) => {
                    let node = pending.remove(i);
                    finished.push(skipped(&node, why));
                    changed = true;
                }
                Needs::Ready => {
                    let PlanNode::DynamicFanOut(d) = &pending[i] else {
                        i += 1;
                        continue;
                    };
                    let source = outputs.get(&d.source_agent).cloned().unwrap_or(Value::Null);
                    let key = d.id.clone();
                    match expand_dynamic(d, &source) {
                        Ok(specs) => {
                            reporter.note(&format!("{key} fans out to {} agents", specs.len()));
                            let ids: Vec<String> = specs.iter().map(|s| s.id.clone()).collect();
                            if let Some(at) = order.iter().position(|o| *o == key) {
                                order.splice(at..=at, ids);
                            }
                            pending.splice(i..=i, specs.into_iter().map(PlanNode::Agent));
                            expanded = true;
                        }
                        Err(diagnostic) => {
                            let mut r = AgentReport::empty(
                                &key,
                                &key,
                                None,
                                AgentStatus::Failed,
                                format!("cannot expand its fan-out: {}", diagnostic.message),
                            );
                            r.reason = Some(format!("{} ({})", diagnostic.message, diagnostic.hint));
                            pending.remove(i);
                            finished.push(r);
                        }
                    }
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    (finished, expanded)
}

/// Where `wanted` stands, given the reports in `done` and `more` (reports not yet
/// moved into `done`).
fn needs(
    wanted: &[String],
    pending: &[PlanNode],
    running: &RunningMap,
    done: &[AgentReport],
    more: &[AgentReport],
) -> Needs {
    for key in wanted {
        if let Some(bad) = done.iter().chain(more).find(|r| r.agent == *key && !r.satisfies_needs()) {
            let what = match bad.status {
                AgentStatus::Partial => "stopped at a limit",
                AgentStatus::Skipped => "was skipped",
                AgentStatus::Cancelled => "was cancelled",
                _ => "failed",
            };
            return Needs::Blocked(format!("it needs `{}`, which {what}", bad.id));
        }
    }
    let busy = |key: &String| {
        pending.iter().any(|n| match n {
            PlanNode::Agent(s) => s.agent == *key,
            PlanNode::DynamicFanOut(d) => d.id == *key,
        }) || running.values().any(|(_, k)| k == key)
    };
    if wanted.iter().any(busy) { Needs::Waiting } else { Needs::Ready }
}

/// `base: needs`: the commits of the agents `wanted` names (every instance of each, in
/// plan order), as `(agent id, commit)`; agents that changed nothing have none.
fn needed_commits(wanted: &[String], done: &[AgentReport], order: &[String]) -> Vec<(String, String)> {
    let position = |id: &str| order.iter().position(|o| o == id).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    for key in wanted {
        let mut instances: Vec<&AgentReport> = done.iter().filter(|r| r.agent == *key).collect();
        instances.sort_by_key(|r| position(&r.id));
        out.extend(instances.into_iter().filter_map(|r| r.commit.clone().map(|c| (r.id.clone(), c))));
    }
    out
}

fn not_started(spec: &AgentSpec, why: String) -> AgentReport {
    let item = spec.fan_out.as_ref().map(|f| f.item.clone());
    let mut r = AgentReport::empty(&spec.id, &spec.agent, item, AgentStatus::Failed, why);
    r.continue_on_failure = spec.continue_on_failure;
    r
}

fn skipped(node: &PlanNode, why: String) -> AgentReport {
    match node {
        PlanNode::Agent(spec) => {
            let item = spec.fan_out.as_ref().map(|f| f.item.clone());
            let mut r = AgentReport::empty(&spec.id, &spec.agent, item, AgentStatus::Skipped, why);
            r.continue_on_failure = spec.continue_on_failure;
            r
        }
        PlanNode::DynamicFanOut(d) => AgentReport::empty(&d.id, &d.id, None, AgentStatus::Skipped, why),
    }
}

/// `reports` in plan order (ids not in `order` last, as they came).
pub(super) fn sorted(mut reports: Vec<AgentReport>, order: &[String]) -> Vec<AgentReport> {
    let at: HashMap<&str, usize> = order.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    reports.sort_by_key(|r| at.get(r.id.as_str()).copied().unwrap_or(usize::MAX));
    reports
}
