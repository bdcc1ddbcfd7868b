//! MCP servers through `rmcp`: starting them, listing their tools, calling them, and
//! routing an agent's `mcp__<server>__<tool>` calls to where each server is reached.
//!
//! Where servers run:
//! - **stdio** servers are processes, so they run where the agent's tools run: the
//!   agent's tool host starts them (as its children, inside its sandbox, with the
//!   sandbox's environment plus the server's `env`) on the internal request
//!   [`HostRequest::McpTools`], keeps their clients, and serves `mcp__` calls itself. They stop
//!   with the tool host, that is with the agent.
//! - **HTTP** servers (streamable HTTP) are reached from the coordinator: the sandbox
//!   usually has no network, and talking to a declared URL runs no repository code.
//!   Their clients live as long as the agent and are closed with it.
//!
//! A server that fails to start gives tool errors (the tools a workflow names
//! explicitly are offered and fail with the reason); one that dies gives errors from
//! its calls. Neither ends the run.
//!
//! A stdio server's stderr is captured ([`StderrLog`]): the last [`STDERR_TAIL`] bytes
//! are kept for the reason a start failed (its last lines) and for the report, and what
//! it wrote since the coordinator last asked ([`HostRequest::McpStderr`]) goes to the agent's
//! transcript. A server that exits before the handshake fails at once: the wait ends
//! when its stdout closes, not at [`START_TIMEOUT`]. Under `network: none`, npm and uv
//! run offline ([`OFFLINE_ENV`], [`offline_package_managers`]), so an `npx -y` or
//! `uvx` server that is not in the cache fails at once with the package manager's own
//! error instead of retrying a network it does not have.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orch_agents::ToolOutput;
use orch_agents::mcp::{McpListing, McpTool, McpToolInfo, split_name};
use orch_agents::message::{ContentBlock, MediaSource};
use orch_agents::protocol::{HostRequest, ToolExecutor, ToolRequest};
use orch_agents::tools::DynTool;
use orch_workflows::extensions::{McpServer, McpTransport};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{ClientInitializeError, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::AsyncReadExt as _;
use tokio_util::sync::CancellationToken;

/// How long a server may take to start and list its tools.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of a server's stderr is kept for the report: its last 4 KiB.
pub const STDERR_TAIL: usize = 4 * 1024;

/// How much stderr waits for the coordinator between two [`HostRequest::McpStderr`]s; beyond
/// it the oldest part is dropped (and the drop is said).
const STDERR_PENDING: usize = 64 * 1024;

/// How many of a server's last stderr lines a failure reason carries.
const REASON_LINES: usize = 5;

type Client = RunningService<RoleClient, ClientConfig>;

/// How orch introduces itself to MCP servers: `orch` and its version, no client
/// capabilities (no sampling, roots or elicitation: nobody is there to answer), and the
/// newest protocol version that has the `initialize` handshake orch uses (rmcp's
/// default, its newest version, has none, so a server would be asked to shake hands in
/// a version that does not).
pub fn client_info() -> ClientConfig {
    let mut info =
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("orch", env!("CARGO_PKG_VERSION")));
    info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
    info
}

/// What one server wrote to stderr, as the tool host reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStderr {
    /// What it wrote since the last report (capped; a drop is said in the text).
    pub new: String,
    /// Its last [`STDERR_TAIL`] bytes.
    pub tail: String,
}

/// The stderr of one server process: a bounded tail and what is not yet reported.
#[derive(Debug, Clone, Default)]
pub struct StderrLog(Arc<Mutex<StderrState>>);

#[derive(Debug, Default)]
struct StderrState {
    tail: String,
    pending: String,
    dropped: usize,
}

/// Keeps the last `max` bytes of `text` (at a character boundary); how many it cut.
fn keep_last(text: &mut String, max: usize) -> usize {
    if text.len() <= max {
        return 0;
    }
    let mut cut = text.len() - max;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text.drain(..cut);
    cut
}

impl StderrLog {
    fn state(&self) -> std::sync::MutexGuard<'_, StderrState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds what the server wrote.
    pub fn push(&self, text: &str) {
        let mut state = self.state();
        state.tail.push_str(text);
        keep_last(&mut state.tail, STDERR_TAIL);
        state.pending.push_str(text);
        let cut = keep_last(&mut state.pending, STDERR_PENDING);
        state.dropped += cut;
    }

    /// Its last [`STDERR_TAIL`] bytes.
    pub fn tail(&self) -> String {
        self.state().tail.clone()
    }

    /// What it wrote since the last call, with a note when some of it was dropped.
    pub fn take_new(&self) -> String {
        let mut state = self.state();
        let text = std::mem::take(&mut state.pending);
        match std::mem::take(&mut state.dropped) {
            0 => text,
            dropped => format!("[{dropped} earlier bytes of stderr were dropped]\n{text}"),
        }
    }

    /// Its last [`REASON_LINES`] non-empty lines, joined on one line (for a reason).
    pub fn last_lines(&self) -> String {
        let tail = self.tail();
        let lines: Vec<&str> = tail.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let from = lines.len().saturating_sub(REASON_LINES);
        lines[from..].join(" | ")
    }

    /// Reads `pipe` to its end into the log.
    async fn read_from(self, mut pipe: impl tokio::io::AsyncRead + Unpin) {
        let mut buf = vec![0u8; 8192];
        let mut partial: Vec<u8> = Vec::new();
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    partial.extend_from_slice(&buf[..n]);
                    // Whole UTF-8 sequences only; a split character waits for its rest.
                    let valid = match std::str::from_utf8(&partial) {
                        Ok(_) => partial.len(),
                        Err(e) if e.error_len().is_none() => e.valid_up_to(),
                        Err(_) => partial.len(),
                    };
                    let rest = partial.split_off(valid);
                    self.push(&String::from_utf8_lossy(&partial));
                    partial = rest;
                }
            }
        }
        if !partial.is_empty() {
            self.push(&String::from_utf8_lossy(&partial));
        }
    }
}

/// `why`, with the last lines of the server's stderr when it wrote any.
fn with_stderr(why: String, log: &StderrLog) -> String {
    match log.last_lines() {
        lines if lines.is_empty() => format!("{why} (it wrote nothing to stderr)"),
        lines => format!("{why}; its stderr ends with: {lines}"),
    }
}

enum Server {
    Up(Client),
    Down(String),
}

/// The clients of a set of MCP servers.
pub struct McpHub {
    servers: BTreeMap<String, Server>,
    /// The stderr of each stdio server that was started.
    stderr: BTreeMap<String, StderrLog>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub").field("servers", &self.servers.keys().collect::<Vec<_>>()).finish()
    }
}

impl McpHub {
    /// Starts every server (stdio ones with `cwd` as working directory) and lists
    /// their tools. Failures are in the listing, not errors.
    pub async fn start(servers: &BTreeMap<String, McpServer>, cwd: &Path) -> (McpHub, McpListing) {
        let mut hub = McpHub { servers: BTreeMap::new(), stderr: BTreeMap::new() };
        let mut listing = McpListing::default();
        for (name, spec) in servers {
            let log = StderrLog::default();
            if !spec.is_http() {
                hub.stderr.insert(name.clone(), log.clone());
            }
            let started = tokio::time::timeout(START_TIMEOUT, start_one(name, spec, cwd, &log)).await;
            let result = match started {
                Ok(r) => r,
                Err(_) => Err(with_stderr(format!("it did not answer within {}s", START_TIMEOUT.as_secs()), &log)),
            };
            match result {
                Ok((client, tools)) => {
                    listing.tools.extend(tools);
                    hub.servers.insert(name.clone(), Server::Up(client));
                }
                Err(why) => {
                    // The coordinator names it in the run's output (`announce_failures`).
                    tracing::debug!(server = %name, "the MCP server could not be started: {why}");
                    listing.failed.push((name.clone(), why.clone()));
                    hub.servers.insert(name.clone(), Server::Down(why));
                }
            }
        }
        (hub, listing)
    }

    /// What each stdio server wrote to stderr: since the last call, and its tail.
    pub fn stderr(&self) -> BTreeMap<String, ServerStderr> {
        self.stderr
            .iter()
            .map(|(name, log)| (name.clone(), ServerStderr { new: log.take_new(), tail: log.tail() }))
            .collect()
    }

    /// Whether this hub holds the server of the tool `name`.
    pub fn serves(&self, name: &str) -> bool {
        split_name(name).is_some_and(|(server, _)| self.servers.contains_key(server))
    }

    /// Calls the tool `mcp__<server>__<tool>` with `input`.
    pub async fn call(&self, name: &str, input: Value, cancel: CancellationToken) -> ToolOutput {
        let Some((server, tool)) = split_name(name) else {
            return ToolOutput::error(format!("`{name}` is not an MCP tool name"));
        };
        let client = match self.servers.get(server) {
            Some(Server::Up(client)) => client,
            Some(Server::Down(why)) => {
                return ToolOutput::error(format!("the MCP server `{server}` is not available: {why}"));
            }
            None => return ToolOutput::error(format!("no MCP server named `{server}` runs for this agent")),
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        match input {
            Value::Object(map) => params = params.with_arguments(map),
            Value::Null => {}
            other => return ToolOutput::error(format!("MCP tool arguments must be an object, not {other}")),
        }
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => return ToolOutput::error("cancelled before the MCP call finished"),
            r = client.call_tool(params) => r,
        };
        match result {
            Ok(result) => match serde_json::to_value(&result) {
                Ok(value) => render(&value),
                Err(e) => ToolOutput::error(format!("cannot read the MCP result: {e}")),
            },
            Err(e) => {
                ToolOutput::error(format!("the MCP server `{server}` failed on {tool}: {}", describe_service(&e)))
            }
        }
    }

    /// Closes every client (a stdio server's process is killed with its client).
    pub async fn shutdown(self) {
        for (name, server) in self.servers {
            if let Server::Up(client) = server
                && let Err(e) = client.cancel().await
            {
                tracing::debug!(server = %name, "closing the MCP client: {e}");
            }
        }
    }
}

async fn start_one(
    name: &str,
    spec: &McpServer,
    cwd: &Path,
    log: &StderrLog,
) -> Result<(Client, Vec<McpToolInfo>), String> {
    let client = if spec.is_http() {
        connect_http(name, spec).await?
    } else {
        let program = spec.command.clone().ok_or("it has no command")?;
        let mut command = tokio::process::Command::new(&program);
        command.args(&spec.args).envs(&spec.env).current_dir(cwd);
        let (transport, stderr) = TokioChildProcess::builder(command)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start `{program}`: {e}"))?;
        let reader = stderr.map(|pipe| tokio::spawn(log.clone().read_from(pipe)));
        match client_info().serve(transport).await {
            Ok(client) => client,
            Err(e) => {
                // It exited (its stdout closed) or spoke something else: its stderr has
                // the reason. Once it is gone the pipe ends at once; a child it left
                // holding the pipe is not waited for long.
                if let Some(reader) = reader {
                    let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
                }
                return Err(with_stderr(
                    format!("`{program}` did not start as an MCP server: {}", describe_init(&e)),
                    log,
                ));
            }
        }
    };
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| with_stderr(format!("cannot list its tools: {}", describe_service(&e)), log))?;
    let tools = tools
        .into_iter()
        .map(|t| McpToolInfo {
            server: name.to_string(),
            tool: t.name.to_string(),
            description: t.description.as_deref().unwrap_or_default().to_string(),
            input_schema: Value::Object((*t.input_schema).clone()),
            read_only: t.annotations.as_ref().and_then(|a| a.read_only_hint).unwrap_or(false),
        })
        .collect();
    Ok((client, tools))
}

/// Connects to an HTTP server from the coordinator: its `headers` on every request
/// (`Authorization: Bearer ...` as the bearer token), or the tokens its `oauth` client
/// gets ([`crate::mcp_oauth`]).
async fn connect_http(name: &str, spec: &McpServer) -> Result<Client, String> {
    // The HTTP client's TLS needs a crypto provider; the model clients install the
    // same one, and installing twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = spec.url.clone().ok_or("it has no url")?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
    let mut headers = std::collections::HashMap::new();
    for (key, value) in &spec.headers {
        if key.eq_ignore_ascii_case("authorization") {
            let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")).unwrap_or(value);
            config = config.auth_header(token.to_string());
            continue;
        }
        let header = reqwest::header::HeaderName::from_bytes(key.as_bytes())
            .map_err(|_| format!("its header name `{key}` is not a valid HTTP header name"))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| format!("the value of its header `{key}` is not a valid HTTP header value"))?;
        headers.insert(header, value);
    }
    config = config.custom_headers(headers);
    let oauth = match &spec.oauth {
        Some(oauth) => Some(crate::mcp_oauth::OAuth::new(name, &url, oauth, &|var| crate::secrets::var(var))?),
        None => None,
    };
    let connected = match &oauth {
        Some(oauth) => {
            let http = crate::mcp_oauth_http::OAuthHttp { http: reqwest::Client::new(), oauth: oauth.clone() };
            client_info().serve(StreamableHttpClientTransport::with_client(http, config)).await
        }
        None => client_info().serve(StreamableHttpClientTransport::from_config(config)).await,
    };
    connected.map_err(|e| {
        if let Some(why) = oauth.as_ref().and_then(|o| o.failure()) {
            return format!("cannot get an OAuth token: {why}");
        }
        if e.auth_challenge().is_some() {
            return match &oauth {
                Some(_) => "it refused orch's OAuth token; check the scopes the client may have (`oauth.scopes`)".into(),
                None => format!(
                    "it requires authorization (HTTP 401 from {url}); declare its OAuth client (`oauth: {{ client_id: ..., client_secret_env: VAR }}`) or send a token in `headers: {{ Authorization: \"Bearer ${{VAR}}\" }}`"
                ),
            };
        }
        format!("cannot connect to {url}: {}", describe_init(&e))
    })
}

/// An rmcp start-up failure in plain words (no Rust type names).
fn describe_init(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::TransportError { error, .. } => describe_chain(error.error.as_ref()),
        ClientInitializeError::JsonRpcError(e) => {
            format!("it answered the handshake with error {}: {}", e.code.0, e.message)
        }
        ClientInitializeError::ConnectionClosed(_) => "the connection closed during the handshake".into(),
        other => describe_chain(other),
    }
}

/// A failed request in plain words (no Rust type names).
fn describe_service(error: &ServiceError) -> String {
    match error {
        ServiceError::McpError(e) => format!("it answered error {}: {}", e.code.0, e.message),
        ServiceError::TransportSend(e) => describe_chain(e.error.as_ref()),
        ServiceError::TransportClosed => "the connection to it is closed".into(),
        ServiceError::Timeout { timeout } => format!("it did not answer within {}s", timeout.as_secs()),
        other => describe_chain(other),
    }
}

/// An error and its causes on one line, each said once, without the bracketed Rust
/// type names some of rmcp's messages carry.
fn describe_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = next {
        let text = match cause.downcast_ref::<reqwest::Error>() {
            Some(e) => crate::mcp_oauth::describe_reqwest(e),
            None => without_type_names(&cause.to_string()),
        };
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.retain(|p| !text.contains(p.as_str()));
            parts.push(text);
        }
        if cause.downcast_ref::<reqwest::Error>().is_some() {
            break;
        }
        next = cause.source();
    }
    let text = parts.join(": ");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` without `[a::b::C<..>]`-like spans (rmcp names its transports that way).
fn without_type_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']').map(|c| open + c) else { break };
        let inside = &rest[open + 1..close];
        out.push_str(&rest[..open]);
        if !inside.contains("::") {
            out.push_str(&rest[open..=close]);
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out.replace("Transport  error", "transport error").replace("Transport error", "transport error")
}

/// Image types the model accepts as image blocks.
const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The longest base64 image passed on (the provider's limit for one image).
const MAX_IMAGE_BASE64: usize = 5 * 1024 * 1024;

/// What the model sees for a `CallToolResult` (as JSON): its text blocks, its images
/// as image blocks (a note for an image the model cannot take, and for other blocks),
/// or the structured content when there is no text.
fn render(result: &Value) -> ToolOutput {
    let mut parts = Vec::new();
    let mut attachments = Vec::new();
    for block in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(block.get("text").and_then(Value::as_str).unwrap_or_default().to_string()),
            Some("image") => {
                let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or_default();
                let data = block.get("data").and_then(Value::as_str).unwrap_or_default();
                if !IMAGE_TYPES.contains(&mime) {
                    parts.push(format!("[image content omitted: the model does not take `{mime}` images]"));
                } else if data.is_empty() || data.len() > MAX_IMAGE_BASE64 {
                    parts.push(format!(
                        "[image content omitted: {} base64 characters, the model takes 1 to {MAX_IMAGE_BASE64}]",
                        data.len()
                    ));
                } else {
                    parts.push(format!("[{mime} image attached]"));
                    attachments.push(ContentBlock::Image { source: MediaSource::base64(mime, data) });
                }
            }
            Some(kind) => parts.push(format!("[{kind} content omitted]")),
            None => {}
        }
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null())
    {
        parts.push(structured.to_string());
    }
    let content = parts.join("\n");
    let mut out = if result.get("isError").and_then(Value::as_bool).unwrap_or(false) {
        ToolOutput::error(content)
    } else {
        ToolOutput::ok(content)
    };
    out.attachments = attachments;
    out
}

/// The tool-host side: the stdio servers of the agent, started on the first
/// [`HostRequest::McpTools`].
pub struct HostMcp {
    servers: BTreeMap<String, McpServer>,
    cwd: std::path::PathBuf,
    hub: tokio::sync::OnceCell<(McpHub, McpListing)>,
}

impl HostMcp {
    pub fn new(servers: BTreeMap<String, McpServer>, cwd: &Path) -> HostMcp {
        HostMcp { servers, cwd: cwd.to_path_buf(), hub: tokio::sync::OnceCell::new() }
    }

    async fn hub(&self) -> &(McpHub, McpListing) {
        self.hub.get_or_init(|| McpHub::start(&self.servers, &self.cwd)).await
    }

    /// Answers the request if it is an MCP one (the listing or a call).
    pub async fn handle(&self, request: &HostRequest, cancel: CancellationToken) -> Option<ToolOutput> {
        match request {
            HostRequest::McpTools => {
                let (_, listing) = self.hub().await;
                Some(match serde_json::to_string(listing) {
                    Ok(json) => ToolOutput::ok(json),
                    Err(e) => ToolOutput::error(format!("cannot encode the MCP listing: {e}")),
                })
            }
            HostRequest::McpStderr => {
                let stderr = match self.hub.get() {
                    Some((hub, _)) => hub.stderr(),
                    None => BTreeMap::new(),
                };
                Some(match serde_json::to_string(&stderr) {
                    Ok(json) => ToolOutput::ok(json),
                    Err(e) => ToolOutput::error(format!("cannot encode the MCP servers' stderr: {e}")),
                })
            }
            HostRequest::Tool(ToolRequest { tool, input, .. }) if split_name(tool).is_some() => {
                let (hub, _) = self.hub().await;
                Some(hub.call(tool, input.clone(), cancel).await)
            }
            _ => None,
        }
    }

    /// Closes the servers, if they were started.
    pub async fn shutdown(self) {
        if let Some((hub, _)) = self.hub.into_inner() {
            hub.shutdown().await;
        }
    }
}

/// An agent's executor with MCP: HTTP servers' tools go to the coordinator's hub,
/// everything else (stdio servers' tools included) to the tool host.
pub struct McpRouter {
    pub host: Arc<dyn ToolExecutor>,
    pub http: Option<Arc<McpHub>>,
}

#[async_trait]
impl ToolExecutor for McpRouter {
    async fn execute(&self, request: HostRequest, cancel: CancellationToken) -> Result<ToolOutput, String> {
        if let (Some(hub), HostRequest::Tool(call)) = (&self.http, &request)
            && hub.serves(&call.tool)
        {
            return Ok(hub.call(&call.tool, call.input.clone(), cancel).await);
        }
        self.host.execute(request, cancel).await
    }
}

/// Asks the tool host for its stdio servers' tools.
pub async fn host_listing(host: &dyn ToolExecutor, cancel: &CancellationToken) -> McpListing {
    let request = HostRequest::McpTools;
    match host.execute(request, cancel.child_token()).await {
        Ok(out) if !out.is_error => serde_json::from_str(&out.content).unwrap_or_else(|e| McpListing {
            tools: Vec::new(),
            failed: vec![("(tool host)".into(), format!("a bad MCP listing: {e}"))],
        }),
        Ok(out) => McpListing { tools: Vec::new(), failed: vec![("(tool host)".into(), out.content)] },
        Err(e) => McpListing { tools: Vec::new(), failed: vec![("(tool host)".into(), e)] },
    }
}

/// Asks the tool host what its stdio servers wrote to stderr since the last time (an
/// empty map when it cannot say).
pub async fn host_stderr(host: &dyn ToolExecutor, cancel: &CancellationToken) -> BTreeMap<String, ServerStderr> {
    let request = HostRequest::McpStderr;
    match host.execute(request, cancel.child_token()).await {
        Ok(out) if !out.is_error => serde_json::from_str(&out.content).unwrap_or_else(|e| {
            tracing::debug!("a bad MCP stderr report from the tool host: {e}");
            BTreeMap::new()
        }),
        Ok(out) => {
            tracing::debug!("the tool host could not report the MCP servers' stderr: {}", out.content);
            BTreeMap::new()
        }
        Err(e) => {
            tracing::debug!("the tool host could not report the MCP servers' stderr: {e}");
            BTreeMap::new()
        }
    }
}

/// The variables that make package managers use only their cache: npm (and `npx`),
/// and uv (and `uvx`).
pub const OFFLINE_ENV: &[(&str, &str)] = &[("npm_config_offline", "true"), ("UV_OFFLINE", "1")];

/// Under `network: none`: npm and uv in every stdio server run offline (unless the
/// server's `env` sets the variable), so a package that is not in the cache fails at
/// once with the package manager's own error (npm's `ENOTCACHED`) instead of retrying
/// a network that is not there.
pub fn offline_package_managers(servers: &mut Servers) {
    for spec in servers.values_mut() {
        for (name, value) in OFFLINE_ENV {
            spec.env.entry(name.to_string()).or_insert_with(|| value.to_string());
        }
    }
}

/// An MCP server an agent could not use, as the report lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct McpFailure {
    pub server: String,
    /// Why it is not available.
    pub reason: String,
    /// The tools the agent named from it (`mcp__<server>__*` included): none of them
    /// works.
    pub tools: Vec<String>,
    /// The last [`STDERR_TAIL`] bytes of its stderr (a stdio server that wrote any).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
}

/// The servers of `listing` that failed, with the tools of `wanted` each takes away and
/// the tail of its stderr from `stderr`.
pub fn failures(wanted: &[String], listing: &McpListing, stderr: &BTreeMap<String, ServerStderr>) -> Vec<McpFailure> {
    listing
        .failed
        .iter()
        .map(|(server, why)| McpFailure {
            server: server.clone(),
            reason: why.clone(),
            tools: wanted.iter().filter(|t| split_name(t).is_some_and(|(s, _)| s == server)).cloned().collect(),
            stderr: stderr.get(server).map(|s| s.tail.clone()).unwrap_or_default(),
        })
        .collect()
}

/// Why a `type: sse` server is not started.
pub const SSE_REFUSED: &str = "orch does not speak the older `sse` transport; if the server also serves streamable HTTP (usually at `/mcp`), declare it with `type: http` and that url";

/// MCP server declarations by name.
pub type Servers = BTreeMap<String, McpServer>;

/// The servers an agent's `tools` name, with their `${VAR}` references expanded
/// ([`crate::mcp_env`]), split into stdio ones (for its tool host) and HTTP ones (for
/// the coordinator), and `(server, why)` for those that could not be expanded.
pub fn servers_for(
    tools: &[String],
    declared: &BTreeMap<String, McpServer>,
) -> (Servers, Servers, Vec<(String, String)>) {
    let mut named = BTreeMap::new();
    let mut sse = BTreeMap::new();
    for (server, _) in tools.iter().filter_map(|t| split_name(t)) {
        match declared.get(server) {
            Some(spec) if spec.transport == McpTransport::Sse => {
                sse.insert(server.to_string(), SSE_REFUSED.to_string());
            }
            Some(spec) => {
                named.insert(server.to_string(), spec.clone());
            }
            None => {}
        }
    }
    let (expanded, mut failed) = crate::mcp_env::expand_all(named, &crate::mcp_env::process_env);
    failed.extend(sse);
    let (http, stdio) = expanded.into_iter().partition(|(_, spec)| spec.is_http());
    (stdio, http, failed)
}

/// Names each server that failed, as a warning (shown without `-v`): a stdio server
/// fails inside the tool host, whose log the run's output does not show. A wildcard
/// (`mcp__<server>__*`) of a failed server is said to give no tools.
pub fn announce_failures(agent: &str, failures: &[McpFailure]) {
    for failure in failures {
        // One line: the reason may carry the server's stderr.
        let why: String = failure.reason.split_whitespace().collect::<Vec<_>>().join(" ");
        let server = &failure.server;
        let wildcards: Vec<String> =
            failure.tools.iter().filter(|t| t.ends_with("__*")).map(|t| format!("`{t}`")).collect();
        if wildcards.is_empty() {
            tracing::warn!("agent `{agent}`: the MCP server `{server}` is not available: {why}");
        } else {
            tracing::warn!(
                "agent `{agent}`: the MCP server `{server}` is not available, so {} gives it no tools: {why}",
                wildcards.join(", ")
            );
        }
    }
}

/// The MCP tools of an agent: for each `mcp__<server>__<tool>` it lists, that tool of
/// the listing (every tool of the server for `*`). A named tool that is not listed is
/// still offered, and every call of it fails with the reason.
pub fn agent_tools(wanted: &[String], listing: &McpListing) -> Vec<Arc<dyn DynTool>> {
    let mut out: Vec<Arc<dyn DynTool>> = Vec::new();
    for name in wanted {
        let Some((server, tool)) = split_name(name) else { continue };
        let listed = listing.tools.iter().filter(|t| t.server == server && (tool == "*" || t.tool == tool));
        let before = out.len();
        out.extend(listed.map(|t| Arc::new(McpTool::new(t)) as Arc<dyn DynTool>));
        if out.len() == before && tool != "*" {
            let why = match listing.failed.iter().find(|(s, _)| s == server) {
                Some((_, why)) => why.clone(),
                None => format!("the server `{server}` has no tool named `{tool}`"),
            };
            out.push(Arc::new(McpTool::unavailable(name, why)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;
    use serde_json::json;

    #[test]
    fn an_sse_server_is_refused_alone() {
        let declared: Servers = serde_json::from_value(json!({
            "old": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
            "new": {"type": "http", "url": "http://127.0.0.1:1/mcp"},
            "local": {"command": "srv"}
        }))
        .unwrap();
        assert!(declared["old"].problem().is_none());
        let tools: Vec<String> =
            ["mcp__old__a", "mcp__new__a", "mcp__old__b", "mcp__local__*"].iter().map(|t| t.to_string()).collect();
        let (stdio, http, failed) = servers_for(&tools, &declared);
        assert_eq!(stdio.keys().collect::<Vec<_>>(), ["local"]);
        assert_eq!(http.keys().collect::<Vec<_>>(), ["new"]);
        assert_eq!(failed, vec![("old".to_string(), SSE_REFUSED.to_string())]);
    }

    #[test]
    fn stderr_keeps_a_bounded_tail_and_what_is_new() {
        let log = StderrLog::default();
        log.push("first line\n");
        assert_eq!(log.take_new(), "first line\n");
        assert_eq!(log.take_new(), "");
        // Over the pending cap: the oldest part is dropped, and the drop is said.
        let line = "é".repeat(50) + "\n";
        for _ in 0..1000 {
            log.push(&line);
        }
        let new = log.take_new();
        assert!(new.starts_with("[") && new.contains("earlier bytes of stderr were dropped"), "{}", &new[..80]);
        assert!(new.len() <= STDERR_PENDING + 100, "{}", new.len());
        let tail = log.tail();
        assert!(tail.len() <= STDERR_TAIL && tail.len() > STDERR_TAIL - 4, "{}", tail.len());
        assert!(tail.ends_with(&line));
        log.push("\nnpm error code ENOTCACHED\n\n");
        assert!(log.last_lines().ends_with(&format!("{} | npm error code ENOTCACHED", line.trim())));
        assert_eq!(log.last_lines().matches(" | ").count(), REASON_LINES - 1);
    }

    #[tokio::test]
    async fn stderr_is_read_whole_across_split_characters() {
        let log = StderrLog::default();
        let (mut writer, reader) = tokio::io::duplex(4);
        let reading = tokio::spawn(log.clone().read_from(reader));
        use tokio::io::AsyncWriteExt as _;
        writer.write_all("npm error: réseau ✗\n".as_bytes()).await.unwrap();
        drop(writer);
        reading.await.unwrap();
        assert_eq!(log.tail(), "npm error: réseau ✗\n");
        assert_eq!(with_stderr("it failed".into(), &log), "it failed; its stderr ends with: npm error: réseau ✗");
        assert_eq!(with_stderr("it failed".into(), &StderrLog::default()), "it failed (it wrote nothing to stderr)");
    }

    #[test]
    fn failures_name_the_tools_they_take_away() {
        let listing = McpListing {
            tools: Vec::new(),
            failed: vec![("npm".into(), "no network".into()), ("other".into(), "gone".into())],
        };
        let wanted: Vec<String> =
            ["Read", "mcp__npm__*", "mcp__npm__echo", "mcp__ok__add"].iter().map(|t| t.to_string()).collect();
        let stderr = BTreeMap::from([(
            "npm".to_string(),
            ServerStderr { new: String::new(), tail: "npm error code ENOTCACHED\n".into() },
        )]);
        let failures = failures(&wanted, &listing, &stderr);
        assert_eq!(failures.len(), 2);
        assert_eq!(failures[0].tools, ["mcp__npm__*", "mcp__npm__echo"]);
        assert_eq!(failures[0].stderr, "npm error code ENOTCACHED\n");
        assert!(failures[1].tools.is_empty() && failures[1].stderr.is_empty());
    }

    #[test]
    fn package_managers_run_offline_unless_the_server_says_otherwise() {
        let mut servers: Servers = serde_json::from_value(json!({
            "a": {"command": "npx", "args": ["-y", "pkg"]},
            "b": {"command": "npx", "env": {"npm_config_offline": "false"}}
        }))
        .unwrap();
        offline_package_managers(&mut servers);
        let env = |server: &str, name: &str| servers[server].env.get(name).cloned();
        assert_eq!(env("a", "npm_config_offline").as_deref(), Some("true"));
        assert_eq!(env("a", "UV_OFFLINE").as_deref(), Some("1"));
        assert_eq!(env("b", "npm_config_offline").as_deref(), Some("false"));
        assert_eq!(env("b", "UV_OFFLINE").as_deref(), Some("1"));
    }

    #[test]
    fn images_become_image_blocks() {
        let out = render(&json!({"content": [
            {"type": "text", "text": "a chart"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "image", "data": "AAAA", "mimeType": "image/tiff"},
        ]}));
        assert!(!out.is_error);
        assert_eq!(
            out.attachments,
            vec![ContentBlock::Image { source: MediaSource::base64("image/png", "iVBORw0KGgo=") }]
        );
        assert!(out.content.contains("a chart") && out.content.contains("image/png image attached"), "{}", out.content);
        assert!(out.content.contains("`image/tiff`"), "{}", out.content);
        let big = "A".repeat(MAX_IMAGE_BASE64 + 1);
        let out = render(&json!({"content": [{"type": "image", "data": big, "mimeType": "image/png"}]}));
        assert!(out.attachments.is_empty() && out.content.contains("omitted"), "{}", out.content);
    }

    #[test]
    fn results_render_text_and_errors() {
        let ok = render(&json!({"content": [{"type": "text", "text": "a"}, {"type": "audio", "data": "x"}]}));
        assert_eq!(ok, ToolOutput::ok("a\n[audio content omitted]"));
        let err = render(&json!({"content": [{"type": "text", "text": "bad"}], "isError": true}));
        assert_eq!(err, ToolOutput::error("bad"));
        assert_eq!(render(&json!({"content": [], "structuredContent": {"n": 1}})), ToolOutput::ok("{\"n\":1}"));
    }
}
