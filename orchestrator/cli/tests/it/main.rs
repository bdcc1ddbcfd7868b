//! The one integration-test binary of the `orch` binary crate: suites that drive the
//! real `orch` executable (they need `CARGO_BIN_EXE_orch`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod ci;
mod cli_output;
mod containment;
mod descriptors;
mod examples;
mod exec;
mod exec_session;
mod exec_skills;
mod github_workflows;
mod hooks;
mod hooks_fail_closed;
mod instructions;
mod masking;
mod mcp;
mod mcp_conformance;
mod mcp_failures;
mod mcp_npm;
mod memory;
mod network;
mod permission_settings;
mod pipelines;
mod publish;
mod reap;
mod recipes;
mod reliability;
mod repo_data;
mod rough_edges;
mod run;
mod sandbox_run;
mod sarif_validator;
mod signals;
mod skills;
mod subagents;
mod subreaper;
mod support;
mod synthesis_tree;
mod trust;
mod web_fetch;
mod zygote;
