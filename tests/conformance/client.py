#!/usr/bin/env python3
"""The MCP client the official conformance suite (npm `@modelcontextprotocol/conformance`)
drives: `conformance client --command "python3 tests/conformance/client.py" ...`.

The suite starts a scenario's server and runs this with its URL as the last argument,
the scenario's name in MCP_CONFORMANCE_SCENARIO and, for the OAuth scenarios with a
pre-registered client, its credentials in MCP_CONFORMANCE_CONTEXT. This declares the
server as a `.mcp.json` would (the secret or key in an environment variable the
declaration names, never in the file) and runs orch's own client on it,
`orch __mcp-client`, with the calls the scenario expects. ORCH names the binary.
"""

import json
import os
import subprocess
import sys
import tempfile

# What each scenario's server expects to be called (the tools it lists).
CALLS = {
    "tools_call": ['conf/add_numbers={"a": 2, "b": 3}'],
    "elicitation-sep1034-client-defaults": ["conf/test_client_elicitation_defaults"],
    "sse-retry": ["conf/test_reconnection"],
}


def main():
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    env = dict(os.environ)
    server = {"type": "http", "url": url}
    if "client_secret" in context:
        env["CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
        server["oauth"] = {"clientId": context["client_id"], "clientSecretEnv": "CONFORMANCE_CLIENT_SECRET"}
    elif "private_key_pem" in context:
        env["CONFORMANCE_CLIENT_KEY"] = context["private_key_pem"]
        server["oauth"] = {"clientId": context["client_id"], "privateKeyEnv": "CONFORMANCE_CLIENT_KEY"}
        if context.get("signing_algorithm"):
            server["oauth"]["signingAlgorithm"] = context["signing_algorithm"]
    calls = CALLS.get(scenario, ["conf/test-tool"] if scenario.startswith("auth/") else [])
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "mcp.json")
        with open(config, "w") as f:
            json.dump({"mcpServers": {"conf": server}}, f)
        command = [os.environ.get("ORCH", "orch"), "__mcp-client", "--config", config]
        for call in calls:
            command += ["--call", call]
        sys.exit(subprocess.run(command, env=env, cwd=tmp).returncode)


if __name__ == "__main__":
    main()
