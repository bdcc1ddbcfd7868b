#!/usr/bin/env bash
# Re-records the golden files of the differential suite (tests/golden/expected/) from
# the real Claude Code CLI, pinned below, against the test kit's mock model server.
#
#   tests/golden/record.sh            # every case
#   tests/golden/record.sh bash-cd    # the named cases or groups (case file names)
#
# Needs cargo, npm (the npm registry), python3 with PyYAML, and git.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
export CC_VERSION=2.1.328
prefix=${CC_PREFIX:-/tmp/cc-bench}
export CLAUDE=$prefix/node_modules/.bin/claude
if ! "$CLAUDE" --version 2>/dev/null | grep -q "^$CC_VERSION "; then
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$CC_VERSION" >&2
fi
(cd "$root" && cargo build --quiet -p orch-testkit --bin mock-model-server)
export SERVER
SERVER=$(cd "$root" && cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/debug/mock-model-server
exec python3 "$here/record.py" "$@"
