#!/usr/bin/env bash
# scripts/position_loss.sh: the mean loss by position from -tl files.
#   1. its means against the formula of a synthetic file: T 40, 6 rows, the loss of
#      row r at position p is p + 100 r; over the last half (rows 3, 4, 5) the mean at
#      p is p + 400, so positions 0-15 average 407.5 and 16-39 427.5
#   2. every cp size draws the same curve: the CPU twin's -tl at cp 1, 2 and 4
#      (both layouts) give the same table to its four decimals
#   3. a file that is no whole number of rows is refused
#
#   bash test/test_position_loss.sh     (env: see e2e_lib.sh)
set -euo pipefail
E2E_NAME=test_position_loss
source "$(dirname "$0")/e2e_lib.sh"
need gnuplot gnuplot-nox
need python3 python3

# ---- 1. the formula
python3 - "$WORK/synthetic.tl" <<'EOF'
import struct, sys
T, rows = 40, 6
with open(sys.argv[1], "wb") as f:
    for r in range(rows):
        f.write(struct.pack(f"<{T}f", *[p + 100.0 * r for p in range(T)]))
EOF
table=$(bash scripts/position_loss.sh -o "$WORK/synthetic.png" "synthetic=$WORK/synthetic.tl:40")
echo "$table"
read -r _ used early late _ < <(grep '^synthetic ' <<< "$table")
if [[ $used == 3 && $early == 407.5000 && $late == 427.5000 && -s $WORK/synthetic.png ]]; then
    echo "ok   the last half's 3 rows: positions 0-15 average $early, 16-39 $late (the formula: 407.5, 427.5)"
else
    fail "synthetic file: rows $used, means $early and $late; expected 3 rows, 407.5000 and 427.5000 (and a PNG)"
fi

# ---- 2. every cp size draws the same curve
COMMON=(-e d1 -b 2 -t 128 -x 4 -l 1e-3 -v 0 -s 0)
specs=()
for spec in 1:identity 2:round_robin 4:contiguous 4:round_robin; do
    cp=${spec%%:*} layout=${spec#*:}
    train "cp${cp}_$layout" "$cp" -cp "$cp" -cl "$layout" -o "$WORK/cp${cp}_$layout" -tl "$WORK/cp${cp}_$layout.tl"
    specs+=("cp${cp}_$layout=$WORK/cp${cp}_$layout.tl:128")
done
table=$(bash scripts/position_loss.sh -l 1 -o "$WORK/cp.png" "${specs[@]}")
echo "$table"
distinct=$(awk '/^cp/ { $1 = ""; print }' <<< "$table" | sort -u | wc -l)
[[ $distinct -eq 1 ]] || fail "cp 1, 2 and 4 draw different curves (${distinct} distinct table rows)"
[[ $distinct -eq 1 ]] && echo "ok   cp 1, 2 and 4 (both layouts) draw the same curve"

# ---- 3. a file that is no whole number of rows
head -c 100 "$WORK/synthetic.tl" > "$WORK/cut.tl"
if err=$(bash scripts/position_loss.sh -o "$WORK/cut.png" "cut=$WORK/cut.tl:40" 2>&1); then
    fail "a cut file was accepted"
elif [[ $err == *"holds 100 bytes, not a whole number of rows of T 40"* ]]; then
    echo "ok   a cut file: $err"
else
    fail "a cut file: '$err'"
fi
finish
