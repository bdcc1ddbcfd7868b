//! One agent session: everything an agent needs, started in one place and stopped in
//! one order. `orch run` agents, `orch exec`, `setup:` and (through the `Agent` tool,
//! which shares its caller's session) nested agents all start here.
//!
//! [`AgentSession::start`] prepares the sandbox policy (private tmp and home, writable
//! roots handed over), starts the tool host (with the stdio MCP servers the tools name),
//! lists the MCP tools, connects the HTTP MCP servers, and builds the tool pool with its
//! permissions and command hooks. Each MCP server that failed is named (a warning, an
//! `mcp_server` event with its stderr, [`AgentSession::mcp_failures`] for the report);
//! what the stdio servers write to stderr goes to the agent's events, at start and at
//! stop. [`AgentSession::instructions`] reads the project
//! instructions through the tool host.
//!
//! [`AgentSession::stop`] is the one teardown, in this order: the pool (and with it
//! every reference to the tool host), the HTTP MCP clients, the tool host and its
//! processes (stdio MCP servers included), its container, then the sandbox (the cgroup
//! killed, the writable roots handed back). Only after `stop` returns may the caller
//! touch the worktree (commit, remove). A failure while starting stops what had started,
//! in the same order.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use orch_agents::command_hooks::{CommandHook, CommandHooks};
use orch_agents::mcp::{self as agent_mcp, McpListing};
use orch_agents::permissions::Permissions;
use orch_agents::pipeline::ToolPool;

use orch_agents::pipeline::PoolError;
use orch_agents::protocol::ToolExecutor;
use orch_agents::tools::web_search::{WEB_SEARCH_TOOL, WebSearchTool};
use orch_agents::{EventSink, SystemPart};
use orch_sandbox::container::ContainerHost;
use orch_workflows::extensions::McpServer;
use tokio_util::sync::CancellationToken;

use crate::host::{self, AgentSandbox, HostExecutor};
use crate::mcp::{McpHub, McpRouter};
use crate::options::SandboxSpec;

/// How long the tool host gets to stop before it is killed.
const HOST_GRACE: Duration = Duration::from_secs(2);

/// What one session is made of.
pub struct SessionSpec {
    /// The run (for sandbox and container names).
    pub run: String,
    /// The agent's id.
    pub agent: String,
    /// The worktree or directory the agent works in.
    pub cwd: PathBuf,
    /// The sandbox settings (backend, network, extra roots, image).
    pub sandbox: SandboxSpec,
    /// Whether `cwd` is writable (the agent has a tool that writes).
    pub writes: bool,
    /// Extra roots the agent may read (such as the directory of large results).
    pub read: Vec<PathBuf>,
    /// Where the private tmp and home are created.
    pub private: PathBuf,
    /// Variables added to the sandbox's environment.
    pub env: Vec<(String, String)>,
    /// Every tool the agent lists: core tools, `mcp__` tools and `Agent`.
    pub tools: Vec<String>,
    /// The parsed permission rules.
    pub permissions: Permissions,
    /// Where results too large to send inline are written.
    pub results_dir: Option<PathBuf>,
    /// The command hooks.
    pub hooks: Vec<CommandHook>,
    /// The declared MCP servers (only those the tools name are started).
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// The session id hooks see.
    pub session_id: String,
    /// The transcript file hooks see as `transcript_path`.
    pub transcript: Option<PathBuf>,
    /// The model of the agent's loop (hooks' `model`; empty when there is none).
    pub model: String,
    /// The largest file a sandboxed process may write (`RLIMIT_FSIZE`), when not the
    /// sandbox's default: an agent's `limits.max_disk`.
    pub file_size_limit: Option<u64>,
    /// Its access to the run's egress proxy, when its network is an allowlist (the
    /// sandbox's network is then `proxy`).
    pub egress: Option<crate::proxy::run::Grant>,
    /// The git snapshot of `cwd` when the caller knows it (a worktree it has just made:
    /// see [`crate::git::Worktree::fresh_snapshot`]); `None`: read from `cwd`.
    pub git: Option<orch_agents::prompt::GitSnapshot>,
}

/// A started session. Stop it with [`AgentSession::stop`].
pub struct AgentSession {
    agent: String,
    cwd: PathBuf,
    pool: Option<ToolPool>,
    router: Option<Arc<dyn ToolExecutor>>,
    http: Option<Arc<McpHub>>,
    executor: Option<Arc<HostExecutor>>,
    container: Option<ContainerHost>,
    sandbox: Option<AgentSandbox>,
    /// The tool host's pid, and its registration with the coordinator's reaper (kept
    /// until the host has stopped, so it is never taken for an orphan).
    host_pid: Option<u32>,
    registered: Option<crate::reap::Registered>,
    /// The MCP servers the agent could not use.
    mcp_failures: Vec<crate::mcp::McpFailure>,
    /// Where the stdio servers' stderr goes, when there are any.
    mcp_events: Option<Arc<dyn EventSink>>,
    egress: Option<crate::proxy::run::Grant>,
    /// The git snapshot of `cwd`, taken before the sandbox is prepared: as root that
    /// hands the worktree to the sandbox uid, and git then refuses to open it for the
    /// coordinator (its owner check), which must not be turned off for files an agent
    /// owns.
    git: Option<orch_agents::prompt::GitSnapshot>,
    /// The sandbox's network (`None`: the tools that need one are withheld; `Proxy`: an
    /// allowlist, which WebSearch would bypass).
    network: orch_types::Network,
}

/// How a session's tool host ended.
#[derive(Debug, Default)]
pub struct SessionEnd {
    /// Why the tool host died, when it was not asked to stop.
    pub died: Option<String>,
    /// Processes it left behind that the coordinator killed.
    pub killed: usize,
}

impl AgentSession {
    /// Starts the session of `spec`. Hook commands report to `events`; the MCP listing
    /// and hook conditions are cancelled with `cancel`.
    pub async fn start(
        spec: SessionSpec,
        events: Arc<dyn EventSink>,
        cancel: &CancellationToken,
    ) -> crate::error::Result<AgentSession> {
        // The catalog's coordinator tools (`Agent`, `TaskOutput`, `Skill`, `WebSearch`)
        // run here; MCP tools are served by their servers (stdio ones in the tool host,
        // HTTP ones here); the tool host gets the others.
        // Without a network, the tools that need one are absent from the pool (a call
        // says why).
        let offline = spec.sandbox.network == orch_types::Network::None;
        let withheld: Vec<String> =
            spec.tools.iter().filter(|t| offline && orch_types::tools::needs_network(t)).cloned().collect();
        let host_tools: Vec<String> = spec
            .tools
            .iter()
            .filter(|t| {
                orch_types::tools::lookup(t).is_none_or(|i| i.runs == orch_types::tools::Runs::Host)
                    && !t.starts_with(agent_mcp::PREFIX)
            })
            .filter(|t| !withheld.contains(t))
            .cloned()
            .collect();
        let core = host::select_tools(&host_tools)?;
        let name = host::sandbox_name(&format!("{}-{}", spec.run, spec.agent));
        let git = match spec.git {
            Some(known) => Some(known),
            // Off the async workers: a status walk of the whole checkout.
            None => {
                let cwd = spec.cwd.clone();
                tokio::task::spawn_blocking(move || crate::git::snapshot(&cwd)).await.ok().flatten()
            }
        };
        let mut sandbox = AgentSandbox::prepare(&spec.sandbox, &spec.cwd, spec.writes, spec.read, &name, spec.private)?;
        sandbox.policy.env.extend(spec.env);
        if let Some(warning) = crate::masks::apply(&mut sandbox.policy, &spec.permissions, &spec.cwd, &spec.agent) {
            crate::notice::note(format_args!("{warning}"));
        }
        if let Some(bytes) = spec.file_size_limit {
            sandbox.policy.limits.file_size_bytes = Some(bytes);
        }
        let mut egress = spec.egress;
        let handoff = match &egress {
            Some(grant) => Some(prepare_egress(&mut sandbox.policy, grant)?),
            None => None,
        };
        let (mut stdio_mcp, http_mcp, unexpanded) = crate::mcp::servers_for(&spec.tools, &spec.mcp_servers);
        if matches!(sandbox.policy.network, orch_sandbox::policy::Network::None) {
            crate::mcp::offline_package_managers(&mut stdio_mcp);
        }
        let stdio_json = if stdio_mcp.is_empty() { None } else { Some(serde_json::to_string(&stdio_mcp)?) };
        let mut session = AgentSession {
            agent: spec.agent.clone(),
            cwd: spec.cwd.clone(),
            pool: None,
            router: None,
            http: None,
            executor: None,
            container: None,
            sandbox: None,
            host_pid: None,
            registered: None,
            mcp_failures: Vec::new(),
            mcp_events: None,
            egress: None,
            git,
            network: spec.sandbox.network,
        };
        let started = host::spawn_with_mcp(
            &spec.run,
            &spec.agent,
            &spec.cwd,
            &host_tools,
            &sandbox.policy,
            stdio_json.as_deref(),
        )
        .await;
        session.sandbox = Some(sandbox);
        let started = match started {
            Ok(s) => s,
            Err(e) => {
                session.stop().await;
                return Err(e);
            }
        };
        session.container = started.container;
        session.registered = Some(started.registered);
        session.host_pid = started.client.pid();
        if let (Some(handoff), Some(mut grant)) = (handoff, egress.take()) {
            let received = tokio::task::spawn_blocking(move || handoff.receive(EGRESS_WAIT)).await;
            let served = match received {
                Ok(Ok(listener)) => grant.serve(listener).map_err(|e| e.to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            session.egress = Some(grant);
            if let Err(e) = served {
                session.stop().await;
                return Err(crate::error::Error::Message(format!(
                    "the sandbox of `{}` did not connect to the egress proxy: {e}",
                    spec.agent
                )));
            }
        }
        let executor = Arc::new(HostExecutor::new(started.client).ending_on_crash(cancel.clone()));
        session.executor = Some(executor.clone());
        // Hooks fail closed: an agent whose hooks cannot start in its sandbox does not
        // start either.
        if let Err(missing) =
            orch_agents::command_hooks::check(&spec.hooks, executor.as_ref(), cancel.child_token()).await
        {
            session.stop().await;
            return Err(crate::error::Error::Message(hooks_cannot_start(&spec.agent, &spec.sandbox, &missing)));
        }
        let mut listing = McpListing::default();
        let mut stderr = BTreeMap::new();
        if stdio_json.is_some() {
            listing = crate::mcp::host_listing(executor.as_ref(), cancel).await;
            stderr = crate::mcp::host_stderr(executor.as_ref(), cancel).await;
            session.mcp_events = Some(events.clone());
        }
        listing.failed.extend(unexpanded);
        if !http_mcp.is_empty() {
            let (hub, http_listing) = McpHub::start(&http_mcp, &spec.cwd).await;
            listing.tools.extend(http_listing.tools);
            listing.failed.extend(http_listing.failed);
            session.http = Some(Arc::new(hub));
        }
        session.mcp_failures = crate::mcp::failures(&spec.tools, &listing, &stderr);
        crate::mcp::announce_failures(&spec.agent, &session.mcp_failures);
        for failure in &session.mcp_failures {
            events.emit(orch_agents::Event::McpServer {
                server: failure.server.clone(),
                error: Some(failure.reason.clone()),
                stderr: failure.stderr.clone(),
            });
        }
        emit_stderr(events.as_ref(), stderr, &session.mcp_failures);
        let router: Arc<dyn ToolExecutor> = Arc::new(McpRouter { host: executor, http: session.http.clone() });
        session.router = Some(router.clone());
        let mut tools = core;
        tools.extend(crate::mcp::agent_tools(&spec.tools, &listing));
        let hooks = HookSpec {
            hooks: spec.hooks,
            session_id: spec.session_id,
            transcript: spec.transcript,
            model: spec.model,
            events,
            cancel: cancel.clone(),
        };
        match build_pool(&spec.agent, &spec.cwd, tools, router, spec.permissions, spec.results_dir, hooks) {
            Ok(mut pool) => {
                for name in withheld {
                    pool = pool.with_withheld(
                        name,
                        "this agent's sandbox has no network (`network: none`), so this tool is not available; \
                         work from the repository's files",
                    );
                }
                session.pool = Some(pool);
                Ok(session)
            }
            Err(e) => {
                session.stop().await;
                Err(e)
            }
        }
    }

    /// What the agent's sandbox contacted through the egress proxy and what it was
    /// denied (allowlists only).
    pub fn network(&self) -> Option<crate::proxy::run::NetworkReport> {
        self.egress.as_ref().map(|g| g.summary())
    }

    /// The uid the agent's commands run as, when the sandbox gives it one (as root).
    pub fn sandbox_uid(&self) -> Option<u32> {
        self.sandbox.as_ref().and_then(|s| s.policy.uid)
    }

    /// The paths its sandbox masks (its `Read` denies, see `crate::masks`).
    pub fn masked(&self) -> &[PathBuf] {
        self.sandbox.as_ref().map_or(&[], |s| s.policy.masked.as_slice())
    }

    /// The MCP servers the agent could not use (for its report).
    pub fn mcp_failures(&self) -> &[crate::mcp::McpFailure] {
        &self.mcp_failures
    }

    /// The tool pool (absent only after [`AgentSession::stop`]).
    pub fn pool(&self) -> Option<&ToolPool> {
        self.pool.as_ref()
    }

    /// Replaces the pool with `f(pool)`, e.g. to install the `Agent` tool. On an error
    /// the session has no pool left; stop it.
    pub fn map_pool(&mut self, f: impl FnOnce(ToolPool) -> Result<ToolPool, PoolError>) -> Result<(), PoolError> {
        if let Some(pool) = self.pool.take() {
            self.pool = Some(f(pool)?);
        }
        Ok(())
    }

    /// Offers `WebSearch` (a request to the model's API, which runs the search): only
    /// with the `anthropic` provider (`provider` is the provider's name) and a network
    /// that is not `none`; otherwise a call says why it is absent.
    pub fn offer_web_search(&mut self, tool: WebSearchTool, provider: &str) -> Result<(), PoolError> {
        if self.network == orch_types::Network::None {
            // Withheld when the pool was built.
            return Ok(());
        }
        if self.network == orch_types::Network::Proxy {
            let why = "WebSearch runs on the API provider's servers, outside this agent's network allowlist; it is \
                       offered only with `network: full`"
                .to_string();
            return self.map_pool(|pool| Ok(pool.with_withheld(WEB_SEARCH_TOOL, why)));
        }
        if provider != "anthropic" {
            let why = format!(
                "WebSearch runs on the Anthropic API's server-side search, and this agent's provider is \
                 `{provider}`; it is not available"
            );
            return self.map_pool(|pool| Ok(pool.with_withheld(WEB_SEARCH_TOOL, why)));
        }
        self.map_pool(|pool| tool.install(pool))
    }

    /// The tool host, for calls outside the pool (setup commands).
    pub fn host(&self) -> Option<&dyn ToolExecutor> {
        self.executor.as_deref().map(|e| e as &dyn ToolExecutor)
    }

    /// The system prompt for `model`: the static part, the environment and git
    /// snapshot (taken when the session started), and (when `with_instructions`) the project instructions, read through
    /// the tool host.
    pub async fn instructions(
        &self,
        model: &str,
        with_instructions: bool,
        cancel: &CancellationToken,
    ) -> (Vec<SystemPart>, Vec<orch_agents::instructions::Loaded>) {
        match &self.executor {
            Some(executor) => {
                let executor = executor.as_ref();
                crate::agent_prompt::build(&self.cwd, self.git.as_ref(), model, with_instructions, executor, cancel)
                    .await
            }
            None => crate::agent_prompt::build(&self.cwd, self.git.as_ref(), model, false, &Stopped, cancel).await,
        }
    }

    /// Stops everything, in the order the module documents. The worktree may be
    /// touched after this returns.
    pub async fn stop(mut self) -> SessionEnd {
        let mut stopped = SessionEnd::default();
        drop(self.pool.take());
        drop(self.router.take());
        if let Some(hub) = self.http.take().and_then(Arc::into_inner) {
            hub.shutdown().await;
        }
        // What the stdio servers wrote since the start, before they stop with the host.
        if let (Some(events), Some(executor)) = (self.mcp_events.take(), self.executor.as_ref()) {
            let stderr = crate::mcp::host_stderr(executor.as_ref(), &CancellationToken::new()).await;
            emit_stderr(events.as_ref(), stderr, &self.mcp_failures);
        }
        if let Some(executor) = self.executor.take() {
            match Arc::try_unwrap(executor) {
                Ok(executor) => {
                    // After a second signal, no grace: the commit comes first.
                    let grace =
                        if crate::signals::hurried() { std::time::Duration::from_millis(100) } else { HOST_GRACE };
                    stopped.died = executor.shutdown(grace).await;
                }
                // Someone still holds it (a hook or sub-agent task that outlived its
                // loop); dropping ours closes the pipe once they finish.
                Err(_) => tracing::warn!(agent = %self.agent, "the tool host is still in use; not waiting for it"),
            }
        }
        // Whatever a dead host left (re-parented to the coordinator) dies before the
        // worktree is touched.
        stopped.killed = crate::reap::kill_orphans(self.host_pid).await;
        if let Some(container) = self.container.take()
            && let Err(e) = container.stop().await
        {
            tracing::warn!(agent = %self.agent, "could not remove the agent's container: {e}");
        }
        if let Some(sandbox) = self.sandbox.take() {
            sandbox.teardown();
        }
        drop(self.registered.take());
        drop(self.egress.take());
        stopped
    }
}

/// Why an agent does not start when its hooks cannot: each hook command, what it lacks
/// and why, where it looked, and what to do.
fn hooks_cannot_start(
    agent: &str,
    sandbox: &SandboxSpec,
    missing: &[orch_agents::command_hooks::MissingInterpreter],
) -> String {
    let (place, fix) = match &sandbox.image {
        Some(image) if sandbox.backend == orch_sandbox::policy::Backend::Container => {
            (format!("the container image `{image}`"), "use an image that has it")
        }
        _ => ("the agent's sandbox".to_string(), "install it, or add its directory to `sandbox.read`"),
    };
    let each: Vec<String> = missing
        .iter()
        .map(|m| {
            let command: String = m.command.split_whitespace().collect::<Vec<_>>().join(" ");
            let command = match command.char_indices().nth(80) {
                Some((at, _)) => format!("{}…", &command[..at]),
                None => command,
            };
            format!("the hook `{command}` needs `{}` ({}), which {place} does not have", m.missing, m.needed_by)
        })
        .collect();
    format!(
        "agent `{agent}` was not started because its hooks cannot run: {}; {fix}, or change the hook (hooks run \
         with `sh -c`)",
        each.join("; ")
    )
}

/// An `mcp_server` event for each server of `stderr` that wrote something new (those of
/// `failed` have theirs in their failure event).
fn emit_stderr(
    events: &dyn EventSink,
    stderr: BTreeMap<String, crate::mcp::ServerStderr>,
    failed: &[crate::mcp::McpFailure],
) {
    for (server, text) in stderr {
        if text.new.is_empty() || failed.iter().any(|f| f.server == server) {
            continue;
        }
        events.emit(orch_agents::Event::McpServer { server, error: None, stderr: text.new });
    }
}

/// How long the coordinator waits for a started sandbox's egress listener (it is sent
/// before the host says it is ready, so this is only a bound).
const EGRESS_WAIT: Duration = Duration::from_secs(10);

/// Points the policy at the egress proxy: the port, a fresh handoff socket for the
/// sandbox's listener, and the proxy variables in its environment.
fn prepare_egress(
    policy: &mut orch_sandbox::policy::Policy,
    grant: &crate::proxy::run::Grant,
) -> crate::error::Result<orch_sandbox::egress::Handoff> {
    use orch_sandbox::policy::{Backend, Network};
    policy.network = Network::Proxy;
    // A container run by root connects as its own uid (see `container.rs`).
    let owner = (orch_sandbox::identity::is_root() && policy.backend == Backend::Container)
        .then(|| policy.uid.unwrap_or(orch_sandbox::container::NOBODY));
    let handoff = orch_sandbox::egress::Handoff::create(&std::env::temp_dir(), owner)
        .map_err(|e| crate::error::Error::Message(format!("cannot prepare the egress proxy's socket: {e}")))?;
    policy.egress = Some(orch_sandbox::egress::Egress { port: grant.port(), handoff: handoff.path().to_path_buf() });
    policy.env.extend(grant.env());
    if let Some(dir) = grant.ca_dir() {
        policy.read.push(dir.to_path_buf());
    }
    Ok(handoff)
}

/// The command hooks of a session and what they report to.
struct HookSpec {
    hooks: Vec<CommandHook>,
    session_id: String,
    transcript: Option<PathBuf>,
    model: String,
    events: Arc<dyn EventSink>,
    cancel: CancellationToken,
}

/// The pool of `tools` running through `router`, with the hooks when there are any.
fn build_pool(
    agent: &str,
    cwd: &std::path::Path,
    tools: Vec<Arc<dyn orch_agents::tools::DynTool>>,
    router: Arc<dyn ToolExecutor>,
    permissions: Permissions,
    results_dir: Option<PathBuf>,
    hooks: HookSpec,
) -> crate::error::Result<ToolPool> {
    let hook_tools = tools.clone();
    // orch's own default (no mode named) is Claude Code's `default`: rules decide,
    // and what would be asked is denied.
    let mode = permissions.mode.map_or("default", |m| m.as_str());
    let mut pool = ToolPool::new(agent, tools, router.clone(), permissions)?;
    if let Some(dir) = results_dir {
        pool = pool.with_results_dir(dir);
    }
    if hooks.hooks.is_empty() {
        return Ok(pool);
    }
    let command_hooks = CommandHooks::new(agent, cwd, hooks.hooks, hook_tools, router, hooks.events)
        .map_err(|e| crate::error::Error::Message(format!("the hooks of `{agent}` are invalid: {e}")))?
        .with_session_id(hooks.session_id)
        .with_transcript_path(hooks.transcript.as_deref())
        .with_permission_mode(mode)
        .with_model(hooks.model)
        .with_cancel(hooks.cancel);
    Ok(pool.with_hooks(Arc::new(command_hooks)))
}

/// The executor of a stopped session: every call fails.
struct Stopped;

#[async_trait::async_trait]
impl ToolExecutor for Stopped {
    async fn execute(
        &self,
        _request: orch_agents::protocol::HostRequest,
        _cancel: CancellationToken,
    ) -> Result<orch_agents::ToolOutput, String> {
        Err("the session has stopped".into())
    }
}
