# What the end-to-end scripts share (sourced, with E2E_NAME set): the CPU trainer,
# mpirun's flags, a clean work dir $BUILD_DIR/$E2E_NAME (cwd: the repo root), a
# failure counter, train() and run().
#
# Env: MPIRUN, BUILD_DIR (scratch), REPO_ROOT (the trainer is REPO_ROOT/train_gpt2cp_cpu).

REPO_ROOT=${REPO_ROOT:-$(pwd)}
MPIRUN=${MPIRUN:-mpirun}
BUILD_DIR=${BUILD_DIR:-$REPO_ROOT/build}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
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
