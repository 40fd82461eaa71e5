#!/usr/bin/env bash
# `make run`: installs what is missing, builds, and trains the embedded default
# (scripts/default_config.sh) with context parallelism over 2 ranks, round_robin
# layout, for about 3 minutes on 2 CPU cores: the loss falls from ~10.9 and a
# short sample is printed at the end. Where GPUs and the CUDA toolkit are present
# it trains with train_gpt2cp on every GPU instead (cp = number of GPUs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/script_lib.sh
usage="usage: bash scripts/run_default.sh   (make run)
  -h    this help"
no_arguments "$@"
source scripts/default_config.sh

bash scripts/install_deps.sh

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
