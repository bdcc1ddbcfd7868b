#!/usr/bin/env bash
# A nightly batch at scale (BENCHMARKS.md, "Batch"): many agents, a tree synthesis.
#
#   bash tests/bench/batch.sh                    # 1,000 agents x 3 turns at 200 ms, concurrency 32
#   AGENTS=64 bash tests/bench/batch.sh          # a quick try
#   AGENTS=1000 TURNS=3 LATENCY_MS=200 CONCURRENCY=32 REPORT_KB=2 bash tests/bench/batch.sh
#   PROFILE=debug AGENTS=64 bash tests/bench/batch.sh   # check the script with debug builds
#   GROUP_SIZE=8 AGENTS=64 bash tests/bench/batch.sh     # force a tree at a small size
#   ORCH=/path/to/other/orch bash tests/bench/batch.sh   # the same bench with another build of orch
#
# A workflow with one static fan-out of AGENTS agents. The mock model server
# (`mock-model-server --by-turn --log`) gives every agent TURNS model turns, LATENCY_MS
# before each response: TURNS-1 turns that each call LS, then a final report of about
# REPORT_KB kilobytes. Synthesis requests (they offer no tools) get the same report as
# their answer. The landlock sandbox is on, as by default.
#
# Printed: the wall time of `orch run` against the ideal (TURNS x LATENCY_MS per agent in
# waves of CONCURRENCY, plus one latency per synthesis level and the final request); the
# synthesis tree (levels, groups); every synthesis request's size from the mock
# server's log against the budget (half the model's context window, from report.json);
# the CPU time of the coordinator and everything it waited for (user + system), and the
# coordinator's peak RSS (GNU time). Set TMPDIR to put the run on another file system.
#
# Needs cargo, python3, GNU time (/usr/bin/time).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
agents=${AGENTS:-1000}
turns=${TURNS:-3}
latency=${LATENCY_MS:-200}
concurrency=${CONCURRENCY:-32}
report_kb=${REPORT_KB:-2}
profile=${PROFILE:-release}
group_size=${GROUP_SIZE:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-batch.XXXXXX")
server_pid=

cleanup() {
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; fi
    if [[ ${KEEP:-0} == 1 ]]; then echo "work dir kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
log() { echo "batch.sh: $*" >&2; }

log "building orch and mock-model-server ($profile)"
if [[ $profile == release ]]; then flag=--release; else flag=; fi
(cd "$root" && cargo build $flag --quiet -p orch --bin orch -p orch-testkit --bin mock-model-server)
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
orch=${ORCH:-$target/$profile/orch}
mock=$target/$profile/mock-model-server

# --- a small repository ------------------------------------------------------------------
repo=$work/repo
mkdir -p "$repo/src"
for i in $(seq 1 40); do printf 'pub fn f%d() -> u32 { %d }\n' "$i" "$i" >"$repo/src/m$i.rs"; done
git -C "$repo" init -q -b main
git -C "$repo" add -A
git -C "$repo" -c user.name=bench -c user.email=bench@localhost commit -qm fixture

# --- the mock model: TURNS-1 LS calls, then a report of REPORT_KB KB ----------------------
report=$(python3 -c "
import sys
kb = int(sys.argv[1])
line = 'Fixed src/m7.rs: replaced the manual loop with an iterator; tests pass (12 of 12). '
print((line * (kb * 1024 // len(line) + 1))[: kb * 1024])" "$report_kb")
{
    for _ in $(seq 1 $((turns - 1))); do
        echo '- reply: {tool_calls: [{name: LS, input: {path: src}}], usage: {input_tokens: 1000, output_tokens: 20}}'
    done
    printf -- '- reply: {text: "%s", usage: {input_tokens: 1000, output_tokens: 500}}\n' "$report"
} >"$work/steps.yaml"
"$mock" --script "$work/steps.yaml" --latency-ms "$latency" --by-turn --log "$work/requests.jsonl" >"$work/mock.out" &
server_pid=$!
for _ in $(seq 1 100); do grep -q listening "$work/mock.out" 2>/dev/null && break; sleep 0.05; done
url=$(sed -n 's/^listening on //p' "$work/mock.out")
[[ -n $url ]] || { log "the mock server did not start"; exit 1; }

# --- the workflow -------------------------------------------------------------------------
items=$(seq -s, 1 "$agents")
cat >"$work/workflow.yaml" <<YAML
version: 1
name: batch
description: Batch benchmark.
defaults:
  tools: [LS, Read]
  limits: { max_turns: $((turns + 2)) }
agents:
  fix:
    for_each: [$items]
    prompt: Fix file {{ item }}.
integrate: none
YAML
if [[ -n $group_size ]]; then printf 'synthesis: { group_size: %s }\n' "$group_size" >>"$work/workflow.yaml"; fi

log "running $agents agents x $turns turns at ${latency} ms, concurrency $concurrency"
out=$work/run
ANTHROPIC_BASE_URL=$url ANTHROPIC_API_KEY=bench /usr/bin/time -f '%e %M %U %S' -o "$work/time" \
    "$orch" run "$work/workflow.yaml" --repo "$repo" --out "$out" --concurrency "$concurrency" \
    >"$work/stdout" 2>"$work/stderr" || { log "orch run failed:"; tail -5 "$work/stderr" >&2; exit 1; }
# The server writes its request log on SIGINT.
kill -INT "$server_pid"
wait "$server_pid" || true
server_pid=

python3 - "$out/report.json" "$work/requests.jsonl" "$work/time" "$agents" "$turns" "$latency" "$concurrency" <<'PY'
import json, math, sys
report_path, log_path, time_path = sys.argv[1:4]
agents, turns, latency, concurrency = map(int, sys.argv[4:8])
r = json.load(open(report_path))
wall, rss_kib, user_s, sys_s = open(time_path).read().split()
s = r.get("synthesis") or {}
levels = (s.get("tree") or {}).get("levels", [])
ideal = math.ceil(agents / concurrency) * turns * latency / 1000 + (len(levels) + 1) * latency / 1000
t = r["timings"]
print(f"| agents | turns | latency | concurrency | wall | ideal | wall/ideal | agents phase | synthesis | CPU user + sys | coordinator peak RSS |")
print(f"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
print(f"| {agents} | {turns} | {latency} ms | {concurrency} | {float(wall):.2f} s | {ideal:.2f} s | "
      f"{float(wall) / ideal:.2f}x | {t['agents_ms'] / 1000:.2f} s | {t['synthesis_ms'] / 1000:.2f} s | "
      f"{float(user_s):.1f} + {float(sys_s):.1f} s | "
      f"{int(rss_kib) / 1024:.1f} MiB |")
print()
print(f"run status: {r['status']}; agents: {r['totals']['succeeded']} succeeded, {r['totals']['failed']} failed; "
      f"synthesis: {s.get('status')}")
budget = s.get("budget_tokens")
if levels:
    tree = " -> ".join(f"{len(l['groups'])} groups" for l in levels)
    print(f"synthesis tree: {len(levels)} level(s): {tree}, then the final request; budget {budget} tokens per request")
else:
    print(f"synthesis: one request (the reports fit); budget {budget} tokens per request")
# Synthesis requests are the ones that offer no tools.
reqs = [json.loads(l) for l in open(log_path) if l.strip()]
synth = [q for q in reqs if q["tools"] == 0]
over = [q for q in synth if budget is not None and q["tokens"] > budget]
largest = max((q["tokens"] for q in synth), default=0)
print(f"synthesis requests: {len(synth)}; largest {largest} tokens ({largest / budget:.0%} of the budget)" if budget
      else f"synthesis requests: {len(synth)}; largest {largest} tokens")
print("every synthesis request within the budget" if not over else f"OVER THE BUDGET: {len(over)} requests")
for q in synth[-5:]:
    print(f"  request {q['n']}: {q['tokens']} tokens ({q['bytes']} bytes)")
PY
