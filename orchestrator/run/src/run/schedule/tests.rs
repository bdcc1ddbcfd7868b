//! The dispatcher on its own: a fake executor whose agents take a given (paused) time
//! and end with a given status, text and output. Every test runs in milliseconds of
//! real time; the times asserted are tokio's paused clock, so they are exact.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use orch_agents::{Event, EventSink};
use serde_json::json;
use tokio::time::Instant;

use super::*;
use crate::run::events::AgentSink;

/// How long a cancelled fake agent takes to return.
const WIND_DOWN: Duration = Duration::from_millis(5);

/// How one fake agent behaves.
#[derive(Clone)]
struct Script {
    takes: Duration,
    status: AgentStatus,
    text: String,
    output: Option<Value>,
    /// Turns counted on the run's meter (through a real [`AgentSink`]) as it starts.
    turns: u32,
    panics: bool,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            takes: Duration::from_millis(10),
            status: AgentStatus::Succeeded,
            text: String::new(),
            output: None,
            turns: 0,
            panics: false,
        }
    }
}

/// An agent that takes `ms` and succeeds.
fn takes(ms: u64) -> Script {
    Script { takes: Duration::from_millis(ms), ..Script::default() }
}

impl Script {
    fn ends(mut self, status: AgentStatus) -> Self {
        self.status = status;
        self
    }
    fn text(mut self, text: &str) -> Self {
        self.text = text.into();
        self
    }
    fn output(mut self, output: Value) -> Self {
        self.output = Some(output);
        self
    }
    fn turns(mut self, turns: u32) -> Self {
        self.turns = turns;
        self
    }
    fn panics(mut self) -> Self {
        self.panics = true;
        self
    }
}

/// What the fake executor saw.
#[derive(Default)]
struct Log {
    /// (agent id, ms since dispatch began), in start order.
    started: Vec<(String, u64)>,
    /// (agent id, ms since dispatch began), in end order.
    ended: Vec<(String, u64)>,
    prompts: HashMap<String, String>,
    running: usize,
    peak: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts an agent as running until its task ends, however it ends (a panic too).
struct Running {
    log: Arc<Mutex<Log>>,
    id: String,
    t0: Instant,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut log = lock(&self.log);
        log.running -= 1;
        log.ended.push((self.id.clone(), self.t0.elapsed().as_millis() as u64));
    }
}

struct Fake {
    scripts: HashMap<String, Script>,
    log: Arc<Mutex<Log>>,
    t0: Instant,
    meter: Arc<Meter>,
    stop: Arc<Stop>,
    run_cancel: CancellationToken,
    reporter: Arc<dyn Reporter>,
}

impl Executor for Fake {
    fn execute(&self, spec: AgentSpec, prompt: String) -> impl Future<Output = Finished> + Send + 'static {
        let script = self.scripts.get(&spec.id).cloned().unwrap_or_default();
        {
            let mut log = lock(&self.log);
            log.started.push((spec.id.clone(), self.t0.elapsed().as_millis() as u64));
            log.prompts.insert(spec.id.clone(), prompt);
            log.running += 1;
            log.peak = log.peak.max(log.running);
        }
        let running = Running { log: self.log.clone(), id: spec.id.clone(), t0: self.t0 };
        let sink = AgentSink {
            agent: spec.id.clone(),
            transcript: None,
            meter: self.meter.clone(),
            stop: self.stop.clone(),
            run_cancel: self.run_cancel.clone(),
            json: false,
            reporter: self.reporter.clone(),
            checkpoints: None,
        };
        // As a real agent: its own token, a child of the run's.
        let cancel = self.run_cancel.child_token();
        async move {
            let _running = running;
            for turn in 1..=script.turns {
                sink.emit(Event::TurnStarted { turn, model: "fake".into() });
            }
            if script.panics {
                panic!("the fake agent `{}` panics on purpose", spec.id);
            }
            let (status, reason) = tokio::select! {
                () = tokio::time::sleep(script.takes) => (script.status, None),
                () = cancel.cancelled() => {
                    // As a real agent, which commits its work before it returns.
                    tokio::time::sleep(WIND_DOWN).await;
                    (AgentStatus::Cancelled, Some("cancelled while running".to_string()))
                }
            };
            let item = spec.fan_out.as_ref().map(|f| f.item.clone());
            let mut report = AgentReport::empty(&spec.id, &spec.agent, item, status, String::new());
            report.reason = reason;
            report.text = script.text;
            report.output = script.output;
            report.continue_on_failure = spec.continue_on_failure;
            Finished { report, spec }
        }
    }
}

/// The reporter's lines, in order (events left out), and its tallies as
/// `finished/total running pending`.
#[derive(Default)]
struct Lines(Mutex<Vec<String>>, Mutex<Vec<String>>);

impl Reporter for Lines {
    fn tally(&self, t: Tally) {
        lock(&self.1).push(format!("{}/{} {} {}", t.finished, t.total(), t.running, t.pending));
    }
    fn agent_started(&self, id: &str) {
        lock(&self.0).push(format!("started {id}"));
    }
    fn event(&self, _agent: &str, _event: &Event) {}
    fn agent_finished(&self, report: &AgentReport) {
        lock(&self.0).push(format!("finished {} {}", report.id, report.status.as_str()));
    }
    fn note(&self, line: &str) {
        lock(&self.0).push(format!("note {line}"));
    }
    fn json_line(&self, line: &serde_json::Value) {
        lock(&self.0).push(format!("json {line}"));
    }
    fn answer(&self, text: &str) -> std::io::Result<()> {
        lock(&self.0).push(format!("answer {text}"));
        Ok(())
    }
}

/// What the live report was given, one line per call, and its shortest interval.
struct Seen(Arc<Mutex<Vec<String>>>, Duration);

fn describe(kind: &str, now: Snapshot<'_>) -> String {
    let done: Vec<String> = now.done.iter().map(|r| format!("{}={}", r.id, r.status.as_str())).collect();
    let mut running: Vec<&str> = now.running.iter().map(|(id, _)| *id).collect();
    running.sort_unstable();
    let pending: Vec<&str> = now.pending.iter().map(|n| n.id()).collect();
    format!("{kind}: done [{}] running [{}] pending [{}]", done.join(" "), running.join(" "), pending.join(" "))
}

impl Progress for Seen {
    fn progress(&mut self, now: Snapshot<'_>) {
        lock(&self.0).push(describe("progress", now));
    }
    fn min_interval(&self) -> Duration {
        self.1
    }
    fn finished(&mut self, report: &AgentReport) {
        lock(&self.0).push(format!("finished {}", report.id));
    }
    fn interrupted(&mut self, now: Snapshot<'_>) {
        lock(&self.0).push(describe("interrupted", now));
    }
}

fn plan(yaml: &str) -> Plan {
    let workflow = orch_workflows::load_str(yaml, "test.yaml")
        .unwrap_or_else(|d| panic!("{}", orch_workflows::render_diagnostics(&d)));
    orch_workflows::plan(&workflow, &Default::default())
        .unwrap_or_else(|d| panic!("{}", orch_workflows::render_diagnostics(&d)))
}

/// One dispatch of a plan.
struct Case {
    plan: Plan,
    scripts: Vec<(&'static str, Script)>,
    concurrency: usize,
    max_fail: Option<usize>,
    selection: Selection,
    /// Cancels the run's token (an interrupt) this many ms in.
    interrupt_at: Option<u64>,
    /// The live report's shortest interval between rewrites.
    interval: Duration,
}

fn case(yaml: &str) -> Case {
    Case {
        plan: plan(yaml),
        scripts: Vec::new(),
        concurrency: 4,
        max_fail: None,
        selection: Selection::default(),
        interrupt_at: None,
        interval: Duration::ZERO,
    }
}

impl Case {
    fn script(mut self, id: &'static str, script: Script) -> Self {
        self.scripts.push((id, script));
        self
    }
    fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }
    fn max_fail(mut self, n: usize) -> Self {
        self.max_fail = Some(n);
        self
    }
    fn selection(mut self, selection: Selection) -> Self {
        self.selection = selection;
        self
    }
    fn interval(mut self, ms: u64) -> Self {
        self.interval = Duration::from_millis(ms);
        self
    }
    fn interrupt_at(mut self, ms: u64) -> Self {
        self.interrupt_at = Some(ms);
        self
    }

    async fn run(self) -> Outcome {
        let lines = Arc::new(Lines::default());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let env = DispatchEnv {
            reporter: lines.clone(),
            meter: Arc::new(Meter::new(self.plan.limits)),
            stop: Arc::new(Stop::default()),
            run_cancel: CancellationToken::new(),
            progress: Box::new(Seen(seen.clone(), self.interval)),
        };
        let log = Arc::new(Mutex::new(Log::default()));
        let fake = Fake {
            scripts: self.scripts.into_iter().map(|(id, s)| (id.to_string(), s)).collect(),
            log: log.clone(),
            t0: Instant::now(),
            meter: env.meter.clone(),
            stop: env.stop.clone(),
            run_cancel: env.run_cancel.clone(),
            reporter: lines.clone(),
        };
        if let Some(ms) = self.interrupt_at {
            let cancel = env.run_cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                cancel.cancel();
            });
        }
        let stop = env.stop.clone();
        let dispatch = Dispatch { concurrency: self.concurrency, max_fail: self.max_fail, selection: self.selection };
        // Paused time jumps ahead when every task waits: a dispatcher that hung would
        // reach this limit at once instead of hanging the test.
        let reports = tokio::time::timeout(Duration::from_secs(3600), run(&fake, env, &self.plan, dispatch))
            .await
            .expect("the dispatcher hung");
        let log = std::mem::take(&mut *lock(&log));
        let tallies = std::mem::take(&mut *lock(&lines.1));
        let lines = std::mem::take(&mut *lock(&lines.0));
        let told = std::mem::take(&mut *lock(&seen));
        let seen = told.iter().filter(|l| !l.starts_with("finished ")).cloned().collect();
        Outcome { reports, log, lines, tallies, seen, told, stop: stop.get() }
    }
}

struct Outcome {
    reports: Vec<AgentReport>,
    log: Log,
    lines: Vec<String>,
    /// The reporter's tallies: `finished/total running pending`.
    tallies: Vec<String>,
    /// The live report's rewrites and interrupt.
    seen: Vec<String>,
    /// Those, and each `finished` call.
    told: Vec<String>,
    stop: Option<StopReason>,
}

impl Outcome {
    fn report(&self, id: &str) -> &AgentReport {
        self.reports.iter().find(|r| r.id == id).unwrap_or_else(|| panic!("no report for `{id}`"))
    }

    /// `id=status` of every report, in report order.
    fn statuses(&self) -> Vec<String> {
        self.reports.iter().map(|r| format!("{}={}", r.id, r.status.as_str())).collect()
    }

    fn reason(&self, id: &str) -> &str {
        self.report(id).reason.as_deref().unwrap_or("")
    }

    /// `id@ms` of every start, in start order.
    fn starts(&self) -> Vec<String> {
        self.log.started.iter().map(|(id, ms)| format!("{id}@{ms}")).collect()
    }

    fn ended_at(&self, id: &str) -> u64 {
        self.log.ended.iter().find(|(i, _)| i == id).map(|(_, ms)| *ms).unwrap_or_else(|| panic!("`{id}` never ended"))
    }

    fn prompt(&self, id: &str) -> &str {
        self.log.prompts.get(id).map(String::as_str).unwrap_or_else(|| panic!("`{id}` never started"))
    }
}

const HEAD: &str = "version: 1\nname: t\n";

#[tokio::test(start_paused = true)]
async fn an_agent_starts_after_what_it_needs_succeeded() {
    let yaml = format!(
        "{HEAD}agents:
  a: {{ prompt: first }}
  b: {{ needs: [a], prompt: 'after {{{{ agents.a.text }}}}' }}
"
    );
    let out = case(&yaml).script("a", takes(100).text("the answer")).run().await;
    assert_eq!(out.starts(), ["a@0", "b@100"]);
    assert_eq!(out.statuses(), ["a=succeeded", "b=succeeded"]);
    // The deferred prompt is rendered when `b` starts, from `a`'s result.
    assert_eq!(out.prompt("b"), "after the answer");
    assert_eq!(out.lines, ["started a", "finished a succeeded", "started b", "finished b succeeded"]);
}

#[tokio::test(start_paused = true)]
async fn never_more_than_concurrency_agents_run() {
    let yaml = format!(
        "{HEAD}agents:\n  a: {{ prompt: x }}\n  b: {{ prompt: x }}\n  c: {{ prompt: x }}\n  d: {{ prompt: x }}\n  e: {{ prompt: x }}\n"
    );
    let two = case(&yaml).concurrency(2).run().await;
    assert_eq!(two.log.peak, 2);
    assert_eq!(two.starts(), ["a@0", "b@0", "c@10", "d@10", "e@20"]);
    assert!(two.reports.iter().all(|r| r.status == AgentStatus::Succeeded), "{:?}", two.statuses());
    let one = case(&yaml).concurrency(1).run().await;
    assert_eq!(one.log.peak, 1);
    assert_eq!(one.starts(), ["a@0", "b@10", "c@20", "d@30", "e@40"]);
    // The fake does see more than two at once when the limit allows it.
    let all = case(&yaml).concurrency(8).run().await;
    assert_eq!(all.log.peak, 5);
}

#[tokio::test(start_paused = true)]
async fn ready_agents_start_in_plan_order_and_reports_come_back_in_it() {
    let yaml = format!(
        "{HEAD}agents:
  zeta: {{ prompt: x }}
  alpha: {{ prompt: x }}
  late: {{ needs: [zeta], prompt: x }}
  mid: {{ prompt: x }}
"
    );
    // `late` is ready when `zeta` ends, but `alpha` and `mid` come first in the plan.
    let out = case(&yaml).concurrency(1).script("zeta", takes(30)).run().await;
    assert_eq!(out.starts(), ["zeta@0", "alpha@30", "mid@40", "late@50"]);
    // They end in another order; the reports follow the plan.
    let out = case(&yaml)
        .concurrency(3)
        .script("zeta", takes(30))
        .script("alpha", takes(20))
        .script("mid", takes(10))
        .run()
        .await;
    assert_eq!(out.starts(), ["zeta@0", "alpha@0", "mid@0", "late@30"]);
    let ended: Vec<&str> = out.log.ended.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ended, ["mid", "alpha", "zeta", "late"]);
    assert_eq!(out.statuses(), ["zeta=succeeded", "alpha=succeeded", "mid=succeeded", "late=succeeded"]);
}

#[tokio::test(start_paused = true)]
async fn max_fail_stops_new_starts_and_lets_running_agents_finish() {
    let yaml = format!(
        "{HEAD}agents:\n  a: {{ prompt: x }}\n  b: {{ prompt: x }}\n  c: {{ prompt: x }}\n  d: {{ prompt: x }}\n  e: {{ prompt: x }}\n"
    );
    let out = case(&yaml)
        .concurrency(3)
        .max_fail(2)
        .script("a", takes(10).ends(AgentStatus::Failed))
        .script("b", takes(20).ends(AgentStatus::Failed))
        .script("c", takes(30))
        .script("d", takes(100))
        .run()
        .await;
    // `d` took `a`'s place after the first failure; nothing started after the second.
    assert_eq!(out.starts(), ["a@0", "b@0", "c@0", "d@10"]);
    assert_eq!(out.statuses(), ["a=failed", "b=failed", "c=succeeded", "d=succeeded", "e=skipped"]);
    assert_eq!(out.ended_at("d"), 110);
    let why = "--max-fail 2 was reached: no new agent started";
    assert_eq!(out.reason("e"), why);
    assert!(out.lines.contains(&format!("note {why}")), "{:?}", out.lines);
    assert_eq!(out.stop, None);
}

#[tokio::test(start_paused = true)]
async fn fail_fast_cancels_running_agents_and_skips_the_rest() {
    let yaml =
        format!("{HEAD}fail_fast: true\nagents:\n  a: {{ prompt: x }}\n  b: {{ prompt: x }}\n  c: {{ prompt: x }}\n");
    let out =
        case(&yaml).concurrency(2).script("a", takes(10).ends(AgentStatus::Failed)).script("b", takes(100)).run().await;
    assert_eq!(out.starts(), ["a@0", "b@0"]);
    assert_eq!(out.statuses(), ["a=failed", "b=cancelled", "c=skipped"]);
    // `b` saw its token cancelled at once and stopped with its partial work.
    assert_eq!(out.ended_at("b"), 15);
    assert_eq!(out.reason("c"), "the run stopped because `a` failed (fail_fast)");
    assert_eq!(out.stop, Some(StopReason::FailFast("a".into())));
    // Not an interrupt: no interrupted report is written.
    assert!(out.seen.iter().all(|s| !s.starts_with("interrupted")), "{:?}", out.seen);
}

#[tokio::test(start_paused = true)]
async fn a_failure_allowed_by_continue_on_failure_neither_blocks_nor_counts() {
    let yaml = format!(
        "{HEAD}fail_fast: true
agents:
  a: {{ prompt: x, continue_on_failure: true }}
  b: {{ needs: [a], prompt: x }}
  c: {{ prompt: x }}
"
    );
    let out = case(&yaml).concurrency(1).max_fail(1).script("a", takes(10).ends(AgentStatus::Failed)).run().await;
    assert_eq!(out.starts(), ["a@0", "c@10", "b@20"]);
    assert_eq!(out.statuses(), ["a=failed", "c=succeeded", "b=succeeded"]);
    assert!(out.report("a").continue_on_failure);
    assert_eq!(out.stop, None);
    assert!(out.lines.iter().all(|l| !l.starts_with("note")), "{:?}", out.lines);
}

#[tokio::test(start_paused = true)]
async fn agents_whose_needs_did_not_succeed_are_skipped_with_the_reason() {
    let yaml = format!(
        "{HEAD}agents:
  a: {{ prompt: x }}
  p: {{ prompt: x }}
  x: {{ prompt: x }}
  b: {{ needs: [a], prompt: x }}
  q: {{ needs: [p], prompt: x }}
  y: {{ needs: [x], prompt: x }}
  r: {{ needs: [b], prompt: x }}
"
    );
    let out = case(&yaml)
        .script("a", takes(10).ends(AgentStatus::Failed))
        .script("p", takes(10).ends(AgentStatus::Partial))
        .script("x", takes(10).ends(AgentStatus::Cancelled))
        .run()
        .await;
    assert_eq!(out.starts(), ["a@0", "p@0", "x@0"]);
    assert_eq!(out.reason("b"), "it needs `a`, which failed");
    assert_eq!(out.reason("q"), "it needs `p`, which stopped at a limit");
    assert_eq!(out.reason("y"), "it needs `x`, which was cancelled");
    assert_eq!(out.reason("r"), "it needs `b`, which was skipped");
    for id in ["b", "q", "y", "r"] {
        assert_eq!(out.report(id).status, AgentStatus::Skipped, "{id}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_static_fan_out_is_needed_as_a_whole() {
    let yaml = format!(
        "{HEAD}agents:
  docs:
    for_each: [alpha, beta, gamma]
    as: module
    prompt: 'document {{{{ module }}}}'
  index:
    needs: [docs]
    prompt: '{{% for r in agents.docs %}}{{{{ r.id }}}}={{{{ r.text }}}};{{% endfor %}}'
"
    );
    let out = case(&yaml)
        .script("docs/alpha", takes(30).text("A"))
        .script("docs/beta", takes(10).text("B"))
        .script("docs/gamma", takes(20).text("C"))
        .run()
        .await;
    // `index` waits for the slowest instance.
    assert_eq!(out.starts(), ["docs/alpha@0", "docs/beta@0", "docs/gamma@0", "index@30"]);
    assert_eq!(out.prompt("docs/beta"), "document beta");
    assert_eq!(out.prompt("index"), "docs/alpha=A;docs/beta=B;docs/gamma=C;");
    assert_eq!(out.report("docs/beta").item, Some(json!("beta")));

    // One failed instance is enough to skip what needs the fan-out.
    let out = case(&yaml).script("docs/beta", takes(10).ends(AgentStatus::Failed)).run().await;
    assert_eq!(out.statuses(), ["docs/alpha=succeeded", "docs/beta=failed", "docs/gamma=succeeded", "index=skipped"]);
    assert_eq!(out.reason("index"), "it needs `docs/beta`, which failed");
}

fn survey_yaml() -> String {
    format!(
        "{HEAD}agents:
  survey:
    prompt: list the crates
    output:
      schema: {{ type: object, required: [crates], properties: {{ crates: {{ type: array, items: {{ type: string }} }} }} }}
  fix:
    needs: [survey]
    for_each: '{{{{ agents.survey.output.crates }}}}'
    as: krate
    prompt: 'fix {{{{ krate }}}}'
  summary:
    needs: [fix]
    prompt: '{{% for r in agents.fix %}}{{{{ r.id }}}} {{% endfor %}}'
"
    )
}

#[tokio::test(start_paused = true)]
async fn a_dynamic_fan_out_expands_from_its_sources_output() {
    let out = case(&survey_yaml()).script("survey", takes(10).output(json!({ "crates": ["core", "cli"] }))).run().await;
    assert_eq!(out.starts(), ["survey@0", "fix/core@10", "fix/cli@10", "summary@20"]);
    assert_eq!(out.prompt("fix/cli"), "fix cli");
    assert_eq!(out.prompt("summary"), "fix/core fix/cli ");
    // The instances take the fan-out's place in the report.
    assert_eq!(out.statuses(), ["survey=succeeded", "fix/core=succeeded", "fix/cli=succeeded", "summary=succeeded"]);
    assert!(out.lines.contains(&"note fix fans out to 2 agents".to_string()), "{:?}", out.lines);
    // The report on disk showed the fan-out pending, then its instances.
    assert_eq!(out.seen[0], "progress: done [] running [survey] pending [fix summary]");
    assert_eq!(out.seen[1], "progress: done [survey=succeeded] running [fix/cli fix/core] pending [summary]");
    // The count grows when the fan-out expands; the last tally has everything finished.
    assert_eq!(out.tallies, ["0/3 1 2", "1/4 2 1", "2/4 1 1", "3/4 1 0", "4/4 0 0"]);
}

#[tokio::test(start_paused = true)]
async fn the_reporter_is_told_the_count_of_finished_running_and_pending_agents() {
    let out = case(&format!(
        "{HEAD}agents:\n  a:\n    prompt: a\n  b:\n    prompt: b\n  c:\n    needs: [a]\n    prompt: c\n  d:\n    needs: [c]\n    prompt: d\n"
    ))
    .concurrency(1)
    .script("a", takes(10).ends(AgentStatus::Failed))
    .run()
    .await;
    // a runs alone (concurrency 1), fails; c and d are skipped at once; then b runs.
    assert_eq!(out.tallies, ["0/4 1 3", "3/4 1 0", "4/4 0 0"], "{:?}", out.statuses());
}

#[tokio::test(start_paused = true)]
async fn a_fan_out_that_cannot_expand_fails_and_blocks_what_needs_it() {
    let out = case(&survey_yaml()).script("survey", takes(10).output(json!({ "crates": "core" }))).run().await;
    assert_eq!(out.starts(), ["survey@0"]);
    assert_eq!(out.statuses(), ["survey=succeeded", "fix=failed", "summary=skipped"]);
    assert_eq!(
        out.reason("fix"),
        "`for_each` of `fix` needs a list, but `agents.survey.output.crates` is the text `core` (declare that field \
         with `type: array` in the output schema of `survey`)"
    );
    assert_eq!(out.reason("summary"), "it needs `fix`, which failed");

    // When the source fails, the fan-out never expands.
    let out = case(&survey_yaml()).script("survey", takes(10).ends(AgentStatus::Failed)).run().await;
    assert_eq!(out.statuses(), ["survey=failed", "fix=skipped", "summary=skipped"]);
    assert_eq!(out.reason("fix"), "it needs `survey`, which failed");
    assert_eq!(out.reason("summary"), "it needs `fix`, which was skipped");
}

#[tokio::test(start_paused = true)]
async fn a_used_up_run_limit_stops_new_starts() {
    let yaml = format!(
        "{HEAD}limits: {{ max_turns: 2 }}\nagents:\n  a: {{ prompt: x }}\n  b: {{ prompt: x }}\n  c: {{ prompt: x }}\n"
    );
    // `a` uses the run's last turn and ends: nothing else starts.
    let out = case(&yaml).concurrency(1).script("a", takes(10).turns(2)).run().await;
    assert_eq!(out.starts(), ["a@0"]);
    assert_eq!(out.statuses(), ["a=succeeded", "b=skipped", "c=skipped"]);
    let why = "the run's turn limit of 2 was reached";
    assert_eq!(out.reason("b"), why);
    assert_eq!(out.stop, Some(StopReason::RunLimit(why.into())));
    assert!(out.seen.iter().all(|s| !s.starts_with("interrupted")), "{:?}", out.seen);

    // `a` goes past the limit while `b` runs: the meter cancels the run at once.
    let out = case(&yaml).concurrency(2).script("a", takes(10).turns(3)).script("b", takes(100)).run().await;
    assert_eq!(out.starts(), ["a@0", "b@0"]);
    assert_eq!(out.statuses(), ["a=cancelled", "b=cancelled", "c=skipped"]);
    assert_eq!(out.ended_at("b"), 5);
    assert_eq!(out.reason("c"), why);
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_winds_down_running_agents_and_skips_pending_ones() {
    let yaml = format!("{HEAD}agents:\n  a: {{ prompt: x }}\n  b: {{ prompt: x }}\n  c: {{ needs: [a], prompt: x }}\n");
    let out = case(&yaml).concurrency(1).script("a", takes(100)).interrupt_at(50).run().await;
    assert_eq!(out.starts(), ["a@0"]);
    assert_eq!(out.ended_at("a"), 55);
    assert_eq!(out.statuses(), ["a=cancelled", "b=skipped", "c=skipped"]);
    assert_eq!(out.reason("b"), "the run stopped");
    assert_eq!(out.reason("c"), "it needs `a`, which was cancelled");
    // What was known is written once, before anything is torn down.
    assert_eq!(
        out.seen,
        ["progress: done [] running [a] pending [b c]", "interrupted: done [] running [a] pending [b c]"]
    );
    assert_eq!(out.stop, None);
}

#[tokio::test(start_paused = true)]
async fn a_prompt_that_cannot_render_fails_its_agent_without_starting_it() {
    let yaml = format!(
        "{HEAD}agents:
  a:
    prompt: x
    output: {{ schema: {{ type: object }} }}
  b: {{ needs: [a], prompt: 'use {{{{ agents.a.output.missing }}}}' }}
  c: {{ needs: [b], prompt: x }}
"
    );
    let out = case(&yaml).script("a", takes(10).output(json!({}))).run().await;
    assert_eq!(out.starts(), ["a@0"]);
    assert_eq!(out.statuses(), ["a=succeeded", "b=failed", "c=skipped"]);
    assert_eq!(
        out.reason("b"),
        "cannot render its prompt: cannot render the prompt of `b`: `agents.a.output.missing` is undefined"
    );
    assert_eq!(out.reason("c"), "it needs `b`, which failed");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_agent_task_is_an_infrastructure_failure() {
    let yaml = format!("{HEAD}agents:\n  a: {{ prompt: x }}\n  b: {{ prompt: x }}\n  c: {{ needs: [a], prompt: x }}\n");
    let out = case(&yaml).script("a", takes(10).panics()).script("b", takes(20)).run().await;
    assert_eq!(out.starts(), ["a@0", "b@0"]);
    assert_eq!(out.statuses(), ["a=failed", "b=succeeded", "c=skipped"]);
    let a = out.report("a");
    assert!(a.infrastructure);
    let reason = out.reason("a");
    assert!(
        reason.starts_with("its task ended abnormally: task ")
            && reason.ends_with("this is a bug in orch, please report it"),
        "{reason}"
    );
    assert_eq!(out.reason("c"), "it needs `a`, which failed");
    assert_eq!(out.log.running, 0);
}

#[tokio::test(start_paused = true)]
async fn only_runs_the_selected_agents_and_what_they_need() {
    let yaml = format!("{HEAD}agents:\n  a: {{ prompt: x }}\n  b: {{ needs: [a], prompt: x }}\n  c: {{ prompt: x }}\n");
    let plan = plan(&yaml);
    let selection = Selection::new(&plan, &["b".to_string()], None, None, None).expect("a valid selection");
    let out = case(&yaml).selection(selection).run().await;
    assert_eq!(out.starts(), ["a@0", "b@10"]);
    assert_eq!(out.statuses(), ["a=succeeded", "b=succeeded"]);
}

#[tokio::test(start_paused = true)]
async fn prior_results_feed_the_run_instead_of_running_again() {
    let yaml = format!(
        "{HEAD}agents:\n  a: {{ prompt: x }}\n  b: {{ needs: [a], prompt: 'after {{{{ agents.a.text }}}}' }}\n  c: {{ prompt: x }}\n"
    );
    let prior = || {
        let mut a = AgentReport::empty("a", "a", None, AgentStatus::Succeeded, String::new());
        a.reason = None;
        a.text = "the earlier answer".into();
        let mut selection = Selection::default();
        selection.prior.insert("a".into(), a);
        selection
    };
    // `--from`: `a`'s earlier result feeds `b`, and stays out of this run's report.
    // (`c` is in the plan's first stage, `b` in its second.)
    let out = case(&yaml).selection(prior()).run().await;
    assert_eq!(out.starts(), ["c@0", "b@0"]);
    assert_eq!(out.prompt("b"), "after the earlier answer");
    assert_eq!(out.statuses(), ["c=succeeded", "b=succeeded"]);

    // `--resume`: it stays in the report.
    let mut selection = prior();
    selection.keep_prior = true;
    let out = case(&yaml).selection(selection).run().await;
    assert_eq!(out.starts(), ["c@0", "b@0"]);
    assert_eq!(out.statuses(), ["a=succeeded", "c=succeeded", "b=succeeded"]);
    assert_eq!(out.report("a").text, "the earlier answer");
}

#[tokio::test(start_paused = true)]
async fn the_live_report_is_rewritten_when_dispatch_starts_and_after_each_end() {
    let yaml = format!("{HEAD}agents:\n  a: {{ prompt: x }}\n  b: {{ prompt: x }}\n  c: {{ needs: [a], prompt: x }}\n");
    let out = case(&yaml).concurrency(2).script("a", takes(10)).script("b", takes(30)).run().await;
    assert_eq!(
        out.told,
        [
            "progress: done [] running [a b] pending [c]",
            "finished a",
            "progress: done [a=succeeded] running [b c] pending []",
            "finished c",
            "progress: done [a=succeeded c=succeeded] running [b] pending []",
            "finished b",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn rewrites_wait_for_the_interval_and_ends_are_told_at_once() {
    let yaml = format!("{HEAD}agents:\n  a: {{ prompt: x }}\n  b: {{ prompt: x }}\n  c: {{ needs: [a], prompt: x }}\n");
    let out = case(&yaml).concurrency(2).interval(1000).script("a", takes(10)).script("b", takes(1500)).run().await;
    // `a` and `c` end within the first second: one rewrite tells both, at 1 s.
    assert_eq!(
        out.told,
        [
            "progress: done [] running [a b] pending [c]",
            "finished a",
            "finished c",
            "progress: done [a=succeeded c=succeeded] running [b] pending []",
            "finished b",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_report_on_disk_shows_where_the_agents_stand() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let base: super::super::report::RunReport =
        serde_json::from_str(include_str!("../testdata/report.json")).expect("the fixed report parses");
    let writer = super::super::live_report::DiskWriter::start(dir.path());
    let live = LiveReport::new(base, None, crate::signals::Interrupts::default(), writer);
    let env = DispatchEnv {
        reporter: Arc::new(Lines::default()),
        meter: Arc::new(Meter::default()),
        stop: Arc::new(Stop::default()),
        run_cancel: CancellationToken::new(),
        progress: Box::new(OnDisk { live }),
    };
    let yaml = format!("{HEAD}agents:\n  a: {{ prompt: x }}\n  b: {{ prompt: x }}\n  c: {{ needs: [a], prompt: x }}\n");
    let plan = plan(&yaml);
    let fake = Fake {
        scripts: [("b".to_string(), takes(30))].into_iter().collect(),
        log: Arc::default(),
        t0: Instant::now(),
        meter: env.meter.clone(),
        stop: env.stop.clone(),
        run_cancel: env.run_cancel.clone(),
        reporter: env.reporter.clone(),
    };
    let dispatch = Dispatch { concurrency: 2, max_fail: None, selection: Selection::default() };
    let reports = run(&fake, env, &plan, dispatch).await;
    assert_eq!(reports.len(), 3);
    // All three ended within a second: `report.json` is still the first rewrite ...
    let raw: super::super::report::RunReport =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).expect("report.json"))
            .expect("report.json parses");
    let statuses: Vec<String> = raw.agents.iter().map(|r| format!("{}={}", r.id, r.status.as_str())).collect();
    assert_eq!(statuses, ["a=running", "b=running", "c=pending"]);
    // ... and the journal has each ended agent: a reader sees them all.
    let on_disk = super::super::report::read(dir.path()).expect("the report on disk");
    let statuses: Vec<String> = on_disk.agents.iter().map(|r| format!("{}={}", r.id, r.status.as_str())).collect();
    assert_eq!(statuses, ["a=succeeded", "b=succeeded", "c=succeeded"]);
    assert_eq!(on_disk.totals.succeeded, 3);
    assert_eq!(on_disk.exit_code, crate::run::recover::KILLED);
    // A line cut short by a crash is skipped.
    let mut journal = std::fs::read(dir.path().join(super::super::report::JOURNAL)).expect("the journal");
    journal.extend_from_slice(b"{\"id\": \"d\", \"sta");
    std::fs::write(dir.path().join(super::super::report::JOURNAL), journal).expect("write the journal");
    assert_eq!(super::super::report::read(dir.path()).expect("the report on disk").agents.len(), 3);
    // The final report replaces the journal.
    super::super::report::remove_journal(dir.path());
    assert!(!dir.path().join(super::super::report::JOURNAL).exists());
}

#[tokio::test(start_paused = true)]
async fn an_agent_whose_definition_supplies_the_task_starts_with_an_empty_prompt() {
    let yaml = format!("{HEAD}agents:\n  a: {{ uses: reviewer }}\n");
    let out = case(&yaml).run().await;
    assert_eq!(out.starts(), ["a@0"]);
    assert_eq!(out.prompt("a"), "");
    assert_eq!(out.statuses(), ["a=succeeded"]);
}
