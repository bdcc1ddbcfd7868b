#!/usr/bin/env bash
# Publishing a 30-comment review (BENCHMARKS.md, "Publishing").
#
#   bash tests/bench/publish.sh                  # 10 runs with publishing off, 10 on
#   RUNS=20 INLINE=30 OFF_DIFF=6 bash tests/bench/publish.sh
#
# The same review workflow runs through the release `orch` binary with the scripted
# provider, with `--publish off` and `--publish on`, interleaved, each run against a
# fresh in-process fake GitHub server holding the pull request: INLINE findings on the
# diff (inline comments, with suggestions) and OFF_DIFF findings outside it (listed in
# the review's body). Prints a Markdown table: the medians, their difference, the span
# of the step's HTTP requests and their number (see the doc comment of
# tests/src/bin/bench_publish.rs). Exits non-zero when publishing adds 1 s or more.
#
# Needs cargo and git. ORCH_BIN / BENCH_PUBLISH_BIN: prebuilt binaries (skip the build).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
if [[ -z ${ORCH_BIN:-} || -z ${BENCH_PUBLISH_BIN:-} ]]; then
    echo "publish.sh: building orch and bench-publish (release)" >&2
    (cd "$root" && cargo build --release --quiet -p orch -p orch-testkit --bin orch --bin bench-publish)
fi
orch=$(realpath "${ORCH_BIN:-$target/release/orch}")
bench=$(realpath "${BENCH_PUBLISH_BIN:-$target/release/bench-publish}")
echo "publish.sh: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$bench" --orch "$orch" --runs "${RUNS:-10}" --inline "${INLINE:-30}" --off-diff "${OFF_DIFF:-6}"
echo "publish.sh: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
