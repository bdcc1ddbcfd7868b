//! The interface through which a run tells its observers what happens; the binary
//! implements it for the terminal (live view, plain or grouped lines on stderr, data on
//! stdout). The library never writes to stdout or stderr itself: data goes through
//! [`Reporter::json_line`] and [`Reporter::answer`], notes through [`Reporter::note`]
//! or [`crate::notice`].

use orch_agents::Event;

use super::report::AgentReport;

/// Where a run's agents stand: how many have finished (skipped ones too), run, and
/// are still to start. A dynamic fan-out not yet expanded counts as one pending agent
/// until it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub finished: usize,
    pub running: usize,
    pub pending: usize,
}

impl Tally {
    pub fn total(&self) -> usize {
        self.finished + self.running + self.pending
    }

    /// Nothing runs and nothing is left to start: the agents' phase is over.
    pub fn done(&self) -> bool {
        self.running == 0 && self.pending == 0
    }
}

/// Receives what happens during a run.
pub trait Reporter: Send + Sync {
    /// Where the agents stand, each time that changes while they run (the last one
    /// has [`Tally::done`]).
    fn tally(&self, _tally: Tally) {}
    fn agent_started(&self, id: &str);
    fn event(&self, agent: &str, event: &Event);
    fn agent_finished(&self, report: &AgentReport);
    /// A run-level line (fan-out expanded, synthesis started, ...).
    fn note(&self, line: &str);
    /// Clears any live display; called once at the end.
    fn finish(&self) {}
    /// A line of the `--json` (or `--output-format stream-json`/`json`) stream, for stdout.
    fn json_line(&self, line: &serde_json::Value);
    /// The run's answer (model text), for stdout. A reader that went away is not an
    /// error; any other failure is returned.
    fn answer(&self, text: &str) -> std::io::Result<()>;
}
