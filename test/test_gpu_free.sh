#!/usr/bin/env bash
# train_gpt2cp on a machine without a GPU ends with one clear error line and a
# non-zero exit, never a crash or a hang: alone, under mpirun with 2 ranks, and with
# -ct mpi. Skipped (77) where a GPU is present (gpu_check.sh tests the trainer
# there) or where train_gpt2cp was not built (no nvcc).
set -uo pipefail
REPO_ROOT=${REPO_ROOT:-$(pwd)}
MPIRUN=${MPIRUN:-mpirun}
TRAINER=$REPO_ROOT/train_gpt2cp
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "SKIP: a GPU is present"
    exit 77
fi
if [[ ! -x $TRAINER ]]; then
    echo "SKIP: $TRAINER is not built (no nvcc?)"
    exit 77
fi
cd "$REPO_ROOT"
failures=0
# expect NAME COMMAND...: non-zero exit, exactly one 'error:' line naming what is
# missing: the GPU, or its driver (this machine's runtime finds no libcuda)
expect() {
    local name=$1
    shift
    local out rc
    out=$(timeout 60 "$@" 2>&1)
    rc=$?
    local errors
    errors=$(grep -c '^error:' <<< "$out")
    if [[ $rc -eq 0 || $rc -eq 124 ]] || [[ $errors -ne 1 ]] || ! grep -qE '^error: no CUDA (device|driver) found' <<< "$out" ||
        grep -qiE 'segmentation|core dumped|signal [0-9]|terminate called' <<< "$out"; then
        echo "FAIL $name: exit $rc, $errors error line(s); output:"
        echo "$out" | head -20
        failures=$((failures + 1))
    else
        echo "ok   $name: exit $rc, $(grep '^error:' <<< "$out")"
    fi
}
expect "alone" "$TRAINER" -x 1
expect "2 ranks" "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$TRAINER" -x 1 -cp 2
expect "2 ranks -ct mpi" "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$TRAINER" -x 1 -cp 2 -ct mpi
echo "$((3 - failures)) of 3 checks ok"
[[ $failures -eq 0 ]]
