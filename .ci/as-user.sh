#!/usr/bin/env bash
# Runs the sandbox suites as a normal user, the way GitHub-hosted runners run steps: an
# unprivileged user (default `runner`) in the `docker` group. Run it as root from the
# checkout, after a build as root (it reuses that target directory).
#
#  1. creates the user and the `docker` group if missing, puts the user in the group and
#     hands it the Docker socket's group (so the docker-socket cases face a socket the
#     user could really use: root on the machine if the sandbox let it through);
#  2. gives the user the built tree: the checkout and its target directory are chowned
#     to it for the run and handed back to their owner on exit;
#  3. gives it a toolchain without copying one: RUSTUP_HOME is root's (read only; every
#     directory above it is opened for traversal with o+x), and CARGO_HOME is a fresh
#     directory of the user's whose registry and git caches are links to root's (read
#     only: the build is --offline and --locked, every crate is already there);
#  4. runs, as the user with `runuser`, the orch-sandbox tests, then the containment suite
#     and the `orch sandbox run` suite (`ORCH_AS_USER_TESTS` overrides the cargo test
#     arguments of that second run).
#
# ORCH_SKIP_DOCKER_TESTS=1 skips the container half, as in the other suites.
set -euo pipefail
cd "$(dirname "$0")/.."

USER_NAME="${ORCH_CI_USER:-runner}"
TREE=$(pwd)
TARGET="${CARGO_TARGET_DIR:-$TREE/target}"
ROOT_CARGO="${CARGO_HOME:-$HOME/.cargo}"
ROOT_RUSTUP="${RUSTUP_HOME:-$HOME/.rustup}"

die() { echo "as-user.sh: $*" >&2; exit 1; }
say() { echo "as-user.sh: $*"; }
[ "$(id -u)" = 0 ] || die "run me as root (I create a user and run the suites as it)"
command -v runuser >/dev/null || die "runuser (util-linux) is missing"

# 1. The user, in the docker group.
getent group docker >/dev/null || groupadd --system docker
if ! id "$USER_NAME" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash --groups docker "$USER_NAME"
    say "created $USER_NAME"
else
    usermod -aG docker "$USER_NAME"
fi
USER_HOME=$(getent passwd "$USER_NAME" | cut -d: -f6)
if [ -S /var/run/docker.sock ]; then
    chgrp docker /var/run/docker.sock && chmod 660 /var/run/docker.sock
    say "/var/run/docker.sock: $(stat -c '%U:%G %a' /var/run/docker.sock)"
else
    say "no /var/run/docker.sock: the docker-socket cases face no daemon (the container half needs .ci/docker.sh)"
fi
say "$USER_NAME is $(id "$USER_NAME")"

# 2. The built tree, the user's for the run.
owner=$(stat -c %u:%g "$TREE")
target_owner=$(stat -c %u:%g "$TARGET" 2>/dev/null || echo "$owner")
give_back() {
    chown -R "$owner" "$TREE" 2>/dev/null || true
    [ -d "$TARGET" ] && chown -R "$target_owner" "$TARGET" 2>/dev/null || true
}
trap give_back EXIT
chown -R "$USER_NAME:$USER_NAME" "$TREE"
[ -d "$TARGET" ] && chown -R "$USER_NAME:$USER_NAME" "$TARGET"
# Every directory above the tree and the target must be traversable.
open_path() {
    local dir=$1
    while [ "$dir" != / ]; do
        chmod o+x "$dir"
        dir=$(dirname "$dir")
    done
}
open_path "$TREE"
open_path "$TARGET"

# 3. The toolchain.
[ -d "$ROOT_RUSTUP" ] || die "no rustup home at $ROOT_RUSTUP"
open_path "$ROOT_RUSTUP"
open_path "$ROOT_CARGO/bin"
chmod -R o+rX "$ROOT_RUSTUP" "$ROOT_CARGO/bin"
USER_CARGO="$USER_HOME/.cargo-ci"
mkdir -p "$USER_CARGO"
for cache in registry git; do
    if [ -d "$ROOT_CARGO/$cache" ]; then
        chmod -R o+rX "$ROOT_CARGO/$cache"
        ln -sfn "$ROOT_CARGO/$cache" "$USER_CARGO/$cache"
    fi
done
chown -R "$USER_NAME:$USER_NAME" "$USER_CARGO"

# 4. The suites, as the user.
read -r -a TESTS <<<"${ORCH_AS_USER_TESTS:--p orch --test containment --test sandbox_run}"
ENV=(HOME="$USER_HOME" USER="$USER_NAME" LOGNAME="$USER_NAME"
    PATH="$ROOT_CARGO/bin:/usr/local/bin:/usr/bin:/bin"
    CARGO_HOME="$USER_CARGO" RUSTUP_HOME="$ROOT_RUSTUP" CARGO_TARGET_DIR="$TARGET"
    CARGO_TERM_COLOR=never CI="${CI:-true}")
for var in CARGO_INCREMENTAL ORCH_SKIP_DOCKER_TESTS ORCH_TEST_IMAGE RUST_BACKTRACE; do
    [ -n "${!var:-}" ] && ENV+=("$var=${!var}")
done
say "running as $USER_NAME: cargo test -p orch-sandbox, then cargo test ${TESTS[*]}"
runuser -u "$USER_NAME" -- env -i "${ENV[@]}" \
    bash -c 'cd "$1" && shift && id && cargo test --offline --locked -p orch-sandbox \
        && cargo test --offline --locked "$@"' as-user "$TREE" "${TESTS[@]}"
