#!/usr/bin/env bash
# Static figures of the GPU block attention kernels (cp/attention_block.cuh), read from
# what nvcc and ptxas make of them for an H100/H200 (sm_90); no GPU needed. For each
# kernel of both builds (llmc/precision.cuh: FP32 with its exact fp32 and TF32
# kernels, BF16), one row of a markdown table:
#
#   threads, shared   threads per block and the bytes of dynamic shared memory its
#                     launch asks for (bench_attention_gpu -k), plus the static bytes
#                     ptxas reports
#   regs, spills      ptxas -v: registers per thread; spill stores / loads (bytes)
#   blocks/SM         resident blocks per SM, the least of what each sm_90 limit
#                     allows (as cuda_occupancy.h counts them): 65536 registers in 4
#                     sub-partitions of 16384, a warp's registers allocated in units
#                     of 256, each sub-partition holding whole warps; 228 KiB of
#                     shared memory, each block's share plus the 1 KiB the system
#                     reserves for it rounded up to 128 bytes; 2048 threads; 32 blocks
#   limit             the limit that allows that few: regs, shared, threads or blocks
#                     (the first of them in this order where two allow as few)
#   occupancy         the resident warps of those blocks over the SM's 64
#   mma ... cp.async  instructions of that kind in the kernel's PTX: static counts (a
#                     loop's body counts once; a called .func's do not count), mma,
#                     ld.shared (any width), ldmatrix, cvt to or from bf16, f16 or tf32
#                     (the tensor cores' operands; not integer or fp32 <-> integer
#                     conversions, not cvta), cp.async copies (not commit_group or
#                     wait_group)
#
#     bash dev/bench/kernel_figures.sh [WORKDIR]     builds in WORKDIR (default
#                                                    build/kernel_figures), prints the table
#     bash dev/bench/kernel_figures.sh --from DIR    the table from DIR/PRECISION/ (FP32,
#                                                    BF16, either or both) holding ptxas.txt
#                                                    (ptxas -v), kernels.ptx and shapes.txt
#                                                    (bench_attention_gpu -k), as built here
#                                                    (its working files are written there)
#
# The table of today's kernels is in dev/bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export LC_ALL=C # one collation for sort and join

die() { echo "kernel_figures: $*" >&2; exit 1; }

# The markdown table of the kernels in $1/FP32 and $1/BF16 (those present).
table() {
    local dir=$1 prec
    command -v c++filt > /dev/null || die "c++filt (binutils) is missing: it names the kernels"
    printf "| build | kernel | threads | regs | spills st/ld (B) | shared (KiB) | blocks/SM | limit | occupancy | mma | ld.shared | ldmatrix | cvt | cp.async |\n"
    printf "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    for prec in FP32 BF16; do
        [[ -d $dir/$prec ]] || continue
        local f
        for f in ptxas.txt kernels.ptx shapes.txt; do [[ -s $dir/$prec/$f ]] || die "$dir/$prec/$f is missing or empty"; done
        # per entry, mangled: registers, spill stores, spill loads, static shared bytes
        awk '/Compiling entry function/ { name = $0; sub(/.*function .?/, "", name); sub(/.? for .*/, "", name); st = ld = 0 }
             /Function properties for/ { props = $NF }
             /spill stores/ { if (props == name) { st = $5; ld = $9 } }
             /Used [0-9]+ registers/ { smem = 0
                 if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART); sub(/ .*/, "", smem) }
                 print name, $5, st, ld, smem }' "$dir/$prec/ptxas.txt" | sort > "$dir/$prec/usage.txt"
        # per entry, mangled: .maxntid threads (0 without), mma, ld.shared, ldmatrix, cvt, cp.async
        awk 'function op() { o = $1; if (o ~ /^@/) o = $2; return o }
             /^(\.visible |\.weak )?\.entry / { name = $NF; sub(/\(.*/, "", name); names[name] = 1; n = name; next }
             /^(\.visible |\.weak )?\.func / { n = ""; next }
             n == "" { next }
             /^\.maxntid/ { gsub(/,/, " "); bound[n] = $2 * $3 * $4; next }
             { o = op()
               if (o ~ /^mma\./) mma[n]++
               else if (o ~ /^ld\.shared/) lds[n]++
               else if (o ~ /^ldmatrix\./) ldm[n]++
               else if (o ~ /^cvt\./ && o ~ /\.(bf16|bf16x2|f16|f16x2|tf32)(\.|$)/) cvt[n]++
               else if (o ~ /^cp\.async\.c[ag]\./) cpa[n]++ }
             END { for (e in names) print e, bound[e] + 0, mma[e] + 0, lds[e] + 0, ldm[e] + 0, cvt[e] + 0, cpa[e] + 0 }' \
            "$dir/$prec/kernels.ptx" | sort > "$dir/$prec/mix.txt"
        # by readable name (tab-separated: names hold spaces): c++filt's, without "void" and the arguments
        join "$dir/$prec/usage.txt" "$dir/$prec/mix.txt" |
            awk '{ printf "%s", $1; for (i = 2; i <= NF; i++) printf "\t%s", $i; printf "\n" }' > "$dir/$prec/joined.txt"
        paste <(cut -f1 "$dir/$prec/joined.txt" | c++filt | sed -e 's/^void //' -e 's/([^()]*)$//') \
              <(cut -f2- "$dir/$prec/joined.txt") > "$dir/$prec/named.txt"
        # every block attention kernel in the PTX has a launch shape, and every shape a kernel
        local name
        while IFS=$'\t' read -r name _; do
            [[ $name == attend_* ]] || continue
            grep -qF -- "$name"$'\t' "$dir/$prec/shapes.txt" ||
                die "$prec: $name is in the PTX but not among the shapes bench_attention_gpu -k prints"
        done < "$dir/$prec/named.txt"
        local threads dynamic figures regs st ld smem bound mma lds ldm cvt cpa blocks limit occupancy label
        while IFS=$'\t' read -r name threads dynamic; do
            figures=$(awk -F'\t' -v n="$name" '$1 == n { $1 = ""; print; exit }' OFS=' ' "$dir/$prec/named.txt")
            [[ -n $figures ]] || die "$prec: no kernel $name in ptxas's output and the PTX"
            read -r regs st ld smem bound mma lds ldm cvt cpa <<< "$figures"
            [[ $bound -eq 0 || $bound -eq $threads ]] ||
                die "$prec: $name is launched with $threads threads but its __launch_bounds__ says $bound"
            read -r blocks limit occupancy < <(awk -v r="$regs" -v t="$threads" -v s="$((smem + dynamic))" 'BEGIN {
                warps = int((t + 31) / 32)
                per_warp = int((r * 32 + 255) / 256) * 256
                by_regs = int(int(16384 / per_warp) * 4 / warps)
                by_smem = int(233472 / (int((s + 1024 + 127) / 128) * 128))
                by_threads = int(64 / warps)
                b = by_regs; l = "regs"
                if (by_smem < b) { b = by_smem; l = "shared" }
                if (by_threads < b) { b = by_threads; l = "threads" }
                if (32 < b) { b = 32; l = "blocks" }
                printf "%d %s %.1f%%\n", b, l, 100 * b * warps / 64 }')
            # attend_forward_kernel<(MmaPrecision)2, 64> -> attend_forward_kernel<bf16, 64>
            label=$(sed -e 's/(MmaPrecision)0/fp32/' -e 's/(MmaPrecision)1/tf32/' -e 's/(MmaPrecision)2/bf16/' <<< "$name")
            printf "| %s | %s | %d | %d | %d / %d | %s | %d | %s | %s | %d | %d | %d | %d | %d |\n" "$prec" "$label" \
                "$threads" "$regs" "$st" "$ld" "$(awk -v b="$((smem + dynamic))" 'BEGIN { printf "%.1f", b / 1024 }')" \
                "$blocks" "$limit" "$occupancy" "$mma" "$lds" "$ldm" "$cvt" "$cpa"
        done < "$dir/$prec/shapes.txt"
    done
}

if [[ ${1:-} == --from ]]; then
    [[ $# -eq 2 && -d $2 ]] || die "--from needs a directory (usage: see the top of $0)"
    table "$2"
    exit 0
fi
WORK=${1:-build/kernel_figures}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
[[ -x $NVCC ]] || die "no nvcc at $NVCC (set CUDA_HOME)"
for prec in FP32 BF16; do
    # the benchmark instantiates every attention kernel of the build (its dispatch);
    # nvcc keeps the PTX it makes, ptxas -v says what each kernel takes, and -k prints
    # each kernel's launch shape (no GPU needed)
    mkdir -p "$WORK/$prec"
    "$NVCC" -O3 -std=c++17 -arch=sm_90 -DENABLE_$prec -DNO_BLAS -I. -keep -keep-dir "$WORK/$prec" -Xptxas -v \
        dev/bench/attention_gpu.cu -o "$WORK/$prec/bench_attention_gpu" -L"$CUDA_HOME/lib64" -lcublas -lcublasLt \
        -Xlinker -rpath,"$CUDA_HOME/lib64" > "$WORK/$prec/ptxas.txt" 2>&1 ||
        { cat "$WORK/$prec/ptxas.txt" >&2; die "$prec: nvcc failed"; }
    cp "$WORK/$prec/attention_gpu.ptx" "$WORK/$prec/kernels.ptx"
    "$WORK/$prec/bench_attention_gpu" -k > "$WORK/$prec/shapes.txt"
done
table "$WORK"
