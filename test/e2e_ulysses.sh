#!/usr/bin/env bash
# End to end, Ulysses attention: -ca ulysses at cp 2 and 4 and -ca hybrid at
# U x R = 2 x 2 and 2 x 3 reproduce the cp 1 run and the ring at cp 4, per step and
# per token (DESIGN 5 tolerances, checked by compare_runs), on a model of 4 heads
# and B 2 rows of T 50 tokens, which every cp here pads (to 52, 56, 60). Two sets:
# one document per row, contiguous, round_robin and striped; and documents (-dm 1)
# on a token file cut into short documents, packed, round_robin and striped; and
# solver on those documents at T 256 (its chunks of 64 need T >= 64), 8 steps.
#
# The model is d1's random init (L 1, C 64) read as 4 heads of 16 channels (its
# checkpoint with NH 4 in the header: the weights do not depend on NH), the
# smallest model whose heads split 4 ways; d4 (L 4, C 256, NH 4) makes each run
# about 4 times as long.
#
#   bash test/e2e_ulysses.sh COMPARE_RUNS      (env: see test/lib/e2e_lib.sh)
set -euo pipefail
COMPARE=${1:?usage: e2e_ulysses.sh COMPARE_RUNS}
E2E_NAME=e2e_ulysses
source "$(dirname "$0")/lib/e2e_lib.sh"
source "$(dirname "$0")/lib/binary_files.sh" # put_i32, short_documents

STEPS=10 B=2 T=50
COMMON=(-b $B -t $T -x $STEPS -l 1e-3 -v 0 -s 0)
MODEL=$WORK/d1_4heads.bin
train d1 1 -e d1 -x 0 -n 1 -o "$WORK/d1"
cp "$WORK/d1/model_00000000.bin" "$MODEL"
put_i32 "$MODEL" 20 4 # header[5]: NH
COMMON+=(-e "$MODEL")

reference ref 1 -cp 1
reference ring_cp4 4 -cp 4 -cl round_robin
run ulysses_cp2_round_robin 2 -cp 2 -cl round_robin -ca ulysses
run ulysses_cp4_contiguous 4 -cp 4 -cl contiguous -ca ulysses
run hybrid_2x2_round_robin 4 -cp 4 -cl round_robin -ca hybrid -cu 2
run ulysses_cp2_striped 2 -cp 2 -cl striped -ca ulysses
run hybrid_2x3_round_robin 6 -cp 6 -cl round_robin -ca hybrid -cu 2
echo
echo "== B = $B, T = $T, $STEPS steps: ulysses and hybrid against cp 1"
"$COMPARE" $STEPS $((B * T)) "$WORK/ref/main.log" "$WORK/ref.tl" "${runs[@]}" || fail "a run does not match cp 1"
echo "== the same against the ring at cp 4"
"$COMPARE" $STEPS $((B * T)) "$WORK/ring_cp4/main.log" "$WORK/ring_cp4.tl" "${runs[@]}" ||
    fail "a run does not match the ring"
grep -q "L 1, NH 4, C 64" "$WORK/ref.out" || fail "the runs do not train the 4-head model"
# the start-up table names the groups (cp/mesh.h: Ulysses groups of neighbours, rings across them)
grep -q "ulysses groups, U 2 *| {0,1} {2,3} {4,5} " "$WORK/hybrid_2x3_round_robin.out" ||
    fail "the 2 x 3 run does not show its Ulysses groups {0,1} {2,3} {4,5}"
grep -q "rings, R 3 *| {0,2,4} {1,3,5} " "$WORK/hybrid_2x3_round_robin.out" ||
    fail "the 2 x 3 run does not show its rings {0,2,4} {1,3,5}"

DOCS=$WORK/short_documents.bin
short_documents "$DOCS" $((STEPS * B * T + 1))
COMMON+=(-i "$DOCS" -dm 1)
reference ref_documents 1 -cp 1
run ulysses_cp4_packed 4 -cp 4 -cl packed -ca ulysses
run hybrid_2x2_packed 4 -cp 4 -cl packed -ca hybrid -cu 2
run hybrid_2x3_round_robin_documents 6 -cp 6 -cl round_robin -ca hybrid -cu 2
run hybrid_2x2_striped_documents 4 -cp 4 -cl striped -ca hybrid -cu 2
echo
echo "== -dm 1, B = $B, T = $T, $STEPS steps: ulysses and hybrid against cp 1"
"$COMPARE" $STEPS $((B * T)) "$WORK/ref_documents/main.log" "$WORK/ref_documents.tl" "${runs[@]}" ||
    fail "a run with documents does not match cp 1"

# solver: 4 chunks of 64 per row, 2 per rank at cp 2, 1 at cp 4, in the order the
# documents' areas decide; 8 steps (enough for the loss to move as compare_runs
# asks), the documents' file read in shuffled epochs of its windows of B x 256
reference ref_solver 1 -cp 1 -t 256 -x 8
run ulysses_cp2_solver 2 -cp 2 -cl solver -ca ulysses -t 256 -x 8
run hybrid_2x2_solver 4 -cp 4 -cl solver -ca hybrid -cu 2 -t 256 -x 8
echo
echo "== -dm 1, B = $B, T = 256, 8 steps: solver under ulysses and hybrid against cp 1"
"$COMPARE" 8 $((B * 256)) "$WORK/ref_solver/main.log" "$WORK/ref_solver.tl" "${runs[@]}" ||
    fail "a solver run does not match cp 1"
finish
