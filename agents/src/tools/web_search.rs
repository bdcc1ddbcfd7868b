//! `WebSearch` (Claude Code's name and input: `query`, `allowed_domains`,
//! `blocked_domains`). As in Claude Code, the search is the Anthropic API's own
//! `web_search` server tool: the call runs in the coordinator (a [`LocalTool`]) as one
//! nested request to the agent's provider, offering only that server tool with the
//! domain filters, and its answer (the model's summary, and the results, which the
//! provider keeps as text) becomes the tool result. Its tokens count against the
//! agent's budgets. It is offered only for the `anthropic` provider and a network that
//! is not `none` (the search runs at the API; the network rule keeps an offline agent
//! offline).

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::message::{ContentBlock, Message};
use crate::model::{ModelProvider, ModelRequest, StreamEvent, SystemPart, Timeouts};
use crate::pipeline::{LocalTool, PoolError, ToolPool};
use crate::tool::{ToolCall, ToolOutput};
use crate::tools::{DynTool, Tool, ToolContext, ToolError};
use crate::usage::{PriceTable, Usage};

/// The tool's name, as Claude Code calls it.
pub const WEB_SEARCH_TOOL: &str = "WebSearch";

/// The server tool's version the request names.
pub const SERVER_TOOL_TYPE: &str = "web_search_20250305";

/// Searches one call may run at most.
pub const MAX_SEARCHES: u32 = 8;

/// The output cap of the nested request.
const MAX_TOKENS: u32 = 4096;

/// The input, in Claude Code's shape.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearchInput {
    /// What to search for.
    pub query: String,
    /// Only return results from these domains.
    #[serde(default)]
    pub allowed_domains: Option<Vec<String>>,
    /// Never return results from these domains.
    #[serde(default)]
    pub blocked_domains: Option<Vec<String>>,
}

const DESCRIPTION: &str = "Search the web and get the results (titles, URLs and a summary of \
what they say) to answer questions about things outside the repository: current versions, \
documentation, error messages. Give a `query`; optionally limit the results to \
`allowed_domains` or exclude `blocked_domains` (not both). Cite the URLs you rely on. Read \
a result in full with WebFetch.";

/// The metadata face of `WebSearch` for the pipeline; [`WebSearchTool`] runs it.
#[derive(Debug, Clone, Copy, Default)]
pub struct WebSearchSpec;

#[async_trait]
impl Tool for WebSearchSpec {
    type Input = WebSearchInput;
    const NAME: &'static str = WEB_SEARCH_TOOL;

    fn description(&self) -> &'static str {
        DESCRIPTION
    }

    fn is_read_only(&self, _input: &WebSearchInput) -> bool {
        true
    }

    fn is_concurrency_safe(&self, _input: &WebSearchInput) -> bool {
        true
    }

    fn is_destructive(&self, _input: &WebSearchInput) -> bool {
        false
    }

    fn validate(&self, input: &WebSearchInput) -> Result<(), String> {
        if input.query.trim().chars().count() < 2 {
            return Err("`query` is too short; give at least two characters to search for".into());
        }
        if input.allowed_domains.as_ref().is_some_and(|d| !d.is_empty())
            && input.blocked_domains.as_ref().is_some_and(|d| !d.is_empty())
        {
            return Err("give `allowed_domains` or `blocked_domains`, not both".into());
        }
        Ok(())
    }

    fn permission_subject(&self, input: &WebSearchInput) -> Option<String> {
        Some(input.query.trim().to_string())
    }

    async fn call(&self, _input: WebSearchInput, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::new("the WebSearch tool runs in the coordinator, not in a tool host"))
    }
}

/// The server tool as the request sends it.
pub fn server_tool(input: &WebSearchInput) -> Value {
    let mut tool = json!({ "type": SERVER_TOOL_TYPE, "name": "web_search", "max_uses": MAX_SEARCHES });
    if let Some(domains) = input.allowed_domains.as_ref().filter(|d| !d.is_empty()) {
        tool["allowed_domains"] = json!(domains);
    }
    if let Some(domains) = input.blocked_domains.as_ref().filter(|d| !d.is_empty()) {
        tool["blocked_domains"] = json!(domains);
    }
    tool
}

/// One agent's `WebSearch`: its provider and model, and the usage its searches spent.
pub struct WebSearchTool {
    provider: Arc<dyn ModelProvider>,
    agent_id: String,
    model: String,
    timeouts: Timeouts,
    prices: Arc<PriceTable>,
    spent: Mutex<Option<(Usage, f64)>>,
}

impl WebSearchTool {
    pub fn new(
        provider: Arc<dyn ModelProvider>,
        agent_id: impl Into<String>,
        model: impl Into<String>,
        timeouts: Timeouts,
        prices: Arc<PriceTable>,
    ) -> Self {
        Self { provider, agent_id: agent_id.into(), model: model.into(), timeouts, prices, spent: Mutex::new(None) }
    }

    /// Adds `WebSearch` to `pool`.
    pub fn install(self, pool: ToolPool) -> Result<ToolPool, PoolError> {
        let spec: Arc<dyn DynTool> = Arc::new(WebSearchSpec);
        pool.with_local(spec, Arc::new(self))
    }

    /// Runs one search.
    pub async fn search(&self, input: &WebSearchInput, cancel: CancellationToken) -> ToolOutput {
        let system = [SystemPart {
            text: "You run web searches for a coding agent. Search for what the user asks, then list what \
                   you found: for each useful result its title and URL and, in a sentence or two, what it \
                   says that bears on the query. Report only what the results say."
                .to_string(),
            cache: false,
        }];
        let messages = [Message::user(format!("Search the web for: {}", input.query.trim()))];
        let server_tools = [server_tool(input)];
        let agent_id = format!("{}/web-search", self.agent_id);
        let request = ModelRequest {
            agent_id: &agent_id,
            model: &self.model,
            system: &system,
            messages: &messages,
            tools: &[],
            max_tokens: MAX_TOKENS,
            give_up_on_overload_after: None,
            timeouts: self.timeouts,
            thinking: None,
            server_tools: &server_tools,
        };
        let mut sink = |_: StreamEvent| {};
        let response = tokio::select! {
            r = self.provider.send(&request, &mut sink) => r,
            () = cancel.cancelled() => return ToolOutput::error("the web search was cancelled"),
        };
        let response = match response {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("the web search failed: {e}")),
        };
        let cost = self.prices.cost(&self.model, &response.usage);
        {
            let mut spent = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
            let (usage, total) = spent.get_or_insert_with(|| (Usage::default(), 0.0));
            *usage += response.usage;
            *total += cost;
        }
        let text: Vec<&str> = response
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } if !text.trim().is_empty() => Some(text.trim()),
                _ => None,
            })
            .collect();
        if text.is_empty() {
            return ToolOutput::error(format!("the web search for \"{}\" returned nothing", input.query.trim()));
        }
        ToolOutput::ok(format!("Web search results for \"{}\":\n\n{}", input.query.trim(), text.join("\n\n")))
    }
}

#[async_trait]
impl LocalTool for WebSearchTool {
    async fn call(
        &self,
        _pool: &ToolPool,
        _ordinal: u64,
        _call: &ToolCall,
        input: Value,
        cancel: CancellationToken,
    ) -> ToolOutput {
        match serde_json::from_value::<WebSearchInput>(input) {
            Ok(input) => self.search(&input, cancel).await,
            Err(e) => ToolOutput::error(format!("invalid input for WebSearch: {e}")),
        }
    }

    fn take_nested_usage(&self) -> Option<(Usage, f64)> {
        self.spent.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_tool_carries_the_domain_filters() {
        let input = WebSearchInput {
            query: "rust 1.90 release".into(),
            allowed_domains: Some(vec!["blog.rust-lang.org".into()]),
            blocked_domains: None,
        };
        assert_eq!(
            server_tool(&input),
            json!({"type": SERVER_TOOL_TYPE, "name": "web_search", "max_uses": MAX_SEARCHES,
                   "allowed_domains": ["blog.rust-lang.org"]})
        );
        assert!(Tool::validate(&WebSearchSpec, &input).is_ok());
        let both = WebSearchInput { blocked_domains: Some(vec!["x.com".into()]), ..input.clone() };
        assert!(Tool::validate(&WebSearchSpec, &both).unwrap_err().contains("not both"));
        let short = WebSearchInput { query: " a ".into(), ..input };
        assert!(Tool::validate(&WebSearchSpec, &short).is_err());
    }
}
