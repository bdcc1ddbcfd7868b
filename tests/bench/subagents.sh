#!/usr/bin/env bash
# Nested sub-agents (BENCHMARKS.md, "Nested sub-agents").
#
#   bash tests/bench/subagents.sh                      # 50 sub-agents x 5 tool turns, 20 ms, 5 runs
#   FANOUT=50 TOOL_TURNS=5 LATENCY_MS=20 RUNS=5 bash tests/bench/subagents.sh
#
# One root agent starts FANOUT sub-agents with one answer of `Agent` calls; each makes
# TOOL_TURNS turns that call the real LS tool, then answers; the in-process mock model
# server waits LATENCY_MS before every response. Prints a Markdown table: model
# requests, the most sub-agents at once, the median wall time against the ideal (the
# model's latency alone, in waves of 10), and the peak RSS of the process (see the doc
# comment of tests/src/bin/bench_subagents.rs for the details).
#
# Needs cargo.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
echo "subagents.sh: building bench-subagents (release)" >&2
(cd "$root" && cargo build --release --quiet -p orch-testkit --bin bench-subagents)
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
"$target/release/bench-subagents" \
    --fanout "${FANOUT:-50}" --tool-turns "${TOOL_TURNS:-5}" --latency-ms "${LATENCY_MS:-20}" --runs "${RUNS:-5}"
