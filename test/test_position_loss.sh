#!/usr/bin/env bash
# scripts/position_loss.sh: the mean loss by position from -tl files.
#   1. its means against the formula of a synthetic file: T 40, 6 rows, the loss of
#      row r at position p is p + 100 r; over the last half (rows 3, 4, 5) the mean at
#      p is p + 400, so positions 0-15 average 407.5 and 16-39 427.5
#   2. every cp size draws the same curve: the CPU twin's -tl at cp 1, 2 and 4
#      (both layouts) give the same table to its four decimals
#   3. a file that is no whole number of rows is refused
#   4. NaN losses (masked targets, -lm 1): T 8, 4 rows of p + 10 r, row 1 all NaN and
#      position 3 NaN in every row: the table's mean is the valid tokens' (python
#      here), row 1 and position 4 are named, no 'nan' printed, a picture drawn;
#      every loss NaN: refused with one error line (no gnuplot message), no picture
#   5. a label and a title holding gnuplot code, a relative -o with a quote from
#      another directory: the picture lands there, the code never runs
#   6. -h: the usage on stdout, exit 0; an unknown flag: one line with the synopsis
#
#   bash test/test_position_loss.sh     (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=test_position_loss
source "$(dirname "$0")/lib/e2e_lib.sh"
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
# ---- 4. NaN losses
python3 - "$WORK/masked.tl" "$WORK/all_nan.tl" <<'EOF'
import struct, sys
T, rows = 8, 4
nan = float('nan')
with open(sys.argv[1], "wb") as f:
    for r in range(rows):
        f.write(struct.pack(f"<{T}f", *[nan if r == 1 or p == 3 else p + 10.0 * r for p in range(T)]))
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(f"<{T * 2}f", *[nan] * (T * 2)))
EOF
# the valid tokens: rows 0, 2, 3 at positions other than 3
expected=$(python3 -c "v = [p + 10 * r for r in (0, 2, 3) for p in range(8) if p != 3]; print(f'{sum(v) / len(v):.4f}')")
rc=0
bash scripts/position_loss.sh -l 1 -o "$WORK/masked.png" "masked=$WORK/masked.tl:8" > "$WORK/masked.out" 2>&1 || rc=$?
read -r _ used early _ < <(grep '^masked ' "$WORK/masked.out")
if [[ $rc -eq 0 && $used == 4 && $early == "$expected" && -s $WORK/masked.png ]] &&
    grep -q 'masked: no valid token (every loss NaN) in 1 of the 4 rows used: row(s) 1 of the file' "$WORK/masked.out" &&
    grep -q 'masked: no valid token at position(s) 4 (1 = the first target)' "$WORK/masked.out" &&
    ! grep -v 'every loss NaN' "$WORK/masked.out" | grep -qiw 'nan'; then
    echo "ok   NaN losses: the valid tokens' mean $early (python: $expected), row 1 and position 4 named"
else
    fail "NaN losses: rc $rc, rows $used, mean $early (expected $expected): $(cat "$WORK/masked.out")"
fi
rc=0
bash scripts/position_loss.sh -l 1 -o "$WORK/all_nan.png" "all=$WORK/all_nan.tl:8" > "$WORK/all_nan.out" 2> "$WORK/all_nan.err" || rc=$?
if [[ $rc -eq 1 && ! -e $WORK/all_nan.png && $(wc -l < "$WORK/all_nan.err") -eq 1 ]] &&
    grep -q '^error: no run has a valid token in the rows used' "$WORK/all_nan.err" &&
    grep -q 'all: no valid token (every loss NaN) in 2 of the 2 rows used: row(s) 0, 1 of the file' "$WORK/all_nan.out"; then
    echo "ok   every loss NaN: $(cat "$WORK/all_nan.err"), the rows named, no picture"
else
    fail "every loss NaN: rc $rc, stderr '$(cat "$WORK/all_nan.err")', stdout $(cat "$WORK/all_nan.out")"
fi

# ---- 5. gnuplot code in a label and a title, a relative -o with a quote
REPO=$(pwd)
ABS_WORK=$(cd "$WORK" && pwd)
mkdir -p "$ABS_WORK/caller"
code="x'; system('touch INJECTED'); print 'y"
rc=0
(cd "$ABS_WORK/caller" && bash "$REPO/scripts/position_loss.sh" -t "$code" -o "it's.png" "$code=$ABS_WORK/synthetic.tl:40") \
    > "$WORK/inject.out" 2>&1 || rc=$?
# (find exits 1 on the directories of /tmp a normal user cannot read: what it did find counts)
injected=$(find "$REPO" "$ABS_WORK" /tmp -maxdepth 3 -name INJECTED 2> /dev/null | head -n 1 || true)
if [[ $rc -eq 0 && -z $injected && -s "$ABS_WORK/caller/it's.png" && ! -e "$REPO/it's.png" ]]; then
    echo "ok   gnuplot code in the label and title: not run; the relative -o written in the caller's directory"
else
    fail "gnuplot code or a relative -o: rc $rc, injected '$injected': $(tail -n 3 "$WORK/inject.out")"
    [[ -z $injected ]] || rm -f "$injected"
fi

# ---- 6. -h and an unknown flag
rc=0
bash scripts/position_loss.sh -h > "$WORK/help.out" 2> "$WORK/help.err" || rc=$?
[[ $rc -eq 0 && ! -s $WORK/help.err ]] && head -n 1 "$WORK/help.out" | grep -q '^usage: ' &&
    echo "ok   -h: the usage on stdout, exit 0" || fail "-h: rc $rc, $(head -n 1 "$WORK/help.out")"
rc=0
bash scripts/position_loss.sh -q "x=$WORK/synthetic.tl:40" > /dev/null 2> "$WORK/bad_flag.err" || rc=$?
[[ $rc -eq 1 && $(wc -l < "$WORK/bad_flag.err") -eq 1 ]] && grep -q "^error: unknown flag -q (usage: " "$WORK/bad_flag.err" &&
    echo "ok   an unknown flag: $(cat "$WORK/bad_flag.err")" || fail "an unknown flag: rc $rc, $(cat "$WORK/bad_flag.err")"
finish
