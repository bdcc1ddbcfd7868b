//! The tool trait, the per-agent session state tools share, and the registry of core
//! tools.
//!
//! A tool's `call` runs inside the agent's tool host, never in the coordinator. The
//! coordinator only sees a tool's metadata (name, description, schema, safety flags,
//! permission subject) and runs the pipeline around the call.

pub mod background;
pub mod bash;
mod bash_readonly;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod host;
pub mod ls;
pub mod media;
pub mod multi_edit;
pub mod notebook_edit;
pub mod pdf;
pub mod read;
pub mod skill;
pub mod text;
pub mod todo;
pub mod web_fetch;
pub mod web_search;
pub mod write;

mod session;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use session::{FileStamp, Session, Todo, TodoStatus};

/// A failed tool call; the message goes to the model as an error result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// What a call can reach: the agent's session and its own abort token.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub session: Arc<Session>,
    /// Fires when the call must stop (abort, timeout, a failing sibling).
    pub cancel: CancellationToken,
}

/// A tool with a typed input. Defaults fail closed: a tool is not read-only, not
/// concurrency-safe, and destructive, unless it says otherwise.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The input; its JSON Schema is what the model sees.
    type Input: DeserializeOwned + JsonSchema + Send + Sync;

    /// The name the model calls it by.
    const NAME: &'static str;

    /// What the tool does and how to use it, as the model reads it.
    fn description(&self) -> &'static str;

    fn is_read_only(&self, _input: &Self::Input) -> bool {
        false
    }

    fn is_concurrency_safe(&self, _input: &Self::Input) -> bool {
        false
    }

    fn is_destructive(&self, _input: &Self::Input) -> bool {
        true
    }

    /// Checks that need no file system, run before hooks and permissions.
    fn validate(&self, _input: &Self::Input) -> Result<(), String> {
        Ok(())
    }

    /// What permission rules match against: a path for file tools, the command line for
    /// `Bash`. `None` means rules can only match the bare tool name.
    fn permission_subject(&self, _input: &Self::Input) -> Option<String> {
        None
    }

    /// The files this call would write, as given (absolute, or relative to the working
    /// directory). Writes outside the writable roots, or into `.git`, are denied.
    fn writes(&self, _input: &Self::Input) -> Vec<PathBuf> {
        Vec::new()
    }

    /// Results longer than this (in bytes) are saved to a file and shown as a preview.
    fn max_result_bytes(&self) -> usize {
        50_000
    }

    /// Runs the call. This happens inside the tool host.
    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError>;

    /// Runs the call for a result that may carry image or document blocks besides its
    /// text (`Read` of an image or a PDF). Other tools keep the default: [`Tool::call`].
    async fn call_with_attachments(&self, input: Self::Input, ctx: &ToolContext) -> Result<Rich, ToolError> {
        self.call(input, ctx).await.map(Rich::text)
    }
}

/// A result with image or document blocks besides its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Rich {
    pub text: String,
    pub attachments: Vec<crate::message::ContentBlock>,
}

impl Rich {
    pub fn text(text: String) -> Self {
        Self { text, attachments: Vec::new() }
    }
}

/// The object-safe face of a [`Tool`], over JSON values. Every method that takes an
/// input assumes it passed the schema check; one that does not parse is treated the
/// fail-closed way.
#[async_trait]
pub trait DynTool: Send + Sync {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn input_schema(&self) -> Value;
    fn is_read_only(&self, input: &Value) -> bool;
    fn is_concurrency_safe(&self, input: &Value) -> bool;
    fn is_destructive(&self, input: &Value) -> bool;
    /// Parses and validates; the error names what is wrong.
    fn validate(&self, input: &Value) -> Result<(), String>;
    fn permission_subject(&self, input: &Value) -> Option<String>;
    fn writes(&self, input: &Value) -> Vec<PathBuf>;
    fn max_result_bytes(&self) -> usize;
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<String, ToolError>;
    /// [`Tool::call_with_attachments`]; by default the plain call.
    async fn call_with_attachments(&self, input: Value, ctx: &ToolContext) -> Result<Rich, ToolError> {
        self.call(input, ctx).await.map(Rich::text)
    }
}

fn parse<I: DeserializeOwned>(input: &Value) -> Result<I, String> {
    I::deserialize(input).map_err(|e| e.to_string())
}

#[async_trait]
impl<T: Tool> DynTool for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn description(&self) -> &'static str {
        Tool::description(self)
    }

    fn input_schema(&self) -> Value {
        let schema = schemars::schema_for!(T::Input);
        let mut value = serde_json::to_value(schema).unwrap_or(Value::Null);
        if let Some(obj) = value.as_object_mut() {
            obj.remove("$schema");
            obj.remove("title");
        }
        value
    }

    fn is_read_only(&self, input: &Value) -> bool {
        parse::<T::Input>(input).is_ok_and(|i| Tool::is_read_only(self, &i))
    }

    fn is_concurrency_safe(&self, input: &Value) -> bool {
        parse::<T::Input>(input).is_ok_and(|i| Tool::is_concurrency_safe(self, &i))
    }

    fn is_destructive(&self, input: &Value) -> bool {
        parse::<T::Input>(input).map_or(true, |i| Tool::is_destructive(self, &i))
    }

    fn validate(&self, input: &Value) -> Result<(), String> {
        let parsed = parse::<T::Input>(input)?;
        Tool::validate(self, &parsed)
    }

    fn permission_subject(&self, input: &Value) -> Option<String> {
        parse::<T::Input>(input).ok().and_then(|i| Tool::permission_subject(self, &i))
    }

    fn writes(&self, input: &Value) -> Vec<PathBuf> {
        parse::<T::Input>(input).map(|i| Tool::writes(self, &i)).unwrap_or_default()
    }

    fn max_result_bytes(&self) -> usize {
        Tool::max_result_bytes(self)
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let parsed = parse::<T::Input>(&input).map_err(|e| ToolError(format!("invalid input for {}: {e}", T::NAME)))?;
        Tool::call(self, parsed, ctx).await
    }

    async fn call_with_attachments(&self, input: Value, ctx: &ToolContext) -> Result<Rich, ToolError> {
        let parsed = parse::<T::Input>(&input).map_err(|e| ToolError(format!("invalid input for {}: {e}", T::NAME)))?;
        Tool::call_with_attachments(self, parsed, ctx).await
    }
}

/// Every core tool, sorted by name.
pub fn core_tools() -> Vec<Arc<dyn DynTool>> {
    let mut tools: Vec<Arc<dyn DynTool>> = vec![
        Arc::new(bash::Bash),
        Arc::new(background::BashOutput),
        Arc::new(background::KillShell),
        Arc::new(edit::Edit),
        Arc::new(glob::Glob),
        Arc::new(grep::Grep),
        Arc::new(ls::Ls),
        Arc::new(multi_edit::MultiEdit),
        Arc::new(notebook_edit::NotebookEdit),
        Arc::new(read::Read),
        Arc::new(todo::TodoWrite),
        Arc::new(web_fetch::WebFetch),
        Arc::new(write::Write),
    ];
    tools.sort_by_key(|t| t.name());
    tools
}

/// The names of the core tools, in the tool catalog's order.
pub const CORE_TOOL_NAMES: &[&str] = &orch_types::tools::CORE_NAMES;
