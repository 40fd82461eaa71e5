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
# a step's shared bytes: 8 warps each read the 64 x 64 bf16 K and V tiles (8 x 16 KiB),
# and K and V are copied in (16 KiB): 147,456; x 864
check "$F" smem 127401984
# the SM's step: shared 147,456 B / (128 B x 1.98 GHz) = 0.58182 us (tensor: 2,097,152 /
# (989.4e12 x 2/3 / 132) = 0.41968 us); a slot gets half the SM: 1.16364 us; the
# longest block (16 steps) ends at 18.618 us, all 96 start at once; + 2 us launch
check "$F" bound shared
check "$F" time 20.618e-6 1e-3
# busy / (slots x span) = 864 / (264 x 16)
check "$F" tail 0.20454545 1e-6
# FlashAttention's count 2 x 12 x 1024^2 x 64 = 1.6106e9 over 20.618 us
check "$F" tflops 78.117 1e-3
# Our backward, H100, B*NH 48, T 1024: attention_dq_splits: want ceil(264 / 48) = 6 <
# most min(17 / 2, 16) = 8: 6 splits, 288 blocks over 264 slots (1.09 waves: a second,
# nearly empty wave). Split s walks key tiles s, s+6, s+12, each seen by 16 - kt query
# tiles: 30, 27, 24, 21, 18, 16 pairs = 136 = 16 x 17 / 2 a head, 6528 in all, each
# 5 products of 2 x 64^3 = 2,621,440 FLOPs
B="ours backward H100 48 1024"
check "$B" splits 6
check "$B" blocks 288
check "$B" waves 1.09090909 1e-6
check "$B" steps 6528
check "$B" flops 17112760320
# DRAM: 264 resident slices of 1024 x 64 fp32 (69.2 MB) exceed the 50 MB L2, so the dQ
# read-modify-write counts in full: 6528 pairs x 4 warps x 16 rows x 64 x 4 B x 2 =
# 213,909,504; rows = 48 x 1024 x 64 = 3,145,728: Q, K, V, dO read and dK, dV written
# bf16 37,748,736; lse, D 393,216; the slices' memset 75,497,472; their sum read and dQ
# written 88,080,384; D = rowsum(dO * O) 12,779,520
check "$B" dram 428408832
check "$B" dq_in_l2 False
# the kernel's DRAM (Q, K, V, dO, dK, dV, lse, D and the read-modify-write: 252,051,456 B)
# over 3.35 TB/s x 0.9 = 83.60 us bounds it: the SM time is a 46-step slot (264 blocks
# start at once, the 24 left go to the slots that end first, those of 16 steps; the
# first of them takes 30) x 1.55152 us (half an SM's step: 196,608 shared bytes, 4 warps
# x 45,056 read + 16,384 copied in, / 253.44 GB/s) = 71.37 us; the L2's 365,297,664 B /
# 7 TB/s = 52.19 us. The passes around it add 176,357,376 B / 3.015 TB/s = 58.49 us, and
# 4 launches 8 us: 150.09 us
check "$B" smem 1283457024
check "$B" l2 365297664
check "$B" bound DRAM
check "$B" time 150.09e-6 1e-4
check "$B" tail 0.53754941 1e-6
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
