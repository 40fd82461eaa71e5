#!/usr/bin/env bash
# The GPU attention runs on the tensor cores: the PTX of the block attention kernels
# in both builds of llmc/precision.cuh:
#   FP32 build: the plain kernels (cp/attention_block.cuh), mma.sync m16n8k8 TF32 in
#               each TF32 kernel, no mma in the exact fp32 ones (-f 0, validated
#               against the CPU twin);
#   BF16 build: the FlashAttention-2 kernels (cp/attention_block_flash.cuh), mma.sync
#               m16n8k16 bf16 (fp32 accumulation) fed by ldmatrix and cp.async in
#               every kernel, and no TF32 mma.
# The PTX is what nvcc kept while building the ring attention tests of both builds
# (test/CMakeLists.txt: -keep), whose dispatch instantiates every kernel: nothing is
# compiled here.
#
#     bash test/test_attention_ptx.sh FP32_PTX BF16_PTX     exits 77 without them
set -euo pipefail
if [[ $# -ne 2 ]]; then
    echo "SKIP: no CUDA compiler was found, so no PTX of the attention kernels was made"
    exit 77
fi
declare -A PTX_OF=([FP32]=$1 [BF16]=$2)
for prec in FP32 BF16; do
    [[ -s ${PTX_OF[$prec]} ]] || { echo "FAIL: the $prec build's PTX '${PTX_OF[$prec]}' is missing (cmake --build the test dir)"; exit 1; }
done
TF32_MMA='mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32'
BF16_MMA='mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32'
status=0
for prec in FP32 BF16; do
    PTX=${PTX_OF[$prec]}
    # per kernel entry: its name and how many TF32 and bf16 mma it holds. The mangled
    # names carry the template arguments: MmaPrecision 0 is fp32, 1 TF32, 2 bf16.
    awk -v tf32="$TF32_MMA" -v bf16="$BF16_MMA" '
        /^\.(visible )?\.entry / || /^\.entry / { name = $NF; sub(/\(.*/, "", name); names[++n] = name
                                                   t[name] = b[name] = l[name] = c[name] = 0 }
        $0 ~ tf32 { if (n) t[names[n]]++ }
        $0 ~ bf16 { if (n) b[names[n]]++ }
        /ldmatrix\.sync/ { if (n) l[names[n]]++ }
        /cp\.async\.c[ag]\./ { if (n) c[names[n]]++ }
        END { for (i = 1; i <= n; i++) print names[i], t[names[i]], b[names[i]], l[names[i]], c[names[i]] }
    ' "$PTX" > "$PTX.mma"
    declare -A kernels=([0]=0 [1]=0 [2]=0)
    while read -r name tf32 bf16 ldm cpa; do
        # the plain kernels carry their MmaPrecision (0 fp32, 1 TF32) in the mangled
        # name; the flash kernels are bf16
        if [[ $name =~ attend_.*kernel.*MmaPrecision([0-9]) ]]; then p=${BASH_REMATCH[1]}
        elif [[ $name =~ attend_.*_flash_kernel ]]; then p=2
        else continue; fi
        kernels[$p]=$((kernels[$p] + 1))
        case $p in
            0) want="exact fp32, no mma"; ok=$((tf32 == 0 && bf16 == 0)) ;;
            1) want="$tf32 TF32 mma"; ok=$((tf32 > 0 && bf16 == 0)) ;;
            2) want="$bf16 bf16 mma, $ldm ldmatrix, $cpa cp.async"; ok=$((bf16 > 0 && tf32 == 0 && ldm > 0 && cpa > 0)) ;;
        esac
        if [[ $ok -eq 1 ]]; then echo "ok   $prec $name: $want"; else
            echo "FAIL: $prec kernel $name holds $tf32 TF32 and $bf16 bf16 mma, $ldm ldmatrix, $cpa cp.async"
            status=1
        fi
    done < "$PTX.mma"
    # FP32: 3 kernels (forward, dQ, dKV) x 3 head sizes in each precision; BF16: the
    # same 3 x 3
    if [[ $prec == FP32 ]]; then expected="9 9 0"; else expected="0 0 9"; fi
    found="${kernels[0]} ${kernels[1]} ${kernels[2]}"
    if [[ $found != "$expected" ]]; then
        echo "FAIL: $prec build: expected $expected fp32, TF32 and bf16 attention kernels in the PTX, found $found"
        status=1
    fi
    unset kernels
done
[[ $status -eq 0 ]] && echo "PASS: the TF32 kernels of the FP32 build hold mma.sync m16n8k8 TF32, the BF16 build's mma.sync m16n8k16 bf16 with ldmatrix and cp.async"
exit $status
