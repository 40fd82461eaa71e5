#!/usr/bin/env bash
# Builds the GPU code for the CUDA emulation (cuda_emu.h) and runs it on the CPU:
#
#     bash dev/cuda/emu/run.sh [tests] [trainer] [mutations] [gpu_call]     (default: tests)
#
#   tests      the GPU tests (test_gpu_kernels, test_gpu_attention_algorithms on 1 to 4
#              ranks, in both precisions: -DENABLE_FP32 and -DENABLE_BF16) under the
#              first seed of EMU_SEEDS (default: one seed drawn at random, printed);
#              the kernel tests and the ring at 2 ranks again under each further seed
#   trainer    train_gpt2cp against the CPU twin, over the staged MPI transport and
#              over NCCL (trainer.sh)
#   mutations  every synchronisation site removed in turn, each must be caught
#              (mutations.sh)
#   gpu_call   the one-call GPU check (scripts/gpu_call.sh) as a dry run: its logic,
#              every step, at small sizes, on these binaries
#
# The sources are rewritten for a C++ compiler (rewrite.py) and compiled with
# clang's thread-sanitizer instrumentation, whose hooks the emulator's runtime
# (emu_*.cpp) implements: every load and store of the code under test is checked
# (racecheck, initcheck, memcheck), every barrier and warp collective
# (synccheck), every launch (the chip's limits) and every pair of stream
# operations (happens-before). A finding ends the test with "EMU <check>: ..." and
# exit status 66. Each emulated rank is a GPU of its own (EMU_DEVICES=4), so NCCL
# runs too (over MPI). Slow (every thread is a fiber): small sizes only.
set -euo pipefail
cd "$(dirname "$0")/../../.."
REPO=$(pwd)
EMU=$REPO/dev/cuda/emu
WORK=${BUILD_DIR:-$REPO/build}/emu
PARTS=("${@:-tests}")
for part in "${PARTS[@]}"; do
    [[ $part == tests || $part == trainer || $part == mutations || $part == gpu_call ]] ||
        { echo "run.sh: unknown part '$part' (tests, trainer, mutations, gpu_call)" >&2; exit 2; }
done
for tool in clang++ g++ python3 mpicc mpirun; do
    command -v "$tool" > /dev/null || { echo "run.sh: $tool is missing (bash scripts/install_deps.sh emu installs it)" >&2; exit 2; }
done
rm -rf "$WORK"
mkdir -p "$WORK/src"

# ---- build: the sources as a C++ compiler reads them, the runtime, the binaries
python3 "$EMU/rewrite.py" "$REPO" "$WORK/src"
MPI_COMPILE=($(mpicc --showme:compile))
LINK=($(mpicc --showme:link))
# (no sibling calls: a barrier or collective is known by its return address in the kernel)
CXX=(clang++ -x c++ -std=c++17 -O2 -g -w -fno-optimize-sibling-calls -fsanitize=thread
     -mllvm -tsan-instrument-func-entry-exit=0 -mllvm -tsan-instrument-atomics=0 -I"$EMU" -I"$WORK/src"
     "${MPI_COMPILE[@]}" -DNO_BLAS -DOMPI_SKIP_MPICXX)
# jobs in the background; built waits for them all, failing if any failed
BUILDS=()
built() {
    local failed=0
    for pid in "${BUILDS[@]}"; do wait "$pid" || failed=1; done
    BUILDS=()
    [[ $failed -eq 0 ]] || { echo "run.sh: a build failed" >&2; exit 1; }
}
RUNTIME=()
for f in "$EMU"/emu_*.cpp; do
    o=$WORK/$(basename "$f" .cpp).o
    g++ -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -I"$EMU" "${MPI_COMPILE[@]}" -DOMPI_SKIP_MPICXX \
        -c "$f" -o "$o" & BUILDS+=($!)
    RUNTIME+=("$o")
done
built
# build NAME SOURCE PRECISION: $WORK/NAME_PRECISION, in the background
build() {
    { "${CXX[@]}" -DENABLE_$3 -c "$WORK/src/$2" -o "$WORK/$1_$3.o" &&
      g++ "$WORK/$1_$3.o" "${RUNTIME[@]}" -o "$WORK/$1_$3" "${LINK[@]}"; } & BUILDS+=($!)
}
for p in FP32 BF16; do
    build test_gpu_kernels test/test_gpu_kernels.cu $p
    build test_gpu_attention_algorithms test/test_gpu_attention_algorithms.cu $p
    built
done
build checks_test dev/cuda/emu/checks_test.cu FP32
built
if [[ " ${PARTS[*]} " == *" trainer "* || " ${PARTS[*]} " == *" gpu_call "* ]]; then
    build train_gpt2cp train_gpt2cp.cu FP32
    build train_gpt2cp train_gpt2cp.cu BF16
    built
fi
if [[ " ${PARTS[*]} " == *" gpu_call "* ]]; then
    build bench_attention_gpu dev/bench/attention_gpu.cu FP32
    build bench_attention_gpu dev/bench/attention_gpu.cu BF16
    build gpu_probe dev/cuda/gpu_probe.cu FP32
    built
fi

MPIRUN=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
export OMP_NUM_THREADS=1
export EMU_DEVICES=4

# ---- the GPU tests, once per seed: each test's verdict line, and any check that failed
if [[ " ${PARTS[*]} " == *" tests "* ]]; then
    # first the emulator's own checks, each on a program made to break its rule (or
    # a correct one close to it, which must pass): the cases two at once (each one
    # host thread), then each judged
    "$WORK/checks_test_FP32" list 2> /dev/null > "$WORK/checks.list"
    while IFS=$'\t' read -r name _; do
        while [[ $(jobs -rp | wc -l) -ge 2 ]]; do wait -n || true; done
        { rc=0
          EMU_SEED=1 timeout 120 "${MPIRUN[@]}" -np 1 "$WORK/checks_test_FP32" "$name" > "$WORK/check_$name.out" 2>&1 < /dev/null || rc=$?
          echo $rc > "$WORK/check_$name.rc"; } &
    done < "$WORK/checks.list"
    wait
    checks=0
    while IFS=$'\t' read -r name expected names; do
        out=$(cat "$WORK/check_$name.out")
        rc=$(cat "$WORK/check_$name.rc")
        case $expected in
            -) got=$([[ $rc -eq 0 ]] && grep -q "^ok $name$" <<< "$out" && echo -) ;;
            "launch refused") got=$([[ $rc -eq 0 ]] && grep -q "^launch refused: " <<< "$out" && echo "launch refused") ;;
            *) got=$([[ $rc -ne 0 ]] && grep -o -m 1 "^EMU [a-z]*:" <<< "$out" | cut -c5- | tr -d :) ;;
        esac
        # a report that must name a file (the line of the other access) and does not is not the one expected
        [[ -z $names ]] || grep -qF -- "$names" <<< "$out" || got="$got report not naming $names"
        if [[ -z $got || "|$expected|" != *"|$got|"* ]]; then
            echo "the emulator's check on '$name': expected $expected, got ${got:-nothing} (exit $rc):"
            echo "$out" | tail -n 12
            exit 1
        fi
        checks=$((checks + 1))
    done < "$WORK/checks.list"
    echo "the emulator's checks: $checks cases, each caught as expected (or passed)"
    # the first seed runs every test at 1 to 4 ranks in both precisions; each further
    # seed runs the kernel tests and the ring test at 2 ranks (in BF16: its kernels
    # are the FP32 build's with other operand types). A seed changes the order of
    # threads, blocks and stream operations, not what the checks compare: racecheck
    # and the streams' happens-before hold under any order, so further seeds look
    # for a wrong result under another interleaving, which the cheaper runs do at a
    # tenth of the first seed's time.
    # gpu_tests SEED "NP BINARY"...: the runs at once (a rank is one host thread: the
    # single-rank runs of the two builds keep two cores busy), then each run's verdict
    # lines and any check that failed, in the order given
    gpu_tests() {
        local seed=$1 run pids=() failed=0 i=0
        shift
        for run in "$@"; do
            EMU_SEED=$seed "${MPIRUN[@]}" -np "${run% *}" "$WORK/${run#* }" > "$WORK/tests_$i.out" 2>&1 < /dev/null &
            pids+=($!)
            i=$((i + 1))
        done
        i=0
        for run in "$@"; do
            wait "${pids[$i]}" || failed=1
            echo "== seed $seed: ${run#* } at ${run% *} rank(s)"
            grep -v '^ok ' "$WORK/tests_$i.out" || true
            i=$((i + 1))
        done
        [[ $failed -eq 0 ]] || { echo "run.sh: a GPU test failed (above)" >&2; exit 1; }
    }
    read -ra SEEDS <<< "${EMU_SEEDS:-$((RANDOM * 32768 + RANDOM))}"
    for s in "${!SEEDS[@]}"; do
        seed=${SEEDS[$s]}
        gpu_tests "$seed" "1 test_gpu_kernels_FP32" "1 test_gpu_kernels_BF16"
        if [[ $s -eq 0 ]]; then
            gpu_tests "$seed" "1 test_gpu_attention_algorithms_FP32" "1 test_gpu_attention_algorithms_BF16"
            for p in FP32 BF16; do
                for np in 2 3 4; do gpu_tests "$seed" "$np test_gpu_attention_algorithms_$p"; done
            done
        else
            gpu_tests "$seed" "2 test_gpu_attention_algorithms_BF16"
        fi
    done
    echo "emulated GPU tests: $SECONDS s"
fi
export REPO EMU WORK
export MPIRUN_LINE="${MPIRUN[*]}"
if [[ " ${PARTS[*]} " == *" trainer "* ]]; then bash "$EMU/trainer.sh"; fi
if [[ " ${PARTS[*]} " == *" mutations "* ]]; then bash "$EMU/mutations.sh"; fi
if [[ " ${PARTS[*]} " == *" gpu_call "* ]]; then
    GPU_PREP_SIZES=emulation bash scripts/gpu_prep.sh
    OUT=$WORK/gpu_call GPU_CALL_EMULATION=1 EMU_BUILD=$WORK bash scripts/gpu_call.sh
    # every step of the call reported, none skipped (PyTorch's training step runs only
    # where torch is: the emulation has none)
    for step in gpu_probe test_gpu_kernels_BF16 gpu_cp4_hybrid_2x2_mpi gpu_docs_cp4_packed_allgather gpu_docs_cp4_solver_groupcast \
                bf16_v5_cp1_nccl \
                gpu_resume_rest attn_64_fp32 sdpa train_T64_BF16; do
        grep -q " $step: ok" "$WORK/gpu_call/summary.txt" ||
            { echo "the GPU call's dry run: no successful step $step in its summary" >&2; exit 1; }
    done
fi
echo "emulation: $SECONDS s in all"
