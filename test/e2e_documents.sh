#!/usr/bin/env bash
# End to end, documents and attention algorithms: with document masking (-dm 1) a
# token attends only to its own document (an EOT token opens one). On a token
# file cut into short documents, the packed layout at cp 2, 3, 4, contiguous,
# round_robin, striped and solver with -dm 1, and the all-gather (-ca allgather) and
# group-cast (-ca groupcast, whose messages the documents shrink) attentions reproduce
# the single-rank run with document masking, per step and per token (docs/DESIGN.md §5
# tolerances, checked by compare_runs). The masking must be live: the -dm 0 run
# on the same data gives other per-token losses. The start-up table's layout balance
# and attention bytes per layer equal dev/cp_layout's on the same first batch.
#
#   bash test/e2e_documents.sh COMPARE_RUNS      (env: see test/lib/e2e_lib.sh)
set -euo pipefail
COMPARE=${1:?usage: e2e_documents.sh COMPARE_RUNS}
E2E_NAME=e2e_documents
source "$(dirname "$0")/lib/e2e_lib.sh"
source "$(dirname "$0")/lib/binary_files.sh" # short_documents

STEPS=10 B=2 T=100
# rows of several short documents over the span the runs read
DOCS=$WORK/short_documents.bin
short_documents "$DOCS" $((STEPS * B * T + 1))

# -sh 0: read in order, the span that holds the documents
COMMON=(-e d1 -b $B -t $T -x $STEPS -l 1e-3 -v 0 -s 0 -i "$DOCS" -sh 0)

reference ref 1 -cp 1 -dm 1
run packed_cp2 2 -cp 2 -cl packed -dm 1
run packed_cp3 3 -cp 3 -cl packed -dm 1
run packed_cp4 4 -cp 4 -cl packed -dm 1
run contiguous_cp3 3 -cp 3 -cl contiguous -dm 1
run round_robin_cp4 4 -cp 4 -cl round_robin -dm 1
run striped_cp3 3 -cp 3 -cl striped -dm 1
run allgather_striped_cp4 4 -cp 4 -cl striped -dm 1 -ca allgather
run allgather_round_robin_cp2 2 -cp 2 -cl round_robin -dm 1 -ca allgather
run allgather_packed_cp4 4 -cp 4 -cl packed -dm 1 -ca allgather
run allgather_contiguous_cp3 3 -cp 3 -cl contiguous -dm 1 -ca allgather
run solver_cp2 2 -cp 2 -cl solver -dm 1
run solver_cp4 4 -cp 4 -cl solver -dm 1
run allgather_solver_cp2 2 -cp 2 -cl solver -dm 1 -ca allgather
run allgather_solver_cp4 4 -cp 4 -cl solver -dm 1 -ca allgather
run groupcast_solver_cp3 3 -cp 3 -cl solver -dm 1 -ca groupcast -co 2
run groupcast_packed_cp4 4 -cp 4 -cl packed -dm 1 -ca groupcast
echo
echo "== -dm 1, B = $B, T = $T, $STEPS steps: packed, contiguous, round_robin, striped, solver, all-gather, group-cast against cp 1"
"$COMPARE" $STEPS $((B * T)) "$WORK/ref/main.log" "$WORK/ref.tl" "${runs[@]}" || fail "a run does not match cp 1"

# the masking is live: without it the first step's per-token losses differ
train nomask 1 -cp 1 -dm 0 -o "$WORK/nomask" -tl "$WORK/nomask.tl"
step_bytes=$((B * T * 4))
if cmp -s <(head -c $step_bytes "$WORK/ref.tl") <(head -c $step_bytes "$WORK/nomask.tl"); then
    fail "document masking changes nothing: -dm 1 and -dm 0 give the same per-token losses"
fi
# the start-up table's balance and bytes per layer on the first batch (the rows the
# runs read first, -sh 0): dev/cp_layout's, counted pair by pair on the same rows
[[ -x cp_layout ]] || fail "./cp_layout is missing: build it with 'make cp_layout'"
for case in "solver_cp4 4 solver ring" "packed_cp4 4 packed ring" "round_robin_cp4 4 round_robin ring" \
            "striped_cp3 3 striped ring" "allgather_solver_cp4 4 solver allgather" \
            "groupcast_solver_cp3 3 solver groupcast" "groupcast_packed_cp4 4 packed groupcast"; do
    read -r name cp layout algorithm <<< "$case"
    want=$(./cp_layout -t $T -cp "$cp" -cl "$layout" -i "$DOCS" -b $B -dm 1 -tile 64 -m d1 | awk -v a="$algorithm" '
        $1 == "imbalance" { printf "max/mean: area %s, tiles of 64 %s\n", $7, $5 }
        $2 == "comm" && $3 == a { printf "fwd %s B, bwd %s B per rank%s\n", $5, $8, a == "groupcast" ? " (mean)" : "" }')
    got=$(sed -n 's/^| balance, first batch *| \(.*[0-9]\) *|$/\1/p; s/^| attention sent\/layer *| \(.*[a-z)]\) *|$/\1/p' \
          "$WORK/$name.out")
    [ "$(grep -c . <<< "$want")" -eq 2 ] || fail "$name: cp_layout gave no imbalance or comm line: $want"
    [ "$got" = "$want" ] || fail "$name: the start-up table says"$'\n'"$got"$'\n'"cp_layout says"$'\n'"$want"
done
# and the packed layout really padded its documents
grep -qE "padded T +\| [0-9]+ to [0-9]+ \(the documents decide\)" "$WORK/packed_cp4.out" || fail "the packed run does not report a data-dependent length"
finish
