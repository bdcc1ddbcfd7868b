#!/usr/bin/env bash
# Harness overhead per turn: orch against Claude Code 2.1.328, in the same run
# (BENCHMARKS.md, "Harness overhead per turn").
#
#   bash tests/bench/turns.sh            # 10 measured runs of each, after one warm-up
#   RUNS=20 bash tests/bench/turns.sh
#
# One session = 21 turns that each make one tool call, then a final answer: 22 model
# requests to the mock model server (`bench-turns serve`, zero added latency), started
# afresh for every session so both harnesses meet the same server in the same state.
# orch runs `bench-turns run` (the query loop, the Anthropic provider, an in-process Echo
# tool); "orch run" is the whole product: a one-agent workflow through `orch run`, its
# Read tool in the sandboxed tool host, on a small file in a git repository; Claude
# Code runs `claude -p` with its Read tool on a small file. For all three:
# per-turn times from the mock server's arrival log, process wall time, and peak RSS
# from GNU time. Prints a Markdown table: per harness, the median over the runs.
#
# Needs cargo, npm (the npm registry, to install the peer once), GNU time, git.
# Environment: RUNS (10), TURNS (21), CC_PREFIX (/tmp/cc-bench),
# HARNESSES ("orch orch-run claude-code": which to measure),
# BENCH_TURNS_BIN, ORCH (prebuilt bench-turns and orch; skip the build), KEEP=1 keeps the work dir.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs=${RUNS:-10}
turns=${TURNS:-21}
requests=$((turns + 1))
cc_version=2.1.328
cc_prefix=${CC_PREFIX:-/tmp/cc-bench}
claude=$cc_prefix/node_modules/.bin/claude
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-turns.XXXXXX")
server_pid=

cleanup() {
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; fi
    if [[ ${KEEP:-0} == 1 ]]; then echo "work dir kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

log() { echo "turns.sh: $*" >&2; }

# --- tools -----------------------------------------------------------------------------
harnesses=(${HARNESSES:-orch orch-run claude-code})
# Both binaries in one build, so that they share one set of dependency features (and
# the same build as scaling.sh and startup.sh make).
if [[ -z ${BENCH_TURNS_BIN:-} || ( -z ${ORCH:-} && " ${harnesses[*]} " == *" orch-run "* ) ]]; then
    log "building bench-turns and orch (release)"
    (cd "$root" && cargo build --release --quiet -p orch-testkit --bin bench-turns -p orch --bin orch)
fi
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bench=$(realpath "${BENCH_TURNS_BIN:-$target/release/bench-turns}")
orch=$(realpath "${ORCH:-$target/release/orch}")

if [[ " ${harnesses[*]} " == *" claude-code "* ]] && ! "$claude" --version 2>/dev/null | grep -q "^$cc_version "; then
    log "installing Claude Code $cc_version into $cc_prefix"
    npm install --prefix "$cc_prefix" --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$cc_version" >&2
fi

if [[ ! -x /usr/bin/time ]]; then
    log "installing GNU time"
    apt-get install -y -qq time >&2
fi

# --- the session -----------------------------------------------------------------------
# Both run in an empty directory outside any git repository.
cwd=$work/cwd
mkdir -p "$cwd" "$work/cc-config"
printf 'a small file\n' >"$cwd/note.txt"
"$bench" steps --turns "$turns" >"$work/orch-steps.json"
"$bench" steps --turns "$turns" --tool Read --input "{\"file_path\": \"$cwd/note.txt\"}" >"$work/claude-code-steps.json"
# `orch run` works in a git repository: the agent reads note.txt in its own worktree.
repo=$work/repo
mkdir -p "$repo"
printf 'a small file\n' >"$repo/note.txt"
git -C "$repo" init -q -b main
git -C "$repo" add -A
git -C "$repo" -c user.name=bench -c user.email=bench@localhost commit -qm fixture
"$bench" steps --turns "$turns" --tool Read --input '{"file_path": "note.txt"}' >"$work/orch-run-steps.json"
cat >"$work/workflow.yaml" <<'YAML'
version: 1
name: bench-turns
agents:
  main: { prompt: "Read the file each time you are asked to, then answer.", tools: [Read] }
integrate: none
YAML

# Starts a mock server on the steps of harness $1, logging to $2.log; sets server_pid, url.
start_server() {
    "$bench" serve --steps "$work/$1-steps.json" --log "$2.log" >"$2.serve" &
    server_pid=$!
    for _ in $(seq 500); do
        url=$(sed -n 's/^listening on //p' "$2.serve" 2>/dev/null)
        if [[ -n $url ]]; then return; fi
        sleep 0.01
    done
    log "the mock server did not start"
    exit 1
}

stop_server() {
    kill -TERM "$server_pid"
    wait "$server_pid"
    server_pid=
}

# Runs harness $1 against $url under GNU time; writes $work/out, $work/rss, $work/wall.
run_harness() {
    local start end
    start=$(date +%s%N)
    case $1 in
    orch)
        (cd "$cwd" && /usr/bin/time -f %M -o "$work/rss" "$bench" run --server "$url" --turns "$turns" >"$work/out")
        ;;
    orch-run)
        rm -rf "$work/run-out"
        (cd "$repo" && env ANTHROPIC_API_KEY=bench ANTHROPIC_BASE_URL="$url" CI=true NO_COLOR=1 \
            /usr/bin/time -f %M -o "$work/rss" "$orch" run "$work/workflow.yaml" --out "$work/run-out" >"$work/out" 2>"$work/err") || {
            log "orch run failed:"
            tail -n 20 "$work/err" >&2
            exit 1
        }
        ;;
    claude-code)
        (cd "$cwd" && env IS_SANDBOX=1 CLAUDE_CONFIG_DIR="$work/cc-config" \
            ANTHROPIC_BASE_URL="$url" ANTHROPIC_API_KEY=bench \
            DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
            /usr/bin/time -f %M -o "$work/rss" "$claude" -p "Read the file each time you are asked to, then answer." \
            --dangerously-skip-permissions --max-turns 30 --model claude-sonnet-4-5 --output-format json \
            >"$work/out")
        if ! grep -q "\"num_turns\":$requests," "$work/out" || ! grep -q '"result":"All done."' "$work/out"; then
            log "Claude Code did not run the whole session:"
            head -c 2000 "$work/out" >&2
            exit 1
        fi
        ;;
    esac
    end=$(date +%s%N)
    echo $((end - start)) >"$work/wall"
}

results=$work/results.jsonl
: >"$results"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for run in $(seq 0 "$runs"); do
    # Alternate which harness goes first; run 0 warms caches and is not counted.
    order=("${harnesses[@]}")
    if ((run % 2 == 1)); then
        order=()
        for ((h = ${#harnesses[@]} - 1; h >= 0; h--)); do order+=("${harnesses[h]}"); done
    fi
    for harness in "${order[@]}"; do
        start_server "$harness" "$work/$harness-$run"
        run_harness "$harness"
        stop_server
        client=()
        if [[ $harness == orch ]]; then client=(--client "$work/out"); fi
        line=$("$bench" stats --log "$work/$harness-$run.log" --harness "$harness" --expect "$requests" \
            --rss-kb "$(tail -n 1 "$work/rss")" --wall-ns "$(cat "$work/wall")" "${client[@]}")
        if ((run > 0)); then echo "$line" >>"$results"; fi
        log "run $run $harness: $(sed -E 's/"[a-z_]+":\[[^]]*\],?//g' <<<"$line" | cut -c1-300)"
    done
done

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')
echo
echo "Harness overhead per turn, $(date -u '+%Y-%m-%d %H:%M UTC'): $runs runs of each after a warm-up,"
echo "one session each ($turns tool turns + final answer = $requests requests). $(nproc) cores ($cpu), $mem;"
echo "load average $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after. orch $commit (+ working tree), Claude Code $cc_version."
echo
"$bench" table "$results"
