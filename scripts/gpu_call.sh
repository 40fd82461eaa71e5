#!/usr/bin/env bash
# The one call on a GPU machine (one H200 here is lent for minutes at a time): the
# GPU check (scripts/gpu_check.sh), then the benchmark (dev/bench/gpu_bench.sh),
# planned to end in under 8 minutes, whatever hangs or fails:
#
#     make gpu_prep                   here, where apt works: gpu_prep/ (binaries, the
#                                     CPU twin's references, Open MPI)
#     bash scripts/gpu_call.sh        there, with gpu_prep/ carried along
#
# Every step runs under its own timeout (60 s; a build, needed only where gpu_prep's
# binaries do not start, 300 s), with GPT2CP_TIMEOUT=60, and none starts after
# GPU_CALL_DEADLINE seconds (default 450; gpu_prep's TIME_SCALE scales both for the dry run). $OUT/summary.txt (build/gpu_call/ without
# OUT) gets a line as each step ends, so a hang or a failure leaves every other
# step's result; the check's and the benchmark's tables and logs lie beside it.
# Exits non-zero if either part failed.
#
# GPU_CALL_EMULATION=1 runs the same logic under the CUDA emulation (CI does:
# dev/cuda/emu/run.sh gpu_call), so that a broken script fails there, not on the GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/script_lib.sh
usage="usage: bash scripts/gpu_call.sh   (on the GPU machine, gpu_prep/ carried along)
  -h    this help
  env: OUT (the reports' folder), GPU_CALL_DEADLINE, GPU_CALL_EMULATION"
no_arguments "$@"
GPU_CALL_START=$(date +%s)
export GPU_CALL_START
# both parts report into one folder: $OUT on the GPU machine, else build/gpu_call
export OUT=${OUT:-$(pwd)/build/gpu_call}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
# the binaries' commit is gpu_prep's (the tree here may be another: a copy's .git can lag)
echo "GPU call: gpu_prep made at commit $(cut -c1-12 gpu_prep/commit 2> /dev/null || echo unknown)," \
    "this tree at $(git rev-parse --short=12 HEAD 2> /dev/null || echo unknown), $(date -u)" > "$SUMMARY"
bash scripts/gpu_check.sh
check=$?
bash dev/bench/gpu_bench.sh
bench=$?
echo "[$(($(date +%s) - GPU_CALL_START))s] the call: check exit $check, benchmark exit $bench" >> "$SUMMARY"
echo
cat "$SUMMARY"
[[ $check -eq 0 && $bench -eq 0 ]]
