#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test gpt2cp, from Debian's
# packages: Open MPI, OpenBLAS (its OpenMP build, so its threads do not fight ours),
# CMake, clang with its libFuzzer runtime (the fuzz tests), PCRE2 (the tokenizer's
# pre-tokenizer, ./encode), gnuplot (layout and loss-curve plots), iproute2 and procps
# (the two-host test's network namespaces, the tests' process look-ups), python3 (the
# tests' independent reference computations), Node.js and npm (the reference GPT-2
# encoder the encoder test compares with), Slurm and munge (the Slurm batch script's
# test), and g++ where the CUDA toolkit is (nvcc compiles host code with it).
# As root it installs them; otherwise it prints the command to run and fails.
set -euo pipefail
source "$(dirname "$0")/script_lib.sh"
usage="usage: bash scripts/install_deps.sh   (as root; otherwise it prints the command)
  -h    this help"
no_arguments "$@"

packages=(openmpi-bin libopenmpi-dev libopenblas-openmp-dev cmake make gcc clang libclang-rt-14-dev libpcre2-dev
          gnuplot-nox iproute2 procps python3 slurm-wlm munge)
[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] && packages+=(g++)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm by command: a machine may have them from elsewhere (NodeSource's
# nodejs bundles npm, and Debian's npm package conflicts with it)
command -v node > /dev/null 2>&1 || missing+=(nodejs)
command -v npm > /dev/null 2>&1 || missing+=(npm)
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
