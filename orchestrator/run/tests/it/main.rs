//! The one integration-test binary of `orch-run`: its public API driven as the binary
//! drives it, with typed options and no command line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod sandbox;
