#!/usr/bin/env bash
# Runs each recipe of examples/github/ as a user would: in a fresh git repository that
# is not orch's (a small Go module), with the files installed where the recipe's header
# says (its `install: SRC -> DEST` lines, committed on the default branch), and its jobs
# run offline by tests/recipes/actions.py (a stand-in for the Actions runner: the
# environment GitHub sets, a clone per job, artifacts, job outputs and matrices, and
# the orch Action's own .github/action/run.sh) with the scripted provider and the
# turns beside this file. Then it checks what each recipe must do.
#
#   tests/recipes/run.sh [RECIPE...]     (default: every recipe below)
#
# ORCH_BIN: the orch binary (default: $CARGO_TARGET_DIR or target, /debug/orch).
# Needs git, jq, and python3 with PyYAML (Debian/Ubuntu: python3-yaml; GitHub's
# runner images have it). The CLI test `recipes` runs this script.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
ORCH_BIN=${ORCH_BIN:-${CARGO_TARGET_DIR:-$source_dir/target}/debug/orch}
[ -x "$ORCH_BIN" ] || { echo "run.sh: no orch binary at $ORCH_BIN; build it (cargo build -p orch) or set ORCH_BIN" >&2; exit 2; }
python3 -c 'import yaml' 2>/dev/null || { echo "run.sh: python3 with PyYAML is needed (apt-get install python3-yaml)" >&2; exit 2; }
command -v jq >/dev/null || { echo "run.sh: jq is needed" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/orch-recipes.XXXXXX")
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.com GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.com
export GIT_CONFIG_NOSYSTEM=1 HOME="$work/home"
mkdir -p "$HOME"
git config --global init.defaultBranch main
git config --global advice.detachedHead false

fail() { echo "run.sh: FAIL: $*" >&2; exit 1; }
check() { local what=$1; shift; "$@" || fail "$what"; echo "  ok: $what"; }

# A fresh Go module, not orch's, as the default branch of a bare `origin`.
new_repo() {
  local dir=$1
  git init -q "$dir/src" && cd "$dir/src"
  mkdir -p util docs
  printf 'module example.com/app\n\ngo 1.22\n' > go.mod
  cat > main.go <<'GO'
package main

import (
	"fmt"

	"example.com/app/util"
)

func main() {
	// TODO: greet by name
	fmt.Println("hello")
	fmt.Println(util.Shout("hi"))
}

func name() string { return "world" }
GO
  cat > util/strings.go <<'GO'
package util

import "strings"

// TODO: trim spaces too
// Shout upper-cases s.
func Shout(s string) string { return strings.ToUpper(strings.TrimSpace(s)) }
GO
  echo 'old notes' > docs/old.md
  git add -A && git commit -qm "a small Go module"
}

# Copies the recipe's files where its header's `install: SRC -> DEST` lines say, and
# commits them on the default branch.
install_recipe() {
  local recipe=$1 n=0
  while read -r src dest; do
    mkdir -p "$(dirname "$dest")"
    cp "$source_dir/$src" "$dest"
    n=$((n + 1))
  done < <(sed -n 's/^#[[:space:]]*install:[[:space:]]*\([^ ]*\)[[:space:]]*->[[:space:]]*\([^ ]*\)[[:space:]]*$/\1 \2/p' "$recipe")
  [ "$n" -gt 0 ] || fail "$recipe has no \`# install: SRC -> DEST\` line in its header"
  git add -A && git commit -qm "install $(basename "$recipe")"
}

publish_origin() {
  git clone -q --bare . "$1/origin.git"
}

run_jobs() {
  local recipe=$1 dir=$2
  mkdir -p "$dir/state"
  ORCH_SOURCE=$source_dir ORCH_BIN=$ORCH_BIN ORIGIN=$dir/origin.git REPOSITORY=example/app \
    ORCH_SCRIPT=$SCRIPT python3 "$here/actions.py" "$recipe" "$dir/state"
}

recipe_pr_review() {
  local dir=$work/pr-review recipe=$source_dir/examples/github/pr-review.yml
  echo "== pr-review"
  new_repo "$dir"
  install_recipe "$recipe"
  git checkout -q -b feature
  cat > util/math.go <<'GO'
package util

// Add returns a + b.
func Add(a, b int) int {
	return a + b
}
GO
  sed -i 's|^\tfmt.Println(util.Shout("hi"))$|&\n\tfmt.Println(util.Add(2, 3))|' main.go
  git rm -q docs/old.md
  git add -A && git commit -qm "add Add"
  local head; head=$(git rev-parse HEAD)
  # The base moves on after the fork: its change is not the pull request's.
  git checkout -q main
  printf '\nrequire example.com/other v1.0.0\n' >> go.mod
  git commit -qam "base moves on"
  local base; base=$(git rev-parse HEAD)
  publish_origin "$dir"
  jq -n --arg base "$base" --arg head "$head" '{
    action: "opened", number: 3,
    pull_request: { number: 3,
      base: { ref: "main", sha: $base, repo: { full_name: "example/app" } },
      head: { ref: "feature", sha: $head, repo: { full_name: "example/app" } } },
    repository: { full_name: "example/app", default_branch: "main" } }' > "$dir/event.json"
  cd "$dir"
  EVENT_NAME=pull_request EVENT_PATH=$dir/event.json REF=$head SCRIPT=$here/pr-review.script.yaml \
    run_jobs "$recipe" "$dir" || fail "pr-review: a job failed (the log is above)"
  local temp; temp=$(jq -r '.review.runner_temp' "$dir/state/result.json")
  local report; report=$(echo "$temp"/orch-run-*/report.json)
  check "the run wrote its report" test -f "$report"
  check "one reviewer per changed file, none for unchanged or deleted ones" \
    test "$(jq -c '[.agents[].id] | sort' "$report")" = '["review/main-go","review/util-math-go"]'
  check "every reviewer succeeded" test "$(jq -r '[.agents[].status] | unique | join(",")' "$report")" = succeeded
  check "the synthesized review is the answer" grep -q "Verdict: fine to merge" "$(dirname "$report")/report.md"
  check "the step summary was written" grep -q "review/util-math-go" "$(jq -r '.review.summary' "$dir/state/result.json")"
  check "the JUnit file was written" grep -q 'testcase' "$temp/orch-junit.xml"
  check "the review would be posted (a dry run without a token)" \
    grep -q 'util/math.go' "$(dirname "$report")/publish.json"
  check "the run directory was kept as an artifact" test -f "$dir/state/artifacts/orch-review/$(basename "$(dirname "$report")")/report.json"
}

recipe_nightly() {
  local dir=$work/nightly recipe=$source_dir/examples/github/nightly-refactor.yml
  echo "== nightly-refactor"
  new_repo "$dir"
  install_recipe "$recipe"
  publish_origin "$dir"
  jq -n '{ schedule: "17 2 * * *", repository: { full_name: "example/app", default_branch: "main" } }' \
    > "$dir/event.json"
  cd "$dir"
  EVENT_NAME=schedule EVENT_PATH=$dir/event.json REF=main SCRIPT=$here/nightly.script.yaml \
    run_jobs "$recipe" "$dir" || fail "nightly: a job failed (the log is above)"
  local result=$dir/state/result.json
  check "survey, four shards and merge ran green" \
    test "$(jq -r '[to_entries[] | "\(.key)=\(.value.status)"] | join(" ")' "$result")" = \
    "survey=success shard (0)=success shard (1)=success shard (2)=success shard (3)=success merge=success"
  check "no job compiled orch" bash -c "! grep -l 'cargo\\|Compiling' '$dir'/state/jobs/*/step-*.log"
  local branches; branches=$(git --git-dir="$dir/origin.git" for-each-ref --format='%(refname:short)' 'refs/heads/orch/')
  check "the shards pushed one branch per fixed file" \
    test "$(echo "$branches" | sed 's|^orch/[^/]*/||; s|-[0-9a-f]\{8\}$||' | sort | tr '\n' ' ')" = "fix-main-go fix-util-strings-go "
  local main_branch; main_branch=$(echo "$branches" | grep '/fix-main-go-')
  check "the fix is on its branch" bash -c "git --git-dir='$dir/origin.git' show '$main_branch:main.go' | grep -q 'hello, '"
  local merged; merged=$(jq -r '.merge.runner_temp' "$result")/merged
  check "orch merge joined every agent" \
    test "$(jq -c '[.agents[] | "\(.id)=\(.status)"] | sort' "$merged/report.json")" = \
    '["fix/main-go=succeeded","fix/util-strings-go=succeeded","survey=succeeded"]'
  check "synthesis ran once, in the merge" grep -q "Nothing was left" "$merged/report.md"
  check "the merge's step summary was written" test -s "$(jq -r '.merge.summary' "$result")"
  check "the issue would be posted (a dry run without a token)" grep -q 'TODO sweep' "$merged/publish.json"
}

recipe_triage() {
  local dir=$work/triage recipe=$source_dir/examples/github/issue-triage.yml
  echo "== issue-triage"
  new_repo "$dir"
  install_recipe "$recipe"
  publish_origin "$dir"
  # The body tries to run a command through the job's shell: it must stay text.
  jq -n --arg pwned "$dir/pwned" '{
    action: "opened",
    issue: { number: 7, title: "Shout drops the text \u0027 \\\" `true`",
             body: ("Calling util.Shout with spaces loses them.\n$(touch " + $pwned + ")\nname=value") },
    repository: { full_name: "example/app", default_branch: "main" } }' > "$dir/event.json"
  cd "$dir"
  EVENT_NAME=issues EVENT_PATH=$dir/event.json REF=main SCRIPT=$here/triage.script.yaml \
    run_jobs "$recipe" "$dir" || fail "issue-triage: a job failed (the log is above)"
  local temp; temp=$(jq -r '.triage.runner_temp' "$dir/state/result.json")
  local report=$temp/orch-triage/report.json
  check "the run wrote its report" test -f "$report"
  check "the triage agent succeeded" test "$(jq -r '.agents[0].status' "$report")" = succeeded
  check "the issue's body was not run by the shell" test ! -e "$dir/pwned"
  check "the comment would be posted on the issue (a dry run without a token)" \
    bash -c "grep -q 'automated triage' '$temp/orch-triage/publish.json' && grep -q '/issues/7/comments' '$temp/orch-triage/publish.json'"
  check "the run directory was kept as an artifact" test -f "$dir/state/artifacts/orch-triage/report.json"
}

recipes=("$@")
[ ${#recipes[@]} -gt 0 ] || recipes=(pr-review nightly triage)
for r in "${recipes[@]}"; do
  case $r in
    pr-review) recipe_pr_review ;;
    nightly) recipe_nightly ;;
    triage) recipe_triage ;;
    *) echo "run.sh: unknown recipe $r (pr-review, nightly, triage)" >&2; exit 2 ;;
  esac
done
echo "run.sh: every recipe ran green"
