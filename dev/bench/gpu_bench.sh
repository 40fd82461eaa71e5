#!/usr/bin/env bash
# The GPU benchmark: one command for a machine with an NVIDIA GPU (planned for one
# H200; MPI, NCCL, torch and a package registry may each be missing). From the repo
# root:
#
#     bash dev/bench/gpu_bench.sh            (QUICK=1: T 1K and 4K only)
#
#   1. the toolchain as scripts/gpu_check.sh finds it (scripts/gpu_toolchain.sh);
#      builds bench_attention_gpu (no MPI needed) and, with MPI, train_gpt2cp
#   2. block attention (cp/attention_block.cuh) forward and backward, causal, B 1,
#      12 heads of 64, at T_local 1K, 4K, 16K, TF32 (-f 1) and exact fp32 (-f 0),
#      beside PyTorch's scaled_dot_product_attention on the same shapes and
#      precision (dev/bench/torch_bench.py; skipped without torch)
#   3. train_gpt2cp GPT-2 124M at T 1K (-e d12, B 8), 4K (B 2) and 16K (B 1, a
#      d12 checkpoint with that max_seq_len written by torch_bench.py): cp 1 (NCCL
#      where found, else -ct mpi), and cp 2 and 4 with the ranks sharing the GPU
#      through -ct mpi (an overhead figure: one GPU does all the ranks' work), each
#      -f 1 and -f 0; tok/s (mean over the steps after the first) and MFU
#   4. PyTorch's GPT-2 124M training step on the same shapes (SDPA, AdamW), the
#      anchor
# Prints the table and writes it to $OUT/gpu_bench.txt (or build/gpu_bench/), the
# full log beside it.
#
# MFU counts 6 N + 6 L C T flops per token (N = 124M parameters; the causal
# attention's Q K^T and P V, forward and backward) against the H200's dense peak:
# 494.7 TFLOP/s TF32 for -f 1, 66.9 TFLOP/s fp32 for -f 0 (the datasheet's H100
# SXM rates, which the H200 shares).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
# ---- 1. toolchain and build
GPU_SCRIPT=gpu_bench
# shellcheck source=scripts/gpu_toolchain.sh
source scripts/gpu_toolchain.sh || exit 1
run build_bench 900 make "${MAKE_FLAGS[@]}" bench_attention_gpu || { fail "building bench_attention_gpu"; exit 1; }
if [[ $HAVE_MPI -eq 1 ]]; then
    run build_trainer 900 make "${MAKE_FLAGS[@]}" train_gpt2cp || fail "building train_gpt2cp"
fi
CT1=$([[ $HAVE_NCCL -eq 1 ]] && echo nccl || echo mpi)
LENGTHS=(1024 4096 16384)
[[ ${QUICK:-0} == 1 ]] && LENGTHS=(1024 4096)
declare -A BATCH=([1024]=8 [4096]=2 [16384]=1)

{
    printf "GPU benchmark (%s)\n" "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
    printf "\nblock attention, causal, B 1, NH 12, HS 64: forward / backward ms (TFLOP/s)\n"
    printf "%-7s %-5s %26s %26s %26s %26s\n" T prec "ours forward" "ours backward" "sdpa forward" "sdpa backward"
} > "$TABLE"
# "forward X ms (Y TFLOP/s), backward ..." -> "X (Y)" for forward or backward
field() { sed -n "s/.*$2 \([0-9.]*\) ms (\([0-9.]*\) TFLOP\/s).*/\1 (\2)/p" "$1" | head -n 1; }

# ---- 2. block attention beside SDPA
for T in "${LENGTHS[@]}"; do
    for f in 1 0; do
        prec=$([[ $f -eq 1 ]] && echo tf32 || echo fp32)
        run "attn_${T}_$prec" 300 ./bench_attention_gpu -t "$T" -b 1 -nh 12 -hs 64 -f "$f" || fail "bench_attention_gpu T $T $prec"
        run "sdpa_${T}_$prec" 300 python3 dev/bench/torch_bench.py attention -t "$T" -b 1 -nh 12 -hs 64 -f "$f" ||
            fail "torch sdpa T $T $prec"
        a=$WORK/attn_${T}_$prec.out s=$WORK/sdpa_${T}_$prec.out
        printf "%-7s %-5s %26s %26s %26s %26s\n" "$T" "$prec" "$(field "$a" forward)" "$(field "$a" backward)" \
            "$(field "$s" forward || true)" "$(field "$s" backward || true)" >> "$TABLE"
        grep -q skipped "$s" && say "$(cat "$s")"
    done
done

# ---- 3. and 4. GPT-2 124M training
mfu() { awk -v tps="$1" -v T="$2" -v f="$3" 'BEGIN { if (tps == "-" || tps == "") { print "-"; exit }
                                                  flops = 6 * 124475904 + 6 * 12 * 768 * T; peak = f ? 494.7e12 : 66.9e12
                                                  printf "%.1f%%", 100 * tps * flops / peak }'; }
{
    printf "\nGPT-2 124M training (-e d12), tok/s (MFU): train_gpt2cp -x 6, PyTorch one step (SDPA, AdamW)\n"
    printf "%-7s %-3s %-5s %16s %16s %16s %16s\n" T B prec "cp 1 ($CT1)" "cp 2 (mpi)" "cp 4 (mpi)" "pytorch"
} >> "$TABLE"
for T in "${LENGTHS[@]}"; do
    B=${BATCH[$T]}
    init=d12
    if [[ $T -gt 1024 ]]; then # d12's max_seq_len is 1024: a checkpoint with room for T
        init=$WORK/d12_T$T.bin
        run "checkpoint_$T" 300 python3 dev/bench/torch_bench.py checkpoint -t "$T" -o "$init" || fail "checkpoint T $T"
    fi
    for f in 1 0; do
        prec=$([[ $f -eq 1 ]] && echo tf32 || echo fp32)
        cells=()
        for cp in 1 2 4; do
            name=d12_T${T}_${prec}_cp$cp
            ct=$([[ $cp -eq 1 ]] && echo "$CT1" || echo mpi)
            if [[ $HAVE_MPI -eq 1 && -x ./train_gpt2cp ]]; then
                run "$name" 900 "${MPIRUN[@]}" -np "$cp" ./train_gpt2cp -e "$init" -b "$B" -t "$T" -x 6 -f "$f" -v 0 -s 0 \
                    -cp "$cp" -cl "$([[ $cp -eq 1 ]] && echo identity || echo round_robin)" -ct "$ct" -o "$WORK/$name" ||
                    fail "$name"
                tps=$(tokens_per_s "$WORK/$name.out")
                cells+=("$tps ($(mfu "$tps" "$T" "$f"))")
            else
                cells+=("- (no MPI)")
            fi
        done
        run "torch_gpt2_T${T}_$prec" 600 python3 dev/bench/torch_bench.py gpt2 -t "$T" -b "$B" -f "$f" || fail "torch gpt2 T $T $prec"
        ttps=$(sed -n 's/.* \([0-9]*\) tok\/s$/\1/p' "$WORK/torch_gpt2_T${T}_$prec.out")
        tcell=$([[ -n $ttps ]] && echo "$ttps ($(mfu "$ttps" "$T" "$f"))" || echo "- (no torch)")
        printf "%-7s %-3s %-5s %16s %16s %16s %16s\n" "$T" "$B" "$prec" "${cells[@]}" "$tcell" >> "$TABLE"
    done
done
printf "\n%d failure(s); %d s in all\n" "$failures" "$((SECONDS - START))" >> "$TABLE"
echo
tee -a "$LOG" < "$TABLE"
[[ $failures -eq 0 ]]
