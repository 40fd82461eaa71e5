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
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
