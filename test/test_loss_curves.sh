#!/usr/bin/env bash
# scripts/loss_curves.sh refuses what cannot be drawn with one line, and never
# writes over a committed picture unless told to:
#   1. -x 1, -x 0 (through -f), -x abc, a flag without its value: exit 1, one
#      'error:' line on stderr and nothing else (no gnuplot message), nothing trained
#   2. -r over runs with a single step in common: the same, and no picture
#   3. -r over runs of 3 steps (main.log files written here): exit 0, the picture in
#      the runs' directory (a PNG), and docs/loss_curves.png byte for byte as before
#   4. -o naming a device (/dev/null): refused, the device left as it is
# Nothing here trains (every case is refused first, or redraws): no trainer is run
# or built.
#
#   bash test/test_loss_curves.sh      (env: BUILD_DIR, scratch)
set -euo pipefail
cd "${REPO_ROOT:-$(pwd)}"
WORK=${BUILD_DIR:-build}/test_loss_curves
rm -rf "$WORK"
mkdir -p "$WORK"
if ! command -v gnuplot > /dev/null; then
    echo "SKIP test_loss_curves: gnuplot is not installed (scripts/install_deps.sh installs it)"
    exit 77
fi
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
docs_before=$(sha256sum docs/loss_curves.png)

# refused NAME PATTERN ARGS...: exit 1, exactly one stderr line, an 'error:' matching PATTERN
refused() {
    local name=$1 pattern=$2 rc=0
    shift 2
    timeout 60 bash scripts/loss_curves.sh -d "$WORK/runs" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err" || rc=$?
    if [[ $rc -eq 1 && $(wc -l < "$WORK/$name.err") -eq 1 ]] && grep -qE "^error: $pattern" "$WORK/$name.err"; then
        echo "ok   $name: $(cat "$WORK/$name.err")"
    else
        fail "$name: rc $rc, stderr: $(head -c 300 "$WORK/$name.err")"
    fi
}

# ---- 1. degenerate step ranges and bad arguments
refused steps_1 "-x 1: a curve needs at least 2 steps" -x 1
refused steps_0_through_flags "-x 0: a curve needs at least 2 steps" -f "-x 0"
refused steps_not_a_number "-x 'abc': the runs' steps must be a number" -x abc
refused flag_without_value "-t needs a value" -t
[[ ! -e $WORK/runs ]] || fail "a refused call made $WORK/runs"

# ---- 2 and 3. redrawing runs of 1 and of 3 steps
RUNS=(cp1_identity cp2_contiguous cp2_round_robin cp4_contiguous cp4_round_robin)
# fake_runs STEPS: main.log of every run, STEPS training lines each
fake_runs() {
    local name s
    for name in "${RUNS[@]}"; do
        mkdir -p "$WORK/runs/d1_T16/$name"
        for ((s = 0; s < $1; s++)); do echo "s:$s trl:$((10 - s)).000000 lr:0.000300 norm:1.000000"; done \
            > "$WORK/runs/d1_T16/$name/main.log"
    done
}
fake_runs 1
refused redraw_one_step "-r: the runs in .* have 1 step\\(s\\) in common: a curve needs at least 2" -r -e d1 -t 16
[[ ! -e $WORK/runs/d1_T16/loss_curves.png ]] || fail "redraw_one_step: a picture was written"
fake_runs 3
rc=0
bash scripts/loss_curves.sh -d "$WORK/runs" -r -e d1 -t 16 > "$WORK/redraw.out" 2> "$WORK/redraw.err" || rc=$?
magic=$(head -c 8 "$WORK/runs/d1_T16/loss_curves.png" 2> /dev/null | od -An -tx1 | tr -d ' \n')
if [[ $rc -eq 0 && $magic == 89504e470d0a1a0a && ! -s $WORK/redraw.err ]]; then
    echo "ok   redraw of 3 steps: a PNG at runs/d1_T16/loss_curves.png, nothing on stderr"
else
    fail "redraw of 3 steps: rc $rc, magic '$magic', stderr: $(head -c 300 "$WORK/redraw.err")"
fi
[[ $(sha256sum docs/loss_curves.png) == "$docs_before" ]] && echo "ok   docs/loss_curves.png untouched" ||
    fail "docs/loss_curves.png changed"

# ---- 4. a device as the picture
refused device_output "-o /dev/null is not a regular file" -r -e d1 -t 16 -o /dev/null
[[ -c /dev/null ]] || fail "/dev/null is no longer a device"

[[ $failures -eq 0 ]] || { echo "FAIL test_loss_curves: $failures check(s) failed"; exit 1; }
echo "PASS test_loss_curves"
