#!/usr/bin/env bash
# The GPU attention runs on the tensor cores: nvcc's PTX of the block attention
# kernels (cp/attention_block.cuh, built through dev/bench/attention_gpu.cu, which
# launches all of them) holds mma.sync m16n8k8 TF32 in each TF32 kernel, and none in
# the exact fp32 ones (-f 0, validated against the CPU twin).
#
#     bash test/test_attention_ptx.sh NVCC WORKDIR [GPU_ARCH]     exits 77 without nvcc
set -euo pipefail
NVCC=${1:-}
WORK=${2:-build}
ARCH=${3:-90}
if [[ -z $NVCC || ! -x $NVCC ]]; then
    echo "SKIP: no nvcc ('$NVCC'): the PTX of the attention kernels cannot be made here"
    exit 77
fi
mkdir -p "$WORK"
PTX=$WORK/attention_gpu.ptx
"$NVCC" -ptx -std=c++17 -arch=sm_$ARCH -DENABLE_FP32 -DNO_BLAS -I. dev/bench/attention_gpu.cu -o "$PTX"
# per kernel entry: its name and how many mma.sync.aligned.m16n8k8...tf32 it holds.
# The mangled names carry the template arguments: AttnPrecision 1 is TF32, 0 fp32.
awk '
    /^\.(visible )?\.entry / || /^\.entry / { name = $NF; sub(/\(.*/, "", name); names[++n] = name; mma[name] = 0 }
    /mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32/ { if (n) mma[names[n]]++ }
    END { for (i = 1; i <= n; i++) print names[i], mma[names[i]] }
' "$PTX" > "$WORK/attention_gpu.mma"
status=0
tf32=0
fp32=0
while read -r name count; do
    case $name in
        *attend_*kernel*AttnPrecision1*)
            tf32=$((tf32 + 1))
            if [[ $count -eq 0 ]]; then echo "FAIL: TF32 kernel $name holds no mma"; status=1; else echo "ok   $name: $count mma"; fi ;;
        *attend_*kernel*AttnPrecision0*)
            fp32=$((fp32 + 1))
            if [[ $count -ne 0 ]]; then echo "FAIL: fp32 kernel $name holds $count mma"; status=1; else echo "ok   $name: exact fp32, no mma"; fi ;;
    esac
done < "$WORK/attention_gpu.mma"
# 3 kernels (forward, dQ, dKV) x 3 head sizes in each precision
if [[ $tf32 -ne 9 || $fp32 -ne 9 ]]; then
    echo "FAIL: expected 9 TF32 and 9 fp32 attention kernels in the PTX, found $tf32 and $fp32"
    status=1
fi
[[ $status -eq 0 ]] && echo "PASS: the PTX of $tf32 TF32 attention kernels holds mma.sync m16n8k8 TF32"
exit $status
