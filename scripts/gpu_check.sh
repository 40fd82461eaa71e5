#!/usr/bin/env bash
# The GPU check: one command for a machine with an NVIDIA GPU (planned for one H200,
# under 6 minutes). From the repo root:
#
#     bash scripts/gpu_check.sh
#
#   1. finds the toolchain: nvcc (CUDA_HOME, default /usr/local/cuda), NCCL (in
#      CUDA_HOME, else python3's site-packages nvidia/nccl from the pip package
#      nvidia-nccl-cu13), MPI (the system's mpirun, else gpu_bundle/ made here by
#      scripts/gpu_bundle.sh, for machines without MPI or a package registry)
#   2. builds train_gpt2cp, the CPU twin train_gpt2cp_cpu and the GPU tests
#   3. runs the GPU tests: every kernel and the whole model against the CPU headers,
#      ring, all-gather, Ulysses and hybrid attention against their CPU twins on 1
#      to 4 ranks sharing the GPU
#   4. trains the same small model (-e d2 -b 4 -t 256 -x 20 -f 0, Austen data) with
#      the CPU twin (cp 1, the reference) and with train_gpt2cp at cp 1 (NCCL) and
#      cp 2 and 4 x {contiguous, round_robin} (-ct mpi, ranks sharing the GPU),
#      Ulysses at cp 1 (NCCL) and 2, the hybrid U 2 x R 2;
#      then with document masking (-dm 1, text with short documents) the packed
#      layout, the all-gather, Ulysses and hybrid attention against the CPU twin
#      with -dm 1; and a
#      resume: 10 steps, then -y 1 to 20, must repeat the 20-step run's losses
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
WORK=$REPO/build/gpu_check
rm -rf "$WORK"
mkdir -p "$WORK"
REPORT_DIR=${OUT:-$WORK}
mkdir -p "$REPORT_DIR"
LOG=$REPORT_DIR/gpu_check.log
TABLE=$REPORT_DIR/gpu_check.txt
: > "$LOG"
START=$SECONDS
failures=0

say() { echo "$*" | tee -a "$LOG"; }
fail() { say "FAIL: $*"; failures=$((failures + 1)); }
# run NAME TIMEOUT COMMAND...: the output goes to the log and $WORK/NAME.out
run() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" > "$WORK/$name.out" 2>&1
    local rc=$?
    cat "$WORK/$name.out" >> "$LOG"
    say "[$((SECONDS - START))s] $name: exit $rc ($((SECONDS - t0)) s)"
    if [[ $rc -ne 0 ]]; then
        tail -n 25 "$WORK/$name.out"
        return 1
    fi
}

# ---- 1. toolchain
for tool in make gcc python3 od awk timeout; do
    command -v $tool > /dev/null || { echo "error: gpu_check.sh needs '$tool'" >&2; exit 1; }
done
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [[ ! -x $CUDA_HOME/bin/nvcc ]]; then
    if command -v nvcc > /dev/null; then CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")"); else
        echo "error: no nvcc (set CUDA_HOME)" >&2; exit 1; fi
fi
say "nvcc: $("$CUDA_HOME/bin/nvcc" --version | tail -n 2 | head -n 1)"
nvidia-smi -L 2>&1 | tee -a "$LOG" || true
if [[ -z ${NCCL_HOME:-} ]]; then
    if [[ -f $CUDA_HOME/include/nccl.h ]]; then NCCL_HOME=$CUDA_HOME; else
        for site in $(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null); do
            if [[ -f $site/nvidia/nccl/include/nccl.h ]]; then NCCL_HOME=$site/nvidia/nccl; break; fi
        done
    fi
fi
if [[ -z ${NCCL_HOME:-} ]]; then echo "error: no NCCL (nccl.h) in $CUDA_HOME or python3's nvidia/nccl; set NCCL_HOME" >&2; exit 1; fi
export NCCL_HOME
say "NCCL: $NCCL_HOME"
if mpirun --version > /dev/null 2>&1 && mpicc --showme:compile > /dev/null 2>&1; then
    say "MPI: the system's ($(command -v mpirun))"
elif [[ -f gpu_bundle/env.sh ]]; then
    # shellcheck disable=SC1091
    source gpu_bundle/env.sh
    say "MPI: gpu_bundle ($(command -v mpirun))"
else
    echo "error: no mpirun here and no gpu_bundle/ (make it with scripts/gpu_bundle.sh where apt works, carry it along)" >&2
    exit 1
fi
# containers often forbid the cross-process memory reads (CMA) of Open MPI's shared
# memory transport; the copy-in/copy-out path always works
export OMPI_MCA_btl_vader_single_copy_mechanism=none
MPIRUN=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
CORES=$(nproc)

# ---- 2. build
GPU_TESTS=(build/gpu/test_gpu_kernels build/gpu/test_gpu_ring_attention)
run build 600 make -j 4 NCCL_HOME="$NCCL_HOME" CUDA_HOME="$CUDA_HOME" train_gpt2cp train_gpt2cp_cpu "${GPU_TESTS[@]}" ||
    { fail "the build failed"; exit 1; }

# ---- 3. GPU tests
export OMP_NUM_THREADS=1
run test_gpu_kernels 240 "${MPIRUN[@]}" -np 1 build/gpu/test_gpu_kernels || fail "test_gpu_kernels"
for np in 1 2 3 4; do
    run "test_gpu_ring_attention_np$np" 240 "${MPIRUN[@]}" -np "$np" build/gpu/test_gpu_ring_attention ||
        fail "test_gpu_ring_attention on $np rank(s)"
done

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
gpu gpu_cp1_nccl 1 cpu_cp1 -cp 1 -ct nccl
for cp in 2 4; do
    for layout in contiguous round_robin; do
        gpu "gpu_cp${cp}_${layout}_mpi" "$cp" cpu_cp1 -cp "$cp" -cl "$layout" -ct mpi
    done
done
# Ulysses (d2: 2 heads, so U 2): the all-to-all over NCCL at cp 1 (a group of one),
# over the staged MPI transport at cp 2, and the hybrid U 2 x R 2
gpu gpu_cp1_ulysses_nccl 1 cpu_cp1 -cp 1 -ca ulysses -ct nccl
gpu gpu_cp2_ulysses_mpi 2 cpu_cp1 -cp 2 -cl round_robin -ca ulysses -ct mpi
gpu gpu_cp4_hybrid_2x2_mpi 4 cpu_cp1 -cp 4 -cl contiguous -ca hybrid -cu 2 -ct mpi
# documents: rows of several short documents over the span the runs read
source test/binary_files.sh
DOCS=$WORK/short_documents.bin
short_documents "$DOCS" $((STEPS * B * T + 1)) # read in order (-sh 0): the runs see the documents
OMP_NUM_THREADS=$CORES train cpu_docs_cp1 1 ./train_gpt2cp_cpu -cp 1 -dm 1 -sh 0 -i "$DOCS" || fail "the CPU twin's -dm 1 run"
gpu gpu_docs_cp1_nccl 1 cpu_docs_cp1 -cp 1 -dm 1 -sh 0 -i "$DOCS" -ct nccl
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

# ---- 5. the table
PER_STEP=$((B * T))
# step losses of main.log, one per line
step_losses() { awk -F'trl:' '/ trl:/ { split($2, a, " "); print a[1] }' "$1"; }
# per-token losses of a -tl file, one per line
token_losses() { od -An -v -f -w4 "$1" | awk '{ print $1 }'; }
# mean tok/s of the progress lines after the first step
tokens_per_s() { awk '/^step / && $2 !~ /^1\// { for (i = 1; i < NF; i++) if ($(i + 1) == "tok/s") { s += $i; n++ } }
                      END { if (n) printf "%.0f", s / n; else print "-" }' "$1"; }
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
printf "GPU tests and runs: %d failure(s); %d s in all\n" "$failures" "$((SECONDS - START))" >> "$TABLE"
echo
tee -a "$LOG" < "$TABLE"
[[ $failures -eq 0 ]]
