//! `report.html`: one self-contained page per run (inline CSS and script, nothing
//! fetched): a timeline with one bar per agent (waiting, worktree, sandbox, loop,
//! commit, from the report's timings), cost and tokens per agent, the synthesis tree
//! and each agent's transcript, folded.
//!
//! The page is rendered with minijinja with HTML auto-escaping on, so text from models,
//! tools and files is always text: it never becomes markup. The timeline's figures
//! reach the script as JSON (escaped for a `<script>` element by `tojson`), and the
//! script builds its elements with `textContent`, never with HTML strings. A
//! Content-Security-Policy lets only the page's own script run (by a per-page nonce).

use std::path::Path;

use minijinja::{AutoEscape, Environment};
use serde::Serialize;
use serde_json::{Value, json};

use super::render::by_status;
use super::report::{AgentReport, RunReport};

/// The page's template.
const TEMPLATE: &str = include_str!("html/report.html");

/// Most bytes of one agent's transcript shown in the page.
const TRANSCRIPT_BYTES: usize = 256 * 1024;

/// Most bytes of transcripts in the whole page; past it, transcripts are only linked.
const ALL_TRANSCRIPTS_BYTES: usize = 32 * 1024 * 1024;

/// One bar of the timeline, in milliseconds from the start of the agents' phase.
#[derive(Serialize)]
struct Bar<'a> {
    id: &'a str,
    status: &'static str,
    waiting: u64,
    worktree: u64,
    sandbox: u64,
    #[serde(rename = "loop")]
    loop_: u64,
    commit: u64,
}

/// One agent's row and transcript.
#[derive(Serialize)]
struct Agent<'a> {
    id: &'a str,
    status: &'static str,
    reason: Option<&'a str>,
    turns: u32,
    input_tokens: u64,
    output_tokens: u64,
    total_tokens: u64,
    cost: String,
    seconds: String,
    files: usize,
    text: &'a str,
    transcript_file: Option<String>,
    /// Its events, one line each; `None` when not read.
    events: Option<Vec<Line>>,
    /// Why its transcript is not shown in full.
    transcript_note: Option<String>,
}

/// One event of a transcript, as shown.
#[derive(Serialize)]
struct Line {
    kind: String,
    text: String,
}

/// Writes `report.html` into `dir` (through a temporary file and a rename), rendered
/// straight into the file: a page of a thousand agents is several MB.
pub fn write(dir: &Path, report: &RunReport) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = dir.join("report.html.tmp");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
    render_to(report, dir, &mut out).map_err(std::io::Error::other)?;
    out.flush()?;
    drop(out);
    std::fs::rename(&tmp, dir.join("report.html"))
}

/// The page for `report`, reading transcripts from `dir` (the tests read it whole).
#[cfg(test)]
pub fn render(report: &RunReport, dir: &Path) -> Result<String, minijinja::Error> {
    let mut out = Vec::new();
    render_to(report, dir, &mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// What the template is given; it borrows the report rather than copying it.
#[derive(Serialize)]
struct Page<'a> {
    run_id: &'a str,
    workflow: &'a str,
    description: Option<&'a str>,
    status: &'static str,
    duration: String,
    totals: Value,
    stopped: Option<&'a str>,
    timeline: Timeline<'a>,
    agents: Vec<Agent<'a>>,
    synthesis: Option<Value>,
    nonce: String,
}

/// The timeline's figures, for the page's script.
#[derive(Serialize)]
struct Timeline<'a> {
    agents: Vec<Bar<'a>>,
    agents_ms: u64,
    synthesis_ms: u64,
}

/// Renders the page for `report` (transcripts read from `dir`) into `out`.
fn render_to(report: &RunReport, dir: &Path, out: &mut impl std::io::Write) -> Result<(), minijinja::Error> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.add_template("report.html", TEMPLATE)?;
    let ordered = by_status(&report.agents);
    let bars: Vec<Bar> = ordered
        .iter()
        .map(|a| Bar {
            id: &a.id,
            status: a.status.as_str(),
            waiting: a.timings.waiting_ms,
            worktree: a.timings.worktree_ms,
            sandbox: a.timings.host_ms,
            loop_: a.timings.loop_ms,
            commit: a.timings.finish_ms,
        })
        .collect();
    let mut budget = ALL_TRANSCRIPTS_BYTES;
    let agents: Vec<Agent> = ordered.iter().map(|a| agent(a, dir, &mut budget)).collect();
    let timeline =
        Timeline { agents: bars, agents_ms: report.timings.agents_ms, synthesis_ms: report.timings.synthesis_ms };
    let synthesis = report.synthesis.as_ref().map(|s| {
        let levels = s.tree.as_ref().map(|t| {
            t.levels
                .iter()
                .map(|l| {
                    let groups: Vec<Value> = l
                        .groups
                        .iter()
                        .map(|g| {
                            json!({
                                "id": g.id,
                                "status": g.status.as_str(),
                                "reason": g.reason,
                                "prompt_tokens": g.prompt_tokens,
                                "members": g.members,
                                "agents": g.agents,
                                "cost": super::render::cost(g.cost_usd),
                            })
                        })
                        .collect();
                    json!({ "level": l.level, "groups": groups })
                })
                .collect::<Vec<_>>()
        });
        json!({
            "status": s.status.as_str(),
            "reason": s.reason,
            "text": s.text.trim(),
            "budget_tokens": s.budget_tokens,
            "prompt_tokens": s.prompt_tokens,
            "cost": super::render::cost(s.cost_usd),
            "turns": s.turns,
            "levels": levels,
        })
    });
    let page = Page {
        run_id: &report.run_id,
        workflow: &report.workflow.name,
        description: report.workflow.description.as_deref(),
        status: super::render::run_status(report.status),
        duration: super::render::seconds(report.duration_ms),
        totals: json!({
            "agents": report.agents.len(),
            "succeeded": report.totals.succeeded,
            "partial": report.totals.partial,
            "failed": report.totals.failed,
            "cancelled": report.totals.cancelled,
            "skipped": report.totals.skipped,
            "turns": report.totals.turns,
            "tokens": report.totals.usage.total(),
            "cost": super::render::cost(report.totals.cost_usd),
        }),
        stopped: report.stopped.as_deref(),
        timeline,
        agents,
        synthesis,
        nonce: nonce(),
    };
    env.get_template("report.html")?.render_captured_to(minijinja::value::Serde(&page), out).map(|_| ())
}

fn agent<'a>(a: &'a AgentReport, dir: &Path, budget: &mut usize) -> Agent<'a> {
    let transcript_file = a.transcript.as_ref().map(|t| t.display().to_string());
    let (events, transcript_note) = match &a.transcript {
        None => (None, None),
        Some(_) if *budget == 0 => (None, Some("not included: the page holds enough transcripts already".into())),
        Some(rel) => match read_transcript(&dir.join(rel), TRANSCRIPT_BYTES.min(*budget)) {
            Ok((lines, used, cut)) => {
                *budget = budget.saturating_sub(used);
                let note = cut.then(|| format!("cut at {} KB: the whole transcript is in the file", used / 1024));
                (Some(lines), note)
            }
            Err(e) => (None, Some(format!("cannot read it: {e}"))),
        },
    };
    Agent {
        id: &a.id,
        status: a.status.as_str(),
        reason: a.reason.as_deref(),
        turns: a.turns,
        input_tokens: a.usage.input_tokens + a.usage.cache_read_input_tokens + a.usage.cache_creation_input_tokens,
        output_tokens: a.usage.output_tokens,
        total_tokens: a.usage.total(),
        cost: super::render::cost(a.cost_usd),
        seconds: super::render::seconds(a.duration_ms),
        files: a.changed_files.len(),
        text: a.text.trim(),
        transcript_file,
        events,
        transcript_note,
    }
}

/// The events of the transcript at `path`, up to `max` bytes of shown text; the bytes
/// used and whether it was cut.
fn read_transcript(path: &Path, max: usize) -> std::io::Result<(Vec<Line>, usize, bool)> {
    use std::io::BufRead as _;
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut lines = Vec::new();
    let mut used = 0;
    for line in file.lines() {
        let line = line?;
        let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
        let Some(shown) = describe(&v["event"]) else { continue };
        used += shown.text.len() + shown.kind.len();
        if used > max {
            return Ok((lines, used, true));
        }
        lines.push(shown);
    }
    Ok((lines, used, false))
}

/// One transcript event as a line of the page (`None` for the ones not worth a line).
fn describe(event: &Value) -> Option<Line> {
    let kind = event["type"].as_str()?.to_string();
    let text = match kind.as_str() {
        "prompt" => event["text"].as_str()?.to_string(),
        "turn_started" => format!("turn {}", event["turn"]),
        "assistant_message" => {
            let blocks = event["message"]["content"].as_array()?;
            let texts: Vec<&str> =
                blocks.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str()).collect();
            if texts.is_empty() {
                return None;
            }
            texts.join("\n")
        }
        "tool_use_started" => format!("{} {}", event["name"].as_str()?, clip(&event["input"].to_string(), 2000)),
        "tool_use_finished" => {
            let error = if event["is_error"] == true { " (error)" } else { "" };
            format!("{}{error}: {}", event["name"].as_str()?, clip(event["output"].as_str().unwrap_or_default(), 4000))
        }
        "terminal" => format!("ended: {}", event["reason"]),
        "retry" => format!("retry {}: {}", event["attempt"], event["error"].as_str().unwrap_or_default()),
        "fallback" => format!("fell back to {}: {}", event["to"], event["error"].as_str().unwrap_or_default()),
        "compaction" => format!("compacted from {} to {} tokens", event["before_tokens"], event["after_tokens"]),
        "hook" => format!("hook {}: {}", event["command"].as_str().unwrap_or_default(), event["outcome"]),
        "agent_finished" => format!("finished: {}", event["status"].as_str().unwrap_or_default()),
        _ => return None,
    };
    Some(Line { kind, text })
}

/// A fresh value for the page's script nonce: the Content-Security-Policy runs only
/// the script that carries it, so markup that slipped into the page could not run.
fn nonce() -> String {
    use rand::Rng as _;
    format!("{:032x}", rand::rng().random::<u128>())
}

/// `text` cut to about `max` bytes, at a character boundary.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes)", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests;
