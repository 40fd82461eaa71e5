#!/usr/bin/env bash
# `make run`: installs what is missing, builds, and trains the embedded default
# (Jane Austen, dev/data/austen) with context parallelism over 2 ranks,
# round_robin layout, for about 3 minutes on 2 CPU cores: the loss falls from
# ~10.9 and a short sample is printed at the end.
# Where GPUs and the CUDA toolkit are present it trains with train_gpt2cp on
# every GPU instead (cp = number of GPUs).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mpirun_flags=(--oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && mpirun_flags+=(--allow-run-as-root)

common=(-e d4 -b 4 -t 256 -x 150 -l 1e-3 -u 10 -q 0.1 -v 50 -m 5 -s 150 -g 64 -o out/default)

gpus=0
if command -v nvidia-smi > /dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
if [ "$gpus" -gt 0 ] && [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    make train_gpt2cp
    echo "training on $gpus GPU(s): cp $gpus, round_robin"
    exec mpirun "${mpirun_flags[@]}" -np "$gpus" ./train_gpt2cp "${common[@]}" -cp "$gpus" -cl round_robin
fi

make train_gpt2cp_cpu
echo "training on the CPU: 2 ranks, cp 2, round_robin"
exec mpirun "${mpirun_flags[@]}" -np 2 ./train_gpt2cp_cpu "${common[@]}" -cp 2 -cl round_robin
