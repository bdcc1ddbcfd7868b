//! `orch exec PROMPT`: one ad-hoc agent through the shared loop, like `claude -p`. The
//! final answer goes to stdout; progress goes to stderr.

use std::io::Write;

use orch_agents::{Event, EventSink, Limits, Message, NoTools, QueryConfig, Terminal, query};
use tokio_util::sync::CancellationToken;

use crate::cli::ExecArgs;
use crate::exit::Code;
use crate::{provider, signals};

pub async fn run(args: ExecArgs) -> anyhow::Result<Code> {
    let provider = provider::build(&args.model)?;
    let mut config = QueryConfig::new(&args.agent_id, &args.model.model);
    config.fallback_model = args.model.fallback_model.clone();
    config.prices = provider::prices(&args.model)?;
    config.limits = Limits {
        max_turns: Some(args.max_turns),
        max_tokens: args.max_tokens,
        max_cost_usd: args.max_cost_usd,
        timeout: args.timeout,
    };
    let cancel = CancellationToken::new();
    let interrupts = signals::watch(cancel.clone())?;
    let sink: Box<dyn EventSink> = if args.json { Box::new(JsonLines) } else { Box::new(StderrLog) };
    let outcome = query(provider.as_ref(), &NoTools, &config, vec![Message::user(&args.prompt)], sink.as_ref(), &cancel).await;

    if !args.json && !outcome.final_text.trim().is_empty() {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", outcome.final_text.trim_end())?;
        out.flush()?;
    }
    if outcome.terminal != Terminal::Completed {
        eprintln!("orch: agent {}", outcome.terminal);
    }
    Ok(interrupts.code().unwrap_or_else(|| Code::for_terminal(&outcome.terminal)))
}

/// `--json`: every event as one JSON line on stdout, flushed per line.
struct JsonLines;

impl EventSink for JsonLines {
    fn emit(&self, event: Event) {
        if matches!(event, Event::TextDelta { .. }) {
            return;
        }
        if let Ok(line) = serde_json::to_string(&event) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// One plain line on stderr per event worth seeing.
struct StderrLog;

impl EventSink for StderrLog {
    fn emit(&self, event: Event) {
        let line = match event {
            Event::ToolUseStarted { name, .. } => format!("tool {name} started"),
            Event::ToolUseFinished { name, is_error: true, output, .. } => {
                format!("tool {name} failed: {}", output.lines().next().unwrap_or_default())
            }
            Event::Retry { attempt, delay_ms, error } => format!("model call failed (attempt {attempt}), retrying in {delay_ms} ms: {error}"),
            Event::Fallback { from, to, .. } => format!("model {from} overloaded; switching to {to}"),
            _ => return,
        };
        eprintln!("orch: {line}");
    }
}
