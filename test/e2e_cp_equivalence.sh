#!/usr/bin/env bash
# End to end: the CPU trainer at cp {2, 3, 4} x {contiguous, round_robin, striped,
# solver}, the all-gather attention over solver at cp 4, and group-cast over
# round_robin at cp 4 in 3 stages, reproduces the cp 1 (identity) run, step losses and gathered per-token losses (docs/DESIGN.md §5);
# dp 2 x cp {1, 2} (cp 2 with the ring and with group-cast) reproduces one rank with the batch of both replicas; a
# checkpoint written with -x 0 loads back into the same run; and at cp 3, where each rank holds a third of the
# position table, the checkpoint's model file and a sample of every position are cp 1's.
#
#   bash test/e2e_cp_equivalence.sh COMPARE_RUNS
#
# COMPARE_RUNS: the compare_runs binary (test/lib/compare_runs.c). Env: see test/lib/e2e_lib.sh.
set -euo pipefail
COMPARE=${1:?usage: e2e_cp_equivalence.sh COMPARE_RUNS}
E2E_NAME=e2e_cp_equivalence
source "$(dirname "$0")/lib/e2e_lib.sh"
if [[ ! -x $COMPARE ]]; then
    echo "FAIL: compare tool '$COMPARE' is missing (cmake --build the test dir)" >&2
    exit 1
fi

STEPS=20
T=100
# -e d1 random init, a learning rate that moves the loss (about 10.85 -> 9.5 in 20 steps);
# -mt T: a position table of T rows, so that every owner of a split table's rows
# (cp/position_table.h) owns rows the tokens use, and receives some from other ranks
# -sh 0: the data in order, so that dp 2 reads the rows of one rank's larger batch
COMMON=(-e d1 -mt $T -t $T -x $STEPS -l 1e-3 -v 0 -s 0 -sh 0)

# train_b NAME NP B [flags...]: one run at batch B, with its main.log in $WORK/NAME
# and its per-token losses in $WORK/NAME.tl
train_b() {
    local name=$1 np=$2 b=$3
    shift 3
    train "$name" "$np" -b "$b" -o "$WORK/$name" -tl "$WORK/$name.tl" "$@"
}

# ---- cp 1 reference and the thirteen cp > 1 configurations, B = 2 (striped pads T 100
# to 102 at cp 3, the others at every cp; solver to whole chunks of 64 on every rank,
# 128, 192, 256: chunks in any order, ranks of pad alone)
train_b ref_b2 1 2 -cp 1 -cl identity
args=()
for cp in 2 3 4; do
    for layout in contiguous round_robin striped solver; do
        name=cp${cp}_${layout}_b2
        train_b "$name" "$cp" 2 -cp "$cp" -cl "$layout"
        args+=("$name" "$WORK/$name/main.log" "$WORK/$name.tl")
    done
done
train_b cp4_solver_allgather_b2 4 2 -cp 4 -cl solver -ca allgather
args+=(cp4_solver_allgather_b2 "$WORK/cp4_solver_allgather_b2/main.log" "$WORK/cp4_solver_allgather_b2.tl")
train_b cp4_round_robin_groupcast_b2 4 2 -cp 4 -cl round_robin -ca groupcast -co 3
args+=(cp4_round_robin_groupcast_b2 "$WORK/cp4_round_robin_groupcast_b2/main.log" "$WORK/cp4_round_robin_groupcast_b2.tl")
echo
echo "== B = 2, T = $T, $STEPS steps: cp > 1 against cp 1"
"$COMPARE" $STEPS $((2 * T)) "$WORK/ref_b2/main.log" "$WORK/ref_b2.tl" "${args[@]}"

# ---- an odd batch with padding: B = 3, T = 100 at cp 3 (padded to 102 / 108)
train_b ref_b3 1 3 -cp 1 -cl identity
train_b cp3_contiguous_b3 3 3 -cp 3 -cl contiguous
train_b cp3_round_robin_b3 3 3 -cp 3 -cl round_robin
echo
echo "== B = 3, T = $T, $STEPS steps: cp 3 against cp 1"
"$COMPARE" $STEPS $((3 * T)) "$WORK/ref_b3/main.log" "$WORK/ref_b3.tl" \
    cp3_contiguous_b3 "$WORK/cp3_contiguous_b3/main.log" "$WORK/cp3_contiguous_b3.tl" \
    cp3_round_robin_b3 "$WORK/cp3_round_robin_b3/main.log" "$WORK/cp3_round_robin_b3.tl"

# ---- data parallel x context parallel: world = dp x cp. Each replica reads its own
# window, so np 2 -cp 1 (dp 2) and np 4 -cp 2 (dp 2) at B = 2 see, step by step,
# the same tokens as one rank at B = 4 (replica k's rows are rows 2k, 2k+1 there);
# the loss is the mean over all of them and the gradients are summed, so the runs
# must match, per step and per token ([dp * B, T] rows in -tl)
train_b ref_b4 1 4 -cp 1 -cl identity
train_b dp2_cp1_b2 2 2 -cp 1 -cl identity
train_b dp2_cp2_b2 4 2 -cp 2 -cl round_robin
train_b dp2_cp2c_b2 4 2 -cp 2 -cl contiguous
train_b dp2_cp2g_b2 4 2 -cp 2 -cl contiguous -ca groupcast
echo
echo "== dp 2 x cp {1, 2}, B = 2, against one rank with B = 4"
"$COMPARE" $STEPS $((4 * T)) "$WORK/ref_b4/main.log" "$WORK/ref_b4.tl" \
    dp2_cp1 "$WORK/dp2_cp1_b2/main.log" "$WORK/dp2_cp1_b2.tl" \
    dp2_cp2_round_robin "$WORK/dp2_cp2_b2/main.log" "$WORK/dp2_cp2_b2.tl" \
    dp2_cp2_contiguous "$WORK/dp2_cp2c_b2/main.log" "$WORK/dp2_cp2c_b2.tl" \
    dp2_cp2_contiguous_groupcast "$WORK/dp2_cp2g_b2/main.log" "$WORK/dp2_cp2g_b2.tl"

# ---- checkpoint round trip: -x 0 writes the initial weights, which load back
echo
echo "== checkpoint round trip"
CKPT_DIR=$WORK/ckpt
# a later flag wins: no steps; -n 1: the checkpoint at the end; -s 1: a sample there, of every position
train ckpt 1 -b 2 -x 0 -n 1 -s 1 -g $T -o "$CKPT_DIR"
CKPT=$CKPT_DIR/model_00000000.bin
if [[ ! -f $CKPT ]]; then
    echo "FAIL: -x 0 -o $CKPT_DIR wrote no $CKPT; the directory holds: $(ls "$CKPT_DIR")" >&2
    exit 1
fi
# d1 at -mt T: maxT T, V 50257 (Vp 50304), L 1, NH 1, C 64; llm.c's parameter count
maxT=$T V=50257 Vp=50304 L=1 NH=1 C=64
params=$((Vp * C + maxT * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C))
expected_bytes=$((1024 + 4 * params))
actual_bytes=$(stat -c %s "$CKPT")
echo "checkpoint $CKPT: $actual_bytes bytes, expected 1024 + 4 * $params = $expected_bytes"
if [[ $actual_bytes -ne $expected_bytes ]]; then
    echo "FAIL: checkpoint size $actual_bytes != $expected_bytes" >&2
    exit 1
fi
header=$(od -A n -t d4 -N 32 "$CKPT" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
expected_header="20240326 3 $maxT $V $L $NH $C $Vp"
echo "checkpoint header: $header"
if [[ $header != "$expected_header" ]]; then
    echo "FAIL: checkpoint header '$header', expected '$expected_header'" >&2
    exit 1
fi
# cp 3: every rank holds its third of the position table's rows, the model file
# gets the others' from them, and so does the sample (it reads all T rows)
source "$(dirname "$0")/lib/binary_files.sh" # same_model
train ckpt_cp3 3 -b 2 -x 0 -n 1 -s 1 -g $T -cp 3 -o "$WORK/ckpt_cp3"
if ! same_model "$CKPT" "$WORK/ckpt_cp3/model_00000000.bin"; then
    echo "FAIL: the cp 3 checkpoint's model file differs from cp 1's (the position table's rows from their owners)" >&2
    exit 1
fi
sample_of() { grep -A 2 '^generating:' "$WORK/$1.out" | tail -n 1; } # the line of tokens after the ---
if [[ -z $(sample_of ckpt) || $(sample_of ckpt) != "$(sample_of ckpt_cp3)" ]]; then
    echo "FAIL: the cp 3 sample differs from cp 1's: '$(sample_of ckpt_cp3)' against '$(sample_of ckpt)'" >&2
    exit 1
fi
echo "cp 3: the model file and the sample of $T tokens are cp 1's"
# the reloaded run must be the d1 run: same losses at every step, bit for bit in
# main.log (same binary, same rank count, same weights)
train_b reload_b2 1 2 -cp 1 -cl identity -mt 0 -e "$CKPT" # -mt 0: the file brings its own table
first_ref=$(grep -m1 '^s:0 trl:' "$WORK/ref_b2/main.log")
first_reload=$(grep -m1 '^s:0 trl:' "$WORK/reload_b2/main.log")
echo "first step from -e d1: '$first_ref'; from the checkpoint: '$first_reload'"
if [[ -z $first_ref || $first_ref != "$first_reload" ]]; then
    echo "FAIL: the reloaded checkpoint does not reproduce the first-step loss" >&2
    exit 1
fi
"$COMPARE" $STEPS $((2 * T)) "$WORK/ref_b2/main.log" "$WORK/ref_b2.tl" \
    reload_from_checkpoint "$WORK/reload_b2/main.log" "$WORK/reload_b2.tl"
echo
echo "PASS e2e_cp_equivalence ($SECONDS s)"
