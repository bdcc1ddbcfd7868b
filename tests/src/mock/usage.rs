//! Simulated usage for the mock server: token counts computed from the request (about
//! four bytes of JSON per token), a prompt cache keyed by the exact bytes of the prefix
//! up to each `cache_control` breakpoint (with the API's lookback of 20 blocks), and a
//! context window beyond which a request is refused as too long. Anthropic wire only.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

use super::script::{MockUsage, Turn};

/// Blocks before a breakpoint the cache looks back over for an earlier entry.
const LOOKBACK: usize = 20;

/// The state of the simulation.
#[derive(Debug, Default)]
pub(crate) struct UsageSim {
    pub(crate) window: Option<u64>,
    entries: HashSet<u64>,
}

/// What one request would cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Measured {
    pub(crate) prompt_tokens: u64,
    pub(crate) cache_read: u64,
    pub(crate) cache_write: u64,
}

/// Tokens of a text, by the simulation's rule.
pub fn tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

impl UsageSim {
    pub(crate) fn new(window: Option<u64>) -> Self {
        Self { window, entries: HashSet::new() }
    }

    /// Measures a request body and records the cache entries it writes.
    pub(crate) fn measure(&mut self, body: &Value) -> Measured {
        let blocks = blocks(body);
        let mut hasher = DefaultHasher::new();
        let mut prefix = Vec::with_capacity(blocks.len());
        let mut cumulative = Vec::with_capacity(blocks.len());
        let mut breakpoints = Vec::new();
        let mut total = 0;
        for (i, block) in blocks.iter().enumerate() {
            let mut plain = (*block).clone();
            if let Some(obj) = plain.as_object_mut()
                && obj.remove("cache_control").is_some()
            {
                breakpoints.push(i);
            }
            let text = plain.to_string();
            text.hash(&mut hasher);
            total += tokens(&text);
            prefix.push(total);
            cumulative.push(hasher.finish());
        }
        let mut read = 0;
        for &b in &breakpoints {
            if let Some(j) = (b.saturating_sub(LOOKBACK - 1)..=b).rev().find(|&j| self.entries.contains(&cumulative[j]))
            {
                read = read.max(prefix[j]);
            }
        }
        let write = breakpoints.last().map_or(0, |&b| prefix[b].saturating_sub(read));
        Measured { prompt_tokens: total, cache_read: read, cache_write: write }
    }

    /// Records the entries of a request that was answered.
    pub(crate) fn commit(&mut self, body: &Value) {
        let mut hasher = DefaultHasher::new();
        for block in blocks(body) {
            let mut plain = block.clone();
            let bp = plain.as_object_mut().is_some_and(|o| o.remove("cache_control").is_some());
            plain.to_string().hash(&mut hasher);
            if bp {
                self.entries.insert(hasher.finish());
            }
        }
    }
}

/// The prompt size of a request body, by the simulation's rule.
pub fn request_tokens(body: &Value) -> u64 {
    blocks(body)
        .into_iter()
        .map(|b| {
            let mut plain = b.clone();
            if let Some(o) = plain.as_object_mut() {
                o.remove("cache_control");
            }
            tokens(&plain.to_string())
        })
        .sum()
}

/// The blocks of a request in prompt order: tools, system, then message content.
fn blocks(body: &Value) -> Vec<&Value> {
    let mut blocks: Vec<&Value> = Vec::new();
    blocks.extend(body.get("tools").and_then(Value::as_array).into_iter().flatten());
    blocks.extend(body.get("system").and_then(Value::as_array).into_iter().flatten());
    for m in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        match m.get("content") {
            Some(Value::Array(content)) => blocks.extend(content),
            Some(other) => blocks.push(other),
            None => {}
        }
    }
    blocks
}

/// The usage of `turn` answering a request that measured `m`.
pub(crate) fn usage_for(m: Measured, turn: &Turn) -> MockUsage {
    let mut out = 1;
    if let Some(t) = &turn.text {
        out += tokens(t);
    }
    for c in &turn.tool_calls {
        out += tokens(&c.input.to_string()) + 8;
    }
    MockUsage {
        input_tokens: m.prompt_tokens - m.cache_read - m.cache_write,
        output_tokens: out,
        cache_creation_input_tokens: m.cache_write,
        cache_read_input_tokens: m.cache_read,
    }
}
