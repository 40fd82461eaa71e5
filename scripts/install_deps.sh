#!/usr/bin/env bash
# The Debian packages each command needs, checked; as root the missing ones are
# installed, otherwise the one command that installs them is printed and it fails.
# The Makefile calls it with the sets of the targets it is asked to build (one check
# for every target that compiles), so `make run` installs only what it builds and
# trains with and `make test` adds what the tests need.
#
#     bash scripts/install_deps.sh SET...          check, or install as root
#     bash scripts/install_deps.sh --list SET...   print the sets' packages, one a line
#
#   cc      gcc and the C library's headers (gcc alone does not bring them):
#           cp_layout, loss_mask
#   encode  cc and PCRE2 (the pre-tokenizer's regex): ./encode
#   mpi     cc and Open MPI (mpicc, mpirun)
#   run     mpi and OpenBLAS (its OpenMP build, so that its threads do not fight
#           ours): the CPU trainer, `make run`
#   gpu     mpi and g++ (nvcc compiles host code with it): the GPU trainer
#   plots   gnuplot and python3: scripts/loss_curves.sh, scripts/position_loss.sh
#   test    run, encode and plots, CMake, clang with its libFuzzer runtime (the fuzz
#           tests), iproute2 and procps (the two-host test's network namespaces, the
#           tests' process look-ups), strace (signals sent at a chosen system call,
#           the tools' test), Node.js and npm (the reference encoder the encoder test
#           compares with), and g++ where the CUDA toolkit is (the GPU tests are built
#           wherever nvcc is): `make test`
#   emu     mpi, clang++, g++ and python3: the CUDA emulation (dev/cuda/emu/run.sh)
#
# Nothing here starts a service: no package of these sets runs a daemon. Slurm and
# munge (test/e2e_slurm.sh) are never installed here, since Debian's packages enable
# and start their daemons; that test skips without them, and CI installs them itself.
set -euo pipefail
source "$(dirname "$0")/script_lib.sh"
usage="usage: bash scripts/install_deps.sh [--list] SET...   (SET: cc encode mpi run gpu plots test emu)
  --list  print the sets' packages, one a line, and install nothing
  -h      this help"

list=0
case ${1:-} in
-h|--help) echo "$usage"; exit 0 ;;
--list) list=1; shift ;;
-*) usage_error "unknown flag $1" ;;
esac
[[ $# -gt 0 ]] || usage_error "no set named"

packages=()
add_set() {
    case $1 in
    cc) packages+=(gcc libc6-dev) ;;
    encode) add_set cc; packages+=(libpcre2-dev) ;;
    mpi) add_set cc; packages+=(openmpi-bin libopenmpi-dev) ;;
    run) add_set mpi; packages+=(libopenblas-openmp-dev) ;;
    gpu) add_set mpi; packages+=(g++) ;;
    plots) packages+=(gnuplot-nox python3) ;;
    test)
        add_set run; add_set encode; add_set plots
        packages+=(cmake clang libclang-rt-14-dev iproute2 procps strace nodejs npm)
        if [[ -x ${CUDA_HOME:-/usr/local/cuda}/bin/nvcc ]]; then packages+=(g++); fi ;;
    emu) add_set mpi; packages+=(clang g++ python3) ;;
    *) usage_error "unknown set '$1'" ;;
    esac
}
for set in "$@"; do add_set "$set"; done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
if [[ $list -eq 1 ]]; then
    printf '%s\n' "${packages[@]}"
    exit 0
fi

missing=()
for p in "${packages[@]}"; do
    case $p in
    # Node.js and npm by command: a machine may have them from elsewhere (NodeSource's
    # nodejs bundles npm, and Debian's npm package conflicts with it)
    nodejs) command -v node > /dev/null 2>&1 || missing+=(nodejs) ;;
    npm) command -v npm > /dev/null 2>&1 || missing+=(npm) ;;
    *) dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p") ;;
    esac
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
