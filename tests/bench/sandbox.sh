#!/usr/bin/env bash
# Sandbox per-command overhead (BENCHMARKS.md, "Sandbox per-command overhead"): how long
# `/bin/true` takes under each way of sandboxing it, side by side in one run.
#
#   bash tests/bench/sandbox.sh             # builds orch (release) first
#   RUNS=50 bash tests/bench/sandbox.sh
#   ORCH=/path/to/other/orch bash tests/bench/sandbox.sh   # the same bench with another build of orch
#
# Whole processes, with hyperfine (-N, no shell; warm-up runs first): /bin/true bare,
# and `sh -c true` and `bash -c true` bare (what a `Bash` call runs: the floor under the
# in-host rows); bwrap; Anthropic's srt (npm @anthropic-ai/sandbox-runtime, installed once under
# $SRT_PREFIX); `docker run --rm --network none`; `docker exec` into a running
# container; `orch sandbox run` with the landlock and the container backend. Then, inside
# a running tool host (the orch binary's `__tool-host`, as agents use it), `Bash` calls of
# `true` over the host protocol, and the tool host's start-up, per backend:
# `cargo bench -p orch-sandbox --bench tool_host` (sandbox/benches/tool_host.rs).
#
# Needs hyperfine and bwrap (`apt-get install -y hyperfine bubblewrap`), the Docker engine
# and the image orch-test:busybox (`.ci/docker.sh`), npm for srt (plus rg and socat,
# which srt needs). A tool that is missing or fails is reported and skipped.
# Environment: RUNS (30 per command; docker/srt/container rows use RUNS_SLOW, 10),
# SRT_PREFIX (/tmp/srt), IMAGE (orch-test:busybox), ORCH_BENCH_CALLS, ORCH_BENCH_STARTS.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs=${RUNS:-30}
runs_slow=${RUNS_SLOW:-10}
image=${IMAGE:-orch-test:busybox}
srt_prefix=${SRT_PREFIX:-/tmp/srt}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-sandbox.XXXXXX")
container=
cleanup() {
    [ -n "$container" ] && docker rm -f "$container" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
say() { echo "sandbox.sh: $*" >&2; }

command -v hyperfine >/dev/null || { say "hyperfine is missing: apt-get install -y hyperfine"; exit 1; }
cd "$root"
cargo build --release -q -p orch
orch=${ORCH:-$root/target/release/orch}

echo "machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), \
$(uname -sr), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), uid $(id -u)"
echo "docker: $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo none)"
# Other work on the machine skews small numbers: say how busy it was, before and after.
load() { echo "load: $(cut -d' ' -f1-3 /proc/loadavg), $(pgrep -c -x rustc || true) rustc, $(pgrep -c -f clippy-driver || true) clippy-driver running"; }
load

fast=()   # name=command pairs measured with $runs
slow=()   # ... with $runs_slow
fast+=("bare" "/bin/true")
fast+=("sh -c true (bare)" "sh -c true")
command -v bash >/dev/null && fast+=("bash -c true (bare)" "bash -c true")
if command -v bwrap >/dev/null && bwrap --ro-bind / / --dev /dev --unshare-net --unshare-pid /bin/true 2>/dev/null; then
    fast+=("bwrap --ro-bind / / --dev /dev --unshare-net --unshare-pid" \
        "bwrap --ro-bind / / --dev /dev --unshare-net --unshare-pid /bin/true")
else
    say "bwrap missing or failing here; row skipped"
fi
mkdir -p "$work/w"
fast+=("orch sandbox run (landlock)" "$orch sandbox run --write $work/w -- /bin/true")

srt=$srt_prefix/node_modules/.bin/srt
if [ ! -x "$srt" ]; then
    npm install --silent --prefix "$srt_prefix" @anthropic-ai/sandbox-runtime >/dev/null 2>&1 || true
fi
if [ -x "$srt" ] && (cd "$work" && "$srt" /bin/true) >"$work/srt.err" 2>&1; then
    slow+=("srt (npm @anthropic-ai/sandbox-runtime)" "$srt /bin/true")
else
    say "srt cannot run here, row skipped: $(tr '\n' ' ' <"$work/srt.err" 2>/dev/null | cut -c1-300)"
fi
if docker image inspect "$image" >/dev/null 2>&1; then
    slow+=("docker run --rm --network none" "docker run --rm --network none $image /bin/true")
    container=$(docker run -d --rm --network none "$image" sleep 100000)
    slow+=("docker exec" "docker exec $container /bin/true")
    slow+=("orch sandbox run --backend container" \
        "$orch sandbox run --write $work/w --backend container --image $image -- /bin/true")
else
    say "no Docker engine or no image $image (.ci/docker.sh); docker rows skipped"
fi

measure() {
    local n=$1; shift
    local args=()
    while [ $# -gt 0 ]; do args+=(-n "$1" "$2"); shift 2; done
    hyperfine -N --warmup 3 --runs "$n" --export-json "$work/h$n.json" "${args[@]}" >&2
    jq -r '.results[] | "| \(.command) | \(.median * 1000 * 1000 | round / 1000) ms | \(.mean * 1000 * 1000 | round / 1000) ± \(.stddev * 1000 * 1000 | round / 1000) ms |"' "$work/h$n.json"
}
echo
echo "| how \`/bin/true\` runs (whole process) | median | mean ± σ |"
echo "|---|---|---|"
measure "$runs" "${fast[@]}"
[ ${#slow[@]} -gt 0 ] && measure "$runs_slow" "${slow[@]}"
echo
echo "In a running tool host, and tool host start-up:"
ORCH_BIN=$orch cargo bench -q -p orch-sandbox --bench tool_host 2>/dev/null | grep -v '^$'
load
