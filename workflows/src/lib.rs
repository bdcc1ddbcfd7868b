//! orch-workflows: the workflow schema, loading with source positions, validation,
//! templating and planning (the DAG of agents and their fan-out).
//!
//! Invariant: this crate knows nothing of processes, the network or git.
//!
//! Status: the crate is laid out in the workspace; the workflow format arrives with the
//! coordinator issue. Nothing in orch depends on it yet.
