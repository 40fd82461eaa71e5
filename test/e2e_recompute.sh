#!/usr/bin/env bash
# -r (llm.c's recompute) on the CPU trainer: -r 1 (GELU recomputed in the backward
# pass) and -r 2 (GELU and the layernorms) train exactly as -r 0 (everything kept).
# The recomputation is the forward computation itself, so the runs must agree bit
# for bit: the main.log train lines and every step's per-token losses (-tl), over
# 3 steps (the losses of steps 1 and 2 depend on the gradients of the steps before).
# d2: two layers, so that the buffers the layers share under -r are really shared.
# B 2 x T 200 = 400 tokens per rank at cp 1: the classifier's chunks of 160 rows at
# GPT-2's vocabulary then end in a short one. Then -r 2 against -r 0 at cp 2
# round_robin, and -r 1 against -r 0 at cp 3 under group-cast in 2 stages.
#
#   bash test/e2e_recompute.sh        (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=e2e_recompute
source "$(dirname "$0")/lib/e2e_lib.sh"

COMMON=(-e d2 -b 2 -t 200 -x 3 -l 1e-3 -v 0 -s 0)
trl_lines() { grep ' trl:' "$1"; }

# same_run NAME REF: main.log train lines and -tl files of two runs are identical
same_run() {
    if [[ "$(trl_lines "$WORK/$1/main.log")" == "$(trl_lines "$WORK/$2/main.log")" ]]; then
        echo "ok   $1: main.log train lines identical to $2's ($(trl_lines "$WORK/$1/main.log" | wc -l) steps)"
    else
        fail "$1: main.log train lines differ from $2's:"
        diff <(trl_lines "$WORK/$1/main.log") <(trl_lines "$WORK/$2/main.log") || true
    fi
    local bytes
    bytes=$(stat -c %s "$WORK/$1.tl")
    if [[ $bytes -ne $((3 * 2 * 200 * 4)) ]]; then
        fail "$1.tl holds $bytes bytes, expected 3 steps of 2 x 200 floats"
    elif cmp -s "$WORK/$1.tl" "$WORK/$2.tl"; then
        echo "ok   $1: per-token losses of 3 steps identical to $2's ($bytes bytes)"
    else
        fail "$1: per-token losses differ from $2's: $(cmp "$WORK/$1.tl" "$WORK/$2.tl" || true)"
    fi
}

# run CP R: a run at -cp CP -r R
run() { train "cp$1_r$2" "$1" -cp "$1" -r "$2" -o "$WORK/cp$1_r$2" -tl "$WORK/cp$1_r$2.tl"; }
run 1 0
run 1 1
run 1 2
same_run cp1_r1 cp1_r0
same_run cp1_r2 cp1_r0
run 2 0
run 2 2
same_run cp2_r2 cp2_r0
for r in 0 1; do
    train "cp3_groupcast_r$r" 3 -cp 3 -ca groupcast -co 2 -r $r -o "$WORK/cp3_groupcast_r$r" -tl "$WORK/cp3_groupcast_r$r.tl"
done
same_run cp3_groupcast_r1 cp3_groupcast_r0
finish
