#!/usr/bin/env bash
# scripts/loss_curves.sh refuses what cannot be drawn with one line, and never
# writes over a committed picture unless told to:
#   1. -x 1, -x 0 (through -f), -x abc, a flag without its value: exit 1, one
#      'error:' line on stderr and nothing else (no gnuplot message), nothing trained
#   2. -r over runs with a single step in common: the same, and no picture
#   3. -r over runs of 3 steps (main.log files written here): exit 0, the picture in
#      the runs' directory (a PNG), and docs/loss_curves.png byte for byte as before
#   4. -o naming a device (/dev/null): refused, the device left as it is
#   5. a step without a loss (trl:nan) in one run: named after the table, and the
#      runs still compared step by step (losses equal at every other step: max |Δ| 0)
#   6. relative -d and -o from another directory: read and written there, nothing
#      in the repository root
#   7. a label (-e) and paths (-d, -o) holding gnuplot code between quotes draw a
#      picture and run none of it: the file the code would touch is not created
#   8. -h: the usage on stdout, exit 0; an unknown flag: one line with the synopsis
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

# ---- 5. a step without a loss
fake_runs 3
sed -i 's/^s:1 trl:[^ ]*/s:1 trl:nan/' "$WORK/runs/d1_T16/cp2_contiguous/main.log"
rc=0
bash scripts/loss_curves.sh -d "$WORK/runs" -r -e d1 -t 16 > "$WORK/nan.out" 2> "$WORK/nan.err" || rc=$?
row=$(grep '^cp2_contiguous ' "$WORK/nan.out" || true)
if [[ $rc -eq 0 && $row =~ ^cp2_contiguous\ +8\.000000\ +0\.000000$ ]] &&
    grep -q '^cp2_contiguous: no loss at 1 step(s) (1; trl:nan in main.log)' "$WORK/nan.out" &&
    [[ $(grep -c 'no loss at' "$WORK/nan.out") -eq 1 ]]; then
    echo "ok   a trl:nan step: named ($(grep 'no loss at' "$WORK/nan.out")), the other steps aligned (max |Δ| 0)"
else
    fail "a trl:nan step: rc $rc, row '$row', $(grep 'no loss' "$WORK/nan.out"), stderr: $(head -c 300 "$WORK/nan.err")"
fi

# ---- 6. relative paths from the caller's directory
REPO=$(pwd)
mkdir -p "$WORK/caller"
WORK=$(cd "$WORK" && pwd) # from here on the checks run from elsewhere
cp -r "$WORK/runs" "$WORK/caller/relative_runs"
rm -f "$WORK/caller/relative_runs/d1_T16/loss_curves.png"
rc=0
(cd "$WORK/caller" && bash "$REPO/scripts/loss_curves.sh" -d relative_runs -r -e d1 -t 16 -o pic.png) \
    > "$WORK/relative.out" 2> "$WORK/relative.err" || rc=$?
if [[ $rc -eq 0 && -s $WORK/caller/pic.png && ! -e $REPO/pic.png && ! -e $REPO/relative_runs ]] &&
    grep -qF "wrote $(cd "$WORK/caller" && pwd)/pic.png" "$WORK/relative.out"; then
    echo "ok   -d relative_runs -o pic.png from $WORK/caller: read and written there, nothing in the repository root"
else
    fail "relative paths: rc $rc, $(tail -n 1 "$WORK/relative.out"), stderr: $(head -c 300 "$WORK/relative.err")"
fi

# ---- 7. gnuplot code in a label (-e: also in the runs' directory name) and quotes in paths
code="x'; system('touch INJECTED'); print 'y"
# draw_from_caller NAME DIR MODEL PNG: a redraw of the 3-step runs copied to DIR/MODEL_T16, run from $WORK/caller
draw_from_caller() {
    local name=$1 dir=$2 model=$3 png=$4 run rc=0
    for run in "${RUNS[@]}"; do
        mkdir -p "$dir/${model}_T16/$run"
        cp "$WORK/runs/d1_T16/$run/main.log" "$dir/${model}_T16/$run/"
    done
    (cd "$WORK/caller" && bash "$REPO/scripts/loss_curves.sh" -d "$dir" -r -e "$model" -t 16 -o "$png") \
        > "$WORK/$name.out" 2> "$WORK/$name.err" || rc=$?
    injected=$(find "$REPO" "$WORK" -name INJECTED 2> /dev/null | head -n 1)
    if [[ $rc -eq 0 && -z $injected && -s $png ]]; then
        echo "ok   $name: a picture, and no INJECTED file anywhere"
    else
        fail "$name: rc $rc, injected '$injected', stderr: $(head -c 300 "$WORK/$name.err")"
        [[ -z $injected ]] || rm -f "$injected"
    fi
}
draw_from_caller code_in_label "$WORK/inject" "$code" "$WORK/inject.png"
odd="$WORK/it's \"odd\" dir"
draw_from_caller quotes_in_paths "$odd" d1 "$odd/pic 'quoted'.png"

# ---- 8. -h, and an unknown flag
rc=0
bash scripts/loss_curves.sh -h > "$WORK/help.out" 2> "$WORK/help.err" || rc=$?
[[ $rc -eq 0 && ! -s $WORK/help.err ]] && head -n 1 "$WORK/help.out" | grep -q '^usage: ' &&
    echo "ok   -h: the usage on stdout, exit 0" || fail "-h: rc $rc, stdout $(head -n 1 "$WORK/help.out")"
refused unknown_flag "unknown argument '--bogus' \(usage: .*loss_curves.sh \[-o PNG\]" --bogus

[[ $failures -eq 0 ]] || { echo "FAIL test_loss_curves: $failures check(s) failed"; exit 1; }
echo "PASS test_loss_curves"
