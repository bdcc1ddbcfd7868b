//! The integration tests of orch-workflows, in one binary: the public API, every
//! diagnostic (data-driven from `tests/invalid/`), plans (from `tests/valid/`), bounded
//! input, a proptest over the loader, and the validation time of 100,000 agents.
//!
//! A counting allocator tracks each thread's peak heap use, so a test can assert that
//! hostile input stays within a memory bound (see [`alloc::peak_during`]).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::result_large_err)]

mod alloc;
mod api;
mod bounded;
mod diagnostics;
mod fuzz;
mod model_settings;
mod plans;
mod scale;
mod schema_files;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;
