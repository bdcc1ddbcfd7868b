#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::{Arc, Mutex};

use orch_agents::Event;
use orch_agents::model::scripted::{Script, ScriptedProvider, ScriptedTurn};
use serde_json::json;

use super::*;
use crate::run::events::Meter;
use crate::run::report::SynthesisReport;
use crate::run::{Reporter, Stop};

fn agent(id: &str, status: AgentStatus, text: &str) -> AgentReport {
    let mut a = AgentReport::empty(id, id, None, status, "hit the turn limit".into());
    a.text = text.into();
    if status == AgentStatus::Succeeded {
        a.reason = None;
    }
    a
}

#[test]
fn task_then_reports_in_order_then_instructions() {
    let mut b = agent("b", AgentStatus::Partial, "half done");
    b.output = Some(json!({"ok": false}));
    let agents = [agent("a", AgentStatus::Succeeded, "all good"), b, agent("c", AgentStatus::Skipped, "")];
    let p = prompt("Fix it", &agents, None);
    let order = [
        "# The original task",
        "Fix it",
        "## Agent `a`",
        "all good",
        "## Agent `b` (partial: hit the turn limit)",
        "\"ok\": false",
        "## Agent `c` (skipped",
        "did not run",
        "# Instructions",
        "unified answer",
    ];
    let mut at = 0;
    for needle in order {
        let found = p[at..].find(needle).unwrap_or_else(|| panic!("`{needle}` missing after {at} in:\n{p}"));
        at += found + needle.len();
    }
    assert!(!p.contains("half done"), "the structured output stands for the text");
}

#[test]
fn a_custom_prompt_replaces_only_the_instructions() {
    let p = prompt("Task", &[agent("a", AgentStatus::Succeeded, "report a")], Some("Only list the files."));
    assert!(p.contains("report a"));
    assert!(p.ends_with("Only list the files.\n"));
    assert!(!p.contains("unified answer"));
}

#[test]
fn split_keeps_order_and_stays_within_budget_and_group_size() {
    let items: Vec<Item> =
        (0..20).map(|i| Item::of_agent(&agent(&format!("a{i}"), AgentStatus::Succeeded, &"x".repeat(400)))).collect();
    let each = tokens(&items[0].section());
    // Room for three per group by budget.
    let groups = split(items.clone(), 10, 10 + 3 * each, None);
    assert!(
        groups.iter().all(|g| g.len() == 3 || g.len() == 2),
        "{:?}",
        groups.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let order: Vec<String> = groups.iter().flatten().map(|i| i.label.clone()).collect();
    assert_eq!(order, (0..20).map(|i| format!("a{i}")).collect::<Vec<_>>());
    // And at most two by group size.
    let groups = split(items, 10, u64::MAX, Some(2));
    assert_eq!(groups.len(), 10);
}

#[test]
fn capping_cuts_the_answer_but_keeps_carried_reasons() {
    let failed = agent("f", AgentStatus::Failed, "");
    let mut failed = failed;
    failed.reason = Some("REASON-F: the model refused\nsecond line".into());
    let members = vec![Item::of_agent(&agent("a", AgentStatus::Succeeded, "ok")), Item::of_agent(&failed)];
    let mut item = Item::of_group("L1-G1", &members, Ok(&"long answer ".repeat(1000)));
    item.cap(2000);
    let s = item.section();
    assert!(serde_json::to_string(&s).unwrap().len() <= 2000, "{}", s.len());
    assert!(s.contains("- `f` (failed): REASON-F: the model refused\nsecond line"), "{s}");
    assert!(s.contains("more bytes cut here"), "{s}");
    // Carried lines survive a further level, untouched.
    let up = Item::of_group("L2-G1", &[item], Ok("short"));
    assert!(up.section().contains("REASON-F: the model refused\nsecond line"));
    assert_eq!(up.agents, ["a", "f"]);
}

#[test]
fn a_failed_group_is_carried_as_a_failure() {
    let members = vec![Item::of_agent(&agent("a", AgentStatus::Succeeded, "ok"))];
    let item = Item::of_group("L1-G4", &members, Err("the model returned an error"));
    assert!(item.section().contains("- group `L1-G4` (synthesis failed): the model returned an error"));
}

// ----- the tree, through the loop with the scripted provider ---------------------------

#[derive(Default)]
struct Notes(Mutex<Vec<String>>);

impl Reporter for Notes {
    fn agent_started(&self, _id: &str) {}
    fn event(&self, _agent: &str, _event: &Event) {}
    fn agent_finished(&self, _report: &AgentReport) {}
    fn note(&self, line: &str) {
        self.0.lock().unwrap().push(line.to_string());
    }
    fn json_line(&self, _line: &serde_json::Value) {}
    fn answer(&self, _text: &str) -> std::io::Result<()> {
        Ok(())
    }
}

fn turns(text: &str, n: usize) -> Vec<ScriptedTurn> {
    vec![ScriptedTurn { text: Some(text.into()), ..Default::default() }; n]
}

async fn synthesize(
    agents: &[AgentReport],
    settings: &Settings,
    script: Script,
) -> (SynthesisReport, tempfile::TempDir) {
    synthesize_with(agents, settings, script, tokio_util::sync::CancellationToken::new()).await
}

async fn synthesize_with(
    agents: &[AgentReport],
    settings: &Settings,
    script: Script,
    run_cancel: tokio_util::sync::CancellationToken,
) -> (SynthesisReport, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let provider = ScriptedProvider::new(script, "test").unwrap();
    let env = SynthesisEnv {
        provider: &provider,
        prices: Arc::new(orch_agents::PriceTable::default()),
        fallback_model: None,
        run_dir: dir.path(),
        meter: Arc::new(Meter::new(orch_workflows::Limits::default())),
        stop: Arc::new(Stop::default()),
        run_cancel,
        reporter: Arc::new(Notes::default()),
        json: false,
    };
    std::fs::create_dir_all(dir.path().join("transcripts")).unwrap();
    let report = run(&env, "Fix every file.", agents, settings).await;
    (report, dir)
}

fn settings(strategy: SynthesisStrategy, group_size: Option<u32>, window: Option<u64>) -> Settings {
    let spec = SynthesisSpec { model: None, prompt: None, strategy, group_size, context_window: window };
    Settings::of(&spec, "claude-sonnet-4-5".into(), 4)
}

fn forty() -> Vec<AgentReport> {
    (0..40)
        .map(|i| {
            let id = format!("fix/f{i:02}");
            if i == 17 {
                let mut a = agent(&id, AgentStatus::Failed, "");
                a.reason = Some("REASON-17: the edit did not apply to src/f17.rs".into());
                a
            } else {
                agent(&id, AgentStatus::Succeeded, &format!("Fixed src/f{i:02}.rs. {}", "detail ".repeat(250)))
            }
        })
        .collect()
}

#[tokio::test]
async fn group_size_builds_a_tree_whose_levels_are_recorded_and_carry_failures() {
    let script = Script {
        version: 1,
        agents: vec![("synthesis".into(), turns("FINAL", 1)), ("synthesis-*".into(), turns("GROUP-SUMMARY", 1))],
    };
    let (r, dir) = synthesize(&forty(), &settings(SynthesisStrategy::Auto, Some(8), None), script).await;
    assert_eq!(r.status, AgentStatus::Succeeded, "{r:?}");
    assert_eq!(r.text, "FINAL");
    let tree = r.tree.as_ref().unwrap();
    assert_eq!(tree.levels.len(), 1);
    let groups = &tree.levels[0].groups;
    assert_eq!(groups.len(), 5);
    assert_eq!(groups[0].members, (0..8).map(|i| format!("fix/f{i:02}")).collect::<Vec<_>>());
    assert_eq!(groups[2].id, "L1-G3");
    assert_eq!(r.turns, 6, "five groups and the final request");
    let last = std::fs::read_to_string(dir.path().join("synthesis-prompt.md")).unwrap();
    assert!(last.contains("- `fix/f17` (failed): REASON-17: the edit did not apply to src/f17.rs"), "{last}");
    assert_eq!(last.matches("GROUP-SUMMARY").count(), 5);
    let g3 = std::fs::read_to_string(dir.path().join("synthesis/L1-G3-prompt.md")).unwrap();
    assert!(g3.contains("## Agent `fix/f17` (failed: REASON-17"), "{g3}");
    assert!(g3.contains("slice of a larger batch"));
    assert!(dir.path().join("transcripts/synthesis-L1-G3.jsonl").is_file());
}

#[tokio::test]
async fn a_tiny_window_makes_every_request_fit_half_of_it() {
    let script = Script {
        version: 1,
        agents: vec![
            ("synthesis".into(), turns("FINAL", 1)),
            ("synthesis-*".into(), turns(&format!("GROUP {}", "g".repeat(3000)), 1)),
        ],
    };
    // About 520 tokens a report; a budget of 4,000 tokens.
    let s = settings(SynthesisStrategy::Auto, None, Some(8_000));
    let (r, dir) = synthesize(&forty(), &s, script).await;
    assert_eq!(r.status, AgentStatus::Succeeded, "{r:?}");
    let tree = r.tree.as_ref().unwrap();
    assert!(tree.levels.len() >= 2, "{tree:?}");
    for level in &tree.levels {
        for g in &level.groups {
            assert!(g.prompt_tokens <= 4_000, "{} has {} tokens", g.id, g.prompt_tokens);
            let text = std::fs::read_to_string(dir.path().join(g.prompt.as_ref().unwrap())).unwrap();
            assert!(tokens(&text) <= 4_000, "{}", g.id);
            assert!(g.members.len() >= 2, "{g:?}");
        }
    }
    assert!(r.prompt_tokens.unwrap() <= 4_000);
    let last = std::fs::read_to_string(dir.path().join("synthesis-prompt.md")).unwrap();
    assert!(tokens(&last) <= 4_000);
    assert!(last.contains("REASON-17: the edit did not apply to src/f17.rs"), "{last}");
}

#[tokio::test]
async fn single_keeps_one_request_whatever_the_size() {
    // The window is the loop's too: it compacts the one large request first.
    let script = Script { version: 1, agents: vec![("synthesis".into(), turns("FINAL", 3))] };
    let s = settings(SynthesisStrategy::Single, None, Some(8_000));
    let (r, dir) = synthesize(&forty(), &s, script).await;
    assert_eq!(r.status, AgentStatus::Succeeded, "{r:?}");
    assert!(r.tree.is_none());
    let last = std::fs::read_to_string(dir.path().join("synthesis-prompt.md")).unwrap();
    assert_eq!(last, prompt("Fix every file.", &forty(), None));
    assert!(r.prompt_tokens.unwrap() > 4_000);
}

#[tokio::test]
async fn a_failed_group_makes_synthesis_partial_and_reaches_the_final_request() {
    // Only three group answers are scripted: the fourth and fifth groups fail.
    let script = Script {
        version: 1,
        agents: vec![
            ("synthesis".into(), turns("FINAL", 1)),
            ("synthesis-L1-G4".into(), Vec::new()),
            ("synthesis-L1-G5".into(), Vec::new()),
            ("synthesis-*".into(), turns("GROUP", 1)),
        ],
    };
    let (r, dir) = synthesize(&forty(), &settings(SynthesisStrategy::Tree, None, None), script).await;
    assert_eq!(r.status, AgentStatus::Partial, "{r:?}");
    assert!(r.reason.as_deref().unwrap().contains("2 of 5 group syntheses failed"), "{r:?}");
    let last = std::fs::read_to_string(dir.path().join("synthesis-prompt.md")).unwrap();
    assert!(last.contains("- group `L1-G4` (synthesis failed)"), "{last}");
}

#[tokio::test]
async fn an_interrupt_stops_the_tree_after_its_level_and_says_so() {
    let script = Script {
        version: 1,
        agents: vec![("synthesis".into(), turns("FINAL", 1)), ("synthesis-*".into(), turns("GROUP", 1))],
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    cancel.cancel();
    let s = settings(SynthesisStrategy::Tree, Some(8), None);
    let (r, dir) = synthesize_with(&forty(), &s, script, cancel).await;
    assert_eq!(r.status, AgentStatus::Cancelled, "{r:?}");
    assert_eq!(r.reason.as_deref(), Some("interrupted during synthesis level 1"));
    assert_eq!(r.tree.as_ref().unwrap().levels[0].groups.len(), 5);
    assert!(!dir.path().join("synthesis-prompt.md").exists(), "the final request was made");
}

#[test]
fn capping_counts_json_escapes() {
    let members = vec![Item::of_agent(&agent("a", AgentStatus::Succeeded, "ok"))];
    let mut item = Item::of_group("L1-G1", &members, Ok(&"\"q\"\n".repeat(2000)));
    item.cap(3000);
    let json = serde_json::to_string(&item.section()).unwrap();
    assert!(json.len() <= 3000, "{}", json.len());
    assert!(item.section().contains("more bytes cut here"));
}
