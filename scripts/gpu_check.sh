#!/usr/bin/env bash
# The GPU check: one command for a machine with an NVIDIA GPU, planned to take about
# 5 minutes on one H200 (16 cores), so that it and dev/bench/gpu_bench.sh fit one
# 10-minute call. From the repo root:
#
#     bash scripts/gpu_check.sh            (SANITIZE=1: also compute-sanitizer, +5 min or more)
#
#   1. finds the toolchain (scripts/gpu_toolchain.sh): nvcc (CUDA_HOME, default
#      /usr/local/cuda), NCCL (in CUDA_HOME, else python3's site-packages
#      nvidia/nccl from the pip package nvidia-nccl-cu13; optional: without it the
#      trainer is built with NO_NCCL=1 and the cp 1 runs use -ct mpi), MPI (the
#      system's mpirun, else gpu_bundle/ made here by scripts/gpu_bundle.sh, for
#      machines without MPI or a package registry); a missing tool stops it there
#   2. builds train_gpt2cp and the GPU tests in both precisions at once (make
#      PRECISION=FP32 and PRECISION=BF16, each in its own copy of the sources under
#      build/precision/), and the CPU twin train_gpt2cp_cpu
#   3. runs the GPU tests of both builds: every kernel and the whole model against
#      the CPU headers, ring, all-gather, Ulysses and hybrid attention against
#      their CPU twins on 1 to 4 ranks sharing the GPU; with SANITIZE=1 also the FP32
#      tests under compute-sanitizer's memcheck and racecheck, where the tool works
#   4. trains the same small model (-e d2 -b 4 -t 256 -x 20 -f 0, Austen data) with
#      the CPU twin (cp 1, the reference) and with the FP32 train_gpt2cp at cp 1
#      (NCCL) and cp 2 and 4 x {contiguous, round_robin} (-ct mpi, ranks sharing the
#      GPU), Ulysses at cp 1 (NCCL) and 2, the hybrid U 2 x R 2; then with document
#      masking (-dm 1, text with short documents) the packed layout, the all-gather,
#      Ulysses and hybrid attention against the CPU twin with -dm 1; and a resume:
#      half the steps, then -y 1 to the end, must repeat the uninterrupted run's losses
#   5. the BF16 build against the FP32 build: the same runs at cp 1, cp 2
#      round_robin and cp 4 contiguous, per-step losses over the 20 steps
#   6. a version 5 (bf16) model file round trip: the BF16 build's checkpoint must be
#      version 5 of the right size; the CPU twin, the FP32 build and the BF16 build
#      train from it (FP32 against the twin, BF16 against FP32, as above), and the
#      FP32 build's checkpoint of it (version 3) holds its weights exactly
#   7. prints a table, also written to $OUT/gpu_check.txt when OUT is set: per run,
#      |step loss - reference| at step 1 and the max over 20 steps, the max
#      |per-token loss - reference| (gathered with -tl) at step 1 and over all
#      steps, and tokens/s; exits non-zero if a test failed or a tolerance is
#      exceeded. FP32 build vs the CPU twin (fp32 with TF32 off on both sides):
#      step loss 1e-4 at step 1 and 1e-3 over 20 steps, per-token loss 1e-3 at
#      step 1. BF16 build vs FP32 build: step loss $BF16_TOLERANCE (default 0.05)
#      at every step; per-token losses are shown, not held to a bound (bf16 moves single
#      tokens' losses far more than their mean).
# The full log goes to $OUT/gpu_check.log (or build/gpu_check/gpu_check.log).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
# ---- 1. toolchain
GPU_SCRIPT=gpu_check
# shellcheck source=scripts/gpu_toolchain.sh
source scripts/gpu_toolchain.sh || exit 1
[[ $HAVE_MPI -eq 1 ]] || { say "error: the GPU check needs MPI (the trainer is an MPI program)"; exit 1; }
CORES=$(nproc)

# ---- 2. build (about 1.5 minutes: the two precisions and the CPU twin side by side)
GPU_TESTS=(test_gpu_kernels test_gpu_ring_attention)
run build_cpu 600 make -j 2 "${MAKE_FLAGS[@]}" train_gpt2cp_cpu &
cpu_build=$!
build_gpu_precisions train_gpt2cp "${GPU_TESTS[@]/#/build/gpu/}" || { fail "the GPU build failed"; exit 1; }
wait "$cpu_build" || { fail "the CPU twin's build failed"; exit 1; }
FP32=$PRECISION_DIR/FP32/train_gpt2cp
BF16=$PRECISION_DIR/BF16/train_gpt2cp

# ---- 3. GPU tests, both builds
export OMP_NUM_THREADS=1
for p in FP32 BF16; do
    tests=$PRECISION_DIR/$p/build/gpu
    run "test_gpu_kernels_$p" 180 "${MPIRUN[@]}" -np 1 "$tests/test_gpu_kernels" || fail "test_gpu_kernels ($p)"
    for np in 1 2 3 4; do
        run "test_gpu_ring_attention_${p}_np$np" 180 "${MPIRUN[@]}" -np "$np" "$tests/test_gpu_ring_attention" ||
            fail "test_gpu_ring_attention ($p) on $np rank(s)"
    done
done

# SANITIZE=1: compute-sanitizer over the FP32 GPU tests, where the tool works on this
# machine: memcheck (out-of-bounds and misaligned accesses, leaks of device memory)
# and racecheck (shared-memory races: a missing __syncthreads in the attention tiles).
# Off by default: it takes longer than the rest of the check together.
SANITIZER=$CUDA_HOME/bin/compute-sanitizer
sanitized="off (SANITIZE=1 runs it)"
if [[ ${SANITIZE:-0} == 1 ]]; then
    if [[ -x $SANITIZER ]] && "$SANITIZER" --version > /dev/null 2>&1; then
        sanitized="memcheck, racecheck"
        for tool in memcheck racecheck; do
            for t in "${GPU_TESTS[@]}"; do
                run "sanitizer_${tool}_$t" 900 "${MPIRUN[@]}" -np 1 "$SANITIZER" --tool "$tool" --error-exitcode 99 \
                    "$PRECISION_DIR/FP32/build/gpu/$t" || fail "compute-sanitizer --tool $tool on $t"
            done
        done
        run sanitizer_memcheck_ring_np2 900 "${MPIRUN[@]}" -np 2 "$SANITIZER" --tool memcheck --error-exitcode 99 \
            "$PRECISION_DIR/FP32/build/gpu/test_gpu_ring_attention" ||
            fail "compute-sanitizer --tool memcheck on test_gpu_ring_attention, 2 ranks"
    else
        fail "SANITIZE=1, but compute-sanitizer is not at $SANITIZER or does not work here"
        sanitized="asked for, not working here"
    fi
fi

# ---- 4. training runs of the FP32 build against the CPU twin
STEPS=20
B=4
T=256
COMMON=(-e d2 -b $B -t $T -x $STEPS -f 0 -l 1e-3 -v 0 -s 0)
# BF16 vs FP32, per step, absolute: DESIGN section 5 names no bf16 tolerance yet (issue 10);
# the environment's BF16_TOLERANCE, when set, replaces it
BF16_TOLERANCE=${BF16_TOLERANCE:-0.05}
# train NAME NP TRAINER FLAGS...: main.log in $WORK/NAME/, per-token losses in $WORK/NAME.tl
train() {
    local name=$1 np=$2 trainer=$3
    shift 3
    run "$name" 300 "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS "$trainer" "${COMMON[@]}" \
        -o "$WORK/$name" -tl "$WORK/$name.tl" "$@"
}
OMP_NUM_THREADS=$CORES train cpu_cp1 1 ./train_gpt2cp_cpu -cp 1 || fail "the CPU twin's run"
# the runs compared in the table, the run each is compared with, and the tolerances
# it is held to: fp32 (against the CPU twin) or bf16 (the BF16 build against FP32)
declare -a runs=()
declare -A reference=() tolerance=()
# gpu NAME NP REFERENCE FLAGS...: an FP32 train_gpt2cp run for the table
gpu() {
    local name=$1 np=$2 ref=$3
    shift 3
    train "$name" "$np" "$FP32" "$@" && { runs+=("$name"); reference[$name]=$ref; tolerance[$name]=fp32; } ||
        fail "$name"
}
# bf16 NAME NP REFERENCE FLAGS...: a BF16 train_gpt2cp run, against the FP32 run REFERENCE
bf16() {
    local name=$1 np=$2 ref=$3
    shift 3
    train "$name" "$np" "$BF16" "$@" && { runs+=("$name"); reference[$name]=$ref; tolerance[$name]=bf16; } ||
        fail "$name"
}
# cp 1 over NCCL where it was found (else over the staged MPI transport)
NCCL_CT=$([[ $HAVE_NCCL -eq 1 ]] && echo nccl || echo mpi)
gpu "gpu_cp1_$NCCL_CT" 1 cpu_cp1 -cp 1 -ct "$NCCL_CT"
for cp in 2 4; do
    for layout in contiguous round_robin; do
        gpu "gpu_cp${cp}_${layout}_mpi" "$cp" cpu_cp1 -cp "$cp" -cl "$layout" -ct mpi
    done
done
# Ulysses (d2: 2 heads, so U 2): the all-to-all at cp 1 (a group of one; NCCL where found),
# over the staged MPI transport at cp 2, and the hybrid U 2 x R 2
gpu "gpu_cp1_ulysses_$NCCL_CT" 1 cpu_cp1 -cp 1 -ca ulysses -ct "$NCCL_CT"
gpu gpu_cp2_ulysses_mpi 2 cpu_cp1 -cp 2 -cl round_robin -ca ulysses -ct mpi
gpu gpu_cp4_hybrid_2x2_mpi 4 cpu_cp1 -cp 4 -cl contiguous -ca hybrid -cu 2 -ct mpi
# documents: rows of several short documents over the span the runs read
source test/binary_files.sh
DOCS=$WORK/short_documents.bin
short_documents "$DOCS" $((STEPS * B * T + 1)) # read in order (-sh 0): the runs see the documents
OMP_NUM_THREADS=$CORES train cpu_docs_cp1 1 ./train_gpt2cp_cpu -cp 1 -dm 1 -sh 0 -i "$DOCS" || fail "the CPU twin's -dm 1 run"
gpu "gpu_docs_cp1_$NCCL_CT" 1 cpu_docs_cp1 -cp 1 -dm 1 -sh 0 -i "$DOCS" -ct "$NCCL_CT"
gpu gpu_docs_cp2_packed_mpi 2 cpu_docs_cp1 -cp 2 -cl packed -dm 1 -sh 0 -i "$DOCS" -ct mpi
gpu gpu_docs_cp4_packed_allgather 4 cpu_docs_cp1 -cp 4 -cl packed -dm 1 -sh 0 -i "$DOCS" -ca allgather -ct mpi
gpu gpu_docs_cp4_rr_allgather 4 cpu_docs_cp1 -cp 4 -cl round_robin -dm 1 -sh 0 -i "$DOCS" -ca allgather -ct mpi
gpu gpu_docs_cp2_packed_ulysses 2 cpu_docs_cp1 -cp 2 -cl packed -dm 1 -sh 0 -i "$DOCS" -ca ulysses -ct mpi
gpu gpu_docs_cp4_packed_hybrid 4 cpu_docs_cp1 -cp 4 -cl packed -dm 1 -sh 0 -i "$DOCS" -ca hybrid -cu 2 -ct mpi
# resume: half the steps with a checkpoint, then -y 1 on to the end, against the uninterrupted run
RESUME=$WORK/gpu_resume
train gpu_resume_first 2 "$FP32" -cp 2 -cl round_robin -ct mpi -x $((STEPS / 2)) -n $((STEPS / 2)) -o "$RESUME" \
    -tl "$RESUME.tl" &&
    train gpu_resume_rest 2 "$FP32" -cp 2 -cl round_robin -ct mpi -y 1 -o "$RESUME" -tl "$RESUME.tl" ||
    fail "the resumed GPU run"
if ! cmp -s "$WORK/gpu_cp2_round_robin_mpi/main.log" "$RESUME/main.log"; then
    fail "resume: main.log after -y 1 differs from the uninterrupted run's"
fi

# ---- 5. the BF16 build against the FP32 build, run for run
bf16 "bf16_cp1_$NCCL_CT" 1 "gpu_cp1_$NCCL_CT" -cp 1 -ct "$NCCL_CT"
bf16 bf16_cp2_round_robin_mpi 2 gpu_cp2_round_robin_mpi -cp 2 -cl round_robin -ct mpi
bf16 bf16_cp4_contiguous_mpi 4 gpu_cp4_contiguous_mpi -cp 4 -cl contiguous -ct mpi

# ---- 6. a version 5 model file: the BF16 build writes it, every trainer loads it
V5=$WORK/bf16_written/model_00000002.bin
# header_field FILE I: the int32 header[I] of a model file
header_field() { od -An -t d4 -j $((4 * $2)) -N 4 "$1" | tr -d ' '; }
if train bf16_written 1 "$BF16" -cp 1 -ct "$NCCL_CT" -x 2 -n 2 && [[ -f $V5 ]]; then
    read -r maxT _ L _ C Vp < <(for i in 2 3 4 5 6 7; do header_field "$V5" $i; done | tr '\n' ' ')
    n=$((Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C))
    version=$(header_field "$V5" 1)
    size=$(stat -c %s "$V5")
    if [[ $version -eq 5 && $size -eq $((1024 + 2 * n)) ]]; then
        say "the BF16 build's checkpoint: version 5, $size bytes for $n parameters"
    else
        fail "the BF16 build's checkpoint is version $version, $size bytes (expected 5, $((1024 + 2 * n)) for $n parameters)"
    fi
    OMP_NUM_THREADS=$CORES train cpu_v5 1 ./train_gpt2cp_cpu -cp 1 -e "$V5" || fail "the CPU twin from the v5 file"
    gpu "gpu_v5_cp1_$NCCL_CT" 1 cpu_v5 -cp 1 -ct "$NCCL_CT" -e "$V5"
    bf16 "bf16_v5_cp1_$NCCL_CT" 1 "gpu_v5_cp1_$NCCL_CT" -cp 1 -ct "$NCCL_CT" -e "$V5"
    # the FP32 build's own checkpoint of it (version 3) holds the v5 weights exactly
    if train gpu_v5_saved 1 "$FP32" -cp 1 -ct "$NCCL_CT" -e "$V5" -x 0 -n 1; then
        widened=$(python3 test/llmc_files.py maxdiff "$V5" "$WORK/gpu_v5_saved/model_00000000.bin")
        [[ $widened == 0.000e+00 ]] && say "the FP32 build's checkpoint of the v5 file: its weights exactly" ||
            fail "the FP32 build's checkpoint of the v5 file differs from it by up to $widened"
    else
        fail "the FP32 build from the v5 file, -x 0 -n 1"
    fi
else
    fail "the BF16 build wrote no checkpoint $V5"
fi

# ---- 7. the table
PER_STEP=$((B * T))
# step losses of main.log, one per line
step_losses() { awk -F'trl:' '/ trl:/ { split($2, a, " "); print a[1] }' "$1"; }
# per-token losses of a -tl file, one per line
token_losses() { od -An -v -f -w4 "$1" | awk '{ print $1 }'; }
for ref in cpu_cp1 cpu_docs_cp1 cpu_v5; do
    if [[ -f $WORK/$ref/main.log && -f $WORK/$ref.tl ]]; then
        step_losses "$WORK/$ref/main.log" > "$WORK/$ref.steps"
        token_losses "$WORK/$ref.tl" > "$WORK/$ref.tokens"
        [[ $(wc -l < "$WORK/$ref.steps") -eq $STEPS ]] || fail "$ref logged $(wc -l < "$WORK/$ref.steps") steps, not $STEPS"
        [[ $(wc -l < "$WORK/$ref.tokens") -eq $((STEPS * PER_STEP)) ]] || fail "$ref: the -tl file has the wrong size"
    elif [[ $ref != cpu_v5 || -f $V5 ]]; then
        fail "no reference: the CPU twin's run $ref left no main.log / -tl file"
    fi
done
{
    printf "GPU check: train_gpt2cp (FP32, BF16) vs the CPU twin (cp 1), %s, %d steps\n" "${COMMON[*]}" "$STEPS"
    printf "tolerances: FP32 vs the CPU twin (reference cpu_*): step loss %s at step 1, %s over %d steps; per-token loss %s at step 1\n" \
        1e-4 1e-3 "$STEPS" 1e-3
    printf "            BF16 vs FP32 (reference gpu_*): step loss %s at every step (per-token losses shown, not bounded)\n" \
        "$BF16_TOLERANCE"
    printf "%-30s %-24s %12s %12s %12s %12s %10s  %s\n" config reference "|dstep| s1" "|dstep| max" "|dtok| s1" "|dtok| max" "tok/s" verdict
    for ref in cpu_cp1 cpu_docs_cp1 cpu_v5; do
        printf "%-30s %-24s %12s %12s %12s %12s %10s  %s\n" "$ref" - - - - - "$(tokens_per_s "$WORK/$ref.out" 2>/dev/null)" reference
    done
} > "$TABLE"
for name in "${runs[@]}"; do
    step_losses "$WORK/$name/main.log" > "$WORK/$name.steps"
    token_losses "$WORK/$name.tl" > "$WORK/$name.tokens"
    ref=${reference[$name]}
    if [[ $(wc -l < "$WORK/$name.steps") -ne $STEPS || $(wc -l < "$WORK/$name.tokens") -ne $((STEPS * PER_STEP)) ||
          ! -s $WORK/$ref.steps ]]; then
        printf "%-30s %s\n" "$name" "incomplete output: $(wc -l < "$WORK/$name.steps") steps, $(wc -l < "$WORK/$name.tokens") token losses (or none from $ref)" >> "$TABLE"
        fail "$name: incomplete output"
        continue
    fi
    read -r ds1 dsmax < <(paste "$WORK/$name.steps" "$WORK/$ref.steps" | awk '
        { d = $1 - $2; if (d < 0) d = -d; if ($1 ~ /nan|inf/) d = 1e30; if (NR == 1) s1 = d; if (d > m) m = d }
        END { printf "%.3e %.3e\n", s1, m }')
    read -r dt1 dtmax < <(paste "$WORK/$name.tokens" "$WORK/$ref.tokens" | awk -v per="$PER_STEP" '
        { d = $1 - $2; if (d < 0) d = -d; if ($1 ~ /nan|inf/) d = 1e30; if (NR <= per && d > m1) m1 = d; if (d > m) m = d }
        END { printf "%.3e %.3e\n", m1, m }')
    verdict=ok
    if [[ ${tolerance[$name]} == bf16 ]]; then
        awk -v b="$dsmax" -v tol="$BF16_TOLERANCE" 'BEGIN { exit !(b <= tol) }' || verdict=FAIL
    else
        awk -v a="$ds1" -v b="$dsmax" -v c="$dt1" 'BEGIN { exit !(a <= 1e-4 && b <= 1e-3 && c <= 1e-3) }' || verdict=FAIL
    fi
    printf "%-30s %-24s %12s %12s %12s %12s %10s  %s\n" "$name" "$ref" "$ds1" "$dsmax" "$dt1" "$dtmax" \
        "$(tokens_per_s "$WORK/$name.out")" "$verdict" >> "$TABLE"
    [[ $verdict == ok ]] || fail "$name: outside the tolerances"
done
printf "compute-sanitizer: %s; NCCL: %s\n" "$sanitized" "$([[ $HAVE_NCCL -eq 1 ]] && echo "$NCCL_HOME" || echo "none (NO_NCCL=1 build)")" >> "$TABLE"
printf "GPU tests and runs: %d failure(s); %d s in all\n" "$failures" "$((SECONDS - START))" >> "$TABLE"
echo
tee -a "$LOG" < "$TABLE"
[[ $failures -eq 0 ]]
