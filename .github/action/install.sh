#!/usr/bin/env bash
# Installs the orch binary for the GitHub Action (action.yml): the released tarball of the
# action's own ref, verified against its SHA-256 sum. It prints `found=true` when it
# installed a release and `found=false` when no release matches the ref (a branch or a
# commit), so that the action falls back to building from source. A checksum mismatch or a
# broken download is an error, never a fallback.
#
# Environment:
#   ORCH_REF           the ref to install (the action's ref: a tag such as v0.2.0)
#   ORCH_DEST          where to install: the binary goes to $ORCH_DEST/bin/orch
#   ORCH_RELEASE_URL   base of the release downloads, default
#                      $GITHUB_SERVER_URL/$ORCH_ACTION_REPOSITORY/releases/download
#   ORCH_ARCH          x86_64 or aarch64 (default: uname -m)
#   GITHUB_OUTPUT      where `found=...` is written (default: stdout)
set -euo pipefail

ref=${ORCH_REF:-}
dest=${ORCH_DEST:?set ORCH_DEST to the install directory}
out=${GITHUB_OUTPUT:-/dev/stdout}
arch=${ORCH_ARCH:-$(uname -m)}
case "$arch" in
  x86_64 | amd64) arch=x86_64 ;;
  aarch64 | arm64) arch=aarch64 ;;
  *)
    echo "orch: no release is built for the $arch architecture; building from source" >&2
    echo "found=false" >>"$out"
    exit 0
    ;;
esac
if [ "$(uname -s)" != Linux ]; then
  echo "::error::orch runs on Linux runners only (it needs Landlock or Docker); this runner is $(uname -s)" >&2
  exit 1
fi

base=${ORCH_RELEASE_URL:-}
if [ -z "$base" ]; then
  repo=${ORCH_ACTION_REPOSITORY:-}
  if [ -z "$repo" ] || [ -z "$ref" ]; then
    echo "orch: the action's repository or ref is unknown (a local action?); building from source" >&2
    echo "found=false" >>"$out"
    exit 0
  fi
  base="${GITHUB_SERVER_URL:-https://github.com}/$repo/releases/download"
fi
# Releases are tags: a ref that cannot be one (a commit SHA, an empty ref) has none.
if [ -z "$ref" ] || [[ "$ref" =~ ^[0-9a-f]{40}$ ]]; then
  echo "orch: ref '${ref:-none}' is not a release tag; building from source" >&2
  echo "found=false" >>"$out"
  exit 0
fi

name="orch-$arch-unknown-linux-musl"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# fetch URL FILE: 0 on success, 2 when the server has no such file (404), 1 otherwise.
fetch() {
  local code
  code=$(curl --silent --show-error --location --retry 3 --retry-delay 1 --connect-timeout 10 \
    --max-time 120 --output "$2" --write-out '%{http_code}' "$1") || return 1
  case "$code" in
    200) return 0 ;;
    404) return 2 ;;
    *) echo "orch: $1 answered HTTP $code" >&2; return 1 ;;
  esac
}

status=0
fetch "$base/$ref/$name.tar.gz.sha256" "$tmp/sum" || status=$?
if [ "$status" = 2 ]; then
  echo "orch: no release $ref has a build for $arch; building from source" >&2
  echo "found=false" >>"$out"
  exit 0
elif [ "$status" != 0 ]; then
  echo "::error::orch: cannot download the checksum of release $ref ($base/$ref/$name.tar.gz.sha256)" >&2
  exit 1
fi
if ! fetch "$base/$ref/$name.tar.gz" "$tmp/$name.tar.gz"; then
  echo "::error::orch: release $ref lists a checksum but its tarball cannot be downloaded ($base/$ref/$name.tar.gz)" >&2
  exit 1
fi

expected=$(awk 'NR == 1 { print $1 }' "$tmp/sum")
actual=$(sha256sum "$tmp/$name.tar.gz" | awk '{ print $1 }')
if ! [[ "$expected" =~ ^[0-9a-f]{64}$ ]]; then
  echo "::error::orch: the checksum file of release $ref is malformed" >&2
  exit 1
fi
if [ "$expected" != "$actual" ]; then
  echo "::error::orch: checksum mismatch for $name.tar.gz of release $ref (expected $expected, got $actual); refusing to install it" >&2
  exit 1
fi

mkdir -p "$tmp/x" "$dest/bin"
tar -xzf "$tmp/$name.tar.gz" -C "$tmp/x"
bin=$(find "$tmp/x" -type f -name orch | head -n 1)
if [ -z "$bin" ]; then
  echo "::error::orch: the tarball of release $ref holds no orch binary" >&2
  exit 1
fi
install -m 0755 "$bin" "$dest/bin/orch"
echo "orch: installed release $ref ($arch) to $dest/bin/orch" >&2
echo "found=true" >>"$out"
