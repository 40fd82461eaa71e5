#!/usr/bin/env bash
# The GPU check, the first half of the one call on a machine with an NVIDIA GPU
# (scripts/gpu_call.sh runs it, then dev/bench/gpu_bench.sh). It needs gpu_prep/,
# made where apt works by `make gpu_prep` and carried along. From the repo root:
#
#     bash scripts/gpu_check.sh
#
#   1. the toolchain and the binaries (scripts/gpu_toolchain.sh): first whether CUDA
#      runs here (libcuda.so.1 loads, gpu_probe runs a tiny kernel), else one error
#      line and exit 1, no step run; then gpu_prep's binaries, built here only where
#      they do not start
#   2. the GPU tests of both builds (FP32, BF16): every kernel and the whole model
#      against the CPU headers; ring, all-gather, Ulysses, hybrid and group-cast
#      attention against their CPU twins on RING_RANKS ranks sharing the GPU
#   3. compute-sanitizer's racecheck, synccheck and memcheck over one attention
#      forward and backward of each build (bench_attention_gpu, SANITIZED sizes),
#      after it ran gpu_probe: where it refuses the device, one error line and its
#      steps skipped ("skipped: device not supported")
#   4. the FP32 trainer against the CPU twin's runs that gpu_prep made (CHECK sizes:
#      d2, B 4, T 256, 20 steps, -f 0): cp 1 over NCCL, cp 2 and 4 x {contiguous,
#      round_robin} (-ct mpi, ranks sharing the GPU), Ulysses at cp 1 and 2, the
#      hybrid U 2 x R 2; with document masking (-dm 1, short documents) the packed
#      layout, the all-gather, Ulysses and the hybrid, and group-cast over the
#      solver layout in 2 stages at cp 4; a resume (half the steps,
#      then -y 1) that must repeat the uninterrupted run's main.log
#   5. the BF16 build against the FP32 build, run for run: cp 1, 2 round_robin, 4
#      contiguous, per step within BF16_TOLERANCE (0.05)
#   6. model files of version 5 (bf16): the BF16 build writes one of the right size;
#      both builds train from llm.c's bf16 file of test/lib/llmc_files.py, the FP32 build
#      against the CPU twin from its fp32 twin, and the FP32 build's own checkpoint
#      of it (version 3) holds its weights exactly
#   7. the table ($OUT/gpu_check.txt): per run, |step loss - reference| at step 1
#      and the most over the steps, the most |per-token loss - reference| at step 1
#      and over all steps, tok/s. FP32 vs the CPU twin: step loss 1e-4 at step 1 and
#      1e-3 over the steps, per-token loss 1e-3 at step 1. BF16 vs FP32: step loss
#      BF16_TOLERANCE at every step (per-token losses shown, not bounded).
# Every step runs under its own timeout of 60 s (300 for a build), independent runs
# side by side; summary.txt gets a line as each ends.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/script_lib.sh
usage="usage: bash scripts/gpu_check.sh   (on the GPU machine, gpu_prep/ carried along; scripts/gpu_call.sh runs it)
  -h    this help"
no_arguments "$@"
REPO=$(pwd)
GPU_SCRIPT=gpu_check
# shellcheck source=scripts/gpu_toolchain.sh
source scripts/gpu_toolchain.sh || exit 1
[[ $HAVE_MPI -eq 1 ]] || { error "the GPU check needs MPI (the trainer is an MPI program)"; exit 1; }
export OMP_NUM_THREADS=1
JOBS=$([[ $EMULATION -eq 1 ]] && echo 2 || echo 4)
# at most JOBS commands at once in the background (each runs its own `run`)
spawn() {
    while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n; done
    "$@" &
}
# whether the step NAME ran and succeeded (run leaves $WORK/NAME.out; a spawned
# run's status is in $WORK/NAME.rc)
passed() { [[ -f $WORK/$1.rc && $(cat "$WORK/$1.rc") -eq 0 ]]; }
step() {
    local name=$1
    shift
    run "$name" "$@"
    echo $? > "$WORK/$name.rc"
}

# ---- 2. the GPU tests, both builds
for p in FP32 BF16; do
    spawn step "test_gpu_kernels_$p" 60 "${MPIRUN[@]}" -np 1 "$(bin $p test_gpu_kernels)"
    for np in $RING_RANKS; do
        spawn step "test_gpu_attention_algorithms_${p}_np$np" 60 "${MPIRUN[@]}" -np "$np" "$(bin $p test_gpu_attention_algorithms)"
    done
done

# ---- 3. compute-sanitizer over one attention forward and backward of each build
SANITIZER=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
# sanitizer_probe: compute-sanitizer tried first on gpu_probe. Where it does not
# support this device (some container runtimes: "Device not supported", then every
# allocation fails) it says so in its own error line and its steps are skipped, not
# failed; any other failure of the probe under it is one failure, its steps skipped
sanitizer_probe() {
    if timeout $((60 * TIME_SCALE)) "$SANITIZER" --tool memcheck --error-exitcode 99 "$PROBE" \
        > "$WORK/sanitizer_probe.out" 2>&1; then
        skip_sanitizer=
        return
    fi
    cat "$WORK/sanitizer_probe.out" >> "$LOG"
    local refused
    refused=$(grep -m 1 -iE 'device not supported|no CUDA-capable device|sees no device' "$WORK/sanitizer_probe.out")
    if [[ -n $refused ]]; then
        skip_sanitizer="device not supported"
        error "compute-sanitizer refuses this device (${refused#"========= "}): its steps are skipped"
    else
        skip_sanitizer="compute-sanitizer fails on gpu_probe"
        local why
        why=$(grep -m 1 -iE 'error' "$WORK/sanitizer_probe.out" || tail -n 1 "$WORK/sanitizer_probe.out")
        fail "$skip_sanitizer: ${why#"========= "}"
    fi
}
if [[ $HAVE_GPU_TOOLS -eq 1 && -x $SANITIZER ]]; then
    sanitizer_probe
    sanitized=${skip_sanitizer:+skipped: $skip_sanitizer}
    for p in FP32 BF16; do
        for tool in racecheck synccheck memcheck; do
            if [[ -n $skip_sanitizer ]]; then
                summary_line "sanitizer_${tool}_$p: skipped: $skip_sanitizer"
            else
                spawn step "sanitizer_${tool}_$p" 60 "$SANITIZER" --tool "$tool" --error-exitcode 99 \
                    "$(bin $p bench_attention_gpu)" "${SANITIZED[@]}" -f 1
            fi
        done
    done
    sanitized=${sanitized:-racecheck, synccheck, memcheck}
else
    sanitized="not run: no compute-sanitizer$([[ $EMULATION -eq 1 ]] && echo " (emulation: its own checks are on)")"
    say "compute-sanitizer: $sanitized"
fi

# ---- 4-6. the trainings
# train NAME NP PRECISION FLAGS...: main.log in $WORK/NAME/, per-token losses in $WORK/NAME.tl
train() {
    local name=$1 np=$2 p=$3
    shift 3
    step "$name" 60 "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS "$(bin $p train_gpt2cp)" "${CHECK[@]}" \
        -o "$WORK/$name" -tl "$WORK/$name.tl" "$@"
}
# the runs compared in the table, the run each is compared with, and the tolerances
# it is held to: fp32 (against the CPU twin) or bf16 (the BF16 build against FP32)
declare -a runs=()
declare -A reference=() tolerance=()
# compared NAME NP PRECISION REFERENCE FLAGS...: a run for the table
compared() {
    local name=$1 np=$2 p=$3 ref=$4
    shift 4
    runs+=("$name")
    reference[$name]=$ref
    tolerance[$name]=$([[ $p == FP32 ]] && echo fp32 || echo bf16)
    spawn train "$name" "$np" "$p" "$@"
}
NCCL_CT=$([[ $HAVE_NCCL -eq 1 ]] && echo nccl || echo mpi)
REF=$PREP/ref
DOCS=(-dm 1 -sh 0 -i "$REF/short_documents.bin")
V5=(-e "$REF/bf16_models/exact_v5.bin" -i "$REF/bf16_models/tokens.bin" "${BF16_MODEL_SHAPE[@]}")
compared "gpu_cp1_$NCCL_CT" 1 FP32 cpu_cp1 -cp 1 -ct "$NCCL_CT"
for cp in 2 4; do
    for layout in contiguous round_robin; do
        compared "gpu_cp${cp}_${layout}_mpi" "$cp" FP32 cpu_cp1 -cp "$cp" -cl "$layout" -ct mpi
    done
done
# Ulysses (the check's model has 2 heads, so U 2): the all-to-all at cp 1 (a group of one), at cp 2, the hybrid U 2 x R 2
compared "gpu_cp1_ulysses_$NCCL_CT" 1 FP32 cpu_cp1 -cp 1 -ca ulysses -ct "$NCCL_CT"
compared gpu_cp2_ulysses_mpi 2 FP32 cpu_cp1 -cp 2 -cl round_robin -ca ulysses -ct mpi
compared gpu_cp4_hybrid_2x2_mpi 4 FP32 cpu_cp1 -cp 4 -cl contiguous -ca hybrid -cu 2 -ct mpi
# documents
compared "gpu_docs_cp1_$NCCL_CT" 1 FP32 cpu_docs_cp1 -cp 1 "${DOCS[@]}" -ct "$NCCL_CT"
compared gpu_docs_cp2_packed_mpi 2 FP32 cpu_docs_cp1 -cp 2 -cl packed "${DOCS[@]}" -ct mpi
compared gpu_docs_cp4_packed_allgather 4 FP32 cpu_docs_cp1 -cp 4 -cl packed "${DOCS[@]}" -ca allgather -ct mpi
compared gpu_docs_cp4_rr_allgather 4 FP32 cpu_docs_cp1 -cp 4 -cl round_robin "${DOCS[@]}" -ca allgather -ct mpi
compared gpu_docs_cp2_packed_ulysses 2 FP32 cpu_docs_cp1 -cp 2 -cl packed "${DOCS[@]}" -ca ulysses -ct mpi
compared gpu_docs_cp4_packed_hybrid 4 FP32 cpu_docs_cp1 -cp 4 -cl packed "${DOCS[@]}" -ca hybrid -cu 2 -ct mpi
compared gpu_docs_cp4_solver_groupcast 4 FP32 cpu_docs_cp1 -cp 4 -cl solver "${DOCS[@]}" -ca groupcast -co 2 -ct mpi
# the BF16 build against the FP32 build, run for run
compared "bf16_cp1_$NCCL_CT" 1 BF16 "gpu_cp1_$NCCL_CT" -cp 1 -ct "$NCCL_CT"
compared bf16_cp2_round_robin_mpi 2 BF16 gpu_cp2_round_robin_mpi -cp 2 -cl round_robin -ct mpi
compared bf16_cp4_contiguous_mpi 4 BF16 gpu_cp4_contiguous_mpi -cp 4 -cl contiguous -ct mpi
# llm.c's bf16 model file: the FP32 build against the CPU twin from its fp32 twin, BF16 against FP32
compared "gpu_v5_cp1_$NCCL_CT" 1 FP32 cpu_v3 -cp 1 -ct "$NCCL_CT" "${V5[@]}"
compared "bf16_v5_cp1_$NCCL_CT" 1 BF16 "gpu_v5_cp1_$NCCL_CT" -cp 1 -ct "$NCCL_CT" "${V5[@]}"
# the FP32 build's own checkpoint of it; the BF16 build's checkpoint (version 5)
spawn train gpu_v5_saved 1 FP32 -cp 1 -ct "$NCCL_CT" "${V5[@]}" -x 0 -n 1
spawn train bf16_written 1 BF16 -cp 1 -ct "$NCCL_CT" -x 2 -n 2
# resume: half the steps with a checkpoint, then -y 1 on to the end
resume() {
    local half=$((CHECK_STEPS / 2)) dir=$WORK/gpu_resume
    train gpu_resume_first 2 FP32 -cp 2 -cl round_robin -ct mpi -x $half -n $half -o "$dir" -tl "$dir.tl" &&
        train gpu_resume_rest 2 FP32 -cp 2 -cl round_robin -ct mpi -y 1 -o "$dir" -tl "$dir.tl"
}
spawn resume
wait

# ---- the checks of the runs that are not in the table
passed gpu_resume_rest && cmp -s "$WORK/gpu_cp2_round_robin_mpi/main.log" "$WORK/gpu_resume/main.log" ||
    fail "resume: main.log after -y 1 differs from the uninterrupted run's (or a run failed)"
# header_field FILE I: the int32 header[I] of a model file
header_field() { od -An -t d4 -j $((4 * $2)) -N 4 "$1" | tr -d ' '; }
written=$WORK/bf16_written/model_00000002.bin
if passed bf16_written && [[ -f $written ]]; then
    read -r maxT _ L _ C Vp < <(for i in 2 3 4 5 6 7; do header_field "$written" $i; done | tr '\n' ' ')
    n=$((Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C))
    version=$(header_field "$written" 1)
    size=$(stat -c %s "$written")
    if [[ $version -eq 5 && $size -eq $((1024 + 2 * n)) ]]; then
        say "the BF16 build's checkpoint: version 5, $size bytes for $n parameters"
    else
        fail "the BF16 build's checkpoint is version $version, $size bytes (expected 5, $((1024 + 2 * n)) for $n parameters)"
    fi
else
    fail "the BF16 build wrote no checkpoint $written"
fi
if passed gpu_v5_saved; then
    widened=$(python3 test/lib/llmc_files.py maxdiff "$REF/bf16_models/exact_v5.bin" "$WORK/gpu_v5_saved/model_00000000.bin")
    [[ $widened == 0.000e+00 ]] && say "the FP32 build's checkpoint of llm.c's bf16 file: its weights exactly" ||
        fail "the FP32 build's checkpoint of llm.c's bf16 file differs from it by up to $widened"
else
    fail "the FP32 build from llm.c's bf16 file, -x 0 -n 1"
fi
for f in "$WORK"/*.rc; do
    [[ $(cat "$f") -eq 0 ]] || fail "$(basename "$f" .rc)"
done

# ---- 7. the table
BF16_TOLERANCE=${BF16_TOLERANCE:-0.05}
# step losses of main.log, one per line; per-token losses of a -tl file, one per line
step_losses() { awk -F'trl:' '/ trl:/ { split($2, a, " "); print a[1] }' "$1"; }
token_losses() { od -An -v -f -w4 "$1" | awk '{ print $1 }'; }
for ref in cpu_cp1 cpu_docs_cp1 cpu_v3; do
    cp "$REF/$ref/main.log" "$WORK/$ref.log"
    step_losses "$REF/$ref/main.log" > "$WORK/$ref.steps"
    token_losses "$REF/$ref.tl" > "$WORK/$ref.tokens"
done
{
    printf "GPU check (%s sizes): train_gpt2cp (FP32, BF16) vs the CPU twin (cp 1, made by gpu_prep), %s\n" \
        "$PREP_SIZES" "${CHECK[*]}"
    printf "tolerances: FP32 vs the CPU twin (reference cpu_*): step loss 1e-4 at step 1, 1e-3 over %d steps; per-token loss 1e-3 at step 1\n" \
        "$CHECK_STEPS"
    printf "            BF16 vs FP32 (reference gpu_*): step loss %s at every step (per-token losses shown, not bounded)\n" \
        "$BF16_TOLERANCE"
    printf "%-30s %-24s %12s %12s %12s %12s %10s  %s\n" config reference "|dstep| s1" "|dstep| max" "|dtok| s1" \
        "|dtok| max" "tok/s" verdict
} > "$TABLE"
for name in "${runs[@]}"; do
    ref=${reference[$name]}
    step_losses "$WORK/$name/main.log" > "$WORK/$name.steps" 2> /dev/null
    token_losses "$WORK/$name.tl" > "$WORK/$name.tokens" 2> /dev/null
    if [[ $(wc -l < "$WORK/$name.steps") -ne $CHECK_STEPS ||
          $(wc -l < "$WORK/$name.tokens") -ne $((CHECK_STEPS * CHECK_TOKENS)) || ! -s $WORK/$ref.steps ]]; then
        printf "%-30s %s\n" "$name" "incomplete output: $(wc -l < "$WORK/$name.steps") steps, $(wc -l < "$WORK/$name.tokens") token losses (or none from $ref)" >> "$TABLE"
        fail "$name: incomplete output"
        continue
    fi
    read -r ds1 dsmax < <(paste "$WORK/$name.steps" "$WORK/$ref.steps" | awk '
        { d = $1 - $2; if (d < 0) d = -d; if ($1 ~ /nan|inf/) d = 1e30; if (NR == 1) s1 = d; if (d > m) m = d }
        END { printf "%.3e %.3e\n", s1, m }')
    read -r dt1 dtmax < <(paste "$WORK/$name.tokens" "$WORK/$ref.tokens" | awk -v per="$CHECK_TOKENS" '
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
printf "compute-sanitizer: %s; NCCL: %s\n" "$sanitized" "$([[ $HAVE_NCCL -eq 1 ]] && echo "${NCCL_HOME:-emulated}" || echo "none (NO_NCCL=1 build)")" >> "$TABLE"
printf "GPU check: %d failure(s); %d s in all\n" "$failures" "$((SECONDS - START))" >> "$TABLE"
echo "[$(($(date +%s) - GPU_CALL_START))s] gpu_check: $failures failure(s)" >> "$SUMMARY"
echo
tee -a "$LOG" < "$TABLE"
[[ $failures -eq 0 ]]
