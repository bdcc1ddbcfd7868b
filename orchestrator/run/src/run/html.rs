//! `report.html`: one self-contained page per run (inline CSS and script, nothing
//! fetched) with what `report.md` holds and more: a timeline with one bar per agent
//! (waiting, worktree, sandbox, loop, commit, from the report's timings) over a time
//! axis, cost and tokens per agent, each agent's branch and changed files, the
//! synthesis (and its tree) when it ran, the likely conflicts, the integration, the
//! publishing, and each agent's transcript, folded.
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
    branch: Option<&'a str>,
    changed_files: Vec<ChangedFile<'a>>,
    /// Lines about its end (processes killed, worktree kept, carried over, not
    /// committed for size, network).
    notes: Vec<String>,
    mcp_failures: &'a [crate::mcp::McpFailure],
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

/// A file an agent changed.
#[derive(Serialize)]
struct ChangedFile<'a> {
    kind: &'a str,
    path: String,
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
    overlaps: &'a [super::report::Overlap],
    integration: Value,
    publish: Option<Value>,
    nonce: String,
}

/// The timeline's figures, for the page's script.
#[derive(Serialize)]
struct Timeline<'a> {
    agents: Vec<Bar<'a>>,
    /// The time the full width stands for: the longest bar (at least 1 ms).
    end_ms: u64,
    /// The marks of the time axis under the bars.
    axis: Vec<Tick>,
    agents_ms: u64,
    /// Only when synthesis ran.
    synthesis_ms: Option<u64>,
}

/// One mark of the time axis.
#[derive(Debug, PartialEq, Serialize)]
struct Tick {
    ms: u64,
    label: String,
}

/// The steps of a time axis, in milliseconds: round for a clock.
const STEPS: &[u64] = &[
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000,
    900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000, 86_400_000,
];

/// The marks of an axis from 0 to `end_ms`: the smallest round step (see [`STEPS`];
/// past a day, whole days) that gives at most eight intervals.
fn axis(end_ms: u64) -> Vec<Tick> {
    let end = end_ms.max(1);
    let day = 86_400_000;
    let step = STEPS.iter().copied().find(|s| end / s <= 8).unwrap_or_else(|| end.div_ceil(8).div_ceil(day) * day);
    (0..=end / step).map(|i| Tick { ms: i * step, label: time_label(i * step) }).collect()
}

/// `ms` as an axis label: `0`, `250ms`, `1.5s`, `40s`, `2m`, `2m30s`, `1h5m`, `2d`.
fn time_label(ms: u64) -> String {
    match ms {
        0 => "0".into(),
        ms if ms < 1000 => format!("{ms}ms"),
        ms if ms < 60_000 && ms % 1000 != 0 => format!("{:.1}s", ms as f64 / 1000.0),
        ms if ms < 60_000 => format!("{}s", ms / 1000),
        ms if ms < 3_600_000 => {
            let (m, s) = (ms / 60_000, (ms % 60_000) / 1000);
            if s == 0 { format!("{m}m") } else { format!("{m}m{s}s") }
        }
        ms if ms < 86_400_000 => {
            let (h, m) = (ms / 3_600_000, (ms % 3_600_000) / 60_000);
            if m == 0 { format!("{h}h") } else { format!("{h}h{m}m") }
        }
        ms => {
            let (d, h) = (ms / 86_400_000, (ms % 86_400_000) / 3_600_000);
            if h == 0 { format!("{d}d") } else { format!("{d}d{h}h") }
        }
    }
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
    let end_ms = bars.iter().map(|b| b.waiting + b.worktree + b.sandbox + b.loop_ + b.commit).max().unwrap_or(0).max(1);
    let ran = report.synthesis.as_ref().is_some_and(|s| s.status != super::report::AgentStatus::Skipped);
    let timeline = Timeline {
        agents: bars,
        end_ms,
        axis: axis(end_ms),
        agents_ms: report.timings.agents_ms,
        synthesis_ms: ran.then_some(report.timings.synthesis_ms),
    };
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
        overlaps: &report.overlaps,
        integration: integration(&report.integration),
        publish: report.publish.as_ref().map(publishing),
        nonce: nonce(),
    };
    env.get_template("report.html")?.render_captured_to(minijinja::value::Serde(&page), out).map(|_| ())
}

/// The integration section: the mode, the integration branch and each agent's merge,
/// the branches fetched into the repository, the pruned ones, and what failed.
fn integration(i: &super::report::IntegrationReport) -> Value {
    json!({
        "mode": i.mode,
        "fetched": i.fetched,
        "merge": i.merge.as_ref().map(|m| json!({
            "branch": m.branch,
            "merges": m.merges.iter().map(|e| json!({
                "agent": e.agent,
                "merged": e.merged,
                "conflicts": e.conflicts.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })),
        "pruned": i.pruned,
        "error": i.error,
    })
}

/// The publishing section, from the report's `publish` (see `crate::publish`): the
/// mode, where a dry run's requests are, and one line per output.
fn publishing(p: &Value) -> Value {
    let outcomes: Vec<Value> = p["outcomes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            json!({
                "output": o["output"].as_str().unwrap_or_default(),
                "state": o["state"].as_str().unwrap_or_default(),
                "url": o["url"].as_str(),
                "detail": o["detail"].as_str().unwrap_or_default(),
            })
        })
        .collect();
    json!({
        "mode": p["mode"].as_str().unwrap_or("on"),
        "requests_file": p["requests_file"].as_str(),
        "outcomes": outcomes,
    })
}

/// The lines about how an agent's work ended that `report.md` gives beside its changed
/// files.
fn agent_notes(a: &AgentReport) -> Vec<String> {
    let mut notes = Vec::new();
    if a.killed_processes > 0 {
        notes.push(format!("{} processes it left running were killed at its end.", a.killed_processes));
    }
    if let Some(w) = &a.worktree {
        notes.push(format!("Worktree kept at {}", w.display()));
    }
    if a.carried_over {
        notes.push("Carried over from the resumed run: not run again.".into());
    }
    if let Some(commit) = &a.resumed_from {
        notes.push(format!("Run again from the resumed run's work (commit {commit})."));
    }
    if !a.too_large_files.is_empty() {
        let files: Vec<String> =
            a.too_large_files.iter().map(|f| format!("{} ({} bytes)", f.path.display(), f.size)).collect();
        notes.push(format!("Not committed, over the file size limit: {}", files.join(", ")));
    }
    if let Some(net) = a.network.as_ref().filter(|n| !n.is_empty()) {
        let contacted: Vec<String> = net
            .contacted
            .iter()
            .map(|h| format!("{}:{} ({} B up, {} B down)", h.host, h.port, h.bytes_up, h.bytes_down))
            .collect();
        let denied: Vec<String> = net.denied.iter().map(|h| format!("{}:{}", h.host, h.port)).collect();
        let mut parts = Vec::new();
        if !contacted.is_empty() {
            parts.push(format!("contacted {}", contacted.join(", ")));
        }
        if !denied.is_empty() {
            parts.push(format!("denied {}", denied.join(", ")));
        }
        notes.push(format!("Network: {}", parts.join("; ")));
    }
    notes
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
        // Only a commit leaves a branch (`report.md`'s branch column alike).
        branch: a.branch.as_deref().filter(|_| a.commit.is_some()),
        changed_files: a
            .changed_files
            .iter()
            .map(|f| ChangedFile { kind: &f.kind, path: f.path.display().to_string() })
            .collect(),
        notes: agent_notes(a),
        mcp_failures: &a.mcp_failures,
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
