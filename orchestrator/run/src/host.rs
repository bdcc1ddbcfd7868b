//! The agent's tool host: the hidden `orch __tool-host` mode that serves an agent's
//! tools over stdin/stdout, and the coordinator-side executor that sends calls to it.
//!
//! Every tool call of every agent crosses this process boundary; nothing opens a file
//! on an agent's behalf in the coordinator.
//!
//! Sandboxing: the coordinator builds the agent's [`Policy`] and prepares for it
//! ([`AgentSandbox::prepare`]: private tmp and home, writable roots handed to the
//! sandbox uid when root), then starts the host with `--policy <JSON>`, an environment
//! of exactly `policy.env`, and the worktree as working directory. `main` calls
//! [`confine_self`] before any runtime thread exists; then [`serve`] runs the tools,
//! with the Bash orphan hook set to `orch_sandbox::reaper::kill_orphans` (the host is a
//! child subreaper), and kills every remaining descendant when it stops.
//! [`AgentSandbox::teardown`] kills the agent's cgroup, hands the roots back and
//! removes the private directories.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::error::Context as _;
use async_trait::async_trait;
use orch_agents::ToolOutput;
use orch_agents::protocol::{HostRequest, ToolExecutor};
use orch_agents::tools::host::HostTools;
use orch_agents::tools::{DynTool, Session, core_tools};
use orch_sandbox::Handover;
use orch_sandbox::container::{ContainerHost, ContainerOptions};
use orch_sandbox::host::{Handler, HostClient, HostError, ServeOptions, serve_stdio};
use orch_sandbox::policy::{Backend, Policy};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::exit::UsageError;
use crate::options::{HostOptions, SandboxSpec};
use crate::sandbox::{self, PolicyInput, PrivateDirs};

/// The hidden subcommand name.
pub const SUBCOMMAND: &str = "__tool-host";

/// Confines this process under the policy of `args`. Runs before the async runtime
/// exists (see `main`).
pub fn confine_self(args: &HostOptions) -> crate::error::Result<()> {
    let policy: Policy = serde_json::from_str(&args.policy).context("the tool host got a malformed --policy")?;
    // Its own session: nothing its commands start can join the coordinator's, which is
    // how the coordinator tells a dead host's orphans from its own children (`reap`).
    if let Err(e) = nix::unistd::setsid() {
        tracing::debug!("the tool host could not start its own session: {e}");
    }
    let done = orch_sandbox::confine(&policy)?;
    tracing::debug!(?done, "tool host confined");
    if policy.backend == Backend::Landlock
        && !done.memory_in_cgroup
        && let Some(limit) = policy.limits.memory_bytes
    {
        // rlimits cap each process only: bound the agent's total here.
        let _ = MEMORY_WATCH.set(limit);
    }
    Ok(())
}

/// The memory limit this host enforces on the sum of its processes (no cgroup does).
static MEMORY_WATCH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Kills every process of this host once their resident memory adds up past `limit`
/// (`orch_sandbox::memwatch`), as a cgroup's OOM killer would; runs for the host's life.
fn watch_memory(limit: u64) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(orch_sandbox::memwatch::INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Ok(Some(total)) = tokio::task::spawn_blocking(move || orch_sandbox::memwatch::over(limit)).await else {
                continue;
            };
            let killed = orch_sandbox::reaper::kill_descendants();
            crate::notice::note(format_args!(
                "tool host: the agent's processes held {} MiB, over its memory limit of {} MiB; killed {killed}",
                total >> 20,
                limit >> 20
            ));
        }
    });
}

/// The whole life of a tool host process from its options: confine it (while it has
/// one thread), serve on stdin and stdout with a current-thread runtime, and return its
/// exit code. `orch __tool-host` and each host the zygote forks ([`crate::zygote`]) run
/// this.
pub fn host_main(options: HostOptions) -> u8 {
    if let Err(e) = confine_self(&options) {
        tracing::error!("the tool host could not confine itself: {e:#}");
        return crate::exit::Code::Infrastructure as u8;
    }
    // A tool host serves one agent: one thread is plenty (blocking work such as a search
    // walk still goes to tokio's blocking pool), and 64 agents mean 64 hosts.
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return crate::exit::Code::Infrastructure as u8;
        }
    };
    match runtime.block_on(serve(options)) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e:#}");
            crate::exit::Code::Infrastructure as u8
        }
    }
}

/// One agent's sandbox, on the coordinator side: its policy and what was prepared for
/// it.
#[derive(Debug)]
pub struct AgentSandbox {
    pub policy: Policy,
    dirs: PrivateDirs,
    handover: Option<Handover>,
    done: bool,
}

impl AgentSandbox {
    /// Builds the policy of an agent named `name` working in `cwd` with the flags
    /// `args`, creates its private tmp and home under `base`, and, as root, hands the
    /// writable roots to its sandbox uid. `cwd` is writable when `writable_cwd` (the
    /// agent has a tool that writes), readable otherwise; `read` are extra readable
    /// roots (such as the directory of results too large to send inline). Warns when
    /// the backend is `none`.
    pub fn prepare(
        args: &SandboxSpec,
        cwd: &Path,
        writable_cwd: bool,
        read: Vec<PathBuf>,
        name: &str,
        base: PathBuf,
    ) -> crate::error::Result<AgentSandbox> {
        match args.backend {
            Backend::Container if args.image.is_none() => {
                let (key, hint) = (args.source.backend_key(), args.source.image_hint());
                return Err(UsageError(format!("{key} container needs an image: {hint}")).into());
            }
            Backend::None => sandbox::warn_unconfined(args.source),
            Backend::Landlock | Backend::Container => {}
        }
        let dirs = PrivateDirs::create(base).context("cannot create the agent's private tmp and home")?;
        let input = PolicyInput {
            cwd,
            write: if writable_cwd { vec![cwd.to_path_buf()] } else { vec![] },
            read: if writable_cwd { read } else { read.into_iter().chain([cwd.to_path_buf()]).collect() },
            dirs: &dirs,
            name: name.to_string(),
            wall_time: None,
        };
        let prepared = sandbox::build_policy(args, input)
            .map_err(|e| crate::error::Error::from(UsageError(e.to_string())))
            .and_then(|policy| {
                // The container backend hands the writable roots over itself.
                let handover = match policy.backend {
                    Backend::Container => None,
                    _ => Some(orch_sandbox::prepare_writable(&policy)?),
                };
                Ok((handover, policy))
            });
        if let Ok((_, policy)) = &prepared {
            per_agent_memory(policy);
        }
        match prepared {
            Ok((handover, policy)) => Ok(AgentSandbox { policy, dirs, handover, done: false }),
            Err(e) => {
                dirs.remove();
                Err(e)
            }
        }
    }

    /// After the tool host stopped: kills what is left in the agent's cgroup, hands the
    /// writable roots back, removes the private directories. Dropping the sandbox does
    /// the same, so an early return cannot leave a worktree with the sandbox uid.
    pub fn teardown(mut self) {
        self.tear_down();
    }

    fn tear_down(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        if let Some(handover) = self.handover.take() {
            // Root's cgroup, or a normal user's delegated one (none: nothing found).
            if let Some(name) = &self.policy.name {
                orch_sandbox::cgroup::kill_and_remove(name);
            }
            handover.restore();
        }
        self.dirs.remove();
    }
}

impl Drop for AgentSandbox {
    fn drop(&mut self) {
        self.tear_down();
    }
}

/// A normal user's per-agent memory limit needs a delegated cgroup: made (or found)
/// once per coordinator, before its first landlock sandbox with a memory limit; where
/// none can be had, one warning says what is missing and how the limit holds instead.
fn per_agent_memory(policy: &Policy) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if policy.backend != Backend::Landlock || policy.limits.memory_bytes.is_none() || orch_sandbox::identity::is_root()
    {
        return;
    }
    ONCE.call_once(|| {
        if let Err(missing) = orch_sandbox::cgroup::delegate() {
            crate::notice::note(format_args!(
                "warning: agents' memory limits hold per process, not per agent: {missing}; each tool host \
                 kills its agent's processes when together they pass the limit instead (checked every {} ms). \
                 Run orch as root or give it passwordless sudo for a per-agent cgroup",
                orch_sandbox::memwatch::INTERVAL.as_millis()
            ));
        }
    });
}

struct Serve(HostTools, Option<crate::mcp::HostMcp>);

#[async_trait]
impl Handler for Serve {
    async fn handle(&self, payload: Value, cancel: CancellationToken) -> Result<Value, String> {
        let request: HostRequest = serde_json::from_value(payload).map_err(|e| format!("bad host request: {e}"))?;
        // MCP requests (the listing, `mcp__` calls) go to this host's stdio servers.
        let mcp = match &self.1 {
            Some(mcp) => mcp.handle(&request, cancel.clone()).await,
            None => None,
        };
        let output = match mcp {
            Some(output) => output,
            None => self.0.run(request, cancel).await,
        };
        serde_json::to_value(output).map_err(|e| format!("cannot encode the tool result: {e}"))
    }
}

/// The tools named in `names`, from the core set.
pub fn select_tools(names: &[String]) -> crate::error::Result<Vec<Arc<dyn DynTool>>> {
    let all = core_tools();
    names
        .iter()
        .map(|n| {
            all.iter().find(|t| t.name() == n).cloned().ok_or_else(|| {
                let known: Vec<_> = all.iter().map(|t| t.name()).collect();
                crate::error::Error::from(UsageError(format!(
                    "unknown tool `{n}`; the tools are: {}",
                    known.join(", ")
                )))
            })
        })
        .collect()
}

/// Runs the tool host until the coordinator closes its stdin or says shutdown.
pub async fn serve(args: HostOptions) -> crate::error::Result<()> {
    // An agent with `tools: []` is spawned with `--tools ""`, which clap reads as one
    // empty name.
    let names: Vec<String> = args.tools.iter().filter(|t| !t.is_empty()).cloned().collect();
    let tools = select_tools(&names)?;
    let session = Arc::new(Session::new(&args.cwd));
    let mcp = match &args.mcp {
        Some(json) => {
            let servers = serde_json::from_str(json).context("the tool host got a malformed --mcp")?;
            Some(crate::mcp::HostMcp::new(servers, &args.cwd))
        }
        None => None,
    };
    let handler = Arc::new(Serve(HostTools::new(tools, session), mcp));
    if let Some(limit) = MEMORY_WATCH.get() {
        watch_memory(*limit);
    }
    orch_agents::tools::bash::set_orphan_hook(orch_sandbox::reaper::kill_orphans);
    // Every command enters its own Landlock domain that scopes signals and abstract
    // sockets, so nothing it starts can signal, ptrace or read /proc of this host.
    // Nothing but 0-2 crosses its `exec` (see `orch_sandbox::fds`).
    orch_agents::tools::bash::set_spawn_hook(orch_sandbox::scope::enter_command);
    let served = serve_stdio(ServeOptions::default(), handler.clone()).await;
    if let Some(mcp) = Arc::into_inner(handler).and_then(|h| h.1) {
        mcp.shutdown().await;
    }
    let killed = orch_sandbox::reaper::kill_descendants();
    if killed > 0 {
        tracing::debug!(killed, "tool host: killed the processes still running at shutdown");
    }
    served.context("the tool host lost its pipe to the coordinator")
}

/// A started tool host: its client, and its container when the backend is `container`
/// (stop it with [`ContainerHost::stop`] after the client shut down).
pub struct Started {
    pub client: HostClient,
    pub container: Option<ContainerHost>,
    /// Keeps the host's pid known to the coordinator's reaper while it lives: keep it
    /// until the host has stopped.
    pub registered: crate::reap::Registered,
}

/// `id` as a name for a sandbox (its cgroup, and the seed of its uid): letters, digits,
/// `-`, `_` and `.`, then `.` and this coordinator's instance tag
/// (`orch_sandbox::instance`), so no other run's sandbox has the same name, even with
/// the same run id.
pub fn sandbox_name(id: &str) -> String {
    format!("{}{}", name_prefix(id), orch_sandbox::instance::tag())
}

/// What every sandbox name of `id` starts with, whichever coordinator made it.
fn name_prefix(id: &str) -> String {
    let mut name: String =
        id.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    name.push('.');
    name
}

/// Kills and removes the cgroups of `id`'s sandboxes whose coordinator is gone (as
/// root; for `orch recover`). A live run's, even one with the same run id, are left
/// alone.
pub fn kill_dead_sandboxes(id: &str) {
    if !orch_sandbox::identity::is_root() {
        return;
    }
    let prefix = name_prefix(id);
    for name in orch_sandbox::cgroup::names_with_prefix(&prefix) {
        let tag = &name[prefix.len()..];
        if !tag.contains('.') && !orch_sandbox::instance::alive(tag) {
            orch_sandbox::cgroup::kill_and_remove(&name);
        }
    }
}

/// Starts a tool host for an agent `agent` of the run `run` working in `cwd` with
/// `tools`, confined by `policy`: a child process, or for the container backend a
/// container (labelled with the run and agent) whose long-lived process is this orch
/// binary.
pub async fn spawn(
    run: &str,
    agent: &str,
    cwd: &Path,
    tools: &[String],
    policy: &Policy,
) -> crate::error::Result<Started> {
    spawn_with_mcp(run, agent, cwd, tools, policy, None).await
}

/// [`spawn`], with the stdio MCP servers the host starts on request (`--mcp`, JSON).
pub async fn spawn_with_mcp(
    run: &str,
    agent: &str,
    cwd: &Path,
    tools: &[String],
    policy: &Policy,
    mcp: Option<&str>,
) -> crate::error::Result<Started> {
    let mcp_args: Vec<String> = mcp.map(|m| vec!["--mcp".to_string(), m.to_string()]).unwrap_or_default();
    let exe = std::env::current_exe().context("cannot find the orch binary to start a tool host")?;
    if policy.backend == Backend::Container {
        let docker = orch_sandbox::container::connect().await?;
        let args: Vec<String> = vec![
            SUBCOMMAND.into(),
            "--cwd".into(),
            cwd.display().to_string(),
            "--tools".into(),
            tools.join(","),
            "--policy".into(),
            serde_json::to_string(policy)?,
        ]
        .into_iter()
        .chain(mcp_args.iter().cloned())
        .collect();
        let options =
            ContainerOptions { run: run.to_string(), agent: agent.to_string(), ..ContainerOptions::default() };
        let (container, client) = ContainerHost::start(&docker, policy, &exe, &args, &options).await?;
        return Ok(Started { client, container: Some(container), registered: crate::reap::register(None) });
    }
    let mut command = tokio::process::Command::new(exe);
    command
        .arg(SUBCOMMAND)
        .arg("--cwd")
        .arg(cwd)
        .arg("--tools")
        .arg(tools.join(","))
        .arg("--policy")
        .arg(serde_json::to_string(policy)?)
        .args(&mcp_args)
        .env_clear()
        .envs(&policy.env)
        .current_dir(cwd);
    let started = std::time::Instant::now();
    let starting = crate::reap::starting().await;
    let client = match crate::zygote::spawn(cwd, tools, policy, mcp).await? {
        Some(client) => client,
        None => HostClient::spawn(command).await?,
    };
    let registered = crate::reap::register(client.pid());
    drop(starting);
    tracing::debug!(elapsed_ms = started.elapsed().as_secs_f64() * 1e3, "tool host started");
    Ok(Started { client, container: None, registered })
}

/// Sends calls to one agent's tool host.
pub struct HostExecutor {
    client: HostClient,
    on_crash: Option<CancellationToken>,
}

impl HostExecutor {
    pub fn new(client: HostClient) -> Self {
        Self { client, on_crash: None }
    }

    /// Cancels `token` (the agent's) as soon as a call finds the host dead: the agent
    /// cannot work without it.
    pub fn ending_on_crash(mut self, token: CancellationToken) -> Self {
        self.on_crash = Some(token);
        self
    }

    /// Stops the tool host, killing it after `grace`. Returns how it ended when it
    /// ended on its own (a crash, a signal from outside) rather than at our request,
    /// e.g. "the tool host exited (signal 9, SIGKILL)".
    pub async fn shutdown(self, grace: Duration) -> Option<String> {
        let exit = self.client.shutdown(grace).await;
        if exit.killed {
            tracing::warn!("the tool host did not stop in time and was killed");
            return None;
        }
        died(exit.status)
    }
}

/// How a tool host's exit status reads when it was not a clean stop.
fn died(status: Option<std::process::ExitStatus>) -> Option<String> {
    use std::os::unix::process::ExitStatusExt as _;
    let status = status?;
    if let Some(signal) = status.signal() {
        let name = nix::sys::signal::Signal::try_from(signal).map(|s| format!(", {s}")).unwrap_or_default();
        return Some(format!("the tool host exited (signal {signal}{name})"));
    }
    match status.code() {
        Some(0) | None => None,
        Some(code) => Some(format!("the tool host exited (exit code {code})")),
    }
}

#[async_trait]
impl ToolExecutor for HostExecutor {
    async fn execute(&self, request: HostRequest, cancel: CancellationToken) -> Result<ToolOutput, String> {
        let payload = serde_json::to_value(&request).map_err(|e| e.to_string())?;
        match self.client.call(payload, cancel).await {
            Ok(value) => serde_json::from_value(value).map_err(|e| format!("the tool host sent a bad result: {e}")),
            Err(HostError::Cancelled) => Ok(ToolOutput::error("cancelled before the call finished")),
            Err(e @ HostError::Crashed { .. }) => {
                if let Some(token) = &self.on_crash {
                    token.cancel();
                }
                Err(e.to_string())
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_names_carry_the_coordinators_instance() {
        let name = sandbox_name("run 1-agent/x");
        assert_eq!(name, format!("run_1-agent_x.{}", orch_sandbox::instance::tag()));
        assert!(name.starts_with(&name_prefix("run 1-agent/x")));
    }

    #[test]
    fn recovery_removes_a_dead_coordinators_cgroups_and_keeps_a_live_ones() {
        if !orch_sandbox::identity::is_root() {
            eprintln!("needs root: cgroups are root's");
            return;
        }
        let id = format!("t-names-{}", std::process::id());
        // A coordinator that is gone: a child that exited.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let start = orch_sandbox::instance::start_time(child.id()).unwrap_or_default();
        let dead = format!("{}{}s{start}", name_prefix(&id), child.id());
        child.wait().unwrap();
        let live = sandbox_name(&id);
        let limits = orch_sandbox::policy::Limits::default();
        let (Some(dead_cg), Some(live_cg)) = (
            orch_sandbox::cgroup::Cgroup::create(&dead, &limits),
            orch_sandbox::cgroup::Cgroup::create(&live, &limits),
        ) else {
            eprintln!("no writable cgroup hierarchy here");
            return;
        };
        kill_dead_sandboxes(&id);
        assert!(dead_cg.dirs().iter().all(|d| !d.exists()), "the dead run's cgroup is left");
        assert!(live_cg.dirs().iter().all(|d| d.exists()), "the live run's cgroup was removed");
        live_cg.remove();
    }
}
