#!/usr/bin/env bash
# Time of the GitHub Action's install step (BENCHMARKS.md, "Installing the Action").
#
#   bash tests/bench/install.sh            # 5 runs
#   RUNS=10 bash tests/bench/install.sh
#
# Builds orch (release), packs it the way the release workflow does
# (orch-x86_64-unknown-linux-musl.tar.gz and its .sha256), serves the layout from a local
# HTTP server on loopback, and times `.github/action/install.sh` from start to an
# installed, verified binary that answers `orch --version`. Prints one Markdown row per
# run and the median. The real release binary is static (musl); this one is the host
# build, which has the same size class, so the download and unpacking are comparable.
#
# Needs cargo, python3, curl, tar and sha256sum.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs=${RUNS:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-install.XXXXXX")
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
log() { echo "install.sh: $*" >&2; }

log "building orch (release)"
(cd "$root" && cargo build --release --quiet -p orch --bin orch)
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

name=orch-x86_64-unknown-linux-musl
mkdir -p "$work/pack/$name" "$work/site/v9.9.9"
cp "$target/release/orch" "$work/pack/$name/orch"
strip "$work/pack/$name/orch" 2>/dev/null || true
tar -C "$work/pack" -czf "$work/site/v9.9.9/$name.tar.gz" "$name"
(cd "$work/site/v9.9.9" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
size=$(stat -c %s "$work/site/v9.9.9/$name.tar.gz")

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$work/site" >/dev/null 2>&1 &
server_pid=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done

log "tarball: $size bytes; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| run | install step | tarball |"
echo "|---:|---:|---:|"
times=()
for i in $(seq "$runs"); do
  dest="$work/dest-$i"
  start=$(date +%s.%N)
  ORCH_REF=v9.9.9 ORCH_DEST="$dest" ORCH_RELEASE_URL="http://127.0.0.1:$port" ORCH_ARCH=x86_64 \
    GITHUB_OUTPUT="$work/out-$i" bash "$root/.github/action/install.sh" >/dev/null
  "$dest/bin/orch" --version >/dev/null
  end=$(date +%s.%N)
  grep -q '^found=true$' "$work/out-$i" || { log "run $i did not install the release"; exit 1; }
  t=$(python3 -c "print(f'{$end - $start:.3f}')")
  times+=("$t")
  echo "| $i | ${t} s | $((size / 1024 / 1024)) MiB |"
done
median=$(printf '%s\n' "${times[@]}" | sort -n | python3 -c 'import sys; v=[float(x) for x in sys.stdin]; print(f"{sorted(v)[len(v)//2]:.3f}")')
echo
echo "median: ${median} s (target: under 15 s); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
