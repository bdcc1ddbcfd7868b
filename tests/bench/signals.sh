#!/usr/bin/env bash
# Time from SIGTERM to exit of `orch run` (BENCHMARKS.md, "Interrupting a run").
#
#   bash tests/bench/signals.sh              # 16 agents, 5 runs
#   AGENTS=16 RUNS=5 BACKEND=landlock bash tests/bench/signals.sh
#
# A workflow of AGENTS agents (a static fan-out, all at once), each of which runs
# `sleep 600` through its Bash tool in the sandbox (scripted model turns, offline). Once
# every sleep is running, the bench sends SIGTERM to orch and measures until orch has
# exited, then counts the processes of the run still alive (anything whose command line
# or working directory is under the run directory, and every `sleep 600`), and checks
# that report.json says `interrupted` and the exit code is 143. Prints a Markdown row
# per run and the median.
#
# Needs cargo and python3.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
agents=${AGENTS:-16}
runs=${RUNS:-5}
backend=${BACKEND:-landlock}
image=${IMAGE:-orch-test:busybox}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-signals.XXXXXX")
trap 'rm -rf "$work"' EXIT
log() { echo "signals.sh: $*" >&2; }

log "building orch (release)"
(cd "$root" && cargo build --release --quiet -p orch --bin orch)
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
orch=$target/release/orch

repo=$work/repo
mkdir -p "$repo"
echo hello >"$repo/README"
git -C "$repo" init -q -b main
git -C "$repo" add -A
git -C "$repo" -c user.name=bench -c user.email=bench@localhost commit -qm fixture

items=$(seq -s, 1 "$agents")
sandbox="{ backend: $backend }"
if [[ $backend == container ]]; then sandbox="{ backend: container, image: \"$image\" }"; fi
cat >"$work/workflow.yaml" <<EOF
version: 1
name: signals
concurrency: $agents
defaults:
  tools: [Bash]
  sandbox: $sandbox
agents:
  wait:
    for_each: [$items]
    prompt: Wait {{ item }}.
EOF
cat >"$work/script.yaml" <<'EOF'
version: 1
agents:
  "wait/*":
    - tool_calls: [{name: Bash, input: {command: "touch started.$$; sleep 600", timeout: 600000}}]
    - text: never
EOF

python3 - "$orch" "$work" "$agents" "$runs" <<'EOF'
import glob, os, signal, statistics, subprocess, sys, time, json
orch, work, agents, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def alive(out):
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if out in cmd or cwd.startswith(out) or cmd.strip() == "sleep 600":
            left.append(f"{pid} {cmd.strip()}")
    return left

times = []
print("| run | agents | SIGTERM → exit | exit code | processes left | report |")
print("|---:|---:|---:|---:|---:|---|")
for i in range(1, runs + 1):
    out = f"{work}/run{i}"
    p = subprocess.Popen([orch, "run", f"{work}/workflow.yaml", "--provider", "scripted", "--script",
                          f"{work}/script.yaml", "--repo", f"{work}/repo", "--out", out, "--run-id", f"sig{i}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while len(glob.glob(f"{out}/worktrees/*/started.*")) < agents:
        if time.time() > deadline or p.poll() is not None:
            sys.exit(f"the sleeps never all started (run {i})")
        time.sleep(0.01)
    time.sleep(0.2)  # every sleep is past its exec
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    code = p.wait()
    took = time.monotonic() - t0
    time.sleep(0.1)
    left = alive(out)
    status = json.load(open(f"{out}/report.json"))["status"]
    times.append(took)
    print(f"| {i} | {agents} | {took*1000:.0f} ms | {code} | {len(left)} | {status} |")
    if left:
        print("left: " + "; ".join(left), file=sys.stderr)
print(f"\nmedian SIGTERM → exit: {statistics.median(times)*1000:.0f} ms over {runs} runs")
EOF
