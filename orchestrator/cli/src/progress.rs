//! Progress on stderr while a run goes: what a person or a CI log sees. Reporters only
//! observe events; none reaches back into the loop.
//!
//! - [`Live`]: an attended terminal outside CI: an indicatif multi-progress view, one
//!   line per running agent (state, turn, current tool, tokens, cost) under an overall
//!   line (`N/M finished`, running, pending and failed counts, turns, tokens,
//!   spend, elapsed time). When the agents are done, the overall line gives way to one
//!   line that stays; at the end (or on an error or a signal) every live line is
//!   cleared.
//! - [`Plain`]: in CI or when stderr is not a terminal: one plain line per event worth
//!   seeing. Under GitHub Actions, each agent's lines are held back and printed inside a
//!   `::group::` when it finishes, so parallel agents do not interleave.

use std::collections::HashMap;
use std::io::{IsTerminal as _, Write as _};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use orch_agents::Event;
use orch_run::run::report::{AgentReport, AgentStatus};
use orch_run::run::{Reporter, Tally};

/// One JSON line on stdout, flushed. A reader that went away is not an error: the
/// line is dropped (the run's files have it all).
fn json_line(line: &serde_json::Value) {
    if let Ok(text) = serde_json::to_string(line) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}").and_then(|()| out.flush());
    }
}

/// The run's answer (model text) on stdout, fenced in GitHub mode. A reader that went
/// away (`orch run … | head`) is not an error: the report on disk has it all.
fn answer(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let written = write!(out, "{}", orch_run::fence::untrusted(text)).and_then(|()| out.flush());
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Picks the reporter for this process: live on an attended terminal outside CI,
/// plain otherwise (grouped under GitHub Actions).
pub fn for_terminal() -> Box<dyn Reporter> {
    let ci = in_ci();
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    let github = orch_run::fence::github_mode();
    if std::io::stderr().is_terminal() && !ci && !dumb && !github {
        Box::new(Live::new())
    } else {
        Box::new(Plain::new(github))
    }
}

/// Whether `CI` says this runs in CI (set, and not empty, `false` or `0`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The line an event is worth, if any.
fn describe(event: &Event) -> Option<String> {
    Some(match event {
        Event::ToolUseStarted { name, input, .. } => format!("{name} {}", short_input(input)),
        Event::ToolUseFinished { name, is_error: true, output, .. } => {
            format!("{name} failed: {}", output.lines().next().unwrap_or_default())
        }
        Event::Retry { attempt, delay_ms, error } => {
            format!("model call failed (attempt {attempt}), retrying in {delay_ms} ms: {error}")
        }
        Event::Fallback { from, to, .. } => format!("model {from} overloaded; switching to {to}"),
        Event::Compaction { before_tokens, after_tokens, reason } => {
            format!("context compacted ({reason}): {before_tokens} -> {after_tokens} tokens")
        }
        // A sub-agent's lines, under its id; its end, with how it ended.
        Event::Subagent { agent, event, .. } => match event.as_ref() {
            Event::Terminal { reason, turns } => format!("{agent} {reason} ({turns} turns)"),
            inner => format!("{agent}: {}", describe(inner)?),
        },
        _ => return None,
    })
}

/// The most telling field of a tool input, cut to one short line.
fn short_input(input: &serde_json::Value) -> String {
    let field = ["command", "file_path", "pattern", "path", "description", "prompt"]
        .iter()
        .find_map(|k| input.get(k).and_then(|v| v.as_str()))
        .unwrap_or_default();
    let line = field.lines().next().unwrap_or_default();
    if line.chars().count() > 80 { format!("{}…", line.chars().take(80).collect::<String>()) } else { line.into() }
}

fn finished_line(r: &AgentReport) -> String {
    let reason = r.reason.as_deref().map(|w| format!(": {}", w.lines().next().unwrap_or_default())).unwrap_or_default();
    format!(
        "{} {}{reason} ({:.1}s, {} turns, {} tokens, ${:.4}, {} files changed)",
        r.id,
        r.status.as_str(),
        r.duration_ms as f64 / 1000.0,
        r.turns,
        r.usage.total(),
        r.cost_usd,
        r.changed_files.len()
    )
}

/// The mark before a finished agent's line on an attended terminal: only a failure
/// gets the cross; work stopped at a limit, cancelled or skipped each look different.
fn mark(status: AgentStatus) -> &'static str {
    match status {
        AgentStatus::Succeeded => "✓",
        AgentStatus::Failed => "✗",
        AgentStatus::Partial => "◐",
        AgentStatus::Cancelled => "⊘",
        AgentStatus::Skipped => "-",
        AgentStatus::Running | AgentStatus::Pending => "…",
    }
}

/// `text` with line breaks as spaces (a workflow command's data is one line).
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// One plain line per event worth seeing.
pub struct Plain {
    github: bool,
    held: Mutex<HashMap<String, Vec<String>>>,
}

impl Plain {
    pub fn new(github: bool) -> Self {
        Self { github, held: Mutex::new(HashMap::new()) }
    }

    fn line(&self, text: &str) {
        let mut err = std::io::stderr().lock();
        // A line break would start a line that is not orch's: fence the rest.
        if self.github && text.contains(['\n', '\r']) {
            let _ = write!(err, "{}", orch_run::fence::fence(&format!("orch: {text}")));
        } else {
            let _ = writeln!(err, "orch: {text}");
        }
    }
}

impl Reporter for Plain {
    fn agent_started(&self, id: &str) {
        self.line(&format!("{id} started"));
    }

    fn event(&self, agent: &str, event: &Event) {
        let Some(text) = describe(event) else { return };
        if self.github {
            self.held.lock().unwrap_or_else(|p| p.into_inner()).entry(agent.to_string()).or_default().push(text);
        } else {
            self.line(&format!("{agent}: {text}"));
        }
    }

    fn agent_finished(&self, report: &AgentReport) {
        if !self.github {
            self.line(&finished_line(report));
            return;
        }
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&report.id).unwrap_or_default();
        // Tool lines and the answer are model and tool text: fenced, so only orch's
        // own `::group::` and `::endgroup::` reach the runner as commands.
        let mut body = held.join("\n");
        if !report.text.trim().is_empty() {
            body = format!("{body}{}final answer:\n{}", if body.is_empty() { "" } else { "\n" }, report.text.trim());
        }
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "::group::{}", one_line(&finished_line(report)));
        if !body.is_empty() {
            let _ = write!(err, "{}", orch_run::fence::fence(&body));
        }
        let _ = writeln!(err, "::endgroup::");
    }

    fn note(&self, line: &str) {
        self.line(line);
    }

    fn json_line(&self, line: &serde_json::Value) {
        json_line(line);
    }

    fn answer(&self, text: &str) -> std::io::Result<()> {
        answer(text)
    }
}

/// The multi-progress view of an attended terminal. Nothing is drawn until the first
/// agent starts (a run that fails before leaves no line), and [`Reporter::finish`]
/// clears every line it drew, whichever way the run ended.
pub struct Live {
    multi: MultiProgress,
    overall: ProgressBar,
    agents: Mutex<HashMap<String, AgentLine>>,
    counts: Mutex<Counts>,
}

struct AgentLine {
    bar: ProgressBar,
    turn: u32,
    tool: Option<String>,
    tokens: u64,
    cost: f64,
}

/// What the overall line counts.
#[derive(Default)]
struct Counts {
    /// Whether the overall line is on screen.
    shown: bool,
    /// The dispatcher's last word on where the agents stand.
    tally: Option<Tally>,
    /// Agents started, and finished with a report (for a run that tells no tally).
    started: usize,
    finished: usize,
    failed: usize,
    /// The turns and tokens of finished agents (running ones add their own).
    turns: u64,
    tokens: u64,
    /// Spent so far, by every agent and sub-agent.
    cost: f64,
}

impl Counts {
    /// The overall line: `3/10 finished · 2 running · 5 pending · 1 failed`, then the
    /// totals so far.
    fn line(&self, turns: u64, tokens: u64) -> String {
        let tally = self.tally.unwrap_or(Tally {
            finished: self.finished,
            running: self.started.saturating_sub(self.finished),
            pending: 0,
        });
        let failed = if self.failed > 0 { format!(" · {} failed", self.failed) } else { String::new() };
        format!(
            "{}/{} finished · {} running · {} pending{failed} · {} turns · {} tokens · ${:.4}",
            tally.finished,
            tally.total(),
            tally.running,
            tally.pending,
            self.turns + turns,
            tokens_short(self.tokens + tokens),
            self.cost
        )
    }
}

impl Counts {
    /// The line that stays once every agent has ended: `3/3 agents finished (1 failed)`
    /// and the totals.
    fn summary(&self) -> String {
        let tally = self.tally.unwrap_or(Tally { finished: self.finished, running: 0, pending: 0 });
        let mut notes = Vec::new();
        if self.failed > 0 {
            notes.push(format!("{} failed", self.failed));
        }
        // Finished without a report of their own: skipped, or never started.
        let not_run = tally.finished.saturating_sub(self.finished);
        if not_run > 0 {
            notes.push(format!("{not_run} did not run"));
        }
        let notes = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join(", ")) };
        format!(
            "{}/{} agents finished{notes} · {} turns · {} tokens · ${:.4}",
            tally.finished,
            tally.total(),
            self.turns,
            tokens_short(self.tokens),
            self.cost
        )
    }
}

/// A token count in a few characters: `950`, `12.3k`, `4.5M`.
fn tokens_short(n: u64) -> String {
    match n {
        n if n < 1_000 => n.to_string(),
        n if n < 1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        n => format!("{:.1}M", n as f64 / 1e6),
    }
}

impl Live {
    pub fn new() -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        // Not in `multi` (so not drawn) until the first agent starts.
        let overall = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        overall.set_style(
            // `wide_msg` cuts the line at the terminal's width: a line that wrapped would
            // be two lines to clear.
            ProgressStyle::with_template("{spinner} {elapsed:>3} {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        crate::logging::around(&multi);
        Self { multi, overall, agents: Mutex::new(HashMap::new()), counts: Mutex::new(Counts::default()) }
    }

    /// Puts the overall line on screen, once.
    fn show(&self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if !c.shown {
            c.shown = true;
            let overall = self.multi.insert(0, self.overall.clone());
            overall.reset_elapsed();
            overall.enable_steady_tick(Duration::from_millis(100));
        }
    }

    fn update_overall(&self) {
        let (turns, tokens) = {
            let agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
            agents.values().fold((0u64, 0u64), |(t, k), l| (t + u64::from(l.turn), k + l.tokens))
        };
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        self.overall.set_message(c.line(turns, tokens));
    }

    fn render(line: &AgentLine, id: &str) {
        let tool = line.tool.as_deref().map(|t| format!(" · {t}")).unwrap_or_default();
        line.bar.set_message(format!("{id} · turn {}{tool} · {} tokens · ${:.4}", line.turn, line.tokens, line.cost));
    }
}

impl Default for Live {
    fn default() -> Self {
        Self::new()
    }
}

impl Reporter for Live {
    fn tally(&self, tally: Tally) {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).tally = Some(tally);
        if tally.done() {
            // Every agent has ended: the count is final, and synthesis, integration and
            // publishing print their own lines. No line of "0 running" stays behind.
            let line = {
                let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
                c.shown.then(|| format!("orch: {} in {}", c.summary(), elapsed(&self.overall)))
            };
            self.overall.finish_and_clear();
            if let Some(line) = line {
                let _ = self.multi.println(line);
            }
            return;
        }
        self.update_overall();
    }

    fn agent_started(&self, id: &str) {
        self.show();
        let bar = self.multi.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("  {spinner} {wide_msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        let line = AgentLine { bar, turn: 0, tool: None, tokens: 0, cost: 0.0 };
        Self::render(&line, id);
        self.agents.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string(), line);
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).started += 1;
        self.update_overall();
    }

    fn event(&self, agent: &str, event: &Event) {
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        let Some(line) = agents.get_mut(agent) else { return };
        match event {
            Event::TurnStarted { turn, .. } => {
                line.turn = *turn;
                line.tool = None;
            }
            Event::ToolUseStarted { name, input, .. } => line.tool = Some(format!("{name} {}", short_input(input))),
            Event::ToolUseFinished { .. } => line.tool = None,
            Event::Usage { total, total_cost_usd, cost_usd, .. } => {
                line.tokens = total.total();
                line.cost = *total_cost_usd;
                self.counts.lock().unwrap_or_else(|p| p.into_inner()).cost += cost_usd;
            }
            // A sub-agent's spend shows in the run's total as it happens.
            Event::Subagent { event: inner, .. } if matches!(**inner, Event::Usage { .. }) => {
                if let Event::Usage { cost_usd, .. } = **inner {
                    self.counts.lock().unwrap_or_else(|p| p.into_inner()).cost += cost_usd;
                }
                drop(agents);
                self.update_overall();
                return;
            }
            _ => {
                if let Some(text) = describe(event) {
                    self.multi.suspend(|| {
                        let _ = writeln!(std::io::stderr(), "orch: {agent}: {text}");
                    });
                }
                return;
            }
        }
        Self::render(line, agent);
        drop(agents);
        self.update_overall();
    }

    fn agent_finished(&self, report: &AgentReport) {
        if let Some(line) = self.agents.lock().unwrap_or_else(|p| p.into_inner()).remove(&report.id) {
            line.bar.finish_and_clear();
            self.multi.remove(&line.bar);
        }
        {
            let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
            c.finished += 1;
            c.turns += u64::from(report.turns);
            c.tokens += report.usage.total();
            if matches!(report.status, AgentStatus::Failed) {
                c.failed += 1;
            }
        }
        let _ = self.multi.println(format!("{} {}", mark(report.status), finished_line(report)));
        self.update_overall();
    }

    fn note(&self, line: &str) {
        let _ = self.multi.println(format!("orch: {line}"));
    }

    /// Clears every line of the view, the agents' that never reported an end too (an
    /// error or a signal ended the run): nothing is left frozen on screen. Called again,
    /// it does nothing more.
    fn finish(&self) {
        for (_, line) in self.agents.lock().unwrap_or_else(|p| p.into_inner()).drain() {
            line.bar.finish_and_clear();
            self.multi.remove(&line.bar);
        }
        self.overall.finish_and_clear();
        let _ = self.multi.clear();
    }

    fn json_line(&self, line: &serde_json::Value) {
        json_line(line);
    }

    fn answer(&self, text: &str) -> std::io::Result<()> {
        answer(text)
    }
}

/// How long a bar has been on screen, as `4.2s`.
fn elapsed(bar: &ProgressBar) -> String {
    format!("{:.1}s", bar.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tool_calls_are_described_in_one_short_line() {
        let event = Event::ToolUseStarted {
            id: "t".into(),
            name: "Bash".into(),
            input: json!({"command": format!("echo {}\nsecond line", "x".repeat(100))}),
        };
        let line = describe(&event).unwrap();
        assert!(line.starts_with("Bash echo xxx"), "{line}");
        assert!(line.ends_with('…') && !line.contains("second"), "{line}");
        assert!(describe(&Event::TextDelta { text: "x".into() }).is_none());
    }

    #[test]
    fn the_overall_line_counts_agents_and_the_summary_says_nothing_runs() {
        let mut c = Counts { started: 2, finished: 1, turns: 3, tokens: 1_200, cost: 0.5, ..Counts::default() };
        // Before the dispatcher's first tally (`orch exec`): what started.
        assert_eq!(c.line(2, 300), "1/2 finished · 1 running · 0 pending · 5 turns · 1.5k tokens · $0.5000");
        c.tally = Some(Tally { finished: 1, running: 1, pending: 3 });
        c.failed = 1;
        assert_eq!(c.line(0, 0), "1/5 finished · 1 running · 3 pending · 1 failed · 3 turns · 1.2k tokens · $0.5000");
        c.tally = Some(Tally { finished: 5, running: 0, pending: 0 });
        c.finished = 2;
        let summary = c.summary();
        assert_eq!(summary, "5/5 agents finished (1 failed, 3 did not run) · 3 turns · 1.2k tokens · $0.5000");
        assert!(!summary.contains("running"), "{summary}");
        assert_eq!(tokens_short(999), "999");
        assert_eq!(tokens_short(4_560_000), "4.6M");
    }

    #[test]
    fn only_failures_get_the_cross() {
        let all = [
            AgentStatus::Succeeded,
            AgentStatus::Failed,
            AgentStatus::Partial,
            AgentStatus::Cancelled,
            AgentStatus::Skipped,
        ];
        let marks: std::collections::HashSet<&str> = all.iter().map(|s| mark(*s)).collect();
        assert_eq!(marks.len(), all.len(), "each status has its own mark");
        assert_eq!(mark(AgentStatus::Failed), "✗");
        assert!(all.iter().filter(|s| **s != AgentStatus::Failed).all(|s| mark(*s) != "✗"));
    }
}
