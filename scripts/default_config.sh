# The embedded default run (sourced by scripts/run_default.sh and
# scripts/loss_curves.sh): a 16M-parameter GPT-2 (-e d4) on Jane Austen
# (dev/data/austen), 150 steps of 4 x 256 tokens, cosine schedule after 30 steps
# of warmup (with 10, the peak learning rate comes early enough to cause a loss spike).
source "$(dirname "${BASH_SOURCE[0]}")/script_lib.sh"
sourced_only "usage: source scripts/default_config.sh   (scripts/run_default.sh and scripts/loss_curves.sh do)" "$@"
DEFAULT_FLAGS=(-e d4 -b 4 -t 256 -x 150 -l 1e-3 -u 30 -q 0.1 -v 50 -m 5 -g 64)

# mpirun's flags for a workstation or container: more ranks than cores is fine,
# no binding (ranks share the cores), root allowed where we are root
MPIRUN_FLAGS=(--oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && MPIRUN_FLAGS+=(--allow-run-as-root)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# no hwloc OpenGL plugin: at every MPI start it probes X displays, each a lookup of
# "localhost", which without /etc/hosts goes to DNS (seconds where a reply is lost)
export HWLOC_COMPONENTS=${HWLOC_COMPONENTS:--gl}

# number of GPUs when the GPU trainer can be built and run here, else 0
gpus_available() {
    local n=0
    if command -v nvidia-smi > /dev/null 2>&1 && [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
        n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    fi
    echo "$n"
}
