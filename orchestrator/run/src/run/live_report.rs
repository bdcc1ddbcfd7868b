//! The report on disk while agents run. `report.json` and `report.md` are rewritten
//! (each through a temporary file and a rename) when dispatch starts and after agents
//! end, with every agent of the plan: finished ones as they ended, running ones
//! `running`, the others `pending`; the run's status is `running` and its exit code
//! 137, what a caller saw if the process was killed. So a run killed at any moment
//! leaves a report that `orch recover` and `--resume` start from.
//!
//! Rewriting the whole report costs in proportion to the number of agents, so it
//! happens at most once a second; in between, each agent that ends is appended to the
//! journal (`agents.jsonl`), which [`report::read`] lays over the report. A crash
//! loses no ended agent either way.
//!
//! On the first interrupt the report is written once more, before teardown: status
//! `interrupted`, the real exit code (130 for SIGINT, 143 for SIGTERM), the `stopped`
//! reason, running agents `cancelled`, and `partial: true` until the final report
//! replaces it.

use std::path::Path;
use std::time::SystemTime;

use orch_workflows::PlanNode;

use super::StopReason;
use super::github;
use super::recover::KILLED;
use super::report::{self, AgentReport, AgentStatus, RunReport, RunStatus, Totals};
use crate::clock;
use crate::exit::Code;
use crate::signals::Interrupts;

/// The report of a run in progress.
pub struct LiveReport {
    base: RunReport,
    github: Option<github::Actions>,
    interrupts: Interrupts,
    interrupted: bool,
}

/// What the dispatcher knows at one moment.
pub struct Snapshot<'a> {
    pub done: &'a [AgentReport],
    /// `(id, key)` of each running agent.
    pub running: Vec<(&'a str, &'a str)>,
    pub pending: &'a [PlanNode],
    /// Agent ids in plan order.
    pub order: &'a [String],
}

impl LiveReport {
    pub fn new(base: RunReport, github: Option<github::Actions>, interrupts: Interrupts) -> Self {
        LiveReport { base, github, interrupts, interrupted: false }
    }

    /// Rewrites the report with where the agents stand now (not after an interrupt:
    /// the interrupted report stays until the final one).
    pub fn progress(&self, run_dir: &Path, now: Snapshot<'_>) {
        if self.interrupted {
            return;
        }
        let mut r = self.base.clone();
        r.agents = agents(now, AgentStatus::Running, "running");
        r.status = RunStatus::Running;
        r.exit_code = KILLED;
        r.partial = true;
        r.totals = Totals::of(&r.agents, None);
        r.finished_at = clock::rfc3339(SystemTime::now());
        if let Err(e) = report::write(run_dir, &r) {
            tracing::warn!("cannot rewrite the report: {e}");
        }
    }

    /// Appends `report`, an agent's final report, to the run's journal
    /// ([`report::JOURNAL`]), which [`report::read`] lays over a report still in
    /// progress: an ended agent is on disk at once, whenever the whole report is next
    /// rewritten.
    pub fn finished(&self, run_dir: &Path, report: &AgentReport) {
        if let Err(e) = report::journal(run_dir, report) {
            tracing::warn!("cannot add {} to the run's journal: {e}", report.id);
        }
    }

    /// Writes the report of an interrupted run, once, before teardown.
    pub fn interrupted(&mut self, run_dir: &Path, now: Snapshot<'_>, stop: Option<StopReason>) {
        if std::mem::replace(&mut self.interrupted, true) {
            return;
        }
        let code = self.interrupts.code().unwrap_or(Code::Interrupted);
        let stop = stop.or_else(|| self.interrupts.reason());
        let mut r = self.base.clone();
        r.agents = agents(now, AgentStatus::Cancelled, "interrupted while running");
        r.totals = Totals::of(&r.agents, None);
        r.status = RunStatus::Interrupted;
        r.exit_code = code as u8;
        r.partial = true;
        r.stopped = Some(match stop {
            Some(s) => format!("{s} (this report was written before teardown; the final one replaces it)"),
            None => "the run was stopped (this report was written before teardown; the final one replaces it)".into(),
        });
        r.finished_at = clock::rfc3339(SystemTime::now());
        if let Err(e) = report::write(run_dir, &r) {
            tracing::warn!("cannot write the partial report: {e}");
        }
        if let Some(g) = &self.github
            && let Err(e) = g.write_summary(&r)
        {
            tracing::warn!("cannot write the partial GitHub step summary: {e}");
        }
    }
}

/// Every agent of the plan, in plan order: finished, then running ones as `running`
/// (with `why`), then those not started as `pending`.
fn agents(now: Snapshot<'_>, running: AgentStatus, why: &str) -> Vec<AgentReport> {
    let mut all: Vec<AgentReport> = now.done.to_vec();
    all.extend(now.running.iter().map(|(id, key)| AgentReport::empty(id, key, None, running, why.into())));
    for node in now.pending {
        let (id, key, item) = match node {
            PlanNode::Agent(spec) => (&spec.id, &spec.agent, spec.fan_out.as_ref().map(|f| f.item.clone())),
            PlanNode::DynamicFanOut(d) => (&d.id, &d.id, None),
        };
        let mut r = AgentReport::empty(id, key, item, AgentStatus::Pending, "not started yet".into());
        if let PlanNode::Agent(spec) = node {
            r.continue_on_failure = spec.continue_on_failure;
        }
        all.push(r);
    }
    super::schedule::sorted(all, now.order)
}
