#!/usr/bin/env bash
# `make run`: installs what is missing (make checks the packages of what it builds),
# builds, and trains the embedded default (scripts/default_config.sh) with context
# parallelism over 2 ranks, round_robin layout, 150 steps: the loss falls from
# 10.881069 to 5.788972 and a short sample is printed at the end. 2 min 12 s from a
# clean clone on 2 idle cores (load average 0.29 before) with the packages already
# installed; a first run adds their install: 2 min 21 s on a fresh Debian 12 root
# at load average 0.9 to 1.8 (docs/tests.md: what each command installs). Where GPUs and the CUDA toolkit are present
# it trains with train_gpt2cp on every GPU instead (cp = number of GPUs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/script_lib.sh
usage="usage: bash scripts/run_default.sh   (make run)
  -h    this help"
no_arguments "$@"
source scripts/default_config.sh

# sample once, at the end; a fresh run each time (a run refuses a directory that
# holds another run's checkpoints)
rm -rf out/default
flags=("${DEFAULT_FLAGS[@]}" -s 150 -o out/default)

gpus=$(gpus_available)
if [ "$gpus" -gt 0 ]; then
    make train_gpt2cp
    echo "training on $gpus GPU(s): cp $gpus, round_robin"
    exec mpirun "${MPIRUN_FLAGS[@]}" -np "$gpus" ./train_gpt2cp "${flags[@]}" -cp "$gpus" -cl round_robin
fi

make train_gpt2cp_cpu
echo "training on the CPU: 2 ranks, cp 2, round_robin"
exec mpirun "${MPIRUN_FLAGS[@]}" -np 2 ./train_gpt2cp_cpu "${flags[@]}" -cp 2 -cl round_robin
