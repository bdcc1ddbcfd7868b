#!/usr/bin/env bash
# Parallel scaling of `orch run` (BENCHMARKS.md, "Parallel scaling").
#
#   bash tests/bench/scaling.sh                  # 64 agents at concurrency 64 and 8, 3 runs each
#   AGENTS=64 TURNS=10 LATENCY_MS=50 RUNS=5 CONCURRENCY="64 8" bash tests/bench/scaling.sh
#   ORCH=/path/to/other/orch bash tests/bench/scaling.sh   # the same bench with another build of orch
#
# A workflow with one static fan-out of AGENTS agents, each given TURNS model turns by
# the mock model server (`mock-model-server --by-turn`, LATENCY_MS before every
# response): TURNS-1 turns that each call LS, then a final answer. Then synthesis (one
# more turn). The repository is small (40 files). The landlock sandbox is on, as it is
# by default; as root each agent also gets its own uid.
#
# Reported per concurrency, as the median over RUNS: wall time of the whole `orch run`
# process; the ideal (TURNS * LATENCY_MS per agent, in waves of CONCURRENCY, plus one
# synthesis turn); the split from report.json (run clone, agents, synthesis,
# integration; and per agent the mean worktree, sandbox+host, loop and finish times);
# peak RSS of the coordinator alone (GNU time), and the peak proportional set size (PSS:
# shared pages split between the processes that map them) of the whole process tree,
# the coordinator with every tool host and command, sampled every 5 ms.
#
# Needs cargo, python3, GNU time (/usr/bin/time).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
agents=${AGENTS:-64}
turns=${TURNS:-10}
latency=${LATENCY_MS:-50}
runs=${RUNS:-3}
concurrencies=${CONCURRENCY:-"64 8"}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-scaling.XXXXXX")
server_pid=

cleanup() {
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; fi
    if [[ ${KEEP:-0} == 1 ]]; then echo "work dir kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
log() { echo "scaling.sh: $*" >&2; }

log "building orch and mock-model-server (release)"
(cd "$root" && cargo build --release --quiet -p orch --bin orch -p orch-testkit --bin mock-model-server)
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
orch=${ORCH:-$target/release/orch}
mock=$target/release/mock-model-server

# --- a small repository ------------------------------------------------------------------
repo=$work/repo
mkdir -p "$repo/src"
for i in $(seq 1 40); do printf 'pub fn f%d() -> u32 { %d }\n' "$i" "$i" >"$repo/src/m$i.rs"; done
git -C "$repo" init -q -b main
git -C "$repo" add -A
git -C "$repo" -c user.name=bench -c user.email=bench@localhost commit -qm fixture

# --- the mock model: TURNS-1 LS calls, then an answer, for every conversation -------------
{
    for _ in $(seq 1 $((turns - 1))); do
        echo '- reply: {tool_calls: [{name: LS, input: {path: src}}], usage: {input_tokens: 1000, output_tokens: 20}}'
    done
    echo '- reply: {text: "done", usage: {input_tokens: 1000, output_tokens: 5}}'
} >"$work/steps.yaml"
"$mock" --script "$work/steps.yaml" --latency-ms "$latency" --by-turn >"$work/mock.out" &
server_pid=$!
for _ in $(seq 1 100); do grep -q listening "$work/mock.out" 2>/dev/null && break; sleep 0.05; done
url=$(sed -n 's/^listening on //p' "$work/mock.out")
[[ -n $url ]] || { log "the mock server did not start"; exit 1; }

# --- the workflow -------------------------------------------------------------------------
items=$(seq -s, 1 "$agents")
cat >"$work/workflow.yaml" <<EOF
version: 1
name: scaling
description: Scaling benchmark.
defaults:
  tools: [LS, Read]
  limits: { max_turns: $((turns + 2)) }
agents:
  work:
    for_each: [$items]
    prompt: Task {{ item }}.
integrate: none
EOF

sampler=$work/sample_rss.py
cat >"$sampler" <<'EOF'
# Polls the process tree under a pid; prints the peak of its summed PSS in KiB.
import os, sys, time
root = int(sys.argv[1]); peak = 0
def children(pid):
    # Children of every thread: tokio's workers start the tool hosts.
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out
def rss(pid):
    # Pss: shared pages (the orch binary mapped by every tool host) counted once overall.
    for path, key in ((f"/proc/{pid}/smaps_rollup", "Pss:"), (f"/proc/{pid}/status", "VmRSS:")):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key):
                        return int(line.split()[1])
        except OSError:
            pass
    return 0
while os.path.exists(f"/proc/{root}"):
    stack, total = [root], 0
    while stack:
        p = stack.pop(); total += rss(p); stack.extend(children(p))
    peak = max(peak, total)
    time.sleep(0.005)
print(peak)
EOF

run_once() { # concurrency index -> "wall_s coord_kib tree_kib report"
    local c=$1 i=$2 out=$work/run-$1-$2
    ANTHROPIC_BASE_URL=$url ANTHROPIC_API_KEY=bench /usr/bin/time -f '%e %M' -o "$out.time" \
        "$orch" run "$work/workflow.yaml" --repo "$repo" --out "$out" --concurrency "$c" \
        >"$out.stdout" 2>"$out.stderr" &
    local pid=$!
    # /usr/bin/time's child is orch.
    sleep 0.01
    local orch_pid
    orch_pid=$(cat "/proc/$pid/task/$pid/children" 2>/dev/null | awk '{print $1}')
    local tree=0
    if [[ -n $orch_pid ]]; then tree=$(python3 "$sampler" "$orch_pid"); fi
    wait "$pid" || { log "orch run failed:"; tail -5 "$out.stderr" >&2; exit 1; }
    read -r wall coord <"$out.time"
    echo "$wall $coord $tree $out/report.json"
}

echo "| concurrency | wall (median of $runs) | ideal | run clone | agents | synthesis | integration | per agent: worktree / host / loop / finish (mean) | coordinator peak RSS | whole tree peak PSS |"
echo "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"
for c in $concurrencies; do
    results=()
    for i in $(seq 1 "$runs"); do
        results+=("$(run_once "$c" "$i")")
    done
    printf '%s\n' "${results[@]}" | python3 -c '
import json, statistics, sys, math
c, agents, turns, latency = map(int, sys.argv[1:5])
rows = [l.split() for l in sys.stdin if l.strip()]
rows.sort(key=lambda r: float(r[0]))
wall, coord, tree, path = rows[len(rows) // 2]
r = json.load(open(path))
assert r["status"] == "succeeded", r["status"]
assert len(r["agents"]) == agents and all(a["turns"] == turns for a in r["agents"])
t = r["timings"]
mean = lambda k: statistics.mean(a["timings"][k] for a in r["agents"])
ideal = math.ceil(agents / c) * turns * latency / 1000 + latency / 1000
clone_ms, agents_s = t["clone_ms"], t["agents_ms"] / 1000
synth_ms, integ_ms = t["synthesis_ms"], t["integrate_ms"]
per = " / ".join(f"{mean(k):.0f}" for k in ("worktree_ms", "host_ms", "loop_ms", "finish_ms"))
print(f"| {c} | {float(wall):.2f} s | {ideal:.2f} s | {clone_ms} ms | {agents_s:.2f} s | {synth_ms} ms | "
      f"{integ_ms} ms | {per} ms | {int(coord)/1024:.1f} MiB | {int(tree)/1024:.1f} MiB |")
' "$c" "$agents" "$turns" "$latency"
done
