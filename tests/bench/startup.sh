#!/usr/bin/env bash
# Start-up to the first model request (BENCHMARKS.md, "Start-up"): how long after its
# process starts a one-agent `orch exec` and a one-agent `orch run` send their first
# request, against the test kit's mock model server on loopback. The clock starts just
# before the process is spawned (Python's time.time_ns, then Popen) and stops when the
# server receives the request (its --log `at_ns`): both are the machine's wall clock.
#
#   bash tests/bench/startup.sh            # builds orch and the mock server (release)
#   RUNS=30 bash tests/bench/startup.sh
#   ORCH=/path/to/other/orch bash tests/bench/startup.sh   # the same bench with another build of orch
#
# Prints one JSON line per command with the median, min and max in milliseconds, and
# the `-vv` log of one extra run of each with its time stamps (where the time goes,
# phase by phase). Needs cargo, python3 and git.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs=${RUNS:-20}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-startup.XXXXXX")
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
say() { echo "startup.sh: $*" >&2; }

cd "$root"
cargo build --release -q -p orch -p orch-testkit --bin orch --bin mock-model-server
orch=${ORCH:-$root/target/release/orch}
server=$root/target/release/mock-model-server
echo "machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"

repo=$work/repo
mkdir "$repo"
(cd "$repo" && git init -q && echo hello >note.txt && git add -A &&
    git -c user.name=b -c user.email=b@b commit -qm init)
cat >"$work/workflow.yaml" <<'EOF'
version: 1
name: startup
agents:
  main: { prompt: Say done., tools: [Read] }
integrate: none
EOF
printf -- '- reply: {text: done}\n' >"$work/script.yaml"

# measure NAME ARGS...: RUNS runs, each against a fresh server log; prints the JSON line.
measure() {
    local name=$1
    shift
    python3 - "$name" "$runs" "$server" "$work" "$@" <<'PY'
import json, os, signal, statistics, subprocess, sys, time
name, runs, server, work, *cmd = sys.argv[1:]
times = []
for i in range(int(runs)):
    log = f"{work}/log-{i}.jsonl"
    srv = subprocess.Popen([server, "--script", f"{work}/script.yaml", "--repeat-default", "--log", log],
                           stdout=subprocess.PIPE, text=True)
    url = srv.stdout.readline().split()[-1]
    env = dict(os.environ, ANTHROPIC_API_KEY="bench", ANTHROPIC_BASE_URL=url, CI="true", NO_COLOR="1")
    start = time.time_ns()
    p = subprocess.run([a.replace("{i}", str(i)) for a in cmd], cwd=f"{work}/repo", env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    srv.send_signal(signal.SIGINT)
    srv.wait()
    if p.returncode != 0:
        sys.exit(f"startup.sh: {name}: exit {p.returncode}")
    with open(log) as f:
        first = json.loads(f.readline())
    times.append((first["at_ns"] - start) / 1e6)
print(json.dumps({"command": name, "runs": len(times), "median_ms": round(statistics.median(times), 2),
                  "min_ms": round(min(times), 2), "max_ms": round(max(times), 2)}))
PY
}

measure "orch exec" "$orch" exec --tools Read "Say done."
measure "orch run (one agent)" "$orch" run "$work/workflow.yaml" --out "$work/out-{i}" --run-id "bench-{i}"

say "where the time goes: orch exec -vv, one run, each log line with the time since spawn"
python3 - "$server" "$work" "$orch" <<'PY'
import os, signal, subprocess, sys, time
server, work, orch = sys.argv[1:]
srv = subprocess.Popen([server, "--script", f"{work}/script.yaml", "--repeat-default"], stdout=subprocess.PIPE, text=True)
url = srv.stdout.readline().split()[-1]
env = dict(os.environ, ANTHROPIC_API_KEY="bench", ANTHROPIC_BASE_URL=url, CI="true", NO_COLOR="1")
start = time.perf_counter_ns()
p = subprocess.Popen([orch, "-vv", "exec", "--tools", "Read", "Say done."], cwd=f"{work}/repo", env=env,
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
for line in p.stderr:
    if "hyper_util" in line or "[log] " in line and "certificate" not in line:
        continue
    print(f"+{(time.perf_counter_ns() - start) / 1e6:7.2f} ms  {line.rstrip()[:150]}")
p.wait()
srv.send_signal(signal.SIGINT)
srv.wait()
PY
