# What scripts/gpu_check.sh and dev/bench/gpu_bench.sh share (sourced from the repo
# root, GPU_SCRIPT naming the caller): the work folder build/$GPU_SCRIPT, the
# reports in $OUT (build/$GPU_SCRIPT/ without OUT): $GPU_SCRIPT.log (everything),
# $GPU_SCRIPT.txt (the tables) and summary.txt (a line per step, written as each
# step ends, so a step that hangs or fails leaves the others' results), and:
#
#   say MESSAGE             prints a line and logs it
#   fail MESSAGE            says FAIL: MESSAGE and counts it in $failures
#   summary_line TEXT       a line to the summary, after the call's seconds and the script
#   error MESSAGE           says error: MESSAGE, to the summary too (the caller returns 1)
#   run NAME LIMIT CMD...   runs CMD under a timeout of LIMIT seconds (x TIME_SCALE;
#                           less if the call's deadline comes first; none left: skipped), its
#                           output to the log and to $WORK/NAME.out; a line to the
#                           summary; on failure shows its tail and returns 1
#   tokens_per_s FILE       the mean tok/s of a trainer's progress lines after step 1
#   bin PRECISION NAME      the path of a GPU binary (train_gpt2cp, test_gpu_kernels,
#                           test_gpu_attention_algorithms, bench_attention_gpu) of the FP32
#                           or BF16 build
#
# What the call needs that a GPU machine lacks was prepared where apt works, by
# `make gpu_prep` (scripts/gpu_prep.sh), in gpu_prep/, carried along: its sizes.sh
# (the runs' sizes, sourced here), the CPU twin's reference runs, the GPU binaries
# (built there with nvcc; built here only where they do not start), Open MPI.
#
# The toolchain of the GPU machine:
#   CUDA_HOME   nvcc's toolkit (CUDA_HOME, default /usr/local/cuda, else nvcc on PATH)
#   NCCL_HOME   NCCL in CUDA_HOME, else python3's site-packages nvidia/nccl (the pip
#               package nvidia-nccl-cu13); HAVE_NCCL 1 or 0: without it the -ct nccl
#               runs are skipped
#   HAVE_MPI    1 with the system's mpirun, or gpu_prep/bundle; else 0
#   MPIRUN      mpirun with the flags for ranks sharing one machine (as root too)
#
# Before anything else the call learns whether CUDA runs here at all, in one line:
# libcuda.so.1 must load (else "error: no NVIDIA driver here"), and gpu_probe
# (dev/cuda/gpu_probe.cu, gpu_prep's, else built here) must create a context and run
# one tiny kernel (else "error: CUDA does not run here: " and the runtime's reason).
# PROBE is its path (scripts/gpu_check.sh runs it under compute-sanitizer first).
#
# GPU_CALL_EMULATION=1: the dry run (dev/cuda/emu/run.sh gpu_call): the binaries are
# the CUDA emulation's (EMU_BUILD, default build/emu: run.sh builds them), each rank a device of its own
# (EMU_DEVICES=4), no nvcc, nvidia-smi, compute-sanitizer or torch needed (their
# steps say so and go on), gpu_prep made with GPU_PREP_SIZES=emulation.
# Returns non-zero (after saying why) when something the call cannot do without is missing.
source "$(dirname "${BASH_SOURCE[0]}")/script_lib.sh"
sourced_only "usage: source scripts/gpu_toolchain.sh   (scripts/gpu_check.sh and dev/bench/gpu_bench.sh do, with REPO and GPU_SCRIPT set)" "$@"
WORK=$REPO/build/$GPU_SCRIPT
rm -rf "$WORK"
mkdir -p "$WORK"
REPORT_DIR=${OUT:-$WORK}
mkdir -p "$REPORT_DIR"
LOG=$REPORT_DIR/$GPU_SCRIPT.log
TABLE=$REPORT_DIR/$GPU_SCRIPT.txt
SUMMARY=$REPORT_DIR/summary.txt
: > "$LOG"
START=$SECONDS
failures=0
EMULATION=${GPU_CALL_EMULATION:-0}
# one summary for the whole call (scripts/gpu_call.sh starts it), else one per script
[[ -n ${GPU_CALL_START:-} ]] || { : > "$SUMMARY"; GPU_CALL_START=$(date +%s); }
# no wait on another rank may stall a step for long (the trainer's watchdog)
export GPT2CP_TIMEOUT=60

say() { echo "$*" | tee -a "$LOG"; }
fail() { say "FAIL: $*"; failures=$((failures + 1)); }
summary_line() { echo "[$(($(date +%s) - GPU_CALL_START))s] $GPU_SCRIPT $*" >> "$SUMMARY"; }
error() { say "error: $*"; summary_line "error: $*"; }
run() {
    local name=$1 limit=$2
    shift 2
    local left=$((GPU_CALL_DEADLINE - ($(date +%s) - GPU_CALL_START)))
    if [[ $left -lt 5 ]]; then
        say "$name: skipped (the call's ${GPU_CALL_DEADLINE} s are spent)"
        summary_line "$name: SKIPPED (deadline)"
        return 1
    fi
    limit=$((limit * TIME_SCALE))
    [[ $limit -le $left ]] || limit=$left
    local t0=$SECONDS
    timeout "$limit" "$@" > "$WORK/$name.out" 2>&1
    local rc=$?
    cat "$WORK/$name.out" >> "$LOG"
    local verdict="ok"
    [[ $rc -eq 0 ]] || verdict="FAIL (exit $rc$([[ $rc -eq 124 ]] && echo ": past its $limit s"))"
    say "[$((SECONDS - START))s] $name: exit $rc ($((SECONDS - t0)) s)"
    summary_line "$name: $verdict, $((SECONDS - t0)) s"
    if [[ $rc -ne 0 ]]; then
        tail -n 25 "$WORK/$name.out"
        return 1
    fi
}
# whether gpu_probe runs (a context, one tiny kernel), said in one line either way
cuda_runs() {
    local out
    out=$(timeout $((60 * TIME_SCALE)) "$PROBE" 2>&1)
    local rc=$?
    if [[ $rc -ne 0 ]]; then
        out=$(grep -m 1 '^error: ' <<< "$out" || tail -n 1 <<< "$out")
        error "CUDA does not run here: ${out#error: } (gpu_probe, exit $rc)"
        return 1
    fi
    say "$out"
    summary_line "gpu_probe: ok"
}
# mean tok/s of the progress lines after the first step
tokens_per_s() { awk '/^step / && $2 !~ /^1\// { for (i = 1; i < NF; i++) if ($(i + 1) == "tok/s") { s += $i; n++ } }
                      END { if (n) printf "%.0f", s / n; else print "-" }' "$1"; }

for tool in make gcc python3 od awk timeout tar; do
    command -v $tool > /dev/null || { error "this script needs '$tool', which is not on PATH"; return 1; }
done
# no driver, no GPU: one line at once (the dry run has neither)
if [[ $EMULATION -eq 0 ]] && ! why=$(python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>&1); then
    error "no NVIDIA driver here (libcuda.so.1 does not load: ${why##*: }): the GPU check runs on a GPU machine (its dry run: dev/cuda/emu/run.sh gpu_call)"
    return 1
fi
PREP=$REPO/gpu_prep
if [[ ! -f $PREP/sizes.sh ]]; then
    error "no gpu_prep/: make it where apt works ('make gpu_prep', GPU_PREP_SIZES=emulation for the dry run) and carry it"
    return 1
fi
# shellcheck disable=SC1091
source "$PREP/sizes.sh"
if [[ $EMULATION -eq 1 && $PREP_SIZES != emulation ]] || [[ $EMULATION -eq 0 && $PREP_SIZES != gpu ]]; then
    error "gpu_prep/ holds the $PREP_SIZES sizes; remake it with GPU_PREP_SIZES=$([[ $EMULATION -eq 1 ]] && echo emulation || echo gpu)"
    return 1
fi
say "gpu_prep: $PREP_SIZES sizes, made at commit $(cat "$PREP/commit" 2> /dev/null)"
# the call ends before its deadline: steps after it are skipped, not started
GPU_CALL_DEADLINE=${GPU_CALL_DEADLINE:-$((450 * TIME_SCALE))}

MPIRUN=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
HAVE_MPI=1
if mpirun --version > /dev/null 2>&1; then
    say "MPI: the system's ($(command -v mpirun))"
elif [[ -f $PREP/bundle/env.sh ]]; then
    # shellcheck disable=SC1091
    source "$PREP/bundle/env.sh"
    say "MPI: gpu_prep/bundle ($(command -v mpirun))"
else
    HAVE_MPI=0
    say "MPI: none (no mpirun, no gpu_prep/bundle)"
fi
# containers often forbid the cross-process memory reads (CMA) of Open MPI's shared
# memory transport; the copy-in/copy-out path always works
export OMPI_MCA_btl_vader_single_copy_mechanism=none

if [[ $EMULATION -eq 1 ]]; then
    export EMU_DEVICES=4 OMP_NUM_THREADS=1
    HAVE_NCCL=1
    HAVE_GPU_TOOLS=0
    EMU_BUILD=${EMU_BUILD:-$REPO/build/emu}
    bin() { echo "$EMU_BUILD/$2_$1"; }
    for p in FP32 BF16; do
        [[ -x $(bin $p train_gpt2cp) ]] || { error "no $(bin $p train_gpt2cp): run dev/cuda/emu/run.sh gpu_call"; return 1; }
    done
    say "emulation: the binaries of build/emu, each rank a device of its own"
    PROBE=$(bin FP32 gpu_probe)
    cuda_runs
    return
fi
HAVE_GPU_TOOLS=1
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [[ ! -x $CUDA_HOME/bin/nvcc ]]; then
    if command -v nvcc > /dev/null; then CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")"); else
        error "no nvcc (set CUDA_HOME)"; return 1; fi
fi
say "nvcc: $("$CUDA_HOME/bin/nvcc" --version | tail -n 2 | head -n 1)"
command -v nvidia-smi > /dev/null && nvidia-smi -L 2>&1 | while read -r line; do say "$line"; done
PROBE=$PREP/bin/gpu_probe
if [[ ! -x $PROBE ]]; then
    PROBE=$WORK/gpu_probe
    if ! make -s CUDA_HOME="$CUDA_HOME" gpu_probe > "$WORK/gpu_probe_build.out" 2>&1; then
        error "cannot build gpu_probe: $(tail -n 1 "$WORK/gpu_probe_build.out")"
        return 1
    fi
    mv gpu_probe "$PROBE"
fi
cuda_runs || return 1
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
    # the binaries built elsewhere find the libraries of this machine
    export LD_LIBRARY_PATH=$CUDA_HOME/lib64:$NCCL_HOME/lib:$NCCL_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    say "NCCL: $NCCL_HOME"
else
    HAVE_NCCL=0
    MAKE_FLAGS=(CUDA_HOME="$CUDA_HOME" NO_NCCL=1)
    say "NCCL: none found (set NCCL_HOME): building with NO_NCCL=1, the -ct nccl runs are skipped"
fi
# the binaries: gpu_prep's where they start here, else built here, each precision in
# its own copy of the sources (both builds write the same names)
PRECISION_DIR=$REPO/build/precision
# whether both of gpu_prep's trainers start here (their usage: every library found)
prepared_binaries_start() {
    [[ $HAVE_MPI -eq 1 ]] || return 1
    local p
    for p in FP32 BF16; do
        "${MPIRUN[@]}" -np 1 "$PREP/bin/$p/train_gpt2cp" -h > "$WORK/start_$p.out" 2>&1
        grep -q "^usage: " "$WORK/start_$p.out" || return 1
    done
}
BIN_DIR=$PREP/bin
if ! prepared_binaries_start; then
    say "gpu_prep's binaries do not start here ($(grep -v '^usage' "$WORK"/start_*.out 2> /dev/null | head -n 1)): building them"
    BIN_DIR=$PRECISION_DIR/bin
    pids=()
    for p in FP32 BF16; do
        mkdir -p "$BIN_DIR/$p"
        precision_tree "$REPO" "$PRECISION_DIR/$p" || { error "cannot copy the sources"; return 1; }
        run "build_$p" 300 make -C "$PRECISION_DIR/$p" -j 8 "${MAKE_FLAGS[@]}" PRECISION=$p train_gpt2cp \
            bench_attention_gpu build/gpu/test_gpu_kernels build/gpu/test_gpu_attention_algorithms &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || { error "the GPU build failed"; return 1; }; done
    for p in FP32 BF16; do
        cp "$PRECISION_DIR/$p/train_gpt2cp" "$PRECISION_DIR/$p/bench_attention_gpu" \
            "$PRECISION_DIR/$p/build/gpu/test_gpu_kernels" "$PRECISION_DIR/$p/build/gpu/test_gpu_attention_algorithms" \
            "$BIN_DIR/$p/"
    done
fi
say "binaries: $BIN_DIR"
bin() { echo "$BIN_DIR/$1/$2"; }
true
