#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test gpt2cp: Open MPI,
# OpenBLAS (its OpenMP build, so its threads do not fight ours), CMake, clang with
# its libFuzzer runtime (the fuzz tests), gnuplot (layout and loss-curve plots) and
# iproute2 (the two-host test's network namespaces; util-linux's unshare names them).
# As root it installs them; otherwise it prints the command to run and fails.
set -euo pipefail

packages=(openmpi-bin libopenmpi-dev libopenblas-openmp-dev cmake make gcc clang libclang-rt-14-dev gnuplot-nox iproute2)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

command="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "gpt2cp needs: ${missing[*]}" >&2
    echo "run as root:  $command" >&2
    exit 1
fi
# the steps are announced and apt-get's own lines (fetching, unpacking, setting up
# each package) show, so a first run that takes minutes is visibly moving
echo "installing ${#missing[@]} package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
echo "[1/2] apt-get update"
apt-get update -q
echo "[2/2] apt-get install (download and set up; a few minutes on a fresh machine)"
set +e
apt-get install -y -q --no-install-recommends -o Dpkg::Progress-Fancy=0 "${missing[@]}" 2>&1 |
    grep --line-buffered -E '^(Get:|Unpacking|Setting up|E:)'
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || { echo "apt-get install failed (exit $status)" >&2; exit "$status"; }
echo "installed: ${missing[*]}"
