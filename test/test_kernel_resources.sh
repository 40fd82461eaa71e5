#!/usr/bin/env bash
# Every kernel of the GPU code fits an H100/H200 SM (sm_90) as ptxas builds it, in
# both precisions (llmc/precision.cuh), read from ptxas's own figures (no GPU needed):
#
#   - registers x threads within the 65536 registers of one SM's register file:
#     threads is the kernel's __launch_bounds__ (.maxntid in the PTX) or else 1024,
#     the most a launch may take, so that no launch can fail for registers
#   - no spills (spill stores or loads), the exact-fp32 attention kernels (-f 0,
#     the reference mode) excepted
#   - static shared memory within 48 KiB
#   - every __global__ function of cp/ and llmc/ is among the kernels read, in both
#     builds but for the block attention's: the plain kernels of
#     cp/attention_block.cuh are the FP32 build's, the FlashAttention-2 ones of
#     cp/attention_block_flash.cuh the BF16 build's
#
# The PTX is what nvcc kept while building the GPU tests (test/CMakeLists.txt: -keep),
# which between them hold every kernel; ptxas assembles it again for its figures.
#
#     bash test/test_kernel_resources.sh NVCC ARCH WORKDIR FP32 PTX... BF16 PTX...
#                                                      exits 77 without nvcc
set -euo pipefail
NVCC=${1:-}
ARCH=${2:-90}
WORK=${3:-build}
if [[ -z $NVCC || ! -x $NVCC || $# -lt 5 ]]; then
    echo "SKIP: no nvcc ('$NVCC'): no PTX of the kernels was made"
    exit 77
fi
shift 3
PTXAS=$(dirname "$NVCC")/ptxas
command -v c++filt > /dev/null || { echo "SKIP: no c++filt (binutils) to name the kernels"; exit 77; }
declare -A PTX=([FP32]="" [BF16]="")
prec=""
for arg in "$@"; do
    case $arg in
        FP32 | BF16) prec=$arg ;;
        *) [[ -s $arg ]] || { echo "FAIL: the PTX '$arg' is missing (cmake --build the test dir)"; exit 1; }
           PTX[$prec]+=" $arg" ;;
    esac
done
mkdir -p "$WORK"
# the __global__ functions of the sources (a declaration may span lines)
kernels_of() {
    cat "$@" | tr '\n' ' ' | grep -o '__global__ static void [^{;]*\b[A-Za-z_0-9]*_kernel(' | sed 's/($//' |
        awk '{ print $NF }' | sort -u
}
kernels_of cp/*.cuh llmc/*.cuh > "$WORK/sources.txt"
kernels_of cp/attention_block_flash.cuh > "$WORK/flash.txt"
grep '^attend_' <(kernels_of cp/attention_block.cuh) > "$WORK/plain.txt"
comm -23 "$WORK/sources.txt" "$WORK/flash.txt" > "$WORK/sources_FP32.txt"
comm -23 "$WORK/sources.txt" "$WORK/plain.txt" > "$WORK/sources_BF16.txt"
status=0
for prec in FP32 BF16; do
    : > "$WORK/usage_$prec.txt"
    : > "$WORK/bounds_$prec.txt"
    for ptx in ${PTX[$prec]}; do
        "$PTXAS" -v -arch=sm_$ARCH "$ptx" -o "$WORK/kernels.cubin" 2> "$WORK/ptxas.txt"
        # per entry: its launch bound (.maxntid x*y*z, 0 if none)
        awk '/^\.(visible )?\.?entry / { name = $NF; sub(/\(.*/, "", name); bound[name] = 0; last = name }
             /^\.maxntid/ { gsub(/,/, " "); bound[last] = $2 * $3 * $4 }
             END { for (n in bound) print n, bound[n] }' "$ptx" >> "$WORK/bounds_$prec.txt"
        # per entry: name registers spill_stores spill_loads static_smem
        awk '/Compiling entry function/ { name = $0; sub(/.*function .?/, "", name); sub(/.? for .*/, "", name) }
             /spill stores/ { st = $5; ld = $9 }
             /Used [0-9]+ registers/ { regs = $5; smem = 0
                 if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART); sub(/ .*/, "", smem) }
                 print name, regs, st, ld, smem }' "$WORK/ptxas.txt" >> "$WORK/usage_$prec.txt"
    done
    sort -u -o "$WORK/usage_$prec.txt" "$WORK/usage_$prec.txt"
    while read -r name regs stores loads smem; do
        bound=$(awk -v n="$name" '$1 == n { print $2; exit }' "$WORK/bounds_$prec.txt")
        threads=$([[ ${bound:-0} -gt 0 ]] && echo "$bound" || echo 1024)
        readable=$(echo "$name" | c++filt)
        problems=""
        (( regs * threads > 65536 )) && problems+=" $regs registers x $threads threads > 65536;"
        if [[ $readable != *"(MmaPrecision)0"* ]] && (( stores > 0 || loads > 0 )); then
            problems+=" spills ($stores bytes stored, $loads loaded);"
        fi
        (( smem > 49152 )) && problems+=" $smem bytes of static shared memory > 48 KiB;"
        if [[ -n $problems ]]; then
            echo "FAIL $prec $readable:$problems"
            status=1
        else
            printf "ok   %-4s %3d regs x %4d threads, spills %d/%d, smem %5d  %s\n" "$prec" "$regs" "$threads" \
                "$stores" "$loads" "$smem" "$readable"
        fi
    done < "$WORK/usage_$prec.txt"
    c++filt < <(awk '{ print $1 }' "$WORK/usage_$prec.txt") > "$WORK/names_$prec.txt"
    while read -r kernel; do
        grep -q "\b$kernel\b" "$WORK/names_$prec.txt" ||
            { echo "FAIL $prec: $kernel (a __global__ of cp/ or llmc/) is in none of the PTX read"; status=1; }
    done < "$WORK/sources_$prec.txt"
done
[[ $status -eq 0 ]] && echo "PASS: every kernel of both builds fits an sm_$ARCH SM's registers, without spills"
exit $status
