#!/usr/bin/env bash
# Runs `orch run` for the GitHub Action (action.yml) from its inputs, passed in the
# environment so that nothing the workflow author writes is ever evaluated as shell:
#   ORCH_BIN, ORCH_WORKFLOW, ORCH_PROVIDER_INPUT, ORCH_MODEL_INPUT, ORCH_CONCURRENCY, ORCH_OUT
#   ORCH_INPUTS       one `name=value` per line; a line that does not start with `name=`
#                     continues the value above it, so `files=` followed by one path per
#                     line gives one newline-separated value (one agent per line in a fan-out)
#   ORCH_EXTRA_ARGS   more arguments, split like a shell would split words, with quotes
#                     honoured, but with no globbing, no variables and no command substitution
#   ORCH_PRINT_ARGS   when set, print the arguments NUL-separated instead of running orch
set -euo pipefail

args=(run "$ORCH_WORKFLOW")
[ -n "${ORCH_PROVIDER_INPUT:-}" ] && args+=(--provider "$ORCH_PROVIDER_INPUT")

name=""
value=""
flush() {
  if [ -n "$name" ]; then
    args+=(--input "$name=$value")
  fi
}
while IFS= read -r line || [ -n "$line" ]; do
  if [[ "$line" =~ ^[[:space:]]*([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$ ]]; then
    flush
    name=${BASH_REMATCH[1]}
    value=${BASH_REMATCH[2]}
  elif [ -n "$name" ]; then
    value+=$'\n'"$line"
  elif [[ "$line" =~ ^[[:space:]]*$ ]]; then
    continue
  else
    echo "::error::orch: the 'inputs' line '$line' is not name=value" >&2
    exit 2
  fi
done <<<"${ORCH_INPUTS:-}"
flush

[ -n "${ORCH_MODEL_INPUT:-}" ] && args+=(--model "$ORCH_MODEL_INPUT")
[ -n "${ORCH_CONCURRENCY:-}" ] && args+=(--concurrency "$ORCH_CONCURRENCY")
args+=(--out "${ORCH_OUT:-${RUNNER_TEMP:-/tmp}/orch-run-${GITHUB_RUN_ID:-0}-${GITHUB_RUN_ATTEMPT:-0}-${GITHUB_JOB:-job}}")

extra=()
if [ -n "${ORCH_EXTRA_ARGS:-}" ]; then
  # xargs splits on blanks and honours quotes and backslashes; it never globs or expands.
  if ! mapfile -d '' extra < <(printf '%s' "$ORCH_EXTRA_ARGS" | xargs printf '%s\0'); then
    echo "::error::orch: cannot split the 'args' input (unbalanced quotes?): $ORCH_EXTRA_ARGS" >&2
    exit 2
  fi
fi

if [ -n "${ORCH_PRINT_ARGS:-}" ]; then
  printf '%s\0' "${args[@]}" "${extra[@]}"
  exit 0
fi
exec "$ORCH_BIN" "${args[@]}" "${extra[@]}"
