#!/usr/bin/env bash
# dev/bench/kernel_model.py's arithmetic on two shapes worked out by hand below (not
# from the script's code), its last line's form, and its refusal of a bad argument.
#
#     bash test/test_kernel_model.sh            exits 77 without python3
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 > /dev/null || { echo "SKIP: no python3 to run the model"; exit 77; }
fail=0
# check CASE KEY EXPECTED [RELATIVE TOLERANCE]: one figure of `--case CASE`
check() {
    local got
    got=$(python3 dev/bench/kernel_model.py --case $1 | awk -v k="$2" '$1 == k { print $2 }')
    if [[ -z $got ]]; then echo "FAIL: --case $1 prints no $2"; fail=1; return; fi
    if ! awk -v g="$got" -v e="$3" -v tol="${4:-1e-9}" 'BEGIN {
            if (g == e) exit 0
            d = g - e; if (d < 0) d = -d; m = e < 0 ? -e : e
            exit !(d <= tol * m) }'; then
        echo "FAIL: --case $1: $2 $got, expected $3"; fail=1
    fi
}
# Our forward, H200, B*NH 12, T 1024: 16 key tiles of 64, 8 query blocks of 128 per head
# (96 blocks; 2 per SM on 132 SMs: 264 slots, 96/264 = 0.3636 waves); query block qb
# walks key tiles 0 .. 2qb+1: 2 + 4 + ... + 16 = 72 steps a head, 864 in all.
F="ours forward H200 12 1024"
check "$F" blocks 96
check "$F" slots 264
check "$F" waves 0.36363636 1e-6
check "$F" steps 864
# a step: Q K^T and P V over 128 x 64 x 64: 4 * 128 * 64 * 64 = 2,097,152 FLOPs
check "$F" flops 1811939328
# a step's shared bytes: 4 warps of 32 rows each read the 64 x 64 bf16 K and V tiles
# (4 x 16 KiB), and K and V are copied in (16 KiB): 81,920; x 864
check "$F" smem 70778880
# the SM's step: tensor 2,097,152 / (989.4e12 x 2/3 / 132) = 0.419685 us (shared:
# 81,920 B / (128 B x 1.98 GHz) = 0.323232 us); a slot gets half the SM: 0.83937 us;
# the longest block (16 steps) ends at 13.42992 us, all 96 start at once; + 2 us launch
check "$F" bound tensor
check "$F" time 15.42992e-6 1e-5
# busy / (slots x span) = 864 / (264 x 16)
check "$F" tail 0.20454545 1e-6
# FlashAttention's count 2 x 12 x 1024^2 x 64 = 1,610,612,736 over 15.42992 us
check "$F" tflops 104.382 1e-4
# Our backward, H100, B*NH 12, T 1024: two kernels in turn, each in one wave.
# The dQ kernel: the forward's 96 blocks and 864 steps, two blocks per SM (264 slots);
# a step: Q K^T, dO V^T and dS K over 128 x 64 x 64: 3 x 1,048,576 = 3,145,728 FLOPs;
# shared: 4 warps of 32 rows each read K, V and K once (3 x 8 KiB), K and V copied in:
# 114,688 B
Q="ours backward_dq H100 12 1024"
check "$Q" blocks 96
check "$Q" slots 264
check "$Q" steps 864
check "$Q" flops 2717908992
check "$Q" smem 99090432
# tensor: 3,145,728 / (989.4e12 x 2/3 / 132 = 4.99697e12) = 0.629527 us a step (shared:
# 114,688 B / 253.44 GB/s = 0.452525 us); a slot has half the SM: the longest block
# (16 steps) 20.14486 us; the pass D = rowsum(dO * O) before it: dO and O read
# (2 x 786,432 x 2 B) and D written (49,152 B) = 3,194,880 B / 3.015 TB/s = 1.05966 us;
# 2 launches (D and the kernel) 4 us: 25.20452 us
check "$Q" bound tensor
check "$Q" time 25.20452e-6 1e-5
check "$Q" tail 0.20454545 1e-6
# L2: 864 steps x (K, V 16,384 + their coordinates 512) + 96 blocks x (Q, dO 32,768 +
# lse, D 1,024 + dQ's fp32 rows read and written 65,536) = 24,133,632
check "$Q" l2 24133632
# The dK dV kernel: 16 key tiles a head, tile kt seen by 16 - kt query tiles: 136
# steps a head, 1632 in all, 192 blocks over 396 slots (3 per SM); a step: 4 products
# of 2 x 64^3 = 2,097,152 FLOPs; shared: 2 warps of 32 keys each read Q, dO, dO, Q
# (4 x 8 KiB) and their V fragments (4 x 4 KiB), Q and dO copied in: 114,688 B =
# 0.452525 us (tensor 0.419685); a slot has a third of the SM: the longest block
# (16 steps) 21.72121 us, + 1 launch: 23.72121 us
K="ours backward_dkv H100 12 1024"
check "$K" blocks 192
check "$K" slots 396
check "$K" steps 1632
check "$K" flops 3422552064
check "$K" bound shared
check "$K" time 23.72121e-6 1e-5
check "$K" tail 0.25757576 1e-6
# the backward: both, in turn: 48.92573 us, 6,140,461,056 FLOPs executed; FlashAttention's
# count 2.5 x 2 x 12 x 1024^2 x 64 = 4,026,531,840 over 48.92573 us = 82.2989 TFLOP/s
B="ours backward H100 12 1024"
check "$B" blocks 288
check "$B" flops 6140461056
check "$B" time 48.92573e-6 1e-5
check "$B" tflops 82.2989 1e-4
# the last line's form
last=$(python3 dev/bench/kernel_model.py | tail -n 1)
if ! [[ $last =~ ^model:\ forward\ [0-9]+\.[0-9]+\ backward\ [0-9]+\.[0-9]+\ of\ FlashAttention-2$ ]]; then
    echo "FAIL: last line: $last"; fail=1
fi
# a bad machine: one line, non-zero
if out=$(python3 dev/bench/kernel_model.py --case ours forward B200 12 1024 2>&1); then
    echo "FAIL: an unknown machine was accepted"; fail=1
elif [[ $(wc -l <<< "$out") != 1 || $out != *B200* ]]; then
    echo "FAIL: an unknown machine: $out"; fail=1
fi
[[ $fail == 0 ]] && echo "kernel_model: every figure as worked out by hand"
exit $fail
