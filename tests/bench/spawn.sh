#!/usr/bin/env bash
# Sandboxed spawn against bubblewrap, interleaved (BENCHMARKS.md, "Sandboxed spawn
# against bubblewrap"): issue 29's `orch sandbox run -- /bin/true` against
# `bwrap --unshare-all --ro-bind / / /bin/true`.
#
#   bash tests/bench/spawn.sh                       # builds orch (release) first
#   RUNS=400 bash tests/bench/spawn.sh
#   BASE=/path/to/older/orch bash tests/bench/spawn.sh   # adds that build's rows, in the same rounds
#
# One round runs every command once, in a fresh random order, so that drift in the
# machine's load falls on all of them alike (hyperfine runs one command's runs back to
# back). Each run is timed from just before the spawn to the end of the wait (Python's
# perf_counter_ns around subprocess.run, the same for every row). Rows: /bin/true bare;
# `orch --version` (the cost of starting the orch binary at all); bwrap; `orch sandbox
# run` (landlock, the default backend) of this build and of BASE. Prints a Markdown
# table: median, mean and p90 in ms, and each row's median against bwrap's.
#
# Needs python3 and bwrap (`apt-get install -y bubblewrap`). Environment: RUNS (200),
# WARMUP (20 rounds, not counted), ORCH (a prebuilt orch; skips the build), BASE.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs=${RUNS:-200}
warmup=${WARMUP:-20}
command -v bwrap >/dev/null || { echo "spawn.sh: bwrap is missing: apt-get install -y bubblewrap" >&2; exit 1; }
if [[ -z ${ORCH:-} ]]; then
    (cd "$root" && cargo build --release --quiet -p orch --bin orch -p orch-testkit --bin mock-model-server)
fi
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
orch=$(realpath "${ORCH:-$target/release/orch}")
echo "machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg), $(id -un)"
python3 - "$runs" "$warmup" "$orch" "${BASE:-}" <<'PY'
import os, random, statistics, subprocess, sys, time
runs, warmup, orch, base = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = [
    ("/bin/true (bare)", ["/bin/true"]),
    ("orch --version", [orch, "--version"]),
    ("bwrap --unshare-all --ro-bind / / /bin/true", ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "/bin/true"]),
    ("orch sandbox run -- /bin/true", [orch, "sandbox", "run", "--", "/bin/true"]),
]
if base:
    rows.append(("orch sandbox run -- /bin/true (BASE)", [base, "sandbox", "run", "--", "/bin/true"]))
times = {name: [] for name, _ in rows}
for round in range(warmup + runs):
    order = rows[:]
    random.shuffle(order)
    for name, cmd in order:
        start = time.perf_counter_ns()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        took = (time.perf_counter_ns() - start) / 1e6
        if p.returncode != 0:
            sys.exit(f"spawn.sh: {name} failed ({p.returncode}): {p.stderr.decode()[-500:]}")
        if round >= warmup:
            times[name].append(took)
bwrap = statistics.median(times[rows[2][0]])
print(f"\n{runs} interleaved rounds after {warmup} warm-up rounds; load after: {open('/proc/loadavg').read().split()[:3]}\n")
print("| command | median | mean | p90 | median / bwrap's |")
print("|---|---:|---:|---:|---:|")
for name, _ in rows:
    t = sorted(times[name])
    print(f"| `{name}` | {statistics.median(t):.2f} ms | {statistics.mean(t):.2f} ms | {t[int(0.9 * (len(t) - 1))]:.2f} ms | {statistics.median(t) / bwrap:.2f}× |")
PY
