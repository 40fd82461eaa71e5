#!/usr/bin/env bash
# Every kernel of the GPU trainer fits an H100/H200 SM (sm_90) as ptxas builds it, in
# both precisions (llmc/precision.cuh), read from ptxas's own figures (no GPU needed):
#
#   - registers x threads within the 65536 registers of one SM's register file:
#     threads is the kernel's __launch_bounds__ (.maxntid in the PTX) or else 1024,
#     the most a launch may take, so that no launch can fail for registers
#   - no spills (spill stores or loads) in the BF16 build's kernels and the FP32
#     build's, the exact-fp32 attention ones (-f 0, the reference mode) excepted
#   - static shared memory within 48 KiB
#
#     bash test/test_kernel_resources.sh NVCC WORKDIR [GPU_ARCH]     exits 77 without nvcc
set -euo pipefail
NVCC=${1:-}
WORK=${2:-build}
ARCH=${3:-90}
if [[ -z $NVCC || ! -x $NVCC ]]; then
    echo "SKIP: no nvcc ('$NVCC'): ptxas's figures of the kernels cannot be made here"
    exit 77
fi
PTXAS=$(dirname "$NVCC")/ptxas
command -v c++filt > /dev/null || { echo "SKIP: no c++filt (binutils) to name the kernels"; exit 77; }
mkdir -p "$WORK"
MPI_COMPILE=$(mpicc --showme:compile)
status=0
for prec in FP32 BF16; do
    ptx=$WORK/train_gpt2cp_$prec.ptx
    # shellcheck disable=SC2086
    "$NVCC" -ptx -std=c++17 -arch=sm_$ARCH -DENABLE_$prec -DNO_BLAS -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX \
        $MPI_COMPILE -I. train_gpt2cp.cu -o "$ptx"
    "$PTXAS" -v -arch=sm_$ARCH "$ptx" -o "$WORK/train_gpt2cp_$prec.cubin" 2> "$WORK/ptxas_$prec.txt"
    # per entry: its launch bound (.maxntid x*y*z, 0 if none) from the PTX
    awk '/^\.(visible )?\.?entry / { name = $NF; sub(/\(.*/, "", name); bound[name] = 0; last = name }
         /^\.maxntid/ { gsub(/,/, " "); bound[last] = $2 * $3 * $4 }
         END { for (n in bound) print n, bound[n] }' "$ptx" > "$WORK/bounds_$prec.txt"
    # per entry from ptxas: name registers spill_stores spill_loads static_smem
    awk '/Compiling entry function/ { name = $0; sub(/.*function .?/, "", name); sub(/.? for .*/, "", name) }
         /spill stores/ { st = $5; ld = $9 }
         /Used [0-9]+ registers/ { regs = $5; smem = 0
             if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART); sub(/ .*/, "", smem) }
             print name, regs, st, ld, smem }' "$WORK/ptxas_$prec.txt" > "$WORK/usage_$prec.txt"
    count=0
    while read -r name regs stores loads smem; do
        count=$((count + 1))
        bound=$(awk -v n="$name" '$1 == n { print $2 }' "$WORK/bounds_$prec.txt")
        threads=$([[ ${bound:-0} -gt 0 ]] && echo "$bound" || echo 1024)
        readable=$(echo "$name" | c++filt)
        problems=""
        (( regs * threads > 65536 )) && problems+=" $regs registers x $threads threads > 65536;"
        # the exact-fp32 attention kernels (AttnPrecision 0) may spill: they are the reference
        if [[ $readable != *"(AttnPrecision)0"* ]] && (( stores > 0 || loads > 0 )); then
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
    if [[ $count -lt 20 ]]; then
        echo "FAIL $prec: ptxas reported $count kernels; the trainer has more (see $WORK/ptxas_$prec.txt)"
        status=1
    fi
done
[[ $status -eq 0 ]] && echo "PASS: every kernel of both builds fits an sm_$ARCH SM's registers, without spills"
exit $status
