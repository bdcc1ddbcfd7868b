//! Where an agent's events go during a run: its transcript (`transcripts/<agent>.jsonl`,
//! one JSON object per line, written and flushed as the agent goes, so a crash loses
//! nothing), the run-wide meters that enforce the run's limits, and `--json` output.
//! Reporters only observe: none reaches back into the loop except the meter, which
//! cancels the run's token when a run limit is crossed.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use orch_agents::{Event, EventSink};
use tokio_util::sync::CancellationToken;

use super::StopReason;

/// Appends JSON lines to a transcript file, flushing each.
pub struct Transcript {
    file: Mutex<File>,
}

impl Transcript {
    /// Creates (or truncates) the transcript at `path`, making its directory.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        Ok(Self { file: Mutex::new(File::create(path)?) })
    }

    /// Writes one JSON value as a line.
    pub fn record(&self, value: &serde_json::Value) {
        let Ok(mut line) = serde_json::to_vec(value) else { return };
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = file.write_all(&line) {
            tracing::warn!("cannot write a transcript line: {e}");
        }
    }
}

/// Run-wide totals, checked against the run's limits as usage comes in.
#[derive(Debug, Default)]
pub struct Meter {
    /// Micro-dollars, so the total fits an atomic.
    cost_micros: AtomicU64,
    tokens: AtomicU64,
    turns: AtomicU32,
    limits: orch_workflows::Limits,
}

impl Meter {
    pub fn new(limits: orch_workflows::Limits) -> Self {
        Self { limits, ..Self::default() }
    }

    /// Spend so far, in dollars.
    pub fn cost_usd(&self) -> f64 {
        self.cost_micros.load(Ordering::SeqCst) as f64 / 1e6
    }

    /// The run's limits left for one more agent: each of `own`, capped by what the run
    /// has left.
    pub fn cap(&self, own: orch_workflows::Limits) -> orch_workflows::Limits {
        let left_cost = self.limits.max_cost_usd.map(|l| (l - self.cost_usd()).max(0.0));
        let left_tokens = self.limits.max_tokens.map(|l| l.saturating_sub(self.tokens.load(Ordering::SeqCst)));
        let left_turns = self.limits.max_turns.map(|l| l.saturating_sub(self.turns.load(Ordering::SeqCst)));
        own.capped_by(orch_workflows::Limits::budgets(left_turns, left_tokens, left_cost))
    }

    /// Which run limit is used up, if any: then nothing new may start.
    pub fn exhausted(&self) -> Option<StopReason> {
        self.over_budget().or_else(|| self.over_turns(false))
    }

    /// The run's turn limit, once used up; with `started`, once the turn that has just
    /// started goes past it (the turns up to the limit may run).
    fn over_turns(&self, started: bool) -> Option<StopReason> {
        let limit = self.limits.max_turns?;
        let turns = self.turns.load(Ordering::SeqCst);
        let over = if started { turns > limit } else { turns >= limit };
        over.then(|| StopReason::RunLimit(format!("the run's turn limit of {limit} was reached")))
    }

    /// The run's cost or token limit, once reached.
    fn over_budget(&self) -> Option<StopReason> {
        if let Some(limit) = self.limits.max_cost_usd
            && self.cost_usd() >= limit
        {
            return Some(StopReason::RunLimit(format!("the run's cost limit of ${limit} was reached")));
        }
        if let Some(limit) = self.limits.max_tokens
            && self.tokens.load(Ordering::SeqCst) >= limit
        {
            return Some(StopReason::RunLimit(format!("the run's token limit of {limit} was reached")));
        }
        None
    }

    fn add(&self, event: &Event) {
        match event {
            Event::Usage { usage, cost_usd, .. } => {
                self.cost_micros.fetch_add((cost_usd * 1e6).round().max(0.0) as u64, Ordering::SeqCst);
                self.tokens.fetch_add(usage.total(), Ordering::SeqCst);
            }
            Event::TurnStarted { .. } => {
                self.turns.fetch_add(1, Ordering::SeqCst);
            }
            // A sub-agent's spend counts for the run as it happens.
            Event::Subagent { event, .. } => self.add(event),
            _ => {}
        }
    }
}

/// The sink of one agent: transcript, meter, and `--json` lines (through the reporter).
pub struct AgentSink {
    pub agent: String,
    pub transcript: Option<Arc<Transcript>>,
    pub meter: Arc<Meter>,
    pub stop: Arc<super::Stop>,
    pub run_cancel: CancellationToken,
    pub json: bool,
    pub reporter: Arc<dyn super::Reporter>,
    /// Commits the agent's worktree every N turns (not for synthesis).
    pub checkpoints: Option<Arc<super::checkpoint::Checkpoints>>,
}

impl EventSink for AgentSink {
    fn emit(&self, event: Event) {
        if let Some(c) = &self.checkpoints {
            c.observe(&event);
        }
        // Deltas repeat what the whole assistant message says; keep files and pipes lean.
        if matches!(event, Event::TextDelta { .. }) {
            return;
        }
        self.meter.add(&event);
        self.reporter.event(&self.agent, &event);
        let line = crate::run_event::RunEvent::of(&self.agent, event.clone()).to_value();
        if let Some(t) = &self.transcript {
            t.record(&line);
        }
        if self.json {
            self.reporter.json_line(&line);
        }
        // A turn that stays within the run's turn limit runs to its end, tools included.
        let over = match event.innermost() {
            Event::Usage { .. } => self.meter.over_budget(),
            Event::TurnStarted { .. } => self.meter.over_turns(true),
            _ => None,
        };
        if let Some(reason) = over {
            self.stop.set(reason);
            self.run_cancel.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use orch_workflows::Limits;

    use super::*;

    #[test]
    fn caps_take_the_smaller_of_own_and_left() {
        let meter = Meter::new(Limits { max_cost_usd: Some(1.0), max_turns: Some(10), ..Limits::default() });
        meter.add(&Event::TurnStarted { turn: 1, model: "m".into() });
        let capped = meter.cap(Limits { max_cost_usd: Some(3.0), max_turns: Some(5), ..Limits::default() });
        assert_eq!(capped.max_cost_usd, Some(1.0));
        assert_eq!(capped.max_turns, Some(5));
        assert!(meter.exhausted().is_none());
        for turn in 2..=10 {
            meter.add(&Event::TurnStarted { turn, model: "m".into() });
        }
        assert!(matches!(meter.exhausted(), Some(StopReason::RunLimit(r)) if r.contains("turn limit of 10")));
    }
}
