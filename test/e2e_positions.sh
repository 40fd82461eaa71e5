#!/usr/bin/env bash
# End to end, positions that restart at each document (-rp 1; an EOT token opens a
# document, as for -dm 1):
#
# 1. A packed row is its documents side by side: with -dm 1 -rp 1, the first step's
#    per-token losses of B 2 rows of T 64 holding 5 documents (20, 13, 31 and 41,
#    23 tokens, each opened by an EOT) equal those of each document trained alone
#    at cp 1 (-t its length, a token file of its tokens and the one after it), at
#    cp 1 to 4, every layout and attention algorithm (a 4-head model, so that
#    Ulysses splits it), within DESIGN 5's first-step tolerance, 1e-5. Without -rp 1
#    the packed row differs (the documents past the first see positions 20, 33,
#    ... of the row): the check can fail.
# 2. -rp 1 alone (no document masking) and with -dm 1, over 10 steps on text cut
#    into short documents: cp 2, 3, 4 with striped, contiguous, round_robin, packed
#    and the all-gather attention reproduce cp 1, per step and per token
#    (compare_runs, DESIGN 5 tolerances); and -rp 1 is live: its first step's
#    per-token losses differ from -rp 0's.
#
#   bash test/e2e_positions.sh COMPARE_RUNS      (env: see test/lib/e2e_lib.sh)
set -euo pipefail
COMPARE=${1:?usage: e2e_positions.sh COMPARE_RUNS}
E2E_NAME=e2e_positions
source "$(dirname "$0")/lib/e2e_lib.sh"
source "$(dirname "$0")/lib/binary_files.sh" # put_i32, short_documents

# the 4-head model: d1's init read as 4 heads of 16 channels (test/e2e_ulysses.sh)
MODEL=$WORK/d1_4heads.bin
COMMON=(-v 0 -s 0 -sh 0)
train d1 1 -e d1 -x 0 -n 1 -o "$WORK/d1"
cp "$WORK/d1/model_00000000.bin" "$MODEL"
put_i32 "$MODEL" 20 4 # header[5]: NH

# ---- 1. a packed row against its documents one by one
B=2 T=64
ROWS=$WORK/rows.bin
# the rows: documents of these lengths, each an EOT then Austen's text, and an EOT
# after the last row (its last target); then each document's own token file: its
# tokens and the token after it. documents.txt: "row start length" per document
python3 - "$ROWS" "$WORK" dev/data/austen/austen_val.bin <<'PY'
import struct, sys
from array import array
rows_path, work, source = sys.argv[1:4]
EOT = 50256
with open(source, 'rb') as f:
    f.read(1024)
    text = array('H'); text.frombytes(f.read())
text = [t for t in text if t != EOT]
layout = [[20, 13, 31], [41, 23]]
tokens, place, listing = [], 0, []
for row, lengths in enumerate(layout):
    start = 0
    for n in lengths:
        listing.append((row, start, n, len(tokens)))
        tokens += [EOT] + text[place:place + n - 1]
        place += n - 1
        start += n
tokens.append(EOT)
def write(path, toks):
    with open(path, 'wb') as f:
        f.write(struct.pack('<256i', 20240520, 1, len(toks), *[0] * 253))
        f.write(array('H', toks).tobytes())
write(rows_path, tokens)
with open(f'{work}/documents.txt', 'w') as out:
    for k, (row, start, n, at) in enumerate(listing):
        write(f'{work}/document_{k}.bin', tokens[at:at + n + 1])
        out.write(f'{row} {start} {n}\n')
PY
mapfile -t documents <"$WORK/documents.txt" # (mpirun reads stdin: no `while read` around it)
for k in "${!documents[@]}"; do
    read -r _ _ n <<<"${documents[k]}"
    train "document_$k" 1 -e "$MODEL" -b 1 -t "$n" -x 1 -dm 1 -i "$WORK/document_$k.bin" -tl "$WORK/document_$k.tl"
done

# packed NAME NP [flags...]: one step on the rows, -dm 1 -rp 1, per-token losses in NAME.tl
packed_runs=()
packed() {
    local name=$1 np=$2
    shift 2
    train "$name" "$np" -e "$MODEL" -b $B -t $T -x 1 -i "$ROWS" -dm 1 -tl "$WORK/$name.tl" "$@"
    packed_runs+=("$name")
}
packed rows_cp1 1 -rp 1 -cp 1
packed rows_cp2_packed 2 -rp 1 -cp 2 -cl packed
packed rows_cp2_striped_ulysses 2 -rp 1 -cp 2 -cl striped -ca ulysses
packed rows_cp3_contiguous 3 -rp 1 -cp 3 -cl contiguous
packed rows_cp3_striped 3 -rp 1 -cp 3 -cl striped -ca allgather
packed rows_cp3_round_robin_groupcast 3 -rp 1 -cp 3 -cl round_robin -ca groupcast -co 2
packed rows_cp4_round_robin 4 -rp 1 -cp 4 -cl round_robin
packed rows_cp4_packed_hybrid 4 -rp 1 -cp 4 -cl packed -ca hybrid -cu 2
train rows_cp1_no_restart 1 -e "$MODEL" -b $B -t $T -x 1 -i "$ROWS" -dm 1 -tl "$WORK/rows_cp1_no_restart.tl"
echo
echo "== B $B x T $T, 5 documents, -dm 1 -rp 1, step 0: each run's per-token losses against the documents run alone"
# documents_vs_rows RUN: the largest |row loss - document loss| over every token
documents_vs_rows() {
    python3 - "$WORK" "$1" $B $T <<'PY'
import sys
from array import array
work, run, B, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = array('f'); rows.frombytes(open(f'{work}/{run}.tl', 'rb').read())
assert len(rows) == B * T, f'{run}.tl holds {len(rows)} losses, expected {B * T}'
worst, k = 0.0, 0
for line in open(f'{work}/documents.txt'):
    row, start, n = map(int, line.split())
    alone = array('f'); alone.frombytes(open(f'{work}/document_{k}.tl', 'rb').read())
    assert len(alone) == n, f'document_{k}.tl holds {len(alone)} losses, expected {n}'
    worst = max([worst] + [abs(rows[row * T + start + t] - alone[t]) for t in range(n)])
    k += 1
print(f'{worst:.3e}')
PY
}
for name in "${packed_runs[@]}"; do
    worst=$(documents_vs_rows "$name")
    printf '%-28s max |row - documents alone| %s\n' "$name" "$worst"
    awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' || fail "$name: the packed row's losses are not its documents' ($worst > 1e-5)"
done
worst=$(documents_vs_rows rows_cp1_no_restart)
printf '%-28s max |row - documents alone| %s (positions of the row: must differ)\n' rows_cp1_no_restart "$worst"
awk -v w="$worst" 'BEGIN { exit !(w > 1e-3) }' || fail "without -rp 1 the packed row matches its documents alone: positions are not live"

# ---- 2. -rp 1 over 10 steps, alone and with -dm 1, against cp 1
STEPS=10 B=2 T=100
DOCS=$WORK/short_documents.bin
short_documents "$DOCS" $((STEPS * B * T + 1))
COMMON+=(-e d1 -b $B -t $T -x $STEPS -l 1e-3 -i "$DOCS")
reference ref_restart 1 -cp 1 -rp 1
run restart_striped_cp2 2 -cp 2 -cl striped -rp 1
run restart_contiguous_cp3_allgather 3 -cp 3 -cl contiguous -rp 1 -ca allgather
run restart_round_robin_cp4 4 -cp 4 -cl round_robin -rp 1
echo
echo "== -rp 1, B $B, T $T, $STEPS steps: cp > 1 against cp 1"
"$COMPARE" $STEPS $((B * T)) "$WORK/ref_restart/main.log" "$WORK/ref_restart.tl" "${runs[@]}" || fail "-rp 1: a run does not match cp 1"
reference ref_restart_documents 1 -cp 1 -rp 1 -dm 1
run restart_documents_packed_cp3 3 -cp 3 -cl packed -rp 1 -dm 1
run restart_documents_striped_cp4 4 -cp 4 -cl striped -rp 1 -dm 1
echo
echo "== -rp 1 -dm 1, B $B, T $T, $STEPS steps: cp > 1 against cp 1"
"$COMPARE" $STEPS $((B * T)) "$WORK/ref_restart_documents/main.log" "$WORK/ref_restart_documents.tl" "${runs[@]}" ||
    fail "-rp 1 -dm 1: a run does not match cp 1"
# the positions are live: -rp 0 on the same data gives other first-step losses
train no_restart 1 -cp 1 -x 1 -o "$WORK/no_restart" -tl "$WORK/no_restart.tl"
if cmp -s <(head -c $((B * T * 4)) "$WORK/ref_restart.tl") "$WORK/no_restart.tl"; then
    fail "-rp 1 changes nothing: its first step's per-token losses are -rp 0's"
fi
grep -q "positions *| from each document's start (-rp 1)" "$WORK/ref_restart.out" || fail "the start-up table does not show -rp 1"
finish
