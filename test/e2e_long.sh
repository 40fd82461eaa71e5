#!/usr/bin/env bash
# End to end past GPT-2's 1024 positions: at T = 2050 (positions up to 2049, a row
# that every cp here pads: 2052 at cp 2 and 3, 2056 at cp 4) the CPU trainer at cp
# {2, 3, 4} x {contiguous, round_robin} reproduces the cp 1 run, and the packed
# layout at cp {2, 3, 4} (documents, -dm 1) the cp 1 run with document masking, per
# step and per token (DESIGN 5 tolerances, compare_runs). Then the position table:
# a random init sizes it to -t, -mt asks for more, the checkpoint records it (maxT,
# header[2]) and loads back into the same run (every run here has a 4096-row
# table), a model with a 4096-row table
# continues at T = 4096, and a -t past its table is refused with both numbers.
#
#   bash test/e2e_long.sh COMPARE_RUNS      (env: see test/lib/e2e_lib.sh)
set -euo pipefail
COMPARE=${1:?usage: e2e_long.sh COMPARE_RUNS}
E2E_NAME=e2e_long
source "$(dirname "$0")/lib/e2e_lib.sh"
source "$(dirname "$0")/lib/binary_files.sh" # short_documents

# -e d1 (C 64) keeps a step near a second at this length; 3 steps at lr 3e-3 move
# the loss by about 0.4 (compare_runs wants the reference alive). Every run's
# position table has MT rows (-mt), more than T, so that the reference is also
# the run its checkpoint must reproduce below.
STEPS=3 B=1 T=2050 MT=4096
COMMON=(-e d1 -mt $MT -b $B -t $T -x $STEPS -l 3e-3 -v 0 -s 0)
DOCS=$WORK/short_documents.bin
short_documents "$DOCS" $((STEPS * B * T + 1))

# run NAME NP [flags...]: main.log in $WORK/NAME, per-token losses in $WORK/NAME.tl
run() {
    local name=$1 np=$2
    shift 2
    train "$name" "$np" -o "$WORK/$name" -tl "$WORK/$name.tl" "$@"
}

run ref 1 -cp 1
grep -q "maxT $MT," "$WORK/ref.out" || fail "the random init with -mt $MT does not report a table of $MT rows: $(grep -m1 'model ' "$WORK/ref.out")"
runs=()
for cp in 2 3 4; do
    for layout in contiguous round_robin; do
        run "cp${cp}_$layout" "$cp" -cp "$cp" -cl "$layout"
        runs+=("cp${cp}_$layout" "$WORK/cp${cp}_$layout/main.log" "$WORK/cp${cp}_$layout.tl")
    done
done
echo
echo "== B = $B, T = $T, $STEPS steps: contiguous and round_robin against cp 1"
"$COMPARE" $STEPS $((B * T)) "$WORK/ref/main.log" "$WORK/ref.tl" "${runs[@]}" || fail "a run does not match cp 1"

run ref_documents 1 -cp 1 -dm 1 -i "$DOCS"
runs=()
for cp in 2 3 4; do
    run "packed_cp$cp" "$cp" -cp "$cp" -cl packed -dm 1 -i "$DOCS"
    runs+=("packed_cp$cp" "$WORK/packed_cp$cp/main.log" "$WORK/packed_cp$cp.tl")
done
echo
echo "== -dm 1, B = $B, T = $T, $STEPS steps: packed against cp 1"
"$COMPARE" $STEPS $((B * T)) "$WORK/ref_documents/main.log" "$WORK/ref_documents.tl" "${runs[@]}" ||
    fail "a packed run does not match cp 1"

# ---- the position table: without -mt a random init's covers -t, at least 1024 rows
echo
echo "== position tables"
train table_default 1 -mt 0 -t 1500 -x 0
grep -q "maxT 1500," "$WORK/table_default.out" || fail "-e d1 -t 1500 does not report a table of 1500 rows: $(grep -m1 'model ' "$WORK/table_default.out")"
train table_short 1 -mt 0 -t 64 -x 0
grep -q "maxT 1024," "$WORK/table_short.out" || fail "-e d1 -t 64 does not report GPT-2's 1024 rows: $(grep -m1 'model ' "$WORK/table_short.out")"
# -mt 4096 at T 2050, written by -x 0, read back
train mt_ckpt 1 -x 0 -n 1 -o "$WORK/mt_ckpt"
CKPT=$WORK/mt_ckpt/model_00000000.bin
# d1 at maxT 4096: V 50257 (Vp 50304), L 1, NH 1, C 64; llm.c's parameter count
V=50257 Vp=50304 L=1 NH=1 C=64
params=$((Vp * C + MT * C + L * (12 * C * C + 13 * C) + 2 * C))
header=$(od -A n -t d4 -N 32 "$CKPT" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
echo "checkpoint header: $header, $(stat -c %s "$CKPT") bytes"
[[ $header == "20240326 3 $MT $V $L $NH $C $Vp" ]] || fail "checkpoint header '$header', expected maxT $MT in [2]"
[[ $(stat -c %s "$CKPT") -eq $((1024 + 4 * params)) ]] || fail "checkpoint of $(stat -c %s "$CKPT") bytes, expected $((1024 + 4 * params))"
# the same first step from the random init (the reference) and from its checkpoint, bit for bit
train mt_reload 1 -e "$CKPT" -mt 0 -x 1 -o "$WORK/mt_reload"
direct=$(grep -m1 '^s:0 trl:' "$WORK/ref/main.log" || true)
reload=$(grep -m1 '^s:0 trl:' "$WORK/mt_reload/main.log" || true)
echo "first step from -e d1 -mt $MT: '$direct'; from its checkpoint: '$reload'"
[[ -n $direct && $direct == "$reload" ]] || fail "the checkpoint does not reproduce its run's first step"
grep -q "maxT $MT," "$WORK/mt_reload.out" || fail "the reloaded model does not report maxT $MT"
# the table lets the model continue at its full length (positions up to 4095)
train mt_continue 2 -e "$CKPT" -mt 0 -t $MT -x 1 -cp 2
grep -q '^step    1/1 | loss' "$WORK/mt_continue.out" || fail "no step at -t $MT from the 4096-row checkpoint"
# and no further: -t 4097 is refused with both numbers and what to do
if timeout 60 "${LAUNCH[@]}" -np 2 "$TRAINER" "${COMMON[@]}" -cp 2 -e "$CKPT" -mt 0 -t $((MT + 1)) \
    >"$WORK/too_long.out" 2>&1; then
    fail "-t $((MT + 1)) past the checkpoint's $MT-row table was accepted"
fi
grep -q "^error: -t $((MT + 1)) needs a position table of $((MT + 1)) rows, but the checkpoint '$CKPT' has $MT (maxT): train at -t $MT or less" \
    "$WORK/too_long.out" || fail "no clear error for -t $((MT + 1)) past the table: $(grep -m1 error "$WORK/too_long.out")"
finish
