//! The agent's tool host: the hidden `orch __tool-host` mode that serves an agent's
//! tools over stdin/stdout, and the coordinator-side executor that sends calls to it.
//!
//! Every tool call of every agent crosses this process boundary; nothing opens a file
//! on an agent's behalf in the coordinator.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use orch_agents::ToolOutput;
use orch_agents::tools::host::{HostRequest, HostTools, ToolExecutor};
use orch_agents::tools::{DynTool, Session, core_tools};
use orch_sandbox::host::{Handler, HostClient, HostError, ServeOptions, serve_stdio};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The hidden subcommand name.
pub const SUBCOMMAND: &str = "__tool-host";

/// Arguments of the hidden mode.
#[derive(Debug, clap::Args)]
pub struct HostArgs {
    /// The agent's working directory.
    #[arg(long)]
    pub cwd: PathBuf,
    /// The tools this host serves, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub tools: Vec<String>,
}

struct Serve(HostTools);

#[async_trait]
impl Handler for Serve {
    async fn handle(&self, payload: Value, cancel: CancellationToken) -> Result<Value, String> {
        self.0.handle_json(payload, cancel).await
    }
}

/// The tools named in `names`, from the core set.
pub fn select_tools(names: &[String]) -> anyhow::Result<Vec<Arc<dyn DynTool>>> {
    let all = core_tools();
    names
        .iter()
        .map(|n| {
            all.iter().find(|t| t.name() == n).cloned().ok_or_else(|| {
                let known: Vec<_> = all.iter().map(|t| t.name()).collect();
                anyhow::Error::new(crate::exit::UsageError(format!(
                    "unknown tool `{n}`; the tools are: {}",
                    known.join(", ")
                )))
            })
        })
        .collect()
}

/// Runs the tool host until the coordinator closes its stdin or says shutdown.
pub async fn serve(args: HostArgs) -> anyhow::Result<()> {
    let tools = select_tools(&args.tools)?;
    let session = Arc::new(Session::new(&args.cwd));
    let handler = Arc::new(Serve(HostTools::new(tools, session)));
    serve_stdio(ServeOptions::default(), handler).await.context("the tool host lost its pipe to the coordinator")
}

/// Starts a tool host for an agent working in `cwd` with `tools`.
pub async fn spawn(cwd: &Path, tools: &[String]) -> anyhow::Result<HostClient> {
    let exe = std::env::current_exe().context("cannot find the orch binary to start a tool host")?;
    let mut command = tokio::process::Command::new(exe);
    command.arg(SUBCOMMAND).arg("--cwd").arg(cwd).arg("--tools").arg(tools.join(",")).current_dir(cwd);
    Ok(HostClient::spawn(command).await?)
}

/// Sends calls to one agent's tool host.
pub struct HostExecutor {
    client: HostClient,
}

impl HostExecutor {
    pub fn new(client: HostClient) -> Self {
        Self { client }
    }

    /// Stops the tool host, killing it after `grace`.
    pub async fn shutdown(self, grace: Duration) {
        let exit = self.client.shutdown(grace).await;
        if exit.killed {
            tracing::warn!("the tool host did not stop in time and was killed");
        }
    }
}

#[async_trait]
impl ToolExecutor for HostExecutor {
    async fn execute(&self, request: HostRequest, cancel: CancellationToken) -> Result<ToolOutput, String> {
        let payload = serde_json::to_value(&request).map_err(|e| e.to_string())?;
        match self.client.call(payload, cancel).await {
            Ok(value) => serde_json::from_value(value).map_err(|e| format!("the tool host sent a bad result: {e}")),
            Err(HostError::Cancelled) => Ok(ToolOutput::error("cancelled before the call finished")),
            Err(e) => Err(e.to_string()),
        }
    }
}
