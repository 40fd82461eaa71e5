# What scripts/gpu_check.sh and dev/bench/gpu_bench.sh share (sourced from the repo
# root, GPU_SCRIPT naming the caller): the work folder build/$GPU_SCRIPT, the report
# files $OUT/$GPU_SCRIPT.log and .txt (build/$GPU_SCRIPT/ without OUT), the helpers
#
#   say MESSAGE             prints a line and logs it
#   fail MESSAGE            says FAIL: MESSAGE and counts it in $failures
#   run NAME LIMIT CMD...   runs CMD with a timeout, its output to the log and to
#                           $WORK/NAME.out; on failure shows its tail, returns 1
#   tokens_per_s FILE       the mean tok/s of a trainer's progress lines after step 1
#   build_gpu_precisions TARGET...
#                           make TARGET... (the Makefile's names: train_gpt2cp,
#                           build/gpu/test_gpu_kernels, ...) with PRECISION=FP32 and
#                           with PRECISION=BF16 at once, each in its own copy of the
#                           sources, $PRECISION_DIR/FP32 and $PRECISION_DIR/BF16 (both
#                           builds write the same names, so two trees let them run
#                           side by side; each tree stays up to date, so a second
#                           script builds nothing again): the FP32 trainer is
#                           $PRECISION_DIR/FP32/train_gpt2cp, the BF16 one
#                           $PRECISION_DIR/BF16/train_gpt2cp; FP32_ONLY=(TARGET...)
#                           adds targets that only the FP32 tree builds
#
# and the toolchain of the GPU machine:
#
#   CUDA_HOME   nvcc's toolkit (CUDA_HOME, default /usr/local/cuda, else nvcc on PATH)
#   NCCL_HOME   NCCL in CUDA_HOME, else python3's site-packages nvidia/nccl (the pip
#               package nvidia-nccl-cu13); HAVE_NCCL 1 or 0: without it the trainer
#               is built with NO_NCCL=1 and only -ct mpi runs
#   MAKE_FLAGS  the make variables for the trainer and the GPU tests
#   HAVE_MPI    1 with the system's mpirun and mpicc, or gpu_bundle/ (made where apt
#               works by scripts/gpu_bundle.sh and carried along); else 0
#   MPIRUN      mpirun with the flags for ranks sharing one machine (as root too)
# Returns non-zero (after saying why) when there is no nvcc.
WORK=$REPO/build/$GPU_SCRIPT
rm -rf "$WORK"
mkdir -p "$WORK"
REPORT_DIR=${OUT:-$WORK}
mkdir -p "$REPORT_DIR"
LOG=$REPORT_DIR/$GPU_SCRIPT.log
TABLE=$REPORT_DIR/$GPU_SCRIPT.txt
: > "$LOG"
START=$SECONDS
failures=0

say() { echo "$*" | tee -a "$LOG"; }
fail() { say "FAIL: $*"; failures=$((failures + 1)); }
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
# mean tok/s of the progress lines after the first step
tokens_per_s() { awk '/^step / && $2 !~ /^1\// { for (i = 1; i < NF; i++) if ($(i + 1) == "tok/s") { s += $i; n++ } }
                      END { if (n) printf "%.0f", s / n; else print "-" }' "$1"; }

for tool in make gcc python3 od awk timeout tar; do
    command -v $tool > /dev/null || { say "error: this script needs '$tool', which is not on PATH"; return 1; }
done

PRECISION_DIR=$REPO/build/precision
build_gpu_precisions() {
    local p pids=() rc=0
    for p in FP32 BF16; do
        mkdir -p "$PRECISION_DIR/$p"
        # the sources only (tar keeps their times: make rebuilds what changed)
        tar -C "$REPO" --exclude=./build --exclude=./gpu_bundle --exclude=./dev/data --exclude=./.git -cf - . |
            tar -C "$PRECISION_DIR/$p" -xf - || { say "error: cannot copy the sources to $PRECISION_DIR/$p"; return 1; }
        local targets=("$@")
        [[ $p == FP32 ]] && targets+=(${FP32_ONLY[@]+"${FP32_ONLY[@]}"})
        run "build_$p" 900 make -C "$PRECISION_DIR/$p" -j 4 "${MAKE_FLAGS[@]}" PRECISION=$p "${targets[@]}" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [[ ! -x $CUDA_HOME/bin/nvcc ]]; then
    if command -v nvcc > /dev/null; then CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")"); else
        say "error: no nvcc (set CUDA_HOME)"; return 1; fi
fi
say "nvcc: $("$CUDA_HOME/bin/nvcc" --version | tail -n 2 | head -n 1)"
nvidia-smi -L 2>&1 | while read -r line; do say "$line"; done || true
if [[ -z ${NCCL_HOME:-} ]]; then
    if [[ -f $CUDA_HOME/include/nccl.h ]]; then NCCL_HOME=$CUDA_HOME; else
        for site in $(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null); do
            if [[ -f $site/nvidia/nccl/include/nccl.h ]]; then NCCL_HOME=$site/nvidia/nccl; break; fi
        done
    fi
fi
if [[ -n ${NCCL_HOME:-} ]]; then
    export NCCL_HOME
    HAVE_NCCL=1
    MAKE_FLAGS=(CUDA_HOME="$CUDA_HOME" NCCL_HOME="$NCCL_HOME")
    say "NCCL: $NCCL_HOME"
else
    HAVE_NCCL=0
    MAKE_FLAGS=(CUDA_HOME="$CUDA_HOME" NO_NCCL=1)
    say "NCCL: none found (set NCCL_HOME): building with NO_NCCL=1, the -ct nccl runs are skipped"
fi
HAVE_MPI=1
if mpirun --version > /dev/null 2>&1 && mpicc --showme:compile > /dev/null 2>&1; then
    say "MPI: the system's ($(command -v mpirun))"
elif [[ -f gpu_bundle/env.sh ]]; then
    # shellcheck disable=SC1091
    source gpu_bundle/env.sh
    say "MPI: gpu_bundle ($(command -v mpirun))"
else
    HAVE_MPI=0
    say "MPI: none (no mpirun, no gpu_bundle/: make it with scripts/gpu_bundle.sh where apt works, carry it along)"
fi
# containers often forbid the cross-process memory reads (CMA) of Open MPI's shared
# memory transport; the copy-in/copy-out path always works
export OMPI_MCA_btl_vader_single_copy_mechanism=none
MPIRUN=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
true
