//! Synthesis requests: one through the query loop with no tools ([`call`]), and the
//! tree of them when the reports do not fit one ([`run`]). Group requests of a level
//! run at once, bounded by the run's concurrency, and keep their order.

use std::path::PathBuf;
use std::sync::Arc;

use futures::stream::{self, StreamExt as _};
use orch_agents::prompt::{Environment, system_prompt};
use orch_agents::tool::NoTools;
use orch_agents::{Message, QueryConfig, SystemPart, Terminal, Usage, query};
use orch_workflows::SynthesisStrategy;
use tokio_util::sync::CancellationToken;

use super::{Item, Settings, final_prompt, group_prompt, prompt, split, tokens};
use crate::run::events::{AgentSink, Meter, Transcript};
use crate::run::report::{AgentReport, AgentStatus, SynthesisGroup, SynthesisLevel, SynthesisReport, SynthesisTree};
use crate::run::{Reporter, Shared, Stop};

/// What synthesis needs from a run (or from `orch merge`, which has no run clone).
pub struct SynthesisEnv<'a> {
    pub provider: &'a dyn orch_agents::ModelProvider,
    pub prices: Arc<orch_agents::PriceTable>,
    pub fallback_model: Option<String>,
    pub run_dir: &'a std::path::Path,
    pub meter: Arc<Meter>,
    pub stop: Arc<Stop>,
    pub run_cancel: CancellationToken,
    pub reporter: Arc<dyn Reporter>,
    pub json: bool,
}

impl<'a> SynthesisEnv<'a> {
    pub fn of(shared: &'a Shared) -> Self {
        SynthesisEnv {
            provider: shared.provider.as_ref(),
            prices: shared.prices.clone(),
            fallback_model: shared.fallback_model.clone(),
            run_dir: &shared.run_dir,
            meter: shared.meter.clone(),
            stop: shared.stop.clone(),
            run_cancel: shared.run_cancel.clone(),
            reporter: shared.reporter.clone(),
            json: shared.json,
        }
    }

    fn system(&self, model: &str) -> Vec<SystemPart> {
        system_prompt(&Environment {
            cwd: self.run_dir,
            is_git_repo: false,
            model,
            date: &crate::clock::today(),
            git: None,
            instructions: None,
        })
    }
}

/// Synthesizes `agents`' reports for `task`: one request when they fit (or with
/// `strategy: single`), a tree of group requests otherwise.
pub async fn run(env: &SynthesisEnv<'_>, task: &str, agents: &[AgentReport], settings: &Settings) -> SynthesisReport {
    let budget = settings.budget();
    let system = orch_agents::context::estimate_fixed(&env.system(&settings.model), &[]);
    let custom = settings.custom.as_deref();
    let fits = |p: &str, n: usize| system + tokens(p) <= budget && settings.group_size.is_none_or(|m| n <= m);

    let whole = prompt(task, agents, custom);
    if settings.strategy == SynthesisStrategy::Single || fits(&whole, agents.len()) {
        let prompt_tokens = system + tokens(&whole);
        let mut report = call(env, settings, &Call::last(), whole).await;
        report.budget_tokens = Some(budget);
        report.prompt_tokens = Some(prompt_tokens);
        return report;
    }
    drop(whole);

    let mut items: Vec<Item> = agents.iter().map(Item::of_agent).collect();
    let mut tree = SynthesisTree { group_size: settings.group_size, levels: Vec::new() };
    let mut spent = Spent::default();
    let mut level = 0u32;
    loop {
        level += 1;
        let overhead = system + tokens(&group_prompt(task, "L00-G0000", &[], custom));
        let room = budget.saturating_sub(overhead);
        let cap = usize::try_from(room / 2 * 4).unwrap_or(usize::MAX);
        for item in &mut items {
            item.cap(cap);
        }
        let n = items.len();
        let mut groups = split(items, overhead, budget, settings.group_size);
        if groups.len() >= n && n > 1 {
            // Nothing fits two to a group (the task alone fills the budget): pair them
            // anyway, so every level halves the count and the tree ends.
            groups = split(groups.into_iter().flatten().collect(), 0, u64::MAX, Some(2));
        }
        env.reporter.note(&format!(
            "synthesis level {level}: {n} reports in {} groups, each request within {budget} tokens",
            groups.len()
        ));
        let done: Vec<(SynthesisGroup, Item)> = stream::iter(groups.into_iter().enumerate())
            .map(|(i, members)| group(env, settings, task, level, i + 1, members, system))
            .buffered(settings.concurrency)
            .collect()
            .await;
        let mut groups = Vec::with_capacity(done.len());
        items = Vec::with_capacity(done.len());
        for (g, item) in done {
            spent.add(g.turns, g.usage, g.cost_usd);
            groups.push(g);
            items.push(item);
        }
        tree.levels.push(SynthesisLevel { level, groups });
        if env.run_cancel.is_cancelled() {
            let mut report = SynthesisReport::skipped(&format!("interrupted during synthesis level {level}"));
            report.status = AgentStatus::Cancelled;
            report.model = Some(settings.model.clone());
            spent.into(&mut report);
            report.budget_tokens = Some(budget);
            report.tree = Some(tree);
            return report;
        }
        if items.len() <= 1 || fits(&final_prompt(task, &items, true, custom), items.len()) {
            break;
        }
    }

    let mut last = final_prompt(task, &items, true, custom);
    if system + tokens(&last) > budget {
        // One group answer longer than the budget allows: cut it to fit.
        let overhead = system + tokens(&final_prompt(task, &[], true, custom));
        let share = budget.saturating_sub(overhead) / items.len().max(1) as u64;
        for item in &mut items {
            item.cap(usize::try_from(share * 4).unwrap_or(usize::MAX));
        }
        last = final_prompt(task, &items, true, custom);
    }
    let prompt_tokens = system + tokens(&last);
    let mut report = call(env, settings, &Call::last(), last).await;
    let failed = tree.levels.iter().flat_map(|l| &l.groups).filter(|g| g.status == AgentStatus::Failed).count();
    let total: usize = tree.levels.iter().map(|l| l.groups.len()).sum();
    if failed > 0 && report.status == AgentStatus::Succeeded {
        report.status = AgentStatus::Partial;
        report.reason = Some(format!(
            "{failed} of {total} group syntheses failed; the agents under them reached the answer only as their \
             failures (see synthesis.tree in report.json)"
        ));
    }
    spent.into(&mut report);
    report.budget_tokens = Some(budget);
    report.prompt_tokens = Some(prompt_tokens);
    report.tree = Some(tree);
    report
}

/// What the group requests spent.
#[derive(Default)]
struct Spent {
    turns: u32,
    usage: Usage,
    cost_usd: f64,
}

impl Spent {
    fn add(&mut self, turns: u32, usage: Usage, cost_usd: f64) {
        self.turns += turns;
        self.usage += usage;
        self.cost_usd += cost_usd;
    }

    fn into(self, report: &mut SynthesisReport) {
        report.turns += self.turns;
        report.usage += self.usage;
        report.cost_usd += self.cost_usd;
    }
}

/// Group `n` of `level`: its request, and the item that stands for it above.
async fn group(
    env: &SynthesisEnv<'_>,
    settings: &Settings,
    task: &str,
    level: u32,
    n: usize,
    members: Vec<Item>,
    system: u64,
) -> (SynthesisGroup, Item) {
    let id = format!("L{level}-G{n}");
    let text = group_prompt(task, &id, &members, settings.custom.as_deref());
    let prompt_tokens = system + tokens(&text);
    let r = call(env, settings, &Call::group(&id), text).await;
    let answer = match r.status {
        AgentStatus::Succeeded => Ok(r.text.as_str()),
        AgentStatus::Partial if !r.text.trim().is_empty() => Ok(r.text.as_str()),
        _ => Err(r.reason.as_deref().unwrap_or("no answer")),
    };
    let item = Item::of_group(&id, &members, answer);
    let record = SynthesisGroup {
        id,
        members: members.iter().map(|m| m.label.clone()).collect(),
        agents: item.agents.len(),
        status: r.status,
        reason: r.reason,
        prompt_tokens,
        turns: r.turns,
        usage: r.usage,
        cost_usd: r.cost_usd,
        prompt: r.prompt,
        transcript: r.transcript,
    };
    (record, item)
}

/// One request's name and files.
struct Call {
    /// The agent name its events carry.
    name: String,
    prompt_file: PathBuf,
    transcript_file: PathBuf,
    /// Whether it says on stderr when it starts and ends (the final request does;
    /// groups only when they fail).
    announce: bool,
}

impl Call {
    fn last() -> Call {
        Call {
            name: "synthesis".into(),
            prompt_file: PathBuf::from("synthesis-prompt.md"),
            transcript_file: PathBuf::from("transcripts").join("synthesis.jsonl"),
            announce: true,
        }
    }

    fn group(id: &str) -> Call {
        Call {
            name: format!("synthesis-{id}"),
            prompt_file: PathBuf::from("synthesis").join(format!("{id}-prompt.md")),
            transcript_file: PathBuf::from("transcripts").join(format!("synthesis-{id}.jsonl")),
            announce: false,
        }
    }
}

/// Runs one synthesis prompt through the loop, with no tools.
async fn call(env: &SynthesisEnv<'_>, settings: &Settings, call: &Call, prompt: String) -> SynthesisReport {
    let model = settings.model.clone();
    let mut report = SynthesisReport::skipped("");
    report.status = AgentStatus::Failed;
    report.reason = None;
    report.model = Some(model.clone());
    let prompt_path = env.run_dir.join(&call.prompt_file);
    if let Some(dir) = prompt_path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if std::fs::write(&prompt_path, &prompt).is_ok() {
        report.prompt = Some(call.prompt_file.clone());
    }
    let transcript = Transcript::create(&env.run_dir.join(&call.transcript_file)).ok().map(Arc::new);
    if transcript.is_some() {
        report.transcript = Some(call.transcript_file.clone());
    }
    if call.announce {
        env.reporter.note("synthesis started");
    }
    let mut config = QueryConfig::new(call.name.clone(), &model);
    config.fallback_model = env.fallback_model.clone();
    config.prices = env.prices.clone();
    config.system = env.system(&model);
    if let Some(window) = settings.context_window {
        config.context.window = window;
        config.context.reserve = config.context.reserve.min(window / 5);
    }
    let capped = env.meter.cap(orch_workflows::Limits { max_turns: Some(3), ..Default::default() });
    config.limits = capped;
    let sink = AgentSink {
        agent: call.name.clone(),
        transcript,
        meter: env.meter.clone(),
        stop: env.stop.clone(),
        run_cancel: env.run_cancel.clone(),
        json: env.json,
        reporter: env.reporter.clone(),
        checkpoints: None,
    };
    let cancel = env.run_cancel.child_token();
    let outcome = query(env.provider, &NoTools, &config, vec![Message::user(prompt)], &sink, &cancel).await;
    report.turns = outcome.turns;
    report.usage = outcome.usage;
    report.cost_usd = outcome.cost_usd;
    report.model = Some(outcome.model);
    report.text = outcome.final_text;
    report.status = outcome.terminal.disposition().status.into();
    if outcome.terminal != Terminal::Completed {
        report.reason = Some(outcome.terminal.to_string());
    }
    // A synthesis that did not succeed says why, on stderr, where the run's end is read.
    match &report.reason {
        Some(reason) => env.reporter.note(&format!("{} {}: {reason}", call.name, report.status.as_str())),
        None if call.announce => env.reporter.note(&format!("synthesis {}", report.status.as_str())),
        None => {}
    }
    report.terminal = Some(outcome.terminal);
    report
}
