//! `orch-run`: the coordinator of orch as a library. It takes typed options (see
//! [`options`]) from the binary and runs workflows (`run`), ad-hoc agents (`exec`) and
//! the tool host; it knows nothing of the command-line syntax or of terminals.

pub mod agent;
pub mod agent_prompt;
pub mod changes;
pub mod clock;
pub mod error;
pub mod exec;
mod exec_format;
pub mod exit;
pub mod fail_point;
pub mod fence;
pub mod git;
pub mod hooks_config;
pub mod host;
pub mod masks;
pub mod mcp;
pub mod mcp_env;
pub mod mcp_oauth;
pub mod mcp_oauth_http;
pub mod mcp_oauth_jwt;
pub mod mcp_probe;
pub mod notice;
pub mod options;
pub mod provider;
pub mod proxy;
pub mod publish;
pub mod reap;
pub mod record;
pub mod repo_config;
pub mod run;
pub mod run_event;
pub mod runs;
pub mod sandbox;
pub mod schemas;
pub mod secrets;
pub mod session;
pub mod settings_permissions;
pub mod signals;
pub mod workflow;
pub mod workflow_trust;
pub mod zygote;

#[cfg(test)]
mod tidy;
