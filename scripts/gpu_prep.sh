#!/usr/bin/env bash
# Prepares here, on a Debian machine with apt and the CUDA toolkit (no GPU needed),
# what the one-call GPU check (scripts/gpu_call.sh) needs and should not spend GPU
# time on, into one folder, gpu_prep/ (ignored by git), that the call carries:
#
#     make gpu_prep                              the GPU machine's sizes
#     GPU_PREP_SIZES=emulation make gpu_prep     the dry run's (CI runs the call under
#                                                the CUDA emulation: dev/cuda/emu/run.sh gpu_call)
#
#   sizes.sh       the sizes of every run of the call; the references are made with
#                  them, and the call reads them
#   ref/           the CPU twin's runs the check compares the GPU trainer with
#                  (main.log, -tl per-token losses), their data (short documents), and
#                  llm.c's bf16 model pair (test/lib/llmc_files.py bf16_models)
#   bin/gpu_probe  the call's first step (dev/cuda/gpu_probe.cu): a context, one tiny
#                  kernel; not in emulation
#   bin/FP32, bin/BF16   train_gpt2cp, test_gpu_kernels, test_gpu_attention_algorithms and
#                  bench_attention_gpu for sm_90, built here with nvcc (the call builds
#                  them there only where these do not start); not in emulation
#   bundle/        Open MPI for a GPU machine without it (scripts/gpu_bundle.sh); not
#                  in emulation
# The folder must stay under 56 MiB (the call carries 64 MiB, the sources included);
# a larger one is refused.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/script_lib.sh
usage="usage: [GPU_PREP_SIZES=gpu|emulation] bash scripts/gpu_prep.sh   (make gpu_prep)
  -h    this help"
no_arguments "$@"
PREP=gpu_prep
MAX_MIB=56                          # the call carries 64 MiB in all: the rest for the sources
SIZES=${GPU_PREP_SIZES:-gpu}
[[ $SIZES == gpu || $SIZES == emulation ]] || { echo "GPU_PREP_SIZES='$SIZES': gpu or emulation" >&2; exit 2; }
rm -rf "$PREP"
mkdir -p "$PREP/ref"

# ---- the sizes: NAME, then its value (shell text, as sizes.sh assigns it) on the GPU
# machine, then in the dry run under the CUDA emulation (every step, small); $PREP in
# a value is expanded where sizes.sh is sourced
# shellcheck disable=SC2016
sizes=(
    # the steps' timeouts and the call's deadline, scaled: an emulated step runs far
    # longer than a GPU's
    TIME_SCALE 1 40
    # every training of the check; the dry run's d1 weights read as 2 heads of 32 (made
    # below): Ulysses and the hybrid need 2 heads, and an emulated step's time goes with
    # the parameters (d2 has twice d1's)
    CHECK '(-e d2 -b 4 -t 256 -x 20 -f 0 -l 1e-3 -v 0 -s 0)'
          '(-e "$PREP/ref/d1_2heads.bin" -b 1 -t 64 -x 2 -f 0 -l 1e-3 -v 0 -s 0)'
    CHECK_STEPS 20 2
    # B x T: the per-token losses of a step
    CHECK_TOKENS 1024 64
    # the bf16 test models hold 64 positions: CHECK_TOKENS a step
    BF16_MODEL_SHAPE '(-b 16 -t 64)' '(-b 1 -t 64)'
    # test_gpu_attention_algorithms' ranks; none in the dry run: run.sh tests runs them
    # at 1 to 4 ranks already
    RING_RANKS '"1 2 3 4"' '""'
    # bench_attention_gpu under compute-sanitizer
    SANITIZED '(-t 256 -b 1 -nh 2 -hs 64 -r 1)' '(-t 64 -b 1 -nh 2 -hs 32 -r 1)'
    # the benchmark's
    ATTENTION_LENGTHS '"1024 4096 16384"' 64
    ATTENTION_SHAPE '(-b 1 -nh 12 -hs 64)' '(-b 1 -nh 2 -hs 32)'
    TRAIN_LENGTHS '"1024 4096 16384"' 64
    TRAIN_TOKENS 16384 64
    TRAIN_MODEL d12 d1
    TRAIN_STEPS 6 2
)
column=$([[ $SIZES == gpu ]] && echo 1 || echo 2)
{
    echo "# the $SIZES sizes of the call's runs (scripts/gpu_prep.sh says what each is for)"
    echo "PREP_SIZES=$SIZES"
    for ((i = 0; i < ${#sizes[@]}; i += 3)); do echo "${sizes[i]}=${sizes[i + column]}"; done
} > "$PREP/sizes.sh"
# shellcheck disable=SC1091
source "$PREP/sizes.sh"

# ---- the CPU twin's references
make -s train_gpt2cp_cpu
source test/lib/binary_files.sh
short_documents "$PREP/ref/short_documents.bin" $((CHECK_STEPS * CHECK_TOKENS + 1))
mkdir -p "$PREP/ref/bf16_models"
python3 test/lib/llmc_files.py bf16_models "$PREP/ref/bf16_models" > /dev/null
MPIRUN=(mpirun --bind-to none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
if [[ $SIZES == emulation ]]; then
    # the emulated check's model: d1's weights, 2 heads in the checkpoint header
    "${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu -e d1 -b 1 -t 64 -x 0 -n 1 -v 0 -s 0 -o "$PREP/ref/d1" > /dev/null
    cp "$PREP/ref/d1/model_00000000.bin" "$PREP/ref/d1_2heads.bin"
    put_i32 "$PREP/ref/d1_2heads.bin" 20 2
    rm -rf "$PREP/ref/d1"
fi
reference() {
    local name=$1
    shift
    echo "reference $name: ./train_gpt2cp_cpu ${CHECK[*]} $*"
    OMP_NUM_THREADS=$(nproc) "${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${CHECK[@]}" -cp 1 -o "$PREP/ref/$name" \
        -tl "$PREP/ref/$name.tl" "$@" > "$PREP/ref/$name.out"
}
reference cpu_cp1
reference cpu_docs_cp1 -dm 1 -sh 0 -i "$PREP/ref/short_documents.bin"
reference cpu_v3 -e "$PREP/ref/bf16_models/exact_v3.bin" -i "$PREP/ref/bf16_models/tokens.bin" "${BF16_MODEL_SHAPE[@]}"
rm -f "$PREP"/ref/*/model_*.bin "$PREP"/ref/*/state_*.bin "$PREP"/ref/*/DONE_*

# ---- the GPU binaries and the MPI bundle (the GPU machine's only)
if [[ $SIZES == gpu ]]; then
    NVCC=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
    [[ -x $NVCC ]] || { echo "gpu_prep: no nvcc at $NVCC (set CUDA_HOME)" >&2; exit 1; }
    # each precision in its own copy of the sources (both builds write the same names)
    for p in FP32 BF16; do
        tree=build/precision/$p
        mkdir -p "$PREP/bin/$p"
        precision_tree . "$tree"
        make -s -C "$tree" -j 2 PRECISION=$p train_gpt2cp bench_attention_gpu build/gpu/test_gpu_kernels \
            build/gpu/test_gpu_attention_algorithms
        cp "$tree/train_gpt2cp" "$tree/bench_attention_gpu" "$tree/build/gpu/test_gpu_kernels" \
            "$tree/build/gpu/test_gpu_attention_algorithms" "$PREP/bin/$p/"
        strip "$PREP/bin/$p/"*
    done
    make -s gpu_probe
    mv gpu_probe "$PREP/bin/gpu_probe"
    bash scripts/gpu_bundle.sh "$PREP/bundle"
fi
git rev-parse HEAD > "$PREP/commit" 2> /dev/null || echo unknown > "$PREP/commit"
size=$(du -sm "$PREP" | cut -f1)
echo "gpu_prep: ${size} MiB ($SIZES sizes); carry it with the call: scripts/gpu_call.sh"
if [[ $size -gt $MAX_MIB ]]; then
    echo "error: gpu_prep is ${size} MiB, over its ${MAX_MIB} MiB (the call carries 64 MiB, the sources included)" >&2
    exit 1
fi
