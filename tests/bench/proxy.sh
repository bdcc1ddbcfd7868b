#!/usr/bin/env bash
# The egress proxy of network allowlists (BENCHMARKS.md, "Egress proxy"; issue 20): the
# latency it adds to one HTTPS request (connect, TLS handshake, 1 KiB answer; through
# the proxy against direct, medians) and the memory with TUNNELS tunnels held open.
#
#   bash tests/bench/proxy.sh                 # 1000 requests, 500 tunnels
#   REQUESTS=5000 TUNNELS=1000 bash tests/bench/proxy.sh
#
# Runs `cargo bench -p orch-run --bench proxy` (orchestrator/run/benches/proxy.rs, a
# release build). Needs the openssl CLI (for the test certificate) and a file limit of
# at least 4 x TUNNELS descriptors (raised here when the hard limit allows).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
requests=${REQUESTS:-1000}
tunnels=${TUNNELS:-500}
command -v openssl >/dev/null || { echo "proxy.sh: the openssl CLI is missing" >&2; exit 1; }
want=$((tunnels * 4 + 256))
if [ "$(ulimit -n)" -lt "$want" ]; then ulimit -n "$want" 2>/dev/null || ulimit -n "$(ulimit -Hn)"; fi
cd "$root"
echo "# egress proxy: $(nproc) cores, $(uname -r), $(date -u +%Y-%m-%d)"
cargo bench -q -p orch-run --bench proxy -- "$requests" "$tunnels"
