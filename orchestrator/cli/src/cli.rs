//! The command-line grammar of `orch`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use orch_run::exit::UsageError;
use orch_run::options::{
    ExecOptions, ExecOutput, HostOptions, MergeOptions, ModelSpec, Provider, RunOptions, SandboxSpec, SettingSource,
    WorkflowModelSpec,
};
use orch_run::run::Reporter;
use orch_sandbox::policy::{Backend, Network};

#[derive(Debug, Parser)]
#[command(name = "orch", version, about = "A sandboxed multi-agent orchestrator for CI.")]
pub struct Cli {
    /// More logs on stderr (-v debug, -vv trace). `RUST_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a workflow: its agents in parallel worktrees, then synthesis and reports.
    Run(Box<RunArgs>),
    /// Check a workflow file and report every error with its line and column.
    Validate(ValidateArgs),
    /// Show what a workflow will run: agents, prompts, tools, sandbox, model, limits.
    Plan(PlanArgs),
    /// Join run directories (shards, resumed runs) into one report, with one synthesis.
    Merge(Box<MergeArgs>),
    /// Run one ad-hoc agent on PROMPT and print its final answer.
    Exec(Box<ExecArgs>),
    /// Finish a run that was killed: commit its agents' work, fetch it, clean up, report.
    Recover(RecoverArgs),
    /// Print a JSON Schema: workflow files, report.json, event lines or findings.
    Schema(SchemaArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell.
    Completions(CompletionsArgs),
    /// Write a recipe (an orch workflow and the GitHub Actions workflow that runs it)
    /// into this repository.
    Init(InitArgs),
    /// List or clean up the run directories under orch's state directory.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Write the book's generated reference pages into DIR (the book's `src/`).
    #[command(name = "__docs-gen", hide = true)]
    DocsGen(DocsGenArgs),
    /// The tool host of one agent (started by orch itself, not by hand).
    #[command(name = "__tool-host", hide = true)]
    ToolHost(HostArgs),
    /// orch's MCP client alone: connect to the HTTP servers of a `.mcp.json`-shaped
    /// file, list their tools, make calls (what the MCP conformance suite drives).
    #[command(name = "__mcp-client", hide = true)]
    McpClient(McpClientArgs),
    /// Run commands in a sandbox by hand.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
}

/// Only `orch sandbox ...`: parsed without building the rest of the grammar, because
/// `orch sandbox run` start-up time counts. Same arguments as through [`Cli`].
#[derive(Debug, Parser)]
#[command(name = "orch sandbox", bin_name = "orch sandbox", about = "Run commands in a sandbox by hand.")]
pub struct SandboxCli {
    /// More logs on stderr (-v debug, -vv trace). `RUST_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: SandboxCommand,
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Run CMD under a sandbox policy and exit with its status (124 on timeout, 125 when
    /// the sandbox failed, 126 when CMD cannot run, 127 when it is not found).
    Run(SandboxRunArgs),
}

/// The sandbox policy flags shared by `orch exec` and `orch sandbox run`.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// The sandbox backend.
    #[arg(long, value_enum, default_value = "landlock")]
    pub backend: Backend,
    /// Network access.
    #[arg(long, value_enum, default_value = "none")]
    pub network: Network,
    /// An extra readable (and executable) path. Repeatable.
    #[arg(long = "read", value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// An extra writable path. Repeatable.
    #[arg(long = "write", value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// The container image (container backend).
    #[arg(long)]
    pub image: Option<String>,
}

impl SandboxArgs {
    /// These flags as a workflow agent's `sandbox:` (its paths must be UTF-8, as a
    /// workflow's are).
    pub fn agent_sandbox(&self) -> Result<orch_workflows::SandboxSpec, UsageError> {
        let text = |flag: &str, paths: &[PathBuf]| -> Result<Vec<String>, UsageError> {
            paths
                .iter()
                .map(|p| {
                    p.to_str().map(str::to_owned).ok_or_else(|| {
                        UsageError(format!("{flag} {}: the path is not UTF-8; rename it or link to it", p.display()))
                    })
                })
                .collect()
        };
        Ok(orch_workflows::SandboxSpec {
            backend: self.backend,
            network: self.network.into(),
            image: self.image.clone(),
            read: text("--read", &self.read)?,
            write: text("--write", &self.write)?,
        })
    }

    /// The typed sandbox settings these flags ask for.
    pub fn spec(&self) -> SandboxSpec {
        SandboxSpec {
            backend: self.backend,
            network: self.network,
            read: self.read.clone(),
            write: self.write.clone(),
            image: self.image.clone(),
            source: SettingSource::Flags,
        }
    }
}

#[derive(Debug, Args)]
pub struct SandboxRunArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Kill CMD and everything it started after this long: `90s`, `10m`, `1h`.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<std::time::Duration>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// Which model API to talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProviderKind {
    /// The Anthropic Messages API (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL).
    Anthropic,
    /// An OpenAI-compatible chat-completions API (OPENAI_API_KEY, OPENAI_BASE_URL).
    Openai,
    /// Deterministic turns from a script file (--script); runs offline.
    Scripted,
}

/// Model selection shared by every command that runs agents.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// The model API.
    #[arg(long, value_enum, env = "ORCH_PROVIDER", default_value = "anthropic")]
    pub provider: ProviderKind,
    /// The model name.
    #[arg(long, env = "ORCH_MODEL", default_value = "claude-sonnet-4-5")]
    pub model: String,
    /// A model to switch to when the main one stays overloaded.
    #[arg(long)]
    pub fallback_model: Option<String>,
    /// The turn script for `--provider scripted`.
    #[arg(long, env = "ORCH_SCRIPT")]
    pub script: Option<PathBuf>,
    /// A YAML or JSON price table (model name to {input, output, cache_write, cache_read}
    /// in USD per million tokens) that overrides the built-in prices.
    #[arg(long)]
    pub prices: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// What the agent should do; `-`, or none, reads it from stdin. With a prompt
    /// here and text piped in, the agent gets both (the prompt first), as `claude -p`.
    pub prompt: Option<String>,
    /// Accepted for `claude -p` scripts: orch exec always prints and exits.
    #[arg(short = 'p', long = "print")]
    pub print: bool,
    #[command(flatten)]
    pub model: ModelArgs,
    /// The agent id (selects its turns in a script).
    #[arg(long, default_value = "main")]
    pub agent_id: String,
    /// Read settings, hooks, `.mcp.json`, agent files, skills and commands from the
    /// checkout even when the checked-out commit is not the trusted ref (as `orch run
    /// --trust-repo-config`).
    #[arg(long)]
    pub trust_repo_config: bool,
    /// The trusted ref to read configuration from unless it is checked out (as `orch run
    /// --config-ref`).
    #[arg(long, value_name = "REF")]
    pub config_ref: Option<String>,
    /// Most model calls before the agent stops (default 40).
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Most tokens (input, cache and output) before the agent stops.
    #[arg(long)]
    pub max_tokens: Option<u64>,
    /// Most spend in US dollars before the agent stops.
    #[arg(long)]
    pub max_cost_usd: Option<f64>,
    /// Wall-clock limit, such as `90s`, `10m` or `1h`.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<std::time::Duration>,
    /// Any key of a workflow's `limits:`, as KEY=VALUE (repeatable), such as
    /// `--limit max_disk=1GiB`; the flags above win over it.
    #[arg(long = "limit", value_name = "KEY=VALUE", value_parser = parse_limit)]
    pub limits: Vec<(String, serde_json::Value)>,
    /// Stream orch's events as JSON lines on stdout (the final answer is in the last
    /// event), as `orch run --json` does.
    #[arg(long, conflicts_with = "output_format")]
    pub json: bool,
    /// What goes to stdout, in Claude Code's shapes: `text` (the answer), `json` (one
    /// result object with the answer, usage and cost) or `stream-json` (an init line,
    /// the messages, then the result).
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "text")]
    pub output_format: OutputFormat,
    /// Replaces the system prompt's own text (the project's instructions, skills and
    /// environment are still added).
    #[arg(long, value_name = "TEXT")]
    pub system_prompt: Option<String>,
    /// Text added at the end of the system prompt.
    #[arg(long, value_name = "TEXT")]
    pub append_system_prompt: Option<String>,
    /// MCP servers from a JSON file (or JSON text) with `mcpServers`, as `.mcp.json`
    /// writes them; repeatable. Their tools still need `--tools` or `--allowedTools`.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub mcp_config: Vec<String>,
    /// Permission rules that allow calls, such as `Bash(git diff:*)` or `Edit`
    /// (comma- or space-separated); the tools they name join the agent's tools.
    #[arg(long = "allowedTools", visible_alias = "allowed-tools", value_name = "RULES", num_args = 1..)]
    pub allowed_tools: Vec<String>,
    /// Permission rules that deny calls; a bare tool name takes the tool away.
    #[arg(long = "disallowedTools", visible_alias = "disallowed-tools", value_name = "RULES", num_args = 1..)]
    pub disallowed_tools: Vec<String>,
    /// The same as `--permission-mode bypassPermissions` (the sandbox still holds).
    #[arg(long, conflicts_with = "permission_mode")]
    pub dangerously_skip_permissions: bool,
    /// A JSON Schema file: the final answer must be JSON that matches it (the agent is
    /// asked again when it does not; `structured_output` in the JSON result).
    #[arg(long, value_name = "FILE")]
    pub output_schema: Option<PathBuf>,
    /// Allow write tools outside a git repository, or in the home or root directory.
    #[arg(long)]
    pub allow_outside_repo: bool,
    /// The tools the agent may use, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "Glob,Grep,LS,Read,TodoWrite", value_parser = parse_tool)]
    pub tools: Vec<String>,
    /// The agent's working directory (default: the current one).
    #[arg(short = 'C', long)]
    pub cwd: Option<PathBuf>,
    /// Leave the project's instruction files (AGENTS.md, CLAUDE.md) out of the prompt.
    #[arg(long)]
    pub no_instructions: bool,
    /// Save every model exchange into DIR (as a turn script), as `orch run --record`.
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Answer every model call from a directory written by --record: offline, no API key.
    #[arg(long, value_name = "DIR")]
    pub replay: Option<PathBuf>,
    /// Also write the agent's events, one JSON line each, to FILE as they happen.
    #[arg(long, value_name = "FILE")]
    pub transcript: Option<PathBuf>,
    #[command(flatten)]
    pub model_settings: ModelSettingsArgs,
    #[command(flatten)]
    pub permissions: PermissionArgs,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// How the model is called, as a workflow's `model_settings:` says it.
#[derive(Debug, Args)]
pub struct ModelSettingsArgs {
    /// Longest wait for the first byte of each answer (default 60s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub first_byte_timeout: Option<std::time::Duration>,
    /// Longest silence between two events of a streamed answer (default 60s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub idle_timeout: Option<std::time::Duration>,
    /// Time one request may spend in failed attempts and waits (default 5m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retry_budget: Option<std::time::Duration>,
    /// Most output tokens per answer (default: the model's).
    #[arg(long, value_name = "N")]
    pub max_output_tokens: Option<u32>,
    /// The context window to plan for (default: the model's).
    #[arg(long, value_name = "N")]
    pub context_window: Option<u64>,
    /// Extended thinking with this many tokens (at least 1024).
    #[arg(long, value_name = "N")]
    pub thinking_budget: Option<u32>,
}

impl ModelSettingsArgs {
    /// The settings as a workflow's `model_settings:` writes them.
    fn settings(&self) -> orch_workflows::ModelSettings {
        orch_workflows::ModelSettings {
            first_byte_timeout: self.first_byte_timeout.map(orch_workflows::Duration::from_std),
            idle_timeout: self.idle_timeout.map(orch_workflows::Duration::from_std),
            retry_budget: self.retry_budget.map(orch_workflows::Duration::from_std),
            max_output_tokens: self.max_output_tokens,
            context_window: self.context_window,
            thinking: self.thinking_budget.map(|budget_tokens| orch_workflows::Thinking { budget_tokens }),
        }
    }
}

/// Model selection for commands that run a workflow: as [`ModelArgs`], but the model
/// may also come from the workflow file.
#[derive(Debug, Clone, Args)]
pub struct WorkflowModelArgs {
    /// The model API.
    #[arg(long, value_enum, env = "ORCH_PROVIDER", default_value = "anthropic")]
    pub provider: ProviderKind,
    /// The model of every agent that names none (replaces the workflow's `model:`).
    #[arg(long, env = "ORCH_MODEL")]
    pub model: Option<String>,
    /// A model to switch to when the main one stays overloaded.
    #[arg(long)]
    pub fallback_model: Option<String>,
    /// The turn script for `--provider scripted`.
    #[arg(long, env = "ORCH_SCRIPT")]
    pub script: Option<PathBuf>,
    /// A YAML or JSON price table that overrides the built-in prices.
    #[arg(long)]
    pub prices: Option<PathBuf>,
}

impl WorkflowModelArgs {
    fn spec(self) -> WorkflowModelSpec {
        WorkflowModelSpec {
            provider: self.provider.into(),
            model: self.model,
            fallback_model: self.fallback_model,
            script: self.script,
            prices: self.prices,
        }
    }
}

impl From<ProviderKind> for Provider {
    fn from(kind: ProviderKind) -> Provider {
        match kind {
            ProviderKind::Anthropic => Provider::Anthropic,
            ProviderKind::Openai => Provider::Openai,
            ProviderKind::Scripted => Provider::Scripted,
        }
    }
}

impl ModelArgs {
    fn spec(self) -> ModelSpec {
        // Claude Code's aliases (`--model sonnet`) name the models they stand for.
        let alias = |m: String| orch_types::model::model_id(&m).unwrap_or(m);
        ModelSpec {
            provider: self.provider.into(),
            model: alias(self.model),
            fallback_model: self.fallback_model.map(alias),
            script: self.script,
            prices: self.prices,
        }
    }
}

/// `orch exec --output-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
    StreamJson,
}

/// Most bytes of a prompt read from stdin.
const MAX_STDIN_PROMPT: u64 = 1 << 20;

impl ExecArgs {
    /// The typed options of `orch exec`: reads the prompt from stdin for `-` and the
    /// output schema file.
    pub fn options(self, reporter: Arc<dyn Reporter>) -> Result<ExecOptions, UsageError> {
        use std::io::IsTerminal as _;
        let prompt = match self.prompt.as_deref() {
            None | Some("-") => {
                if self.prompt.is_none() && std::io::stdin().is_terminal() {
                    return Err(UsageError(
                        "no prompt: give it as an argument (`orch exec \"list the files\"`) or pipe it in".into(),
                    ));
                }
                let text = read_stdin(None)?.unwrap_or_default();
                if text.trim().is_empty() {
                    return Err(UsageError(
                        "the prompt on stdin is empty; pipe the task in, e.g. `echo 'list the files' | orch exec`"
                            .into(),
                    ));
                }
                text
            }
            // As `claude -p "explain" < log`: the prompt, a line break, then the input.
            Some(prompt) => match piped_stdin() {
                true => match read_stdin(Some(STDIN_WAIT))? {
                    Some(input) if !input.is_empty() => format!("{prompt}\n{input}"),
                    _ => prompt.to_string(),
                },
                false => prompt.to_string(),
            },
        };
        let output_schema = match &self.output_schema {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| UsageError(format!("cannot read --output-schema {}: {e}", path.display())))?;
                Some(
                    serde_json::from_str(&text)
                        .map_err(|e| UsageError(format!("--output-schema {} is not JSON: {e}", path.display())))?,
                )
            }
            None => None,
        };
        let output_format = match (self.json, self.output_format) {
            (true, _) => ExecOutput::Events,
            (false, OutputFormat::StreamJson) => ExecOutput::StreamJson,
            (false, OutputFormat::Json) => ExecOutput::Json,
            (false, OutputFormat::Text) => ExecOutput::Text,
        };
        let ci = crate::progress::in_ci();
        // The agent a one-agent workflow with these settings would plan.
        let mut agent = orch_workflows::AgentSpec::single(&self.agent_id);
        agent.tools = self.tools;
        // Through the workflow key's own parser, so every `limits:` key is a flag too.
        let mut limits: orch_workflows::Limits =
            serde_json::from_value(serde_json::Value::Object(self.limits.into_iter().collect()))
                .map_err(|e| UsageError(format!("--limit: {e}")))?;
        limits.max_turns = self.max_turns.or(limits.max_turns).or(Some(DEFAULT_EXEC_TURNS));
        limits.max_tokens = self.max_tokens.or(limits.max_tokens);
        limits.max_cost_usd = self.max_cost_usd.or(limits.max_cost_usd);
        limits.timeout = self.timeout.map(orch_workflows::Duration::from_std).or(limits.timeout);
        agent.limits = limits;
        agent.model_settings = self.model_settings.settings();
        let PermissionArgs { permission_mode, mut allow, mut deny, ask } = self.permissions;
        // Claude Code's lists: each rule allows (or denies) its calls; a tool a rule
        // allows joins the agent's tools, and a bare name denied takes the tool away.
        for rule in self.allowed_tools.iter().flat_map(|v| split_rules(v)) {
            let tool = parse_tool(rule_tool(&rule)).map_err(|e| UsageError(format!("--allowedTools: {e}")))?;
            if !agent.tools.contains(&tool) {
                agent.tools.push(tool);
            }
            allow.push(rule);
        }
        for rule in self.disallowed_tools.iter().flat_map(|v| split_rules(v)) {
            let tool = parse_tool(rule_tool(&rule)).map_err(|e| UsageError(format!("--disallowedTools: {e}")))?;
            if tool == rule {
                agent.tools.retain(|t| *t != tool);
            }
            deny.push(rule);
        }
        let permission_mode = match self.dangerously_skip_permissions {
            true => Some(orch_workflows::PermissionMode::BypassPermissions),
            false => permission_mode,
        };
        agent.permissions = orch_workflows::PermissionsSpec { mode: permission_mode, allow, deny, ask };
        agent.sandbox = self.sandbox.agent_sandbox()?;
        agent.instructions = !self.no_instructions;
        Ok(ExecOptions {
            prompt,
            trust_repo_config: self.trust_repo_config,
            config_ref: self.config_ref,
            output_format,
            output_schema,
            allow_outside_repo: self.allow_outside_repo,
            attended: !ci && std::io::stderr().is_terminal(),
            reporter,
            model: self.model.spec(),
            agent,
            cwd: self.cwd,
            record: self.record,
            replay: self.replay,
            transcript: self.transcript,
            system_prompt: self.system_prompt,
            append_system_prompt: self.append_system_prompt,
            mcp_configs: self.mcp_config,
        })
    }
}

/// How long a prompt given as an argument waits for piped input to start, as `claude -p`.
const STDIN_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether stdin is a pipe or a file (not a terminal, not `/dev/null` or a socket).
fn piped_stdin() -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    let Ok(meta) = std::fs::metadata("/dev/stdin") else { return false };
    meta.file_type().is_fifo() || meta.is_file()
}

/// All of stdin (at most [`MAX_STDIN_PROMPT`] bytes); with `wait`, `None` when nothing
/// arrives within it (the input is then left unread).
fn read_stdin(wait: Option<std::time::Duration>) -> Result<Option<String>, UsageError> {
    use std::io::Read as _;
    if let Some(wait) = wait {
        use std::os::fd::AsFd as _;
        let stdin = std::io::stdin();
        let mut fds = [nix::poll::PollFd::new(stdin.as_fd(), nix::poll::PollFlags::POLLIN)];
        let timeout = nix::poll::PollTimeout::try_from(wait).unwrap_or(nix::poll::PollTimeout::MAX);
        match nix::poll::poll(&mut fds, timeout) {
            Ok(0) => {
                tracing::warn!("no input arrived on stdin within {}s; going on with the prompt alone", wait.as_secs());
                return Ok(None);
            }
            Ok(_) => {}
            Err(e) => return Err(UsageError(format!("cannot wait for stdin: {e}"))),
        }
    }
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_STDIN_PROMPT + 1)
        .read_to_string(&mut text)
        .map_err(|e| UsageError(format!("cannot read the prompt from stdin: {e}")))?;
    if text.len() as u64 > MAX_STDIN_PROMPT {
        return Err(UsageError("the input on stdin is over 1 MiB; shorten it".into()));
    }
    Ok(Some(text))
}

/// The rules of one `--allowedTools` value: split at commas and spaces outside
/// parentheses, as Claude Code reads the list.
fn split_rules(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in value.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' | ' ' | '\t' | '\n' if depth == 0 => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The tool a rule is about: `Bash` of `Bash(git diff:*)`.
fn rule_tool(rule: &str) -> &str {
    rule.split_once('(').map_or(rule, |(tool, _)| tool)
}

impl RunArgs {
    /// The typed options of `orch run`, reporting progress to `reporter`.
    pub fn options(self, reporter: Arc<dyn Reporter>) -> RunOptions {
        RunOptions {
            workflow: self.workflow,
            inputs: self.inputs,
            models: self.models.spec(),
            concurrency: self.concurrency,
            out: self.out,
            json: self.json,
            keep_worktrees: self.keep_worktrees,
            trust_repo_config: self.trust_repo_config,
            config_ref: self.config_ref,
            repo: self.repo,
            base: self.base,
            run_id: self.run_id,
            author: self.author,
            only: self.only,
            shard: self.shard,
            from: self.from,
            resume: self.resume,
            max_fail: self.max_fail,
            junit: self.junit,
            record: self.record,
            replay: self.replay,
            publish: self.publish,
            sandbox: orch_run::options::SandboxOverride {
                backend: self.backend,
                network: self.network,
                image: self.image,
            },
            prune_branches: self.prune_branches,
            reporter,
            diff_base: self.diff_base,
        }
    }
}

impl MergeArgs {
    /// The typed options of `orch merge`, reporting progress to `reporter`.
    pub fn options(self, reporter: Arc<dyn Reporter>) -> MergeOptions {
        MergeOptions {
            dirs: self.dirs,
            out: self.out,
            workflow: self.workflow,
            inputs: self.inputs,
            models: self.models.spec(),
            json: self.json,
            junit: self.junit,
            publish: self.publish,
            reporter,
            trust_repo_config: self.trust_repo_config,
            config_ref: self.config_ref,
            repo: self.repo,
        }
    }
}

/// Arguments of `orch __mcp-client`.
#[derive(Debug, Args)]
pub struct McpClientArgs {
    /// A file of `.mcp.json`'s shape (`mcpServers`) declaring HTTP servers.
    #[arg(long)]
    pub config: PathBuf,
    /// A call to make after connecting: `<server>/<tool>` or `<server>/<tool>=<JSON>`.
    /// Repeatable.
    #[arg(long = "call", value_name = "SERVER/TOOL[=JSON]")]
    pub calls: Vec<String>,
}

/// Arguments of the hidden tool-host mode (`orch_run::host::SUBCOMMAND`).
#[derive(Debug, Args)]
pub struct HostArgs {
    /// The agent's working directory.
    #[arg(long)]
    pub cwd: PathBuf,
    /// The tools this host serves, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub tools: Vec<String>,
    /// The sandbox policy, as JSON (`orch_sandbox::policy::Policy`).
    #[arg(long)]
    pub policy: String,
    /// The stdio MCP servers this host starts on request, as JSON (name -> server).
    #[arg(long)]
    pub mcp: Option<String>,
}

impl HostArgs {
    /// The typed options of the tool host.
    pub fn options(self) -> HostOptions {
        HostOptions { cwd: self.cwd, tools: self.tools, policy: self.policy, mcp: self.mcp }
    }
}

/// `orch run WORKFLOW`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The workflow file.
    pub workflow: PathBuf,
    /// A workflow input, `name=value` (the value is parsed as YAML: `n=3` is a number).
    /// Repeatable.
    #[arg(long = "input", value_name = "K=V", value_parser = parse_input)]
    pub inputs: Vec<(String, serde_json::Value)>,
    #[command(flatten)]
    pub models: WorkflowModelArgs,
    /// Most agents running at once, 1 to 1024 (replaces the workflow's `concurrency:`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: Option<u32>,
    /// The run directory (default: $ORCH_RUNS_DIR/<run-id>, else
    /// $XDG_STATE_HOME/orch/runs/<run-id>, else ~/.local/state/orch/runs/<run-id>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Stream every agent's events as JSON lines on stdout, then the report.
    #[arg(long)]
    pub json: bool,
    /// Keep every agent's worktree (failed agents' worktrees are always kept).
    #[arg(long)]
    pub keep_worktrees: bool,
    /// Read the workflow, settings, hooks, `.mcp.json`, agent files, skills and commands
    /// from the checkout even when the checked-out commit is not the trusted ref (by
    /// default they come from that ref then, and `backend: none` and `network: full`
    /// are refused).
    #[arg(long)]
    pub trust_repo_config: bool,
    /// The trusted ref (a branch, tag or commit of the repository) instead of the base
    /// or default branch: configuration comes from it unless it is checked out.
    #[arg(long, value_name = "REF")]
    pub config_ref: Option<String>,
    /// The git repository the agents work on (default: the one containing the current
    /// directory).
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
    /// The commit the agents start from: a branch, tag, sha or `HEAD`; `WORKTREE` for the
    /// checkout's working tree as it is, uncommitted changes included.
    #[arg(long, default_value = "HEAD", value_name = "REF")]
    pub base: String,
    /// The run id, used in branch names `orch/<run-id>/<agent>` (default: the time and
    /// a random suffix).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Author of the commits orch makes, `Name <email>`.
    #[arg(long, env = "ORCH_AUTHOR", value_parser = parse_author)]
    pub author: Option<(String, String)>,
    /// Run only the agents whose id or key matches this glob (`fix/*`), and what they
    /// need. Repeatable.
    #[arg(long, value_name = "PATTERN")]
    pub only: Vec<String>,
    /// Run only this share of the agents, `K/N` (by a stable hash of the agent id).
    #[arg(long, value_name = "K/N")]
    pub shard: Option<orch_run::run::Shard>,
    /// Take the results of agents that succeeded in an earlier run directory instead of
    /// running them (upstream agents of a shard, the source of a fan-out).
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    pub from: Option<PathBuf>,
    /// Rerun only the agents of an earlier run directory that did not succeed; the
    /// others' results are kept in the new report.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Start no new agent after N agents failed (running ones finish).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_fail: Option<u32>,
    /// Also write a JUnit XML report: one test case per agent.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Save every model exchange, per agent, into DIR (as a turn script).
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Answer every model call from a directory written by --record: offline, no API key.
    #[arg(long, value_name = "DIR")]
    pub replay: Option<PathBuf>,
    /// Publish to GitHub what the workflow's `publish:` declares: `on`, `dry-run` (write
    /// the requests to publish.json) or `off`. Default: on under GitHub Actions with a
    /// token, dry-run otherwise.
    #[arg(long, value_name = "MODE", value_parser = parse_publish)]
    pub publish: Option<orch_run::publish::PublishMode>,
    /// Run every agent and setup under this sandbox backend, whatever the workflow says
    /// (in a pull-request run, `none` is still refused without --trust-repo-config).
    #[arg(long, value_enum, value_name = "BACKEND")]
    pub backend: Option<Backend>,
    /// Give every agent and setup this network access, whatever the workflow says (in a
    /// pull-request run, `full` is still refused without --trust-repo-config).
    #[arg(long, value_enum, value_name = "NETWORK")]
    pub network: Option<Network>,
    /// The container image for every agent and setup (container backend).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Give templates `pr.changed_files` and `pr.diff`: the changes since REV, as
    /// `git diff --name-only REV...HEAD` lists them (in a pull-request event, the base
    /// comes from the event without this flag).
    #[arg(long, value_name = "REV")]
    pub diff_base: Option<String>,
    /// Delete the agents' branches the integration branch holds (`integrate: merge` or
    /// `squash`; as `integrate.prune: true`): only those are left out of the repository.
    #[arg(long)]
    pub prune_branches: bool,
}

/// `orch merge DIR...`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The run directories to join, in order.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Where the merged report goes (default as for `orch run`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The workflow the runs came from: agent order, and the synthesis prompt and model.
    #[arg(long, value_name = "FILE")]
    pub workflow: Option<PathBuf>,
    /// A workflow input, `name=value` (with --workflow). Repeatable.
    #[arg(long = "input", value_name = "K=V", value_parser = parse_input)]
    pub inputs: Vec<(String, serde_json::Value)>,
    #[command(flatten)]
    pub models: WorkflowModelArgs,
    /// Stream synthesis events as JSON lines on stdout, then the report.
    #[arg(long)]
    pub json: bool,
    /// Also write a JUnit XML report.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Read --workflow from the checked-out file even when the checked-out commit is not
    /// the trusted ref (by default it comes from that ref then, as for `orch run`).
    #[arg(long)]
    pub trust_repo_config: bool,
    /// The trusted ref to read --workflow from unless it is checked out (a branch, tag
    /// or commit of the repository), as for `orch run`.
    #[arg(long, value_name = "REF")]
    pub config_ref: Option<String>,
    /// Publish the merged result as the workflow's `publish:` declares (needs
    /// --workflow): `on`, `dry-run` or `off`. Default as for `orch run`.
    #[arg(long, value_name = "MODE", value_parser = parse_publish)]
    pub publish: Option<orch_run::publish::PublishMode>,
    /// The repository that gets the integration branch built from the shards' patches
    /// (with a --workflow whose `integrate:` is `merge` or `squash`; default: the
    /// current directory).
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
}

/// `orch recover DIR`: what `orch run --resume DIR` also does first when DIR's run did
/// not finish.
#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// The run directory of the killed run.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Author of the commits, `Name <email>` (default: orch).
    #[arg(long, env = "ORCH_AUTHOR", value_parser = parse_author)]
    pub author: Option<(String, String)>,
}

/// `orch schema NAME`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Which schema.
    #[arg(value_enum)]
    pub name: SchemaName,
}

/// The schemas `orch schema` prints (see `orch_run::schemas`).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemaName {
    /// Workflow files (`orch run FILE`).
    Workflow,
    /// report.json of a run directory.
    Report,
    /// One line of `--json` output.
    Events,
    /// One finding of an agent's structured output (`publish:`).
    Finding,
}

impl SchemaName {
    pub fn schema(self) -> orch_run::schemas::Schema {
        use orch_run::schemas::Schema;
        match self {
            SchemaName::Workflow => Schema::Workflow,
            SchemaName::Report => Schema::Report,
            SchemaName::Events => Schema::Events,
            SchemaName::Finding => Schema::Finding,
        }
    }
}

/// `orch completions SHELL`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `orch __docs-gen DIR`.
#[derive(Debug, Args)]
pub struct DocsGenArgs {
    /// The book's source directory (`docs/src`).
    pub dir: PathBuf,
}

/// `orch init [RECIPE]`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The recipe (`orch init --list` shows them).
    #[arg(required_unless_present = "list")]
    pub recipe: Option<String>,
    /// List the recipes, one per line, and write nothing.
    #[arg(long, conflicts_with_all = ["recipe", "force"])]
    pub list: bool,
    /// Overwrite files that already exist.
    #[arg(long)]
    pub force: bool,
}

/// `orch runs ...`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List the runs: id, start time, status and size on disk.
    List(RunsListArgs),
    /// Remove the runs older than a duration (never one that is still going).
    Clean(RunsCleanArgs),
}

/// `orch runs list`.
#[derive(Debug, Args)]
pub struct RunsListArgs {
    /// Print one JSON array on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `orch runs clean`.
#[derive(Debug, Args)]
pub struct RunsCleanArgs {
    /// Remove the runs that started longer ago than this, such as `12h` or `7d`.
    #[arg(long, value_name = "DURATION", value_parser = parse_age)]
    pub older_than: std::time::Duration,
    /// Say what would be removed, and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `orch validate WORKFLOW`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The workflow file.
    pub workflow: PathBuf,
    /// Read the workflow and repository configuration from the checkout even when the
    /// checked-out commit is not the trusted ref (as `orch run --trust-repo-config`).
    #[arg(long)]
    pub trust_repo_config: bool,
    /// The trusted ref to read configuration from (as `orch run --config-ref`).
    #[arg(long, value_name = "REF")]
    pub config_ref: Option<String>,
}

/// `orch plan WORKFLOW`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The workflow file.
    pub workflow: PathBuf,
    /// A workflow input, `name=value`. Repeatable.
    #[arg(long = "input", value_name = "K=V", value_parser = parse_input)]
    pub inputs: Vec<(String, serde_json::Value)>,
    /// How to print the plan.
    #[arg(long, value_enum, default_value = "text")]
    pub format: PlanFormat,
    /// Split the agents into N shards (`orch run --shard K/N`); with
    /// `--format github-matrix`, one matrix entry per shard.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub shards: Option<u32>,
    /// Fill in `pr.changed_files` and `pr.diff` with the changes since REV, as `orch run
    /// --diff-base` does.
    #[arg(long, value_name = "REV")]
    pub diff_base: Option<String>,
    /// Read the workflow and repository configuration from the checkout even when the
    /// checked-out commit is not the trusted ref (as `orch run --trust-repo-config`).
    #[arg(long)]
    pub trust_repo_config: bool,
    /// The trusted ref to read configuration from (as `orch run --config-ref`).
    #[arg(long, value_name = "REF")]
    pub config_ref: Option<String>,
}

/// `orch plan --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanFormat {
    /// For people.
    Text,
    /// The plan as one JSON document.
    Json,
    /// A GitHub Actions job matrix, `{"include": [{"shard": "1/N", ...}]}` (needs
    /// `--shards N`).
    GithubMatrix,
}

/// Parses `name=value`; the value is YAML (`3` is a number, `[a, b]` a list), and text
/// that is not valid YAML stays text.
fn parse_input(text: &str) -> Result<(String, serde_json::Value), String> {
    let (name, value) =
        text.split_once('=').ok_or_else(|| format!("`{text}` is not an input; write it as name=value"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{text}` has no input name; write it as name=value"));
    }
    // The positioned loader, with its caps: an alias bomb is not expanded (it stays text).
    let value = orch_workflows::yaml::load_value("--input", value.as_bytes())
        .ok()
        .filter(|v| !v.is_null() || value.trim() == "null")
        // YAML folds the lines of a plain scalar into one; text of several lines (`$(git
        // ls-files)`) stays as written, so a fan-out gets one item per line.
        .filter(|v| !(v.is_string() && value.contains('\n')))
        .unwrap_or_else(|| serde_json::Value::String(value.to_string()));
    Ok((name.to_string(), value))
}

/// Parses `Name <email>`.
fn parse_author(text: &str) -> Result<(String, String), String> {
    let bad = || format!("`{text}` is not an author; write it as `Name <email>`");
    let (name, rest) = text.split_once('<').ok_or_else(bad)?;
    let email = rest.strip_suffix('>').ok_or_else(bad)?.trim();
    let name = name.trim();
    if name.is_empty() || email.is_empty() {
        return Err(bad());
    }
    Ok((name.to_string(), email.to_string()))
}

/// Permission rules and mode.
#[derive(Debug, Args)]
pub struct PermissionArgs {
    /// default, acceptEdits, plan (read-only tools only), dontAsk or bypassPermissions;
    /// unset, tools run unless a rule says otherwise and allow-lists hold.
    #[arg(long, value_parser = parse_mode)]
    pub permission_mode: Option<orch_agents::permissions::Mode>,
    /// A rule that allows calls, such as `Bash(git diff *)`. Repeatable.
    #[arg(long = "allow", value_name = "RULE")]
    pub allow: Vec<String>,
    /// A rule that denies calls, such as `Read(~/.ssh/**)`. Repeatable; deny wins.
    #[arg(long = "deny", value_name = "RULE")]
    pub deny: Vec<String>,
    /// A rule that asks for approval; in an unattended run that means deny. Repeatable.
    #[arg(long = "ask", value_name = "RULE")]
    pub ask: Vec<String>,
}

fn parse_mode(text: &str) -> Result<orch_agents::permissions::Mode, String> {
    text.parse().map_err(|_| {
        format!("unknown permission mode `{text}`; use default, acceptEdits, plan, dontAsk or bypassPermissions")
    })
}

/// Parses a duration in orch's one grammar (`500ms`, `90s`, `1.5h`, `1h30m`, or a bare
/// number of seconds) and keeps it between zero and a week.
/// A tool name as a workflow's `tools:` takes it: a core tool or `mcp__<server>__<tool>`;
/// an unknown one gets the closest name.
pub fn parse_tool(text: &str) -> Result<String, String> {
    if orch_workflows::is_known_tool(text) {
        return Ok(text.to_string());
    }
    let closest = orch_workflows::KNOWN_TOOLS
        .iter()
        .map(|name| (strsim::jaro_winkler(&text.to_lowercase(), &name.to_lowercase()), *name))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let hint = match closest {
        Some((_, name)) => format!("did you mean `{name}`? "),
        None => String::new(),
    };
    Err(format!(
        "unknown tool `{text}`; {hint}the tools are {} (or mcp__<server>__<tool>)",
        orch_workflows::KNOWN_TOOLS.join(", ")
    ))
}

/// The turn limit of `orch exec` when no flag sets one.
const DEFAULT_EXEC_TURNS: u32 = 40;

/// One `--limit KEY=VALUE`: the value as JSON when it reads as JSON (`5`, `2.5`), else
/// as text (`1GiB`, `90s`), for the `limits:` parser to check.
fn parse_limit(text: &str) -> Result<(String, serde_json::Value), String> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(format!("`{text}` is not KEY=VALUE; write it like max_disk=1GiB"));
    };
    let value = value.trim();
    let value = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
    Ok((key.trim().to_string(), value))
}

pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let duration = orch_types::Duration::parse(text).map_err(|e| format!("{e}; write it like 90s, 10m or 1.5h"))?;
    let duration = duration.as_std();
    if duration.is_zero() || duration > std::time::Duration::from_secs(7 * 24 * 3600) {
        return Err(format!("`{}` is out of range; give a positive duration of at most a week", text.trim()));
    }
    Ok(duration)
}

/// Parses an age in orch's duration grammar (`12h`, `7d`, `1d12h`); any positive length.
fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    let duration = orch_types::Duration::parse(text).map_err(|e| format!("{e}; write it like 12h, 7d or 30d"))?;
    if duration.is_zero() {
        return Err(format!("`{}` is zero; give a positive age such as 12h or 7d", text.trim()));
    }
    Ok(duration.as_std())
}

fn parse_publish(s: &str) -> Result<orch_run::publish::PublishMode, String> {
    orch_run::publish::PublishMode::parse(s)
        .ok_or_else(|| format!("`{s}` is not a publish mode: use on, dry-run or off"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Nine levels of nine aliases each: 9^9 copies if expanded.
    fn alias_bomb() -> String {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = format!("*a{}", i - 1);
            text.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 9].join(", ")));
        }
        text
    }

    #[test]
    fn inputs_are_yaml_values() {
        assert_eq!(parse_input("n=3"), Ok(("n".into(), serde_json::json!(3))));
        assert_eq!(parse_input("xs=[a, b]"), Ok(("xs".into(), serde_json::json!(["a", "b"]))));
        assert_eq!(parse_input("s=a: b: c"), Ok(("s".into(), serde_json::json!("a: b: c"))));
        assert_eq!(parse_input("e="), Ok(("e".into(), serde_json::json!(""))));
        assert_eq!(parse_input("b=yes"), Ok(("b".into(), serde_json::json!("yes"))));
        let bomb = alias_bomb();
        let (_, value) = parse_input(&format!("x={bomb}")).unwrap();
        assert_eq!(value, serde_json::json!(bomb), "an alias bomb is refused as YAML and kept as text");
        assert!(parse_input("novalue").is_err());
        assert!(parse_input("=x").is_err());
    }

    #[test]
    fn authors() {
        assert_eq!(parse_author("A B <a@b>"), Ok(("A B".into(), "a@b".into())));
        assert!(parse_author("nobody").is_err());
        assert!(parse_author("<a@b>").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("10 parsecs").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
