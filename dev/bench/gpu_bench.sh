#!/usr/bin/env bash
# The GPU benchmark, the second half of the one call on a machine with an NVIDIA
# GPU (scripts/gpu_call.sh runs scripts/gpu_check.sh, then this). It needs gpu_prep/
# (make gpu_prep, where apt works), MPI, nvidia-smi and python3 with torch; without
# the last two their columns say "-". From the repo root:
#
#     bash dev/bench/gpu_bench.sh            (ATTENTION=0: skip part 2)
#
#   1. the toolchain and the binaries as scripts/gpu_check.sh has them
#   2. block attention (cp/attention_block.cuh) forward and backward, causal, B 1,
#      12 heads of 64, at T_local 1K, 4K, 16K (ATTENTION_LENGTHS), bf16 (the BF16
#      build), TF32 (-f 1) and exact fp32 (-f 0) (the FP32 build), beside PyTorch's
#      scaled_dot_product_attention on the same shapes and precision
#      (dev/bench/torch_bench.py, one process for them all)
#   3. GPT-2 124M training on one GPU at T 1K, 4K, 16K with B 16, 4, 1: the same
#      16,384 tokens per step at every T (a position table of T rows: -e d12 -mt T),
#      cp 1, -x 6: train_gpt2cp FP32 (-f 1: TF32 matmuls), train_gpt2cp BF16, and
#      PyTorch (dev/bench/gpt2_torch.py: the same model in plain torch, bf16 autocast,
#      fp32 master weights, fused AdamW, SDPA; eager, the median of 5 steps after 2).
#      tok/s: the trainers' mean over the steps after the first; MFU; peak device
#      memory: nvidia-smi's memory.used sampled every 100 ms through the run, the
#      most, less the reading before the run (so it includes the CUDA context and
#      every library's workspace, alike for all three)
# Every step under its own timeout of 60 s; summary.txt gets a line as each ends.
# Writes the tables (markdown, as dev/bench/README.md's) to $OUT/gpu_bench.txt (or
# build/gpu_bench/), the full log beside it.
#
# MFU = tok/s x (6 N + 6 L C T) / peak: N = 124,475,904 (d12's parameters with
# llm.c's 1024 positions; the longer position tables do no matmul work), 6 L C T
# the causal attention's Q K^T and P V, forward and backward (half of the 12 L C T
# of a full T x T). Peak: the H200's dense rates, the H100 SXM datasheet's: 989.4
# TFLOP/s bf16 for the BF16 build and PyTorch, 494.7 TF32 for the FP32 build
# (-f 1); 66.9 fp32 for -f 0 (attention only).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
GPU_SCRIPT=gpu_bench
# shellcheck source=scripts/gpu_toolchain.sh
source scripts/gpu_toolchain.sh || exit 1
[[ $HAVE_MPI -eq 1 ]] || { error "the benchmark needs MPI (the trainer is an MPI program)"; exit 1; }
HAVE_SMI=0
command -v nvidia-smi > /dev/null && HAVE_SMI=1
HAVE_TORCH=1
python3 -c 'import torch; assert torch.cuda.is_available()' 2> /dev/null ||
    { HAVE_TORCH=0; say "no python3 with torch and a GPU it sees: the PyTorch columns say '-'"; }
CT1=$([[ $HAVE_NCCL -eq 1 ]] && echo nccl || echo mpi)
read -ra LENGTHS <<< "$ATTENTION_LENGTHS"
GPU_NAME=$( ( [[ $HAVE_SMI -eq 1 ]] && nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -n 1 ) ||
            echo "the CUDA emulation")

# run_measured NAME LIMIT CMD...: run, with nvidia-smi sampling the memory in use on
# the GPU every 100 ms; sets PEAK_MIB (the most, less the reading before; "-" if
# no sample came)
run_measured() {
    local name=$1
    shift
    if [[ $HAVE_SMI -eq 0 ]]; then
        PEAK_MIB=-
        run "$name" "$@"
        return
    fi
    local query=(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0)
    local base
    base=$("${query[@]}" | head -n 1)
    "${query[@]}" -lms 100 > "$WORK/$name.mem" 2> /dev/null &
    local sampler=$!
    run "$name" "$@"
    local rc=$?
    kill "$sampler" 2> /dev/null
    wait "$sampler" 2> /dev/null
    PEAK_MIB=$(awk -v base="$base" '$1 ~ /^[0-9]+$/ { if ($1 > m) m = $1; n++ }
                                    END { if (n) print m - base; else print "-" }' "$WORK/$name.mem")
    return $rc
}
# mfu TOKS_PER_S T PEAK_FLOPS: the model flops utilisation of d12, in percent
mfu() { [[ $TRAIN_MODEL == d12 ]] || { echo -; return; }
        awk -v tps="$1" -v T="$2" -v peak="$3" 'BEGIN { if (tps !~ /^[0-9.]+$/) { print "-"; exit }
                                                    printf "%.1f%%", 100 * tps * (6 * 124475904 + 6 * 12 * 768 * T) / peak }'; }

echo "# GPU benchmark ($GPU_NAME, $PREP_SIZES sizes), $(date -u +%Y-%m-%d)" > "$TABLE"

# ---- 2. block attention beside SDPA
if [[ ${ATTENTION:-1} == 1 ]]; then
    {
        printf "\nBlock attention, causal, %s: ms (TFLOP/s)\n\n" "${ATTENTION_SHAPE[*]}"
        printf "| T | precision | ours forward | ours backward | SDPA forward | SDPA backward |\n"
        printf "| ---: | --- | ---: | ---: | ---: | ---: |\n"
    } >> "$TABLE"
    # "forward X ms (Y TFLOP/s), backward ..." -> "X (Y)" for forward or backward, of
    # the line of FILE holding PATTERN
    field() { grep -- "$3" "$1" 2> /dev/null | sed -n "s/.*$2 \([0-9.]*\) ms (\([0-9.]*\) TFLOP\/s).*/\1 (\2)/p" | head -n 1; }
    run sdpa 60 python3 dev/bench/torch_bench.py -t "${LENGTHS[@]}" "${ATTENTION_SHAPE[@]}" -p bf16 tf32 fp32 ||
        fail "torch sdpa"
    for T in "${LENGTHS[@]}"; do
        for prec in bf16 tf32 fp32; do
            build=$([[ $prec == bf16 ]] && echo BF16 || echo FP32)
            f=$([[ $prec == fp32 ]] && echo 0 || echo 1)
            run "attn_${T}_$prec" 60 "$(bin $build bench_attention_gpu)" -t "$T" "${ATTENTION_SHAPE[@]}" -f "$f" ||
                fail "bench_attention_gpu T $T $prec"
            a=$WORK/attn_${T}_$prec.out s=$WORK/sdpa.out key="sdpa $prec B [0-9]* T $T "
            printf "| %s | %s | %s | %s | %s | %s |\n" "$T" "$prec" "$(field "$a" forward 'block attention')" \
                "$(field "$a" backward 'block attention')" "$(field "$s" forward "$key")" \
                "$(field "$s" backward "$key")" >> "$TABLE"
        done
    done
fi

# ---- 3. GPT-2 training: FP32 build, BF16 build, PyTorch bf16
{
    printf "\nGPT-2 training on one GPU (-e %s -mt T, cp 1, -ct %s), %d tokens per step; MFU of the\n" "$TRAIN_MODEL" \
        "$CT1" "$TRAIN_TOKENS"
    printf "precision's dense peak (TF32 494.7, bf16 989.4 TFLOP/s); peak device memory from nvidia-smi\n\n"
    printf "| T | B | trainer | precision | tok/s | MFU | peak device memory (MiB) |\n"
    printf "| ---: | ---: | --- | --- | ---: | ---: | ---: |\n"
} >> "$TABLE"
for T in $TRAIN_LENGTHS; do
    B=$((TRAIN_TOKENS / T))
    for p in FP32 BF16; do
        name=train_T${T}_$p
        if run_measured "$name" 60 "${MPIRUN[@]}" -np 1 "$(bin $p train_gpt2cp)" -e "$TRAIN_MODEL" -mt "$T" -b "$B" \
            -t "$T" -x "$TRAIN_STEPS" -f 1 -v 0 -s 0 -cp 1 -ct "$CT1" -o "$WORK/$name"; then
            tps=$(tokens_per_s "$WORK/$name.out")
        else
            fail "$name"
            tps=-
        fi
        prec=$([[ $p == FP32 ]] && echo "fp32, TF32 matmuls" || echo "bf16, fp32 master weights")
        peak=$([[ $p == FP32 ]] && echo 494.7e12 || echo 989.4e12)
        printf "| %s | %s | train_gpt2cp %s | %s | %s | %s | %s |\n" "$T" "$B" "$p" "$prec" "$tps" \
            "$(mfu "$tps" "$T" "$peak")" "$PEAK_MIB" >> "$TABLE"
    done
    name=torch_T$T
    tps=-
    if [[ $HAVE_TORCH -eq 0 ]]; then
        say "$name: skipped (no torch)"
        PEAK_MIB=-
    elif run_measured "$name" 60 python3 dev/bench/gpt2_torch.py -t "$T" -b "$B" -p bf16 -x 5; then
        tps=$(sed -n 's/.* \([0-9]*\) tok\/s.*/\1/p' "$WORK/$name.out" | head -n 1)
    else
        fail "$name"
    fi
    printf "| %s | %s | PyTorch %s (eager) | bf16 autocast, fp32 master weights | %s | %s | %s |\n" "$T" "$B" \
        "$(python3 -c 'import torch; print(torch.__version__)' 2> /dev/null)" "${tps:--}" \
        "$(mfu "${tps:--}" "$T" 989.4e12)" "$PEAK_MIB" >> "$TABLE"
done
printf "\n%d failure(s); %d s in all\n" "$failures" "$((SECONDS - START))" >> "$TABLE"
echo "[$(($(date +%s) - GPU_CALL_START))s] gpu_bench: $failures failure(s)" >> "$SUMMARY"
echo
tee -a "$LOG" < "$TABLE"
[[ $failures -eq 0 ]]
