//! The test kit's cross-crate suites, as one test binary (one link instead of one per
//! suite): the query loop against the mock model server, fault injection, output-limit
//! recovery, the context pipeline, hooks, scheduling, sub-agents and the pipeline.

mod action;
mod command_hooks;
mod common;
mod context;
mod faults;
mod pipeline;
mod query_loop;
mod recovery;
mod scheduling;
mod subagents;
