#!/usr/bin/env bash
# The trainer warns, in one line at start-up, when a rank runs more OpenMP threads
# than the cores it may run on:
#   1. 2 ranks, each bound to one core (mpirun --bind-to core), OMP_NUM_THREADS =
#      the machine's cores: one warning line naming 2 of 2 ranks and their threads
#      and cores (more threads than the machine has would be clamped to its cores
#      at start-up, train/agree.h, so the binding is what makes them too many)
#   2. OMP_NUM_THREADS = 1: no warning
# (the check itself counts the affinity mask, whatever set it.)
#
#   bash test/e2e_thread_warning.sh      (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=e2e_thread_warning
source "$(dirname "$0")/lib/e2e_lib.sh"

COMMON=(-e d1 -b 1 -t 16 -x 1 -v 0 -s 0 -cp 2)
cores=$(getconf _NPROCESSORS_ONLN) # not nproc: it honours OMP_NUM_THREADS
if [[ $cores -lt 2 ]]; then echo "SKIP e2e_thread_warning: one core: no thread count exceeds a one-core binding without clamping"; exit 77; fi

LAUNCH=("$MPIRUN" --allow-run-as-root --oversubscribe --bind-to core)
OMP_NUM_THREADS=$cores train over 2
warnings=$(grep -c '^warning: .*OpenMP threads' "$WORK/over.out" || true)
expected="warning: 2 of 2 rank(s) run more OpenMP threads than the cores they are bound to (rank 0: $cores threads on 1 core(s))"
if [[ $warnings -ne 1 ]]; then fail "$cores threads on 1 core: $warnings warning lines, expected 1"; fi
if ! grep -qF "$expected" "$WORK/over.out"; then fail "$cores threads on 1 core: no line starting '$expected'"; fi

OMP_NUM_THREADS=1 train fits 2
if grep -q 'OpenMP threads' "$WORK/fits.out"; then fail "1 thread per rank: a warning was printed"; fi

finish
