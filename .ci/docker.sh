#!/usr/bin/env bash
# Makes a Docker engine and the local test image available for the container backend's
# tests (sandbox/tests/container.rs). Idempotent: run it as often as you like.
#
#  1. installs docker.io (Debian/Ubuntu) if `dockerd` is missing;
#  2. starts dockerd in the background (log: $ORCH_DOCKERD_LOG, default
#     /tmp/orch-dockerd.log) if the engine does not answer, and waits up to 60 s;
#  3. builds the test images if they are missing or stale (Docker Hub is not needed: the
#     root filesystems are made locally and loaded with `docker import`):
#     - `orch-test:busybox`: busybox-static plus this machine's glibc runtime (the
#       loader, libc, libm, libgcc_s and friends), so the dynamically linked orch binary
#       built on this machine runs in it;
#     - `orch-test:bare`: busybox-static alone; only a statically linked orch runs in it;
#     - `orch-test:tools`: `orch-test:busybox` plus bash, git and python3 (with its
#       standard library), copied with every library they link from this machine's
#       Debian packages (`dpkg -L`), so the containment suite runs its bash, git and
#       python cases in a container too and no case passes because a tool is missing.
#       `ORCH_ROOTFS_ONLY=DIR .ci/docker.sh` only assembles that root file system in DIR
#       (no engine needed), to check it with `chroot DIR bash -c 'git --version'`.
#
# Needs root, or sudo without a password (GitHub runners). Fails loudly (exit 1) when the
# engine cannot be installed or started: the container tests must not pass silently.
set -euo pipefail

IMAGE="${ORCH_TEST_IMAGE:-orch-test:busybox}"
LOG="${ORCH_DOCKERD_LOG:-/tmp/orch-dockerd.log}"
SOCK=/var/run/docker.sock

die() { echo "docker.sh: $*" >&2; exit 1; }
trap 'echo "docker.sh: failed at line $LINENO (exit $?)" >&2' ERR
say() { echo "docker.sh: $*"; }

# The tools for orch-test:tools: where each comes from on this machine.
TOOL_PATHS="/bin/bash /usr/bin/git /usr/lib/git-core /usr/share/git-core /usr/bin/python3"

# add_tools ROOT: copies bash, git and python3 into ROOT with the shared libraries of
# every ELF file copied (ldd), and python's standard library (without its tests).
add_tools() {
    local root=$1 path python lib
    python=$(readlink -f /usr/bin/python3 2>/dev/null || true)
    for path in $TOOL_PATHS; do
        [ -e "$path" ] || { echo "docker.sh: $path is missing on this machine (apt-get install bash git python3-minimal)" >&2; return 1; }
    done
    for path in $TOOL_PATHS "$python" "/usr/lib/$(basename "$python")"; do
        [ -e "$path" ] || continue
        mkdir -p "$root$(dirname "$path")"
        cp -a "$path" "$root$(dirname "$path")/"
        if [ -L "$path" ]; then cp -aL "$path" "$root$path.real" && mv "$root$path.real" "$root$path"; fi
    done
    rm -rf "$root/usr/lib/$(basename "$python")"/{test,idlelib,tkinter,turtledemo,ensurepip}
    # /bin/sh stays busybox; bash is /bin/bash (and /usr/bin/bash).
    ln -sf /bin/bash "$root/usr/bin/bash"
    ln -sf "$(basename "$python")" "$root/usr/bin/python3"
    # Every library any copied ELF file needs.
    find "$root/bin/bash" "$root/usr/bin" "$root/usr/lib" -type f \( -perm -u+x -o -name '*.so*' \) -print0 \
        | { xargs -0 ldd 2>/dev/null || true; } | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }' | sort -u \
        | while read -r lib; do
            [ -e "$root$lib" ] && continue
            mkdir -p "$root$(dirname "$lib")"
            cp -L "$lib" "$root$lib"
        done
}

if [ -n "${ORCH_ROOTFS_ONLY:-}" ]; then
    mkdir -p "$ORCH_ROOTFS_ONLY"/{bin,usr/bin,etc,tmp}
    add_tools "$ORCH_ROOTFS_ONLY"
    echo "docker.sh: tools root file system in $ORCH_ROOTFS_ONLY ($(du -sh "$ORCH_ROOTFS_ONLY" | cut -f1))"
    exit 0
fi

SUDO=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "not root and no sudo: cannot install or start Docker"
    SUDO=(sudo -n)
fi

engine_up() { "${SUDO[@]}" docker version >/dev/null 2>&1; }

# 1. The engine and the client.
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    if ! engine_up; then
        say "installing docker.io"
        export DEBIAN_FRONTEND=noninteractive
        "${SUDO[@]}" apt-get update -qq || die "apt-get update failed"
        "${SUDO[@]}" apt-get install -y -qq docker.io >/dev/null || die "apt-get install docker.io failed"
    fi
fi

# 2. The daemon.
if ! engine_up; then
    if [ -S "$SOCK" ] && pgrep -x dockerd >/dev/null 2>&1; then
        say "dockerd is running but not answering yet; waiting"
    else
        say "starting dockerd (log: $LOG)"
        "${SUDO[@]}" rm -f /var/run/docker.pid
        # setsid: the daemon outlives this script and does not get its signals.
        "${SUDO[@]}" sh -c "setsid dockerd >>'$LOG' 2>&1 < /dev/null &"
    fi
    for _ in $(seq 1 60); do
        engine_up && break
        sleep 1
    done
    if ! engine_up; then
        echo "---- last lines of $LOG" >&2
        "${SUDO[@]}" tail -n 40 "$LOG" >&2 || true
        die "the Docker engine did not start within 60 s; see $LOG"
    fi
fi
say "engine up: $("${SUDO[@]}" docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')"
# The tests talk to the engine as the current user. On a CI machine (CI=true), open the
# socket to it if need be; anywhere else, say what to do.
if [ "$(id -u)" != 0 ] && ! docker version >/dev/null 2>&1; then
    [ "${CI:-}" = true ] || die "$(id -un) cannot use $SOCK; add it to the docker group (then log in again)"
    "${SUDO[@]}" chmod 666 "$SOCK" || die "cannot make $SOCK usable by $(id -un)"
fi

# 3. The test images.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

busybox_bin() {
    if [ -x /bin/busybox ] && ldd /bin/busybox 2>&1 | grep "not a dynamic" >/dev/null; then
        echo /bin/busybox; return
    fi
    (cd "$WORK" && apt-get download busybox-static >/dev/null 2>&1) \
        || { "${SUDO[@]}" apt-get update -qq && (cd "$WORK" && apt-get download busybox-static >/dev/null); } \
        || return 1
    dpkg-deb -x "$WORK"/busybox-static_*.deb "$WORK/busybox" || return 1
    echo "$WORK/busybox/bin/busybox"
}
BUSYBOX=$(busybox_bin) && [ -x "$BUSYBOX" ] || die "cannot find or download a static busybox (busybox-static)"

# The glibc runtime of this machine: what a Rust binary built here links against.
# libz: git2 links the system zlib into orch.
LIBS="libc.so.6 libm.so.6 libgcc_s.so.1 libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 libz.so.1"
LDCONFIG=$(command -v ldconfig || echo /sbin/ldconfig)
loader=$(ldd /bin/true | awk '/ld-linux/ { print $1 }')
[ -n "$loader" ] || die "cannot find the dynamic loader of this machine (ldd /bin/true)"
lib_paths=("$loader")
for lib in $LIBS; do
    path=$("$LDCONFIG" -p | awk -v l="$lib" '!found && $1 == l && $0 ~ /x86-64|AArch64|64bit/ { print $NF; found = 1 }')
    [ -n "$path" ] && lib_paths+=("$path")
done
glibc=$(ldd --version 2>&1 | awk 'NR == 1 { print $NF }')

# build_image NAME WITH_GLIBC [TOOLS]: busybox, plus this machine's glibc runtime if
# WITH_GLIBC=1, plus bash, git and python3 if TOOLS=1.
build_image() {
    local image=$1 with_glibc=$2 tools=${3:-0} fingerprint have root
    fingerprint=$( (echo "$with_glibc $tools"; sha256sum <"$BUSYBOX"; sha256sum <"$0"
        if [ "$with_glibc" = 1 ]; then for p in "${lib_paths[@]}"; do sha256sum <"$p"; done; fi
        if [ "$tools" = 1 ]; then for p in /bin/bash /usr/bin/git /usr/bin/python3; do sha256sum <"$(readlink -f "$p")"; done; fi) \
        | sha256sum | cut -c1-16)
    have=$("${SUDO[@]}" docker image inspect -f '{{ index .Config.Labels "orch.fingerprint" }}' "$image" 2>/dev/null || true)
    if [ "$have" = "$fingerprint" ]; then
        say "image $image is up to date ($fingerprint)"
        return
    fi
    say "building $image (glibc runtime: $with_glibc, fingerprint $fingerprint)"
    root="$WORK/root-$with_glibc-$tools"
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,proc,sys,dev,home,root,orch}
    chmod 1777 "$root/tmp"
    cp "$BUSYBOX" "$root/bin/busybox"
    for applet in $("$root/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    local label="orch.fingerprint=$fingerprint"
    if [ "$with_glibc" = 1 ]; then
        for p in "${lib_paths[@]}"; do
            mkdir -p "$root$(dirname "$p")"
            cp -L "$p" "$root$p"
        done
        label="$label orch.glibc=$glibc"
    fi
    if [ "$tools" = 1 ]; then
        add_tools "$root" || die "cannot copy bash, git and python3 into $image"
    fi
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' > "$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
    tar -C "$root" -c . | "${SUDO[@]}" docker import \
        --change "LABEL $label" \
        --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' \
        --change 'CMD ["/bin/sh"]' \
        - "$image" >/dev/null || die "docker import of $image failed"
    # Smoke test: the shell runs, and so does the glibc loader where there is one.
    local check="ls /proc >/dev/null"
    [ "$with_glibc" = 1 ] && check="$check && $loader --version >/dev/null"
    [ "$tools" = 1 ] && check="$check && bash -c 'echo \$BASH_VERSION' && git --version && python3 -c 'import json, subprocess, socket'"
    "${SUDO[@]}" docker run --rm --network none "$image" /bin/sh -c "$check" \
        || die "the new image $image does not pass its smoke test ($check)"
    say "built $image"
}

# orch-test:busybox runs the orch binary as built on this machine (dynamically linked).
build_image "$IMAGE" 1
# orch-test:bare is busybox alone: only a statically linked orch runs in it.
build_image "${ORCH_TEST_BARE_IMAGE:-orch-test:bare}" 0
# orch-test:tools adds bash, git and python3: the containment suite's image.
build_image "${ORCH_TEST_TOOLS_IMAGE:-orch-test:tools}" 1 1
# Earlier builds of the images, now untagged.
"${SUDO[@]}" docker image prune -f --filter label=orch.fingerprint >/dev/null || true
