#!/usr/bin/env python3
"""Records the golden files of the differential suite from the real Claude Code CLI.

For each case of tests/golden/cases/*.yaml: a fixture repository is made, the case's
tool calls are served by the test kit's mock model server to `claude -p`, and what
reached the model (each call's tool_result: error flag and text) and the files the run
changed are written to tests/golden/expected/<name>.json, together with the case itself,
so the Rust test (orchestrator/cli/tests/it/golden.rs) needs only that file.

Run it through record.sh, which installs the pinned Claude Code and builds the server.
"""
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION = os.environ["CC_VERSION"]
CLAUDE = os.environ["CLAUDE"]
SERVER = os.environ["SERVER"]
REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*", re.S)


def content(value):
    """A fixture file's text: a string, or {lines: N} for "line 1" to "line N"; with
    {width: W}, each line is padded with x to about W characters and ends in "|end"."""
    if isinstance(value, dict):
        pad = "x" * max(0, value.get("width", 0) - 10)
        end = "|end" if pad else ""
        return "".join(f"line {i}{pad}{end}\n" for i in range(1, value["lines"] + 1))
    return value


def subst(value, repo):
    if isinstance(value, str):
        return value.replace("$REPO", repo)
    if isinstance(value, list):
        return [subst(v, repo) for v in value]
    if isinstance(value, dict):
        return {k: subst(v, repo) for k, v in value.items()}
    return value


def normalize(text, repo):
    return REMINDER.sub("\n", text.replace(repo, "$REPO")).strip()


def block_text(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return json.dumps(content)


def strings(value):
    """Every string inside a JSON value, in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)


def tree(root):
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            with open(path, "rb") as f:
                files[rel] = f.read().decode("utf-8", "replace")
    return files


def calls_of(case):
    """(id, call) of every tool call of the case, in order."""
    n = 0
    for turn in case["turns"]:
        if isinstance(turn, list):
            for call in turn:
                n += 1
                yield f"toolu_golden_{n:02}", call


def steps_of(case, repo):
    steps, n = [], 0
    for turn in case["turns"]:
        if isinstance(turn, list):
            calls = []
            for call in turn:
                n += 1
                calls.append({"id": f"toolu_golden_{n:02}", "name": call["name"], "input": subst(call.get("input", {}), repo)})
            steps.append({"reply": {"tool_calls": calls}})
        else:
            steps.append({"reply": {"text": turn["text"]}})
    steps.append({"reply": {"text": "done"}})
    return steps


def record(case):
    with tempfile.TemporaryDirectory(prefix="golden-") as work:
        work = os.path.realpath(work)
        repo = os.path.join(work, "repo")
        os.makedirs(repo)
        files = subst(dict(case.get("files", {})), repo)
        if "settings" in case:
            files[".claude/settings.json"] = json.dumps(subst(case["settings"], repo), indent=2) + "\n"
        for rel, text in files.items():
            path = os.path.join(repo, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(content(text))
        git = ["git", "-c", "user.name=golden", "-c", "user.email=golden@example.com"]
        subprocess.run(git + ["init", "-q", "-b", "main"], cwd=repo, check=True)
        subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
        subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "fixture"], cwd=repo, check=True)
        before = tree(repo)
        script = os.path.join(work, "script.json")
        with open(script, "w") as f:
            json.dump(steps_of(case, repo), f)
        bodies = os.path.join(work, "bodies.jsonl")
        server = subprocess.Popen([SERVER, "--script", script, "--repeat-default", "--bodies", bodies],
                                  stdout=subprocess.PIPE, text=True)
        url = server.stdout.readline().strip().removeprefix("listening on ")
        env = dict(os.environ, IS_SANDBOX="1", CLAUDE_CONFIG_DIR=os.path.join(work, "config"),
                   ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="golden", DISABLE_TELEMETRY="1",
                   DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
        args = [CLAUDE, "-p", case.get("prompt", "Do the task."), "--model", "claude-sonnet-4-5",
                "--output-format", "stream-json", "--verbose", "--max-turns", "20"]
        if case.get("allowed_tools"):
            args += ["--allowedTools", ",".join(case["allowed_tools"])]
        mode = case.get("mode")
        if mode is None:
            args.append("--dangerously-skip-permissions")
        elif mode != "settings":
            args += ["--permission-mode", mode]
        started = time.time()
        try:
            out = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=180)
            stream = out.stdout
        except subprocess.TimeoutExpired:
            stream = ""
        seconds = round(time.time() - started, 1)
        time.sleep(float(case.get("settle", 0)))
        server.send_signal(2)
        server.wait(timeout=10)
        requests = []
        if os.path.exists(bodies):
            with open(bodies) as f:
                requests = [json.loads(line) for line in f if line.strip()]
        results = {}
        for req in requests:
            for msg in req.get("messages", []):
                if isinstance(msg.get("content"), list):
                    for b in msg["content"]:
                        if b.get("type") == "tool_result" and b.get("tool_use_id") not in results:
                            results[b["tool_use_id"]] = (bool(b.get("is_error")), normalize(block_text(b.get("content")), repo))
        # Hook output often reaches the model inside a <system-reminder>: keep those here.
        everything = "\n".join(s for req in requests for s in strings(req.get("messages", []))).replace(repo, "$REPO")
        calls = []
        for id_, call in calls_of(case):
            is_error, text = results.get(id_, (None, None))
            entry = {"tool": call["name"], "is_error": is_error, "must_reach": [], "must_not_reach": [],
                     "text": text[:3000] if text is not None else None}
            for frag in call.get("expect", []):
                if text is not None and frag in text:
                    entry["must_reach"].append(frag)
                else:
                    print(f"{case['name']}: {call['name']}: Claude Code's result lacks {frag!r}", file=sys.stderr)
            for frag in call.get("absent", []):
                if text is None or frag not in text:
                    entry["must_not_reach"].append(frag)
                else:
                    print(f"{case['name']}: {call['name']}: Claude Code's result has {frag!r}", file=sys.stderr)
            calls.append(entry)
        reach = [f for f in case.get("reach", []) if f in everything]
        for f in case.get("reach", []):
            if f not in everything:
                print(f"{case['name']}: no request of Claude Code has {f!r}", file=sys.stderr)
        not_reach = [f for f in case.get("not_reach", []) if f not in everything]
        after = tree(repo)
        changed = {p: after.get(p) for p in sorted(set(before) | set(after)) if before.get(p) != after.get(p)}
        changed = {p: (normalize(v, repo) if v is not None else None) for p, v in changed.items()}
        golden = {
            "case": case,
            "claude_code": {
                "version": VERSION,
                "requests": len(requests),
                "seconds": seconds,
                "calls": calls,
                "reach": reach,
                "not_reach": not_reach,
                "files": changed,
            },
        }
        with open(os.path.join(HERE, "expected", case["name"] + ".json"), "w") as f:
            json.dump(golden, f, indent=2, ensure_ascii=False)
            f.write("\n")
        if not stream.strip():
            print(f"{case['name']}: claude printed nothing", file=sys.stderr)
        return case["name"], [(c["tool"], c["is_error"]) for c in calls], list(changed)


def main():
    only = set(sys.argv[1:])
    cases = []
    for name in sorted(os.listdir(os.path.join(HERE, "cases"))):
        with open(os.path.join(HERE, "cases", name)) as f:
            for case in yaml.safe_load(f):
                case["group"] = name.removesuffix(".yaml")
                if not only or case["name"] in only or case["group"] in only:
                    cases.append(case)
    names = [c["name"] for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        sys.exit(f"record.py: cases named twice: {sorted(dup)}")
    with concurrent.futures.ThreadPoolExecutor(int(os.environ.get("JOBS", "3"))) as pool:
        for name, calls, changed in pool.map(record, cases):
            print(f"{name}: {calls} files={changed}")


if __name__ == "__main__":
    main()
