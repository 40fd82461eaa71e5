#!/usr/bin/env bash
# The trainer warns, in one line at start-up, when a rank runs more OpenMP threads
# than the cores it may run on (mpirun's default binding gives a rank one core):
#   1. OMP_NUM_THREADS = the cores of this process + 1, 2 ranks: one warning line
#      naming 2 of 2 ranks and their threads and cores
#   2. OMP_NUM_THREADS = 1: no warning
# (--bind-to none throughout, so the cores are what the machine gives the test,
# nproc; the check itself counts the affinity mask, whatever set it.)
#
#   bash test/startup_warning.sh      (env: see e2e_lib.sh)
set -euo pipefail
E2E_NAME=startup_warning
source "$(dirname "$0")/e2e_lib.sh"

COMMON=(-e d1 -b 1 -t 16 -x 1 -v 0 -s 0 -cp 2)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # nproc honours OMP_NUM_THREADS

OMP_NUM_THREADS=$((cores + 1)) train over 2
warnings=$(grep -c '^warning: .*OpenMP threads' "$WORK/over.out" || true)
expected="warning: 2 of 2 rank(s) run more OpenMP threads than the cores they are bound to (rank 0: $((cores + 1)) threads on $cores core(s))"
if [[ $warnings -ne 1 ]]; then fail "$((cores + 1)) threads on $cores cores: $warnings warning lines, expected 1"; fi
if ! grep -qF "$expected" "$WORK/over.out"; then fail "$((cores + 1)) threads on $cores cores: no line starting '$expected'"; fi

OMP_NUM_THREADS=1 train fits 2
if grep -q 'OpenMP threads' "$WORK/fits.out"; then fail "1 thread per rank: a warning was printed"; fi

finish
