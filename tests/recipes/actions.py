#!/usr/bin/env python3
"""A small stand-in for the GitHub Actions runner, for tests/recipes/run.sh: it runs
the jobs of one recipe file (examples/github/*.yml) as GitHub would, offline.

Usage: actions.py RECIPE.yml STATE_DIR

It reads, from the environment: ORCH_SOURCE (orch's checkout: the Action's files),
ORCH_BIN (the orch binary the Action would install), ORIGIN (the bare repository the
jobs clone and push to), REF (what actions/checkout checks out), EVENT_NAME and
EVENT_PATH, REPOSITORY (owner/name), ORCH_SCRIPT (the scripted model turns).

What it simulates: jobs in `needs` order, a matrix from `fromJSON(...)`, `if:`
(`always()`, `success()`, `failure()`), `${{ }}` expressions over `runner`, `env`,
`secrets` (empty), `github.event`, `github.token` (empty), `steps`, `needs`,
`matrix` and `strategy`; steps: `run:` (bash -eo pipefail), actions/checkout (a fresh
clone of ORIGIN per job), actions/upload-artifact and download-artifact (a directory
per artifact), and the orch Action itself (`<owner>/orch@<ref>`: ORCH_BIN on the path,
then .github/action/run.sh with its inputs; the provider is `scripted` unless the step
names one). Anything else in a recipe is an error, so a recipe cannot silently depend
on what this does not do. It writes STATE_DIR/result.json: per job (matrix instances
as `job (i)`), its status, step outcomes, outputs, workspace and RUNNER_TEMP.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


class Unsupported(Exception):
    pass


def lookup(value, path):
    for part in path:
        if isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value


def evaluate(expr, ctx):
    expr = expr.strip()
    if expr in ("always()", "success()", "failure()", "cancelled()"):
        return {"always()": True, "success()": ctx["ok"], "failure()": not ctx["ok"], "cancelled()": False}[expr]
    m = re.fullmatch(r"fromJSON\((.*)\)", expr)
    if m:
        text = evaluate(m.group(1), ctx)
        return json.loads(text) if isinstance(text, str) else text
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", expr):
        raise Unsupported(f"expression `{expr}`")
    parts = expr.split(".")
    root, rest = parts[0], parts[1:]
    if root == "runner" and rest == ["temp"]:
        return ctx["runner_temp"]
    if root == "env":
        return ctx["env"].get(rest[0], "")
    if root == "secrets":
        return ""
    if root == "github":
        if rest == ["token"]:
            return ""
        if rest and rest[0] == "event":
            return lookup(ctx["event"], rest[1:])
        if rest == ["event_name"]:
            return ctx["event_name"]
        raise Unsupported(f"expression `{expr}`")
    if root == "steps" and len(rest) == 3 and rest[1] == "outputs":
        return ctx["steps"].get(rest[0], {}).get(rest[2], "")
    if root == "needs" and len(rest) == 3 and rest[1] == "outputs":
        return ctx["needs"].get(rest[0], {}).get(rest[2], "")
    if root == "matrix":
        return lookup(ctx["matrix"], rest)
    if root == "strategy" and rest == ["job-index"]:
        return ctx["job_index"]
    raise Unsupported(f"expression `{expr}`")


def text(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def substitute(template, ctx):
    """`${{ }}` in a string; a string that is one expression keeps its value's type."""
    if not isinstance(template, str):
        return template
    m = EXPR.fullmatch(template.strip())
    if m:
        return evaluate(m.group(1), ctx)
    return EXPR.sub(lambda m: text(evaluate(m.group(1), ctx)), template)


def condition(step_or_job, ctx):
    cond = step_or_job.get("if")
    if cond is None:
        return ctx["ok"]
    cond = str(cond).strip()
    m = EXPR.fullmatch(cond)
    return bool(evaluate(m.group(1) if m else cond, ctx))


def read_kv(path):
    """A GITHUB_OUTPUT / GITHUB_ENV file: `k=v` lines and `k<<DELIM` blocks."""
    out = {}
    if not os.path.exists(path):
        return out
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^([^=<]+)<<(.+)$", line)
        if m:
            name, delim, value = m.group(1), m.group(2), []
            i += 1
            while i < len(lines) and lines[i] != delim:
                value.append(lines[i])
                i += 1
            out[name] = "\n".join(value)
        elif "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
        i += 1
    return out


def order(jobs):
    done, result = set(), []
    while len(result) < len(jobs):
        progressed = False
        for name, job in jobs.items():
            needs = job.get("needs", [])
            needs = [needs] if isinstance(needs, str) else needs
            if name not in done and all(n in done for n in needs):
                done.add(name)
                result.append(name)
                progressed = True
        if not progressed:
            raise Unsupported("a cycle in `needs`")
    return result


def main():
    recipe_path, state = sys.argv[1], os.path.abspath(sys.argv[2])
    recipe = yaml.safe_load(open(recipe_path, encoding="utf-8"))
    event_path = os.environ["EVENT_PATH"]
    event = json.load(open(event_path, encoding="utf-8"))
    source, orch_bin = os.environ["ORCH_SOURCE"], os.environ["ORCH_BIN"]
    workflow_env = {k: text(v) for k, v in (recipe.get("env") or {}).items()}
    artifacts = os.path.join(state, "artifacts")
    os.makedirs(artifacts, exist_ok=True)
    results, job_outputs, job_status = {}, {}, {}

    for job_name in order(recipe["jobs"]):
        job = recipe["jobs"][job_name]
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        base_ctx = {
            "ok": all(job_status.get(n) == "success" for n in needs),
            "env": dict(workflow_env),
            "event": event,
            "event_name": os.environ["EVENT_NAME"],
            "needs": {n: job_outputs.get(n, {}) for n in needs},
            "steps": {},
            "matrix": {},
            "job_index": 0,
            "runner_temp": "",
        }
        if not condition(job, base_ctx):
            job_status[job_name] = "skipped"
            results[job_name] = {"status": "skipped"}
            continue
        matrix = (job.get("strategy") or {}).get("matrix")
        if matrix is None:
            instances = [{}]
        else:
            matrix = substitute(matrix, base_ctx)
            if set(matrix) - {"include"}:
                raise Unsupported("a matrix other than `include:`")
            instances = matrix.get("include") or []
        statuses = []
        for index, entry in enumerate(instances):
            key = job_name if matrix is None else f"{job_name} ({index})"
            result = run_job(job, key, dict(base_ctx, matrix=entry, job_index=index, ok=True), state, artifacts,
                             source, orch_bin, event_path)
            results[key] = result
            statuses.append(result["status"])
            outputs = {}
            ctx = dict(base_ctx, steps=result["step_outputs"], matrix=entry, job_index=index,
                       runner_temp=result["runner_temp"], ok=True)
            for name, value in (job.get("outputs") or {}).items():
                outputs[name] = text(substitute(value, ctx))
            job_outputs.setdefault(job_name, {}).update(outputs)
        job_status[job_name] = "success" if all(s == "success" for s in statuses) else "failure"

    json.dump(results, open(os.path.join(state, "result.json"), "w"), indent=2)
    failed = [k for k, r in results.items() if r["status"] == "failure"]
    print(f"actions.py: {len(results)} job(s); failed: {', '.join(failed) or 'none'}", file=sys.stderr)
    return 1 if failed else 0


def run_job(job, key, ctx, state, artifacts, source, orch_bin, event_path):
    slug = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")
    root = os.path.join(state, "jobs", slug)
    workspace, temp = os.path.join(root, "work"), os.path.join(root, "temp")
    os.makedirs(workspace)
    os.makedirs(temp)
    ctx["runner_temp"] = temp
    ctx["env"].update({k: text(substitute(v, ctx)) for k, v in (job.get("env") or {}).items()})
    files = {n: os.path.join(root, n) for n in ("output", "env", "path", "summary")}
    for f in files.values():
        open(f, "w").close()
    base_env = dict(os.environ)
    for k in ("ORCH_SOURCE", "ORIGIN", "REF", "EVENT_NAME", "EVENT_PATH", "REPOSITORY"):
        base_env.pop(k, None)
    base_env.update({
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": os.environ["EVENT_NAME"],
        "GITHUB_EVENT_PATH": event_path,
        "GITHUB_REPOSITORY": os.environ["REPOSITORY"],
        "GITHUB_WORKSPACE": workspace,
        "GITHUB_JOB": key.split(" ")[0],
        "GITHUB_RUN_ID": "1",
        "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_STEP_SUMMARY": files["summary"],
        "GITHUB_ENV": files["env"],
        "GITHUB_OUTPUT": files["output"],
        "GITHUB_PATH": files["path"],
        "RUNNER_TEMP": temp,
        "ORCH_PROVIDER": "scripted",
    })
    base_ref = lookup(ctx["event"], ["pull_request", "base", "ref"])
    if base_ref:
        base_env["GITHUB_BASE_REF"] = base_ref
    result = {"status": "success", "steps": [], "step_outputs": {}, "workspace": workspace, "runner_temp": temp,
              "summary": files["summary"]}
    for number, step in enumerate(job.get("steps") or []):
        ctx["ok"] = result["status"] == "success"
        name = step.get("name") or step.get("uses") or f"step {number}"
        if not condition(step, ctx):
            result["steps"].append({"name": name, "outcome": "skipped"})
            continue
        env = dict(base_env)
        env.update(read_kv(files["env"]))
        extra_path = [p for p in open(files["path"]).read().split("\n") if p]
        env["PATH"] = ":".join(list(reversed(extra_path)) + [env.get("PATH", "")])
        env.update(ctx["env"])
        env.update({k: text(substitute(v, ctx)) for k, v in (step.get("env") or {}).items()})
        open(files["output"], "w").close()
        with_ = {k: substitute(v, ctx) for k, v in (step.get("with") or {}).items()}
        log = os.path.join(root, f"step-{number}.log")
        code = run_step(step, with_, env, workspace, temp, artifacts, source, orch_bin, log)
        outputs = read_kv(files["output"])
        if step.get("id"):
            result["step_outputs"][step["id"]] = outputs
            ctx["steps"] = result["step_outputs"]
        result["steps"].append({"name": name, "outcome": "success" if code == 0 else "failure", "exit": code,
                                "log": log})
        if code != 0:
            result["status"] = "failure"
            print(f"actions.py: {key}: step `{name}` failed with {code}; see {log}", file=sys.stderr)
            sys.stderr.write(open(log, encoding="utf-8", errors="replace").read()[-4000:])
    return result


def run_step(step, with_, env, workspace, temp, artifacts, source, orch_bin, log):
    out = open(log, "w")
    if "run" in step:
        script = os.path.join(temp, f"step-{abs(hash(step['run']))}.sh")
        with open(script, "w") as f:
            f.write(step["run"])
        return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", script], cwd=workspace, env=env,
                              stdout=out, stderr=subprocess.STDOUT).returncode
    uses = step["uses"]
    if uses.startswith("actions/checkout@"):
        if set(with_) - {"fetch-depth"}:
            raise Unsupported(f"actions/checkout with {sorted(with_)}")
        cmds = [["git", "clone", "-q", os.environ["ORIGIN"], "."], ["git", "checkout", "-q", os.environ["REF"]]]
        for cmd in cmds:
            code = subprocess.run(cmd, cwd=workspace, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
            if code != 0:
                return code
        return 0
    if uses.startswith("actions/upload-artifact@"):
        dest = os.path.join(artifacts, with_["name"])
        os.makedirs(dest, exist_ok=True)
        matches = glob.glob(with_["path"])
        for path in matches:
            if os.path.isdir(path) and len(matches) == 1 and not glob.has_magic(with_["path"]):
                shutil.copytree(path, dest, dirs_exist_ok=True, symlinks=True)
            elif os.path.isdir(path):
                shutil.copytree(path, os.path.join(dest, os.path.basename(path)), symlinks=True)
            else:
                shutil.copy2(path, dest)
        return 0
    if uses.startswith("actions/download-artifact@"):
        dest = with_["path"]
        names = [with_["name"]] if "name" in with_ else sorted(os.listdir(artifacts))
        for name in names:
            target = dest if "name" in with_ else os.path.join(dest, name)
            shutil.copytree(os.path.join(artifacts, name), target, dirs_exist_ok=True, symlinks=True)
        return 0
    if re.fullmatch(r"[^/]+/orch@.+", uses):
        # Install: the binary on the path and in ORCH_BIN, as action.yml does.
        bin_dir = os.path.dirname(orch_bin)
        with open(env["GITHUB_ENV"], "a") as f:
            f.write(f"ORCH_BIN={orch_bin}\n")
        with open(env["GITHUB_PATH"], "a") as f:
            f.write(bin_dir + "\n")
        if not with_.get("workflow"):
            return 0
        env = dict(env, ORCH_BIN=orch_bin, PATH=bin_dir + ":" + env["PATH"])
        env.update({
            "ORCH_WORKFLOW": text(with_.get("workflow")),
            "ORCH_INPUTS": text(with_.get("inputs")),
            "ORCH_MODEL_INPUT": text(with_.get("model")),
            "ORCH_CONCURRENCY": text(with_.get("concurrency")),
            "ORCH_PROVIDER_INPUT": text(with_.get("provider") or "scripted"),
            "ORCH_EXTRA_ARGS": text(with_.get("args")),
            "ORCH_OUT": text(with_.get("out")),
        })
        unknown = set(with_) - {"workflow", "inputs", "model", "concurrency", "provider", "args", "out"}
        if unknown:
            raise Unsupported(f"orch Action inputs {sorted(unknown)}")
        return subprocess.run(["bash", os.path.join(source, ".github/action/run.sh")], cwd=workspace, env=env,
                              stdout=out, stderr=subprocess.STDOUT).returncode
    raise Unsupported(f"the step `uses: {uses}`")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Unsupported as e:
        print(f"actions.py: the recipe uses {e}, which this runner does not simulate", file=sys.stderr)
        sys.exit(2)
