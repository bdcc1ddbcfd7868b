//! Context management: the pure parts of the pipeline the loop runs before every model
//! call. It owns the settings ([`ContextConfig`]), the local token estimate, the
//! microcompact pass (old re-fetchable tool results become one-line placeholders), the
//! summary request's prompt, the head-drop used when that request is itself too long,
//! the choice of files to restore after a compaction, and the history that replaces the
//! old one. The loop (`query.rs`) drives these and talks to the model; nothing here does
//! I/O.
//!
//! Every function that rewrites a history keeps the pairing of `tool_use` and
//! `tool_result` blocks.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::message::{ContentBlock, Message, Role, ToolSpec};
use crate::model::SystemPart;

/// Tools whose results can be fetched again by repeating the call, so microcompact may
/// clear them. Results of every other tool stay.
pub const REFETCHABLE_TOOLS: &[&str] = &orch_types::tools::REFETCHABLE_NAMES;

/// The start of every microcompact placeholder.
pub const CLEARED_PREFIX: &str = "[result cleared to save context:";

/// The start of the first message of a compacted history.
pub const SUMMARY_HEADER: &str = "[this conversation was compacted:";

/// How the loop keeps a conversation inside the model's context window.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextConfig {
    /// The model's context window, in tokens.
    pub window: u64,
    /// Tokens kept free under the window for the answer and the summary request;
    /// autocompact starts at `window - reserve`.
    pub reserve: u64,
    /// Microcompact: results of the last this many turns are never cleared.
    pub keep_recent_turns: u32,
    /// Microcompact clears only once at least this many tokens can go at once (or when
    /// the context is over the threshold), so the cached prefix survives several turns
    /// between clears.
    pub microcompact_batch_tokens: u64,
    /// Files restored after a compaction, most recently read first.
    pub restore_files: usize,
    /// Token budget of all restored files together.
    pub restore_budget_tokens: u64,
    /// A file whose content is larger than this is not restored.
    pub restore_file_tokens: u64,
    /// Output limit of the summary request.
    pub summary_max_tokens: u32,
    /// Whether the loop compacts at all (microcompact and autocompact; reactive
    /// compaction on a prompt-too-long error too).
    pub enabled: bool,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            window: 200_000,
            reserve: 40_000,
            keep_recent_turns: 10,
            microcompact_batch_tokens: 20_000,
            restore_files: 5,
            restore_budget_tokens: 50_000,
            restore_file_tokens: 10_000,
            summary_max_tokens: 16_384,
            enabled: true,
        }
    }
}

impl ContextConfig {
    /// The context size at which autocompact starts.
    pub fn threshold(&self) -> u64 {
        self.window.saturating_sub(self.reserve)
    }
}

/// The local token estimate: about four bytes of JSON per token. It decides thresholds
/// between calls; the usage the API reports replaces it after every call.
pub fn estimate_text(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The estimate of one message, as it goes over the wire.
pub fn estimate_message(message: &Message) -> u64 {
    serde_json::to_string(message).map(|s| estimate_text(&s)).unwrap_or(0)
}

/// The estimate of some messages.
pub fn estimate_messages(messages: &[Message]) -> u64 {
    messages.iter().map(estimate_message).sum()
}

/// The estimate of what every request carries besides the history.
pub fn estimate_fixed(system: &[SystemPart], tools: &[ToolSpec]) -> u64 {
    let system: u64 = system.iter().map(|p| estimate_text(&p.text)).sum();
    let tools: u64 = tools.iter().map(|t| serde_json::to_string(t).map(|s| estimate_text(&s)).unwrap_or(0)).sum();
    system + tools
}

/// A tool call as the history records it.
struct CallInfo {
    name: String,
    input: Value,
    /// How many assistant messages came before the one that made the call.
    turn: usize,
}

fn calls_by_id(messages: &[Message]) -> HashMap<String, CallInfo> {
    let mut calls = HashMap::new();
    let mut turn = 0;
    for m in messages {
        if m.role != Role::Assistant {
            continue;
        }
        for u in m.tool_uses() {
            calls.insert(u.id.to_string(), CallInfo { name: u.name.to_string(), input: u.input.clone(), turn });
        }
        turn += 1;
    }
    calls
}

/// A short description of a call for a placeholder: the tool and its main argument.
fn describe(name: &str, input: &Value) -> String {
    let arg = ["file_path", "path", "pattern", "command"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .unwrap_or_default();
    let mut arg: String = arg.chars().take(100).collect();
    arg = arg.replace('\n', " ");
    if arg.is_empty() { name.to_string() } else { format!("{name} {arg}") }
}

/// What a microcompact pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleared {
    pub results: usize,
    pub tokens: u64,
}

/// Replaces the results of re-fetchable tools that are older than
/// `keep_recent_turns` turns with a one-line placeholder. Clears nothing unless at least
/// `min_tokens` can go. Results of other tools, errors and small results stay.
pub fn microcompact(messages: &mut [Message], keep_recent_turns: u32, min_tokens: u64) -> Cleared {
    let calls = calls_by_id(messages);
    let turns = messages.iter().filter(|m| m.role == Role::Assistant).count();
    let old = |id: &str| {
        calls.get(id).filter(|c| {
            REFETCHABLE_TOOLS.contains(&c.name.as_str()) && turns.saturating_sub(c.turn) > keep_recent_turns as usize
        })
    };
    let placeholder = |c: &CallInfo| {
        format!(
            "{CLEARED_PREFIX} {} (turn {}); repeat the call if you need it again]",
            describe(&c.name, &c.input),
            c.turn + 1
        )
    };
    // First the sum, so nothing changes when the batch is too small.
    let mut total = Cleared::default();
    for m in messages.iter().filter(|m| m.role == Role::User) {
        for b in &m.content {
            if let ContentBlock::ToolResult { tool_use_id, content, is_error: false, .. } = b
                && let Some(c) = old(tool_use_id)
                && !content.starts_with(CLEARED_PREFIX)
            {
                let saved = estimate_text(content).saturating_sub(estimate_text(&placeholder(c)));
                if saved > 0 {
                    total.results += 1;
                    total.tokens += saved;
                }
            }
        }
    }
    if total.results == 0 || total.tokens < min_tokens {
        return Cleared::default();
    }
    for m in messages.iter_mut().filter(|m| m.role == Role::User) {
        for b in &mut m.content {
            if let ContentBlock::ToolResult { tool_use_id, content, is_error: false, .. } = b
                && let Some(c) = old(tool_use_id)
                && !content.starts_with(CLEARED_PREFIX)
            {
                let short = placeholder(c);
                if estimate_text(content) > estimate_text(&short) {
                    *content = short;
                }
            }
        }
    }
    total
}

/// The system prompt of the summary request.
pub const SUMMARY_SYSTEM: &str = "\
You write handover notes for a coding agent whose conversation no longer fits its \
context window. Another instance of the agent will continue the work with nothing but \
your notes and the files on disk, so be complete and exact. You have no tools; answer \
with the notes only.";

/// The instruction appended to the history in the summary request.
pub const SUMMARY_PROMPT: &str = "\
Stop the task for a moment. The conversation above is about to be replaced by your \
notes, so write them now. Do not call any tool and do not continue the work itself.

Write the notes under exactly these headings, in this order:

1. Request and intent: what was asked, in full, and what the person asking wants to \
end up with.
2. Key technical concepts: languages, frameworks, libraries, conventions and \
constraints that matter for this work.
3. Files and code: every file read, created or changed, with why it matters; quote the \
short code excerpts the work depends on, and name functions and types exactly.
4. Errors and fixes: each error met (build, test, tool, permission) and how it was \
resolved, or that it was not.
5. Problem solving: what was tried, what was ruled out and why, what is settled.
6. All user messages: every message from the user that is not a tool result, in \
order, close to verbatim.
7. Pending tasks: what was asked and is not done yet.
8. Current work: precisely what was being done just before these notes, with file \
names and code.
9. Next step: the single next action that continues the current work, only if it \
follows from the request; quote the latest instruction it rests on.

Be specific rather than brief: paths, names, commands and exact error texts are worth \
more than prose.";

/// The history of a summary request: `messages` with the summary instruction as the
/// last user turn.
pub fn summary_messages(messages: &[Message]) -> Vec<Message> {
    let mut out = messages.to_vec();
    match out.last_mut() {
        Some(last) if last.role == Role::User => last.content.push(ContentBlock::text(SUMMARY_PROMPT)),
        _ => out.push(Message::user(SUMMARY_PROMPT)),
    }
    out
}

/// Drops the oldest part of `messages` (about a fifth, at least one exchange) for a
/// summary request that was too long. The cut lands on a user message; tool results
/// whose calls were dropped are removed from it, and a note says what happened. `None`
/// when nothing more can be dropped.
pub fn drop_head(messages: &[Message]) -> Option<Vec<Message>> {
    let len = messages.len();
    if len < 3 {
        return None;
    }
    let mut cut = (len / 5).max(2);
    while cut < len && messages[cut].role != Role::User {
        cut += 1;
    }
    if cut >= len {
        return None;
    }
    let mut out = messages[cut..].to_vec();
    let kept: HashSet<String> = out.iter().flat_map(|m| m.tool_uses().map(|u| u.id.to_string())).collect();
    if let Some(first) = out.first_mut() {
        first
            .content
            .retain(|b| !matches!(b, ContentBlock::ToolResult { tool_use_id, .. } if !kept.contains(tool_use_id)));
        first.content.insert(
            0,
            ContentBlock::text("[the oldest part of the conversation was dropped here because it no longer fits]"),
        );
    }
    Some(out)
}

/// The files to restore after a compaction: the `file_path` of the latest `Read` calls
/// that succeeded, most recent first, each once, at most `max`.
pub fn recent_reads(messages: &[Message], max: usize) -> Vec<String> {
    let failed: HashSet<&str> = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, is_error: true, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    let mut out: Vec<String> = Vec::new();
    for m in messages.iter().rev().filter(|m| m.role == Role::Assistant) {
        for u in m.tool_uses().collect::<Vec<_>>().into_iter().rev() {
            if u.name != "Read" || failed.contains(u.id) {
                continue;
            }
            if let Some(path) = u.input.get("file_path").and_then(Value::as_str)
                && !out.iter().any(|p| p == path)
            {
                out.push(path.to_string());
                if out.len() == max {
                    return out;
                }
            }
        }
    }
    out
}

/// A file restored after a compaction: the call that re-read it and its result.
#[derive(Debug, Clone)]
pub struct Restored {
    pub id: String,
    pub path: String,
    pub content: String,
}

/// The history that replaces a compacted one: the summary as the first user message,
/// then the restored files as a paired `Read` exchange, then a note to carry on.
pub fn compacted_history(summary: &str, restored: &[Restored]) -> Vec<Message> {
    let head = format!(
        "{SUMMARY_HEADER} its earlier part ran out of room and was replaced by these notes, written by you]\n\n{}",
        summary.trim()
    );
    let carry_on = "Carry on with the task from where the notes leave off. Do not ask for confirmation and do \
                    not repeat work the notes say is done.";
    if restored.is_empty() {
        return vec![Message {
            role: Role::User,
            content: vec![ContentBlock::text(head), ContentBlock::text(carry_on)],
        }];
    }
    let calls: Vec<ContentBlock> = restored
        .iter()
        .map(|r| ContentBlock::ToolUse {
            id: r.id.clone(),
            name: "Read".to_string(),
            input: serde_json::json!({ "file_path": r.path }),
        })
        .collect();
    let mut results: Vec<ContentBlock> =
        restored.iter().map(|r| ContentBlock::tool_result(&r.id, r.content.clone(), false)).collect();
    results.push(ContentBlock::text(carry_on));
    vec![
        Message::user(head),
        Message {
            role: Role::Assistant,
            content: std::iter::once(ContentBlock::text("Re-reading the files I worked on most recently."))
                .chain(calls)
                .collect(),
        },
        Message { role: Role::User, content: results },
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(id: &str, name: &str, input: Value) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse { id: id.into(), name: name.into(), input }],
        }
    }

    fn result(id: &str, text: &str) -> Message {
        Message { role: Role::User, content: vec![ContentBlock::tool_result(id, text, false)] }
    }

    #[test]
    fn microcompact_clears_old_refetchable_results_only() {
        let big = "x".repeat(4000);
        let mut h = vec![Message::user("go")];
        h.push(call("a", "Read", json!({"file_path": "a.rs"})));
        h.push(result("a", &big));
        h.push(call("b", "Edit", json!({"file_path": "a.rs"})));
        h.push(result("b", &big));
        for i in 0..3 {
            h.push(call(&format!("n{i}"), "Read", json!({"file_path": "n.rs"})));
            h.push(result(&format!("n{i}"), &big));
        }
        let cleared = microcompact(&mut h, 2, 0);
        assert_eq!(cleared.results, 2, "a (turn 1) and n0 (turn 3) are older than 2 turns");
        let text = |i: usize| match &h[i].content[0] {
            ContentBlock::ToolResult { content, .. } => content.clone(),
            _ => String::new(),
        };
        assert!(text(2).starts_with(CLEARED_PREFIX) && text(2).contains("Read a.rs"), "{}", text(2));
        assert_eq!(text(4), big, "Edit results are never cleared");
        assert!(text(6).starts_with(CLEARED_PREFIX));
        assert_eq!(text(8), big);
        assert_eq!(microcompact(&mut h, 2, 0), Cleared::default(), "a second pass finds nothing new");
    }

    #[test]
    fn microcompact_waits_for_a_batch() {
        let mut h = vec![Message::user("go"), call("a", "Read", json!({})), result("a", &"x".repeat(400))];
        h.push(call("b", "Read", json!({})));
        h.push(result("b", "y"));
        let before = h.clone();
        assert_eq!(microcompact(&mut h, 0, 1_000), Cleared::default());
        assert_eq!(h, before);
    }

    #[test]
    fn drop_head_keeps_pairs() {
        let mut h = vec![Message::user("go")];
        for i in 0..10 {
            h.push(call(&format!("t{i}"), "Read", json!({})));
            h.push(result(&format!("t{i}"), "r"));
        }
        let dropped = drop_head(&h).unwrap();
        assert!(dropped.len() < h.len());
        assert_eq!(dropped[0].role, Role::User);
        let uses: HashSet<String> = dropped.iter().flat_map(|m| m.tool_uses().map(|u| u.id.to_string())).collect();
        for b in dropped.iter().flat_map(|m| &m.content) {
            if let ContentBlock::ToolResult { tool_use_id, .. } = b {
                assert!(uses.contains(tool_use_id), "orphan result {tool_use_id}");
            }
        }
    }

    #[test]
    fn recent_reads_newest_first_once_without_failures() {
        let h = vec![
            call("1", "Read", json!({"file_path": "a"})),
            result("1", "ok"),
            call("2", "Read", json!({"file_path": "b"})),
            Message { role: Role::User, content: vec![ContentBlock::tool_result("2", "no such file", true)] },
            call("3", "Read", json!({"file_path": "c"})),
            result("3", "ok"),
            call("4", "Read", json!({"file_path": "a"})),
            result("4", "ok"),
        ];
        assert_eq!(recent_reads(&h, 5), vec!["a", "c"]);
        assert_eq!(recent_reads(&h, 1), vec!["a"]);
    }

    #[test]
    fn summary_prompt_has_every_section() {
        for s in [
            "Request and intent",
            "Key technical concepts",
            "Files and code",
            "Errors and fixes",
            "Problem solving",
            "All user messages",
            "Pending tasks",
            "Current work",
            "Next step",
        ] {
            assert!(SUMMARY_PROMPT.contains(s), "{s}");
        }
    }
}
