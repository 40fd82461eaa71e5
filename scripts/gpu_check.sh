#!/usr/bin/env bash
# The GPU check: one command for a machine with an NVIDIA GPU (planned for one H200,
# about 15 minutes, most of it the compute-sanitizer passes). From the repo root:
#
#     bash scripts/gpu_check.sh
#
#   1. finds the toolchain (scripts/gpu_toolchain.sh): nvcc (CUDA_HOME, default
#      /usr/local/cuda), NCCL (in CUDA_HOME, else python3's site-packages
#      nvidia/nccl from the pip package nvidia-nccl-cu13; optional: without it the
#      trainer is built with NO_NCCL=1 and the cp 1 runs use -ct mpi), MPI (the
#      system's mpirun, else gpu_bundle/ made here by scripts/gpu_bundle.sh, for
#      machines without MPI or a package registry)
#   2. builds train_gpt2cp, the CPU twin train_gpt2cp_cpu and the GPU tests
#   3. runs the GPU tests: every kernel and the whole model against the CPU headers,
#      ring, all-gather, Ulysses and hybrid attention against their CPU twins on 1
#      to 4 ranks sharing the GPU (the block attention in exact fp32 and TF32);
#      then, where compute-sanitizer works, the tests again under its memcheck
#      and racecheck
#   4. trains the same small model (-e d2 -b 4 -t 256 -x 20 -f 0, Austen data) with
#      the CPU twin (cp 1, the reference) and with train_gpt2cp at cp 1 (NCCL) and
#      cp 2 and 4 x {contiguous, round_robin} (-ct mpi, ranks sharing the GPU),
#      Ulysses at cp 1 (NCCL) and 2, the hybrid U 2 x R 2;
#      then with document masking (-dm 1, text with short documents) the packed
#      layout, the all-gather, Ulysses and hybrid attention against the CPU twin
#      with -dm 1; and a resume: 10 steps, then -y 1 to 20, must repeat the
#      20-step run's losses; and one timed GPT-2 124M run (-e d12 -b 8 -t 1024,
#      TF32), its tok/s
#   5. prints a table, also written to $OUT/gpu_check.txt when OUT is set: per run,
#      |step loss - CPU twin| at step 1 and the max over 20 steps, the max
#      |per-token loss - CPU twin| (gathered with -tl) at step 1 and over all
#      steps, and tokens/s; exits non-zero if a test failed or a tolerance is
#      exceeded: step loss 1e-4 at step 1 and 1e-3 over 20 steps, per-token loss
#      1e-3 at step 1 (fp32 with TF32 off on both sides).
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

# ---- 2. build
GPU_TESTS=(build/gpu/test_gpu_kernels build/gpu/test_gpu_ring_attention)
run build 600 make -j 4 "${MAKE_FLAGS[@]}" train_gpt2cp train_gpt2cp_cpu "${GPU_TESTS[@]}" ||
    { fail "the build failed"; exit 1; }

# ---- 3. GPU tests
export OMP_NUM_THREADS=1
run test_gpu_kernels 240 "${MPIRUN[@]}" -np 1 build/gpu/test_gpu_kernels || fail "test_gpu_kernels"
for np in 1 2 3 4; do
    run "test_gpu_ring_attention_np$np" 240 "${MPIRUN[@]}" -np "$np" build/gpu/test_gpu_ring_attention ||
        fail "test_gpu_ring_attention on $np rank(s)"
done

# compute-sanitizer over the GPU tests, where the tool works on this machine:
# memcheck (out-of-bounds and misaligned accesses, leaks of device memory) and
# racecheck (shared-memory races: a missing __syncthreads in the attention tiles)
SANITIZER=$CUDA_HOME/bin/compute-sanitizer
sanitized=none
if [[ -x $SANITIZER ]] && "$SANITIZER" --version > /dev/null 2>&1; then
    sanitized="memcheck, racecheck"
    for tool in memcheck racecheck; do
        for t in test_gpu_kernels test_gpu_ring_attention; do
            run "sanitizer_${tool}_$t" 900 "${MPIRUN[@]}" -np 1 "$SANITIZER" --tool "$tool" --error-exitcode 99 \
                "build/gpu/$t" || fail "compute-sanitizer --tool $tool on $t"
        done
    done
    run sanitizer_memcheck_ring_np2 900 "${MPIRUN[@]}" -np 2 "$SANITIZER" --tool memcheck --error-exitcode 99 \
        build/gpu/test_gpu_ring_attention || fail "compute-sanitizer --tool memcheck on test_gpu_ring_attention, 2 ranks"
else
    say "compute-sanitizer: not at $SANITIZER or not working here: the GPU tests ran without it"
fi

# ---- 4. training runs
STEPS=20
B=4
T=256
COMMON=(-e d2 -b $B -t $T -x $STEPS -f 0 -l 1e-3 -v 0 -s 0)
# train NAME NP TRAINER FLAGS...: main.log in $WORK/NAME/, per-token losses in $WORK/NAME.tl
train() {
    local name=$1 np=$2 trainer=$3
    shift 3
    run "$name" 300 "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS "$trainer" "${COMMON[@]}" \
        -o "$WORK/$name" -tl "$WORK/$name.tl" "$@"
}
OMP_NUM_THREADS=$CORES train cpu_cp1 1 ./train_gpt2cp_cpu -cp 1 || fail "the CPU twin's run"
# the runs compared in the table, and the CPU twin's run each is compared with
declare -a runs=()
declare -A reference=()
# gpu NAME NP REFERENCE FLAGS...: a train_gpt2cp run for the table
gpu() {
    local name=$1 np=$2 ref=$3
    shift 3
    train "$name" "$np" ./train_gpt2cp "$@" && { runs+=("$name"); reference[$name]=$ref; } || fail "$name"
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
# resume: 10 steps with a checkpoint, then -y 1 on to 20, against the 20-step run
RESUME=$WORK/gpu_resume
train gpu_resume_first 2 ./train_gpt2cp -cp 2 -cl round_robin -ct mpi -x 10 -n 10 -o "$RESUME" -tl "$RESUME.tl" &&
    train gpu_resume_rest 2 ./train_gpt2cp -cp 2 -cl round_robin -ct mpi -y 1 -o "$RESUME" -tl "$RESUME.tl" ||
    fail "the resumed GPU run"
if ! cmp -s "$WORK/gpu_cp2_round_robin_mpi/main.log" "$RESUME/main.log"; then
    fail "resume: main.log after -y 1 differs from the uninterrupted run's"
fi

# one timed GPT-2 124M run: -e d12, B 8, T 1024, TF32 (the trainer's default -f 1)
D12=(-e d12 -b 8 -t 1024 -x 20 -v 0 -s 0)
run gpu_d12_timed 600 "${MPIRUN[@]}" -np 1 ./train_gpt2cp "${D12[@]}" -cp 1 -ct "$NCCL_CT" -o "$WORK/gpu_d12" ||
    fail "the timed d12 run"

# ---- 5. the table
PER_STEP=$((B * T))
# step losses of main.log, one per line
step_losses() { awk -F'trl:' '/ trl:/ { split($2, a, " "); print a[1] }' "$1"; }
# per-token losses of a -tl file, one per line
token_losses() { od -An -v -f -w4 "$1" | awk '{ print $1 }'; }
for ref in cpu_cp1 cpu_docs_cp1; do
    if [[ -f $WORK/$ref/main.log && -f $WORK/$ref.tl ]]; then
        step_losses "$WORK/$ref/main.log" > "$WORK/$ref.steps"
        token_losses "$WORK/$ref.tl" > "$WORK/$ref.tokens"
        [[ $(wc -l < "$WORK/$ref.steps") -eq $STEPS ]] || fail "$ref logged $(wc -l < "$WORK/$ref.steps") steps, not $STEPS"
        [[ $(wc -l < "$WORK/$ref.tokens") -eq $((STEPS * PER_STEP)) ]] || fail "$ref: the -tl file has the wrong size"
    else
        fail "no reference: the CPU twin's run $ref left no main.log / -tl file"
    fi
done
{
    printf "GPU check: train_gpt2cp vs the CPU twin (cp 1), %s, %d steps, fp32 (-f 0)\n" "${COMMON[*]}" "$STEPS"
    printf "tolerances: step loss %s at step 1, %s over %d steps; per-token loss %s at step 1\n" 1e-4 1e-3 "$STEPS" 1e-3
    printf "%-30s %12s %12s %12s %12s %10s  %s\n" config "|dstep| s1" "|dstep| max" "|dtok| s1" "|dtok| max" "tok/s" verdict
    for ref in cpu_cp1 cpu_docs_cp1; do
        printf "%-30s %12s %12s %12s %12s %10s  %s\n" "$ref" - - - - "$(tokens_per_s "$WORK/$ref.out" 2>/dev/null)" reference
    done
} > "$TABLE"
for name in "${runs[@]}"; do
    step_losses "$WORK/$name/main.log" > "$WORK/$name.steps"
    token_losses "$WORK/$name.tl" > "$WORK/$name.tokens"
    if [[ $(wc -l < "$WORK/$name.steps") -ne $STEPS || $(wc -l < "$WORK/$name.tokens") -ne $((STEPS * PER_STEP)) ]]; then
        printf "%-30s %s\n" "$name" "incomplete output: $(wc -l < "$WORK/$name.steps") steps, $(wc -l < "$WORK/$name.tokens") token losses" >> "$TABLE"
        fail "$name: incomplete output"
        continue
    fi
    ref=${reference[$name]}
    read -r ds1 dsmax < <(paste "$WORK/$name.steps" "$WORK/$ref.steps" | awk '
        { d = $1 - $2; if (d < 0) d = -d; if ($1 ~ /nan|inf/) d = 1e30; if (NR == 1) s1 = d; if (d > m) m = d }
        END { printf "%.3e %.3e\n", s1, m }')
    read -r dt1 dtmax < <(paste "$WORK/$name.tokens" "$WORK/$ref.tokens" | awk -v per="$PER_STEP" '
        { d = $1 - $2; if (d < 0) d = -d; if ($1 ~ /nan|inf/) d = 1e30; if (NR <= per && d > m1) m1 = d; if (d > m) m = d }
        END { printf "%.3e %.3e\n", m1, m }')
    verdict=ok
    awk -v a="$ds1" -v b="$dsmax" -v c="$dt1" 'BEGIN { exit !(a <= 1e-4 && b <= 1e-3 && c <= 1e-3) }' || verdict=FAIL
    printf "%-30s %12s %12s %12s %12s %10s  %s\n" "$name" "$ds1" "$dsmax" "$dt1" "$dtmax" \
        "$(tokens_per_s "$WORK/$name.out")" "$verdict" >> "$TABLE"
    [[ $verdict == ok ]] || fail "$name: outside the tolerances"
done
printf "timed run: train_gpt2cp %s -cp 1 -ct %s: %s tok/s (mean after the first step)\n" "${D12[*]}" "$NCCL_CT" \
    "$(tokens_per_s "$WORK/gpu_d12_timed.out" 2>/dev/null)" >> "$TABLE"
printf "compute-sanitizer: %s; NCCL: %s\n" "$sanitized" "$([[ $HAVE_NCCL -eq 1 ]] && echo "$NCCL_HOME" || echo "none (NO_NCCL=1 build)")" >> "$TABLE"
printf "GPU tests and runs: %d failure(s); %d s in all\n" "$failures" "$((SECONDS - START))" >> "$TABLE"
echo
tee -a "$LOG" < "$TABLE"
[[ $failures -eq 0 ]]
