#!/usr/bin/env bash
# The README's two commands on a fresh Debian 12, as a new user meets them: a root
# file system made by debootstrap (bookworm, minbase) that holds only git, make and
# gcc, this repository cloned into it (its HEAD), and there, as root, `make run` and
# `make test` exactly as written: they must install everything else themselves
# (scripts/install_deps.sh) and pass, every test that the chroot cannot support
# skipping with its reason. The CUDA toolkit is bind-mounted (read-only) where this
# machine has one, so nvcc builds the GPU trainer and tests in there too.
#
# What each command installs is measured there: the packages it adds and their size
# (dpkg's Installed-Size), the disk the root grows by outside the clone (apt's
# downloaded archives and lists included), and the services it adds (init scripts,
# enabled systemd units: none is the rule). `make encode` alone is measured by
# apt-get's simulation on the fresh root. Then, as CI, Slurm and munge are installed
# (never by the project's own install; a policy-rc.d keeps their daemons from being
# started) and e2e_slurm runs again with them.
#
# FRESH_ROOT_BARE=1 makes a barer root: no /etc/hosts (the machine's name resolves
# only through DNS) and /sys without what is mounted below it (no /sys/fs/cgroup,
# as in some containers): every test must pass or skip with its reason there too.
#
# Everything runs in a mount namespace of its own, so that no mount made for the
# run, or by a test inside it, outlives it; the check at the end also fails if a
# test left a network namespace mounted. The root lives in the clone
# (build/fresh_debian) and is removed afterwards; nothing is cached elsewhere.
# Prints how long each step took and the load while it ran.
#
#     bash .ci/fresh_debian.sh        (as root; env DEBIAN_MIRROR, KEEP_FRESH_ROOT=1, FRESH_ROOT_BARE=1)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORK=$REPO/build/fresh_debian
ROOT=$WORK/root
CUDA=/usr/local/cuda
BARE=${FRESH_ROOT_BARE:-0}
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
# for it (bad_input's 150 launches ran past their 20 minutes that way). A bare root
# has none.
if [[ $BARE == 1 ]]; then
    rm -f "$ROOT/etc/hosts"
    echo "bare root: no /etc/hosts, no /sys/fs/cgroup"
else
    printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
        "$(hostname)" > "$ROOT/etc/hosts"
fi
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

# footprint NAME: the root's installed packages (name and Installed-Size in KiB, to
# $WORK/packages.NAME), its disk in MiB outside the clone and the CUDA toolkit
# ($WORK/disk.NAME) and its services: init scripts and enabled systemd units
# ($WORK/services.NAME)
footprint() {
    dpkg-query --admindir="$ROOT/var/lib/dpkg" -W -f='${db:Status-Abbrev}|${Package}|${Installed-Size}\n' |
        awk -F'|' '$1 ~ /^ii/ { print $2, $3 }' | sort > "$WORK/packages.$1"
    du -sxm --exclude="$ROOT/root/gpt2cp" --exclude="$ROOT$CUDA" "$ROOT" | cut -f1 > "$WORK/disk.$1"
    (cd "$ROOT" && ls -d etc/init.d/* etc/systemd/system/*.wants/* 2>/dev/null || true) | sort > "$WORK/services.$1"
}
# added BEFORE AFTER WHAT: what WHAT added between two footprints
added() {
    local new n kib services
    new=$(comm -13 "$WORK/packages.$1" "$WORK/packages.$2")
    n=$(grep -c . <<< "$new" || true)
    kib=$(awk '{ s += $2 } END { print s + 0 }' <<< "$new")
    services=$(comm -13 "$WORK/services.$1" "$WORK/services.$2" | tr '\n' ' ')
    services=${services% }
    echo "== footprint: $3 adds $n packages, $((kib / 1024)) MiB installed (dpkg), $(($(cat "$WORK/disk.$2") - $(cat "$WORK/disk.$1"))) MiB of disk outside the clone (apt's archives and lists included); services added: ${services:-none}"
}
# simulated SET...: what apt-get would install on the root for install_deps.sh's SETs
simulated() {
    local pkgs n kib
    pkgs=$(in_root "apt-get install -s --no-install-recommends \$(bash scripts/install_deps.sh --list $*)" |
        awk '/^Inst / { print $2 }' | tr '\n' ' ')
    n=$(wc -w <<< "$pkgs")
    kib=$(in_root "apt-cache show --no-all-versions $pkgs" | awk '/^Installed-Size:/ { s += $2 } END { print s + 0 }')
    echo "== footprint: make $* alone would add $n packages, $((kib / 1024)) MiB installed (dpkg; apt-get's simulation on the fresh root)"
}
export -f step footprint added simulated
export ROOT CUDA WORK BARE
unshare --mount --propagation private bash -euo pipefail -c '
    source "$WORK/in_root.sh"
    mount -t proc proc "$ROOT/proc"
    # /sys with what a booted machine mounts below it (the cgroup hierarchies slurmd
    # needs); a bare root without them
    if [[ $BARE == 1 ]]; then mount --bind /sys "$ROOT/sys"; else mount --rbind /sys "$ROOT/sys"; fi
    mount --rbind /dev "$ROOT/dev"
    if [[ -x $CUDA/bin/nvcc ]]; then
        mkdir -p "$ROOT$CUDA"
        mount --bind "$CUDA" "$ROOT$CUDA"
        mount -o remount,bind,ro "$ROOT$CUDA"
        echo "the CUDA toolkit at $CUDA is bind-mounted (read-only)"
    fi
    mounts_before=$(wc -l < /proc/self/mounts)
    footprint fresh
    in_root "apt-get update -qq"
    simulated encode
    footprint updated
    step "make run" in_root "make run"
    footprint run
    added updated run "make run"
    step "make test" in_root "make test"
    footprint test
    added run test "make test (after make run)"
    # Slurm and munge as CI provides them (policy-rc.d: their services are not started
    # at install), and the Slurm test again with them
    printf "#!/bin/sh\nexit 101\n" > "$ROOT/usr/sbin/policy-rc.d"
    chmod +x "$ROOT/usr/sbin/policy-rc.d"
    step "apt-get install slurm-wlm munge (CI only)" in_root \
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge > /dev/null"
    rm "$ROOT/usr/sbin/policy-rc.d"
    footprint slurm
    added test slurm "slurm-wlm and munge (CI only)"
    step "e2e_slurm with Slurm" in_root "cd build/test && ctest --output-on-failure --output-junit slurm.xml -R ^e2e_slurm\$; \
        status=\$?; python3 /root/gpt2cp/test/lib/skip_summary.py slurm.xml; exit \$status"
    left=$(grep " $ROOT/run/netns" /proc/self/mounts || true)
    if [[ -n $left || $(wc -l < /proc/self/mounts) -ne $mounts_before ]]; then
        echo "FAIL: the tests left mounts behind:"
        diff <(echo) <(grep " $ROOT" /proc/self/mounts) | tail -n 5
        exit 1
    fi
    echo "ok   no mount left behind by the tests"
'
echo "PASS fresh Debian: make run and make test"
