# What the end-to-end scripts share (sourced, with E2E_NAME set): the CPU trainer,
# mpirun's flags, a clean work dir $BUILD_DIR/$E2E_NAME (cwd: the repo root), a
# failure counter, train() and run().
#
# Env: MPIRUN, BUILD_DIR (scratch), REPO_ROOT (the trainer is REPO_ROOT/train_gpt2cp_cpu).

REPO_ROOT=${REPO_ROOT:-$(pwd)}
MPIRUN=${MPIRUN:-mpirun}
BUILD_DIR=${BUILD_DIR:-$REPO_ROOT/build}
# the tests' MPI environment (test/lib/mpi_test_env says why), where not set already
while IFS='=' read -r name value; do
    [[ -n ${!name+set} ]] || export "$name=$value"
done < <(grep -E '^[A-Za-z_][A-Za-z0-9_]*=' "$REPO_ROOT/test/lib/mpi_test_env")
TRAINER=$REPO_ROOT/train_gpt2cp_cpu
WORK=$BUILD_DIR/${E2E_NAME:?set E2E_NAME before sourcing e2e_lib.sh}
LAUNCH=("$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none)

if [[ ! -x $TRAINER ]]; then
    echo "FAIL: $TRAINER is missing: build it first with 'make train_gpt2cp_cpu' at the repo root" >&2
    exit 1
fi
cd "$REPO_ROOT"
rm -rf "$WORK"
mkdir -p "$WORK"

# need TOOL PACKAGE: a test that calls TOOL skips (exit 77) with the reason where it is
# missing (scripts/install_deps.sh installs PACKAGE)
need() {
    command -v "$1" > /dev/null || { echo "SKIP $E2E_NAME: no $1 here (scripts/install_deps.sh installs $2)"; exit 77; }
}

# checks that fail count here; finish() reports them
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

finish() {
    if [[ $failures -gt 0 ]]; then
        echo "FAIL $E2E_NAME: $failures check(s) failed ($SECONDS s)"
        exit 1
    fi
    echo "PASS $E2E_NAME ($SECONDS s)"
}

# the pid of world rank RANK among the trainer processes writing to DIR (their -o:
# unique to the test, so that other tests' trainers are never touched)
rank_pid() {
    local dir=$1 rank=$2 pid
    for pid in $(pgrep -f -- "-o $dir\$" || true); do
        if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
            echo "$pid"
            return
        fi
    done
}

# signal_mid_run NAME NP RANK SIGNAL STEP FLAGS...: a run of the trainer with FLAGS
# (its -o $WORK/NAME, its output $WORK/NAME.out); once it prints step STEP, SIGNAL
# goes to world rank RANK, and mpirun gets 60 s to end the job by itself. Sets
# RUN_RC (mpirun's exit status) and RUN_SECONDS (from the signal to mpirun's exit).
# A run that never reaches STEP, a rank not found or a job still running after
# 60 s (then ended here) fail, and return 1; so do trainer processes left behind.
signal_mid_run() {
    local name=$1 np=$2 rank=$3 sig=$4 step=$5
    shift 5
    local dir=$WORK/$name out=$WORK/$name.out
    "${LAUNCH[@]}" -np "$np" "$TRAINER" "$@" -o "$dir" >"$out" 2>&1 &
    local launcher=$! waited=0
    until grep -qE "^step +$step/" "$out" 2>/dev/null; do
        sleep 0.1
        waited=$((waited + 1))
        if [[ $waited -gt 600 ]]; then
            kill "$launcher" 2>/dev/null || true
            fail "$name: no step $step within 60 s"
            tail -n 20 "$out"
            return 1
        fi
    done
    # looked for again for up to 2 s: on a loaded machine one look (pgrep, then the
    # process's environment) was seen to miss a rank that went on training
    local pid tries=0
    pid=$(rank_pid "$dir" "$rank")
    while [[ -z $pid && $tries -lt 20 ]]; do
        sleep 0.1
        tries=$((tries + 1))
        pid=$(rank_pid "$dir" "$rank")
    done
    if [[ -z $pid ]]; then
        kill "$launcher" 2>/dev/null || true
        fail "$name: rank $rank's process not found"
        return 1
    fi
    local start end i=0
    start=$(date +%s.%N)
    kill -s "$sig" "$pid"
    while kill -0 "$launcher" 2>/dev/null && [[ $i -lt 1200 ]]; do sleep 0.05; i=$((i + 1)); done
    end=$(date +%s.%N)
    RUN_SECONDS=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
    local ended=1
    if kill -0 "$launcher" 2>/dev/null; then
        fail "$name: mpirun still running 60 s after SIG$sig to rank $rank"
        kill -9 "$pid" "$launcher" 2>/dev/null || true
        ended=0
    fi
    RUN_RC=0
    wait "$launcher" || RUN_RC=$?
    if pgrep -f -- "-o $dir\$" >/dev/null; then
        fail "$name: trainer processes left running"
        ended=0
    fi
    [[ $ended -eq 1 ]]
}

# train NAME NP [flags...]: one run with the script's COMMON flags first, its output
# in $WORK/NAME.out; a run that exits non-zero ends the test with its output
train() {
    local name=$1 np=$2
    shift 2
    local start=$SECONDS
    if ! timeout 300 "${LAUNCH[@]}" -np "$np" "$TRAINER" "${COMMON[@]}" "$@" >"$WORK/$name.out" 2>&1; then
        echo "FAIL: run $name (np $np, $*) exited non-zero; its output:" >&2
        tail -n 30 "$WORK/$name.out" >&2
        exit 1
    fi
    echo "run $name: $((SECONDS - start)) s"
}

# run NAME NP [flags...]: train NAME with its main.log in $WORK/NAME and its per-token
# losses in $WORK/NAME.tl, and append NAME LOG TL to runs (compare_runs' arguments)
runs=()
run() {
    local name=$1 np=$2
    shift 2
    train "$name" "$np" -o "$WORK/$name" -tl "$WORK/$name.tl" "$@"
    runs+=("$name" "$WORK/$name/main.log" "$WORK/$name.tl")
}

# reference NAME NP [flags...]: run NAME as the reference the runs after it are
# compared with: runs then starts empty (a reference is not compared with itself)
reference() {
    run "$@"
    runs=()
}
