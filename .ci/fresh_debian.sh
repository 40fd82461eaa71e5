#!/usr/bin/env bash
# The README's two commands on a fresh Debian 12, as a new user meets them: a root
# file system made by debootstrap (bookworm, minbase) that holds only git, make and
# gcc, this repository cloned into it (its HEAD), and there, as root, `make run` and
# `make test` exactly as written: they must install everything else themselves
# (scripts/install_deps.sh) and pass, every test that the chroot cannot support
# skipping with its reason. The CUDA toolkit is bind-mounted (read-only) where this
# machine has one, so nvcc builds the GPU trainer and tests in there too.
#
# Everything runs in a mount namespace of its own, so that no mount made for the
# run, or by a test inside it, outlives it; the check at the end also fails if a
# test left a network namespace mounted. The root lives in the clone
# (build/fresh_debian) and is removed afterwards; nothing is cached elsewhere.
# Prints how long each step took and the load while it ran.
#
#     bash .ci/fresh_debian.sh        (as root; env DEBIAN_MIRROR, KEEP_FRESH_ROOT=1)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORK=$REPO/build/fresh_debian
ROOT=$WORK/root
CUDA=/usr/local/cuda
[[ $(id -u) -eq 0 ]] || { echo "error: .ci/fresh_debian.sh needs root (debootstrap, chroot, mounts)" >&2; exit 1; }

mounts_under_root() { grep -c " $ROOT[/ ]" /proc/self/mounts || true; }
remove_root() {
    # only once nothing is mounted in there (the namespace that held the mounts is gone)
    if [[ $(mounts_under_root) -ne 0 ]]; then
        echo "error: mounts under $ROOT remain; not removing it" >&2
        return 1
    fi
    rm -rf --one-file-system "$WORK"
}
[[ -e $WORK ]] && remove_root
mkdir -p "$WORK"
trap '[[ ${KEEP_FRESH_ROOT:-0} == 1 ]] || remove_root' EXIT

# step NAME COMMAND...: runs it, then prints its time and the load average before and after
step() {
    local name=$1 start=$SECONDS load_before
    shift
    load_before=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "== fresh Debian: $name"
    "$@"
    echo "== fresh Debian: $name took $((SECONDS - start)) s (load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg))"
}

if ! command -v debootstrap > /dev/null; then
    apt-get install -y -q --no-install-recommends debootstrap > /dev/null
fi
make_root() { debootstrap --variant=minbase --include=git,make,gcc bookworm "$ROOT" "$MIRROR" > "$WORK/debootstrap.log"; }
step "debootstrap bookworm (minbase + git, make, gcc)" make_root
# this machine's network as a fresh install here would be given it: its resolver, and
# the local certificate authorities it trusts (a TLS proxy's, where the registries are
# reached through one), which ca-certificates adds to the root's store when
# install_deps installs it
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# and its /etc/hosts as Debian's installer writes it (debootstrap writes none): the
# machine's own name resolves locally. Without it every lookup of the host name goes
# to DNS, and where DNS answers only by timing out, each mpirun launch waits seconds
# for it (bad_input's 150 launches ran past their 20 minutes that way)
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    "$(hostname)" > "$ROOT/etc/hosts"
if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
    mkdir -p "$ROOT/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
fi
git clone -q "$REPO" "$ROOT/root/gpt2cp"
echo "cloned $(git -C "$ROOT/root/gpt2cp" log -1 --format='%h %s' | cut -c1-100)"

# in_root COMMAND: a login-like shell in the fresh root, in the clone, with a clean environment
cat > "$WORK/in_root.sh" <<EOF
in_root() {
    chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        bash -c "cd /root/gpt2cp && \$1"
}
EOF
export -f step
export ROOT CUDA WORK
unshare --mount --propagation private bash -euo pipefail -c '
    source "$WORK/in_root.sh"
    mount -t proc proc "$ROOT/proc"
    # /sys with what a booted machine mounts below it (the cgroup hierarchies slurmd needs)
    mount --rbind /sys "$ROOT/sys"
    mount --rbind /dev "$ROOT/dev"
    if [[ -x $CUDA/bin/nvcc ]]; then
        mkdir -p "$ROOT$CUDA"
        mount --bind "$CUDA" "$ROOT$CUDA"
        mount -o remount,bind,ro "$ROOT$CUDA"
        echo "the CUDA toolkit at $CUDA is bind-mounted (read-only)"
    fi
    mounts_before=$(wc -l < /proc/self/mounts)
    step "make run" in_root "make run"
    step "make test" in_root "make test"
    left=$(grep " $ROOT/run/netns" /proc/self/mounts || true)
    if [[ -n $left || $(wc -l < /proc/self/mounts) -ne $mounts_before ]]; then
        echo "FAIL: the tests left mounts behind:"
        diff <(echo) <(grep " $ROOT" /proc/self/mounts) | tail -n 5
        exit 1
    fi
    echo "ok   no mount left behind by the tests"
'
echo "PASS fresh Debian: make run and make test"
