//! The interface through which a run tells its observers what happens; the binary
//! implements it for the terminal (live view, plain or grouped lines).

use orch_agents::Event;

use super::report::AgentReport;

/// Receives what happens during a run.
pub trait Reporter: Send + Sync {
    fn agent_started(&self, id: &str);
    fn event(&self, agent: &str, event: &Event);
    fn agent_finished(&self, report: &AgentReport);
    /// A run-level line (fan-out expanded, synthesis started, ...).
    fn note(&self, line: &str);
    /// Clears any live display; called once at the end.
    fn finish(&self) {}
}
