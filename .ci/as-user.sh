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
#  3. builds the tests once, as root, into a nextest archive (nothing is compiled as
#     the user, and no toolchain is shared);
#  4. runs, as the user with `runuser`, the archive's orch-sandbox tests and the orch
#     binary's suites (containment, `orch sandbox run`, workflows end to end);
#     `ORCH_AS_USER_FILTER` overrides the nextest filter.
#
# ORCH_SKIP_DOCKER_TESTS=1 skips the container half, as in the other suites.
# ORCH_AS_USER_SUDO=1 gives the user passwordless sudo for the run, as GitHub's hosted
# runners have it (installing sudo if it is missing); otherwise the user has none (any
# sudoers entry or delegated cgroup of an earlier run is removed), the case of a
# self-hosted runner, and the default run ends with the memory cases again with sudo.
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

# Passwordless sudo, or none (`sudo_for_user on|off`).
SUDOERS=/etc/sudoers.d/orch-as-user
sudo_for_user() {
    if [ "$1" = on ]; then
        if ! command -v sudo >/dev/null; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q sudo >/dev/null 2>&1 ||
                { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q sudo >/dev/null; } ||
                die "cannot install sudo"
        fi
        echo "$USER_NAME ALL=(ALL) NOPASSWD:ALL" > "$SUDOERS"
        chmod 0440 "$SUDOERS"
        say "$USER_NAME has passwordless sudo"
    else
        rm -f "$SUDOERS"
        # Nor the cgroup an earlier run's sudo delegated to it (empty directories only).
        local uid
        uid=$(id -u "$USER_NAME")
        # A process of the last suite may still be leaving it: retry for a few seconds,
        # or the next suite without sudo finds a delegated cgroup it should not have.
        local try
        for try in 1 2 3 4 5 6 7 8 9 10; do
            find /sys/fs/cgroup -depth -type d -name "orch-u$uid" -exec sh -c \
                'find "$1" -depth -type d -exec rmdir {} + 2>/dev/null' _ {} \; 2>/dev/null || true
            [ -z "$(find /sys/fs/cgroup -type d -name "orch-u$uid" 2>/dev/null | head -1)" ] && break
            sleep 1
        done
        [ -n "$(find /sys/fs/cgroup -type d -name "orch-u$uid" 2>/dev/null | head -1)" ] &&
            say "warning: cannot remove the cgroup orch-u$uid delegated by an earlier run"
        say "$USER_NAME has no sudo"
    fi
}
if [ "${ORCH_AS_USER_SUDO:-0}" = 1 ]; then sudo_for_user on; else sudo_for_user off; fi

# 2. The built tree, the user's for the run.
owner=$(stat -c %u:%g "$TREE")
target_owner=$(stat -c %u:%g "$TARGET" 2>/dev/null || echo "$owner")
give_back() {
    sudo_for_user off >/dev/null
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

# The toolchain (some suites run cargo and rustc inside the sandbox) and the MCP
# fixture's python interpreter stay root's, opened for reading, and appear in the
# user's home as links, where a runner's own toolchain would be (the sandbox's read
# roots are the user's ~/.cargo/bin, ~/.rustup and ~/.pyenv).
user_link() { # user_link TARGET NAME: $USER_HOME/NAME -> TARGET
    [ -e "$1" ] || return 0
    open_path "$1"
    chmod -R o+rX "$1"
    mkdir -p "$(dirname "$USER_HOME/$2")"
    ln -sfn "$1" "$USER_HOME/$2"
}
user_link "$ROOT_RUSTUP" .rustup
user_link "$ROOT_CARGO/bin" .cargo/bin
if [ -e "$TARGET/mcp-venv/bin/python" ]; then
    python=$(readlink -f "$TARGET/mcp-venv/bin/python")
    case "$python" in
        "$HOME"/.pyenv/*) user_link "$HOME/.pyenv" .pyenv ;;
        *) open_path "$python" ;;
    esac
    chmod -R o+rX "$TARGET/mcp-venv"
fi
chown -h "$USER_NAME:$USER_NAME" "$USER_HOME/.rustup" "$USER_HOME/.cargo" "$USER_HOME/.cargo/bin" "$USER_HOME/.pyenv" 2>/dev/null || true

# 3. The tests, built once as root into a nextest archive; the user runs the archive,
#    so nothing is compiled twice and no toolchain or cargo home is shared.
ARCHIVE="$TARGET/orch-as-user.tar.zst"
say "building the test archive as $(id -un)"
cargo nextest archive --locked --workspace --archive-file "$ARCHIVE"
chown "$USER_NAME:$USER_NAME" "$ARCHIVE"
NEXTEST=$(command -v cargo-nextest) || die "cargo-nextest is missing"
install -m 0755 "$NEXTEST" "$USER_HOME/cargo-nextest"

# 4. The suites, as the user: the sandbox crate's tests and the binary's end-to-end
#    suites (containment, orch sandbox run, workflows, exec, CI mode). ORCH_AS_USER_FILTER
#    overrides the filter expression.
FILTER="${ORCH_AS_USER_FILTER:-package(orch-sandbox) | package(orch)}"
ENV=(HOME="$USER_HOME" USER="$USER_NAME" LOGNAME="$USER_NAME"
    PATH="$USER_HOME/.cargo/bin:/usr/local/bin:/usr/bin:/bin"
    INSTA_WORKSPACE_ROOT="$TREE" INSTA_UPDATE=no CARGO_TERM_COLOR=never CI="${CI:-true}")
for var in ORCH_SKIP_DOCKER_TESTS ORCH_TEST_IMAGE RUST_BACKTRACE; do
    [ -n "${!var:-}" ] && ENV+=("$var=${!var}")
done
suite() { # suite FILTER
    say "running as $USER_NAME: nextest over the archive, filter: $1"
    runuser -u "$USER_NAME" -- env -i "${ENV[@]}" \
        "$USER_HOME/cargo-nextest" nextest run --archive-file "$ARCHIVE" --workspace-remap "$TREE" \
        --no-fail-fast -E "$1"
}
status=0
suite "$FILTER" || status=$?
# 5. The default run (no sudo) again with passwordless sudo, as GitHub's hosted runners
#    have it, for the cases that differ: the per-agent memory limit through a cgroup
#    that sudo delegates, and the cgroup unit tests.
if [ -z "${ORCH_AS_USER_FILTER:-}" ] && [ "${ORCH_AS_USER_SUDO:-0}" != 1 ]; then
    sudo_for_user on
    suite 'test(memory_limit) | test(cgroup::)' || status=$?
    sudo_for_user off
fi
exit "$status"
