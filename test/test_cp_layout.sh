#!/usr/bin/env bash
# dev/cp_layout against cases worked out by hand (the ranks' work in all and at each
# ring step), plus properties that hold for every (T, cp, layout): the ranks own
# each padded position once, their useful work sums to T*(T+1)/2, and round_robin
# balances T = 1024 at cp 4 better than contiguous. With real data (-i, documents
# -dm 1): a packed case by hand, and on the Austen data the useful work summed over
# the ranks equals the document-masked pairs counted in awk, and striped keeps every
# ring step balanced where round_robin does not. The solver layout: two cases by
# hand, and on the Austen data its useful pairs within 1% of balanced and its
# documents on fewer ranks than packed's and striped's. Group-cast's "# comm" line
# (from the batch's plans) by hand on one document and on documents of 50 tokens.
# -steps 1: every (step, rank)'s SKIP / FULL / MASKED halves for contiguous,
# round_robin and striped against a table derived here from the layouts' definitions.
# Run from the repo root (CTest does), after `make cp_layout`.
set -euo pipefail

tool=./cp_layout
[[ -x $tool ]] || { echo "FAIL: $tool is missing: build it with 'make cp_layout'"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# The tool's table without its comment lines and the per-step lines, blanks
# squeezed: "rank 0 4 0 20 18 18 0-1 6-7"; steps: the per-step lines alone
table() { "$tool" "$@" | awk '!/^#/ && $1 != "step" && $1 != "ring" { $1 = $1; print }'; }
steps() { "$tool" "$@" | awk '$1 == "step" || $1 == "ring" { $1 = $1; print }'; }

# expect "ARGS" LINE...: the table of `cp_layout ARGS` is exactly LINE...
# (expect_steps: its per-step lines)
expect() { expect_lines table "" "$@"; }
expect_steps() { expect_lines steps ", per step" "$@"; }
# expect_lines table|steps WHAT "ARGS" LINE...: the lines that filter of `cp_layout
# ARGS` keeps are exactly LINE...; WHAT follows the arguments in the failure
expect_lines() {
    local filter=$1 what=$2 args=$3
    shift 3
    local got want
    # shellcheck disable=SC2086 # ARGS are flags, split on purpose
    got=$($filter $args)
    want=$(printf '%s\n' "$@")
    [ "$got" = "$want" ] || fail "cp_layout $args$what"$'\n'"got:"$'\n'"$got"$'\n'"want:"$'\n'"$want"
}

# ----------------------------------------------------------------------------
# Hand-computed cases. Each rank splits its tokens into two halves; a tile is a
# (query half, key half) pair, met at the ring step where the key half's block
# visits. With q and k the tiles' index ranges:
#   SKIP    max q < min k             0 computed, 0 visible
#   FULL    min q >= max k            n*n computed, n*n visible
#   MASKED  otherwise (the diagonal)  n*n computed, n(n+1)/2 visible
# computed = sum over tiles not SKIP; visible = sum over own queries of (q + 1),
# since real query q sees keys 0..q; useful = the same over real queries (q < T).
# Pads carry document -1: a pad sees only the pads at or before it.
# The cp1 line is one rank (layout identity) with halves of T/2: two MASKED tiles
# and one FULL, 3 (T/2)^2 computed, T(T+1)/2 visible.

# T 8, cp 2, round_robin: P 8, chunks of 2; r0 owns chunks 0 and 3 = {0,1} {6,7},
# r1 owns chunks 1 and 2 = {2,3} {4,5}.
#   r0 step 0 (own block): {0,1}x{0,1} MASKED 4 (3 visible), {0,1}x{6,7} SKIP,
#      {6,7}x{0,1} FULL 4, {6,7}x{6,7} MASKED 4 (3)                -> 12 computed
#      step 1 (r1's block): {0,1}x{2,3}, {0,1}x{4,5} SKIP,
#      {6,7}x{2,3}, {6,7}x{4,5} FULL 4 + 4                         ->  8 computed
#      computed 20, visible 1+2+7+8 = 18
#   r1 step 0: {2,3}x{2,3} MASKED 4, {2,3}x{4,5} SKIP, {4,5}x{2,3} FULL 4,
#      {4,5}x{4,5} MASKED 4 -> 12; step 1 (r0's): {2,3}x{0,1} and {4,5}x{0,1}
#      FULL 4 + 4, both x{6,7} SKIP -> 8; computed 20, visible 3+4+5+6 = 18
#   balanced: imbalance 20/20 = 18/18 = 1.000; totals 40, 36 = 8*9/2;
#   cp1: 3*4*4 = 48 computed, 36 visible
expect "-t 8 -cp 2 -cl round_robin" \
    "rank 0 4 0 20 18 18 0-1 6-7" \
    "rank 1 4 0 20 18 18 2-5" \
    "max - - - 20 18 18" \
    "mean - - - 20.0 18.0 18.0" \
    "imbalance - - - 1.000 1.000 1.000" \
    "total - - - 40 36 36" \
    "cp1 - - - 48 36 36"

# T 8, cp 2, contiguous: r0 = {0,1} {2,3}, r1 = {4,5} {6,7}.
#   r0 step 0: MASKED 4 (3), SKIP, FULL 4, MASKED 4 (3) -> 12 computed, 10 visible;
#      step 1: every key of r1 is after every query of r0 -> all SKIP, 0
#   r1 step 0: the same shape, 12 computed, 10 visible; step 1: all four tiles
#      FULL, 16 computed, 16 visible -> 28 computed, 26 visible (= 5+6+7+8)
#   computed: max 28, mean 20, imbalance 1.400; visible: max 26, mean 18,
#   imbalance 26/18 = 1.444
expect "-t 8 -cp 2 -cl contiguous" \
    "rank 0 4 0 12 10 10 0-3" \
    "rank 1 4 0 28 26 26 4-7" \
    "max - - - 28 26 26" \
    "mean - - - 20.0 18.0 18.0" \
    "imbalance - - - 1.400 1.444 1.444" \
    "total - - - 40 36 36" \
    "cp1 - - - 48 36 36"

# Per step (the ring waits for its slowest rank at each): round_robin's ranks are
# even at both steps (step 0: 12 computed, 10 visible each; step 1: 8, 8 each).
# contiguous: step 0 even (12, 10 each), step 1 r0 0, r1 16, 16: max/mean 2.000;
# the ring in lock step: computed (12 + 16) / (12 + 8) = 1.400, visible
# (10 + 16) / (10 + 8) = 1.444.
expect_steps "-t 8 -cp 2 -cl round_robin" \
    "step 0 - - 1.000 1.000 1.000" \
    "step 1 - - 1.000 1.000 1.000" \
    "ring - - - 1.000 1.000 1.000"
expect_steps "-t 8 -cp 2 -cl contiguous" \
    "step 0 - - 1.000 1.000 1.000" \
    "step 1 - - 2.000 2.000 2.000" \
    "ring - - - 1.400 1.444 1.444"

# T 8, cp 2, striped: r0 = {0,2,4,6}, r1 = {1,3,5,7}, no padding; halves r0 {0,2}
# {4,6}, r1 {1,3} {5,7}. Every block spans the row, so every step has the shape of
# the diagonal: (first half, second half) SKIP, (second, first) FULL, each half
# against its own place MASKED, 12 computed at every step on both ranks.
#   r0 step 0: {0,2}x{0,2} visible q0:1 q2:2 = 3, {4,6}x{0,2} 4, {4,6}x{4,6} 3 -> 10
#   r0 step 1 (r1's {1,3} {5,7}): {0,2}x{1,3} q2 sees 1 = 1, {4,6}x{1,3} FULL 4,
#      {4,6}x{5,7} q6 sees 5 = 1 -> 6; r0: 24 computed, 16 visible (1+3+5+7)
#   r1 step 0: the same as r0's, 10; step 1 (r0's {0,2} {4,6}): {1,3}x{0,2} q1:1
#      q3:2 = 3, {5,7}x{0,2} 4, {5,7}x{4,6} q5:1 q7:2 = 3 -> 10; r1: 24, 20 (2+4+6+8)
#   computed balanced (1.000); visible max 20, mean 18: 1.111; per step: step 0
#   1.000, step 1 visible 10 / 8 = 1.250; the ring: (10 + 10) / (10 + 8) = 1.111
expect "-t 8 -cp 2 -cl striped" \
    "rank 0 4 0 24 16 16 0 2 4 6" \
    "rank 1 4 0 24 20 20 1 3 5 7" \
    "max - - - 24 20 20" \
    "mean - - - 24.0 18.0 18.0" \
    "imbalance - - - 1.000 1.111 1.111" \
    "total - - - 48 36 36" \
    "cp1 - - - 48 36 36"
expect_steps "-t 8 -cp 2 -cl striped" \
    "step 0 - - 1.000 1.000 1.000" \
    "step 1 - - 1.000 1.250 1.250" \
    "ring - - - 1.000 1.111 1.111"
# -tile: tiles of 2 rows are the halves of the 4 tokens a rank holds, the same
# table (the cp1 line cuts its 8 tokens into 4 tiles instead); tiles of 1 row are
# single pairs, each FULL or SKIP, so computed = visible on every rank
[ "$(table -t 8 -cp 2 -cl striped -tile 2 | grep -v '^cp1')" = "$(table -t 8 -cp 2 -cl striped | grep -v '^cp1')" ] ||
    fail "-tile 2 at 4 tokens per rank differs from the halves"
for cl in striped round_robin contiguous; do
    table -t 24 -cp 3 -cl "$cl" -tile 1 | awk '$1 == "rank" && $5 != $6 { bad = 1 } END { exit bad }' ||
        fail "-tile 1, $cl: computed != visible"
done

# T 8, cp 1, identity: one rank, halves {0..3} {4..7}: MASKED 16 (10 visible),
# SKIP, FULL 16, MASKED 16 (10) -> 48 computed, 36 visible: the same as cp1
expect "-t 8 -cp 1 -cl identity" \
    "rank 0 8 0 48 36 36 0-7" \
    "max - - - 48 36 36" \
    "mean - - - 48.0 36.0 36.0" \
    "imbalance - - - 1.000 1.000 1.000" \
    "total - - - 48 36 36" \
    "cp1 - - - 48 36 36"

# T 10, cp 2, round_robin (padding): P 12, chunks of 3; r0 = {0,1,2} {9,10,11}
# (10 and 11 are pad: 4 real, 2 pad), r1 = {3,4,5} {6,7,8} (6 real). Pads carry
# document -1, real tokens document 0: a pad query sees only pad keys at or
# before it, a real query never sees a pad.
#   r0 step 0: {0,1,2}x{0,1,2} MASKED 9 (6), x{9..11} SKIP (keys after queries),
#      {9..11}x{0,1,2} MASKED 9 (documents {-1,0} vs {0}: query 9 sees 3),
#      {9..11}x{9..11} MASKED 9 (9 sees 9, pad 10 sees 10, pad 11 sees 10 and 11:
#      4) -> 27 computed, 13 visible; step 1: {0,1,2} skips both halves of r1,
#      {9..11} x {3,4,5} and x {6,7,8} MASKED 9 each, query 9 sees 3 + 3
#      -> 18 computed, 6 visible. Total 45 computed, 19 visible, useful
#      (queries 0,1,2,9) 1+2+3+10 = 16
#   r1 step 0: 27 computed, 21 visible; step 1: {3,4,5}x{0,1,2} and
#      {6,7,8}x{0,1,2} FULL 9 + 9, x{9..11} SKIP -> 45 computed,
#      visible = useful = 4+5+6+7+8+9 = 39
#   computed balanced (1.000); visible max 39, mean 29, 39/29 = 1.345; useful
#   max 39, mean 55/2 = 27.5, 39/27.5 = 1.418 (rank 0 holds all the padding).
#   Totals: visible 58 = 10*11/2 real + 1+2 pad, useful 55 = 10*11/2;
#   cp1: halves of 5, 3*25 = 75 computed
expect "-t 10 -cp 2 -cl round_robin" \
    "rank 0 4 2 45 19 16 0-2 9-11" \
    "rank 1 6 0 45 39 39 3-8" \
    "max - - - 45 39 39" \
    "mean - - - 45.0 29.0 27.5" \
    "imbalance - - - 1.000 1.345 1.418" \
    "total - - - 90 58 55" \
    "cp1 - - - 75 55 55"

# T 10, cp 2, contiguous: r0 = {0,1,2} {3,4,5} (6 real), r1 = {6,7,8} {9,10,11}
# (4 real, 2 pad, document -1).
#   r0: step 0 27 computed, 21 visible (1+..+6); step 1 all SKIP
#   r1: step 0 {6,7,8}x{6,7,8} MASKED 9 (6), x{9..11} SKIP, {9..11}x{6,7,8}
#      MASKED 9 (query 9 sees 3), {9..11}x{9..11} MASKED 9 (4) -> 27 computed,
#      13 visible; step 1 {6,7,8} x both halves of r0 FULL 18 (18 visible),
#      {9..11} x each half MASKED 9 (query 9 sees 3 + 3) -> 36 computed,
#      24 visible. Total 63 computed, 37 visible, useful (queries 6..9)
#      7+8+9+10 = 34
#   computed 63/45 = 1.400, visible 37/29 = 1.276, useful 34/27.5 = 1.236
expect "-t 10 -cp 2 -cl contiguous" \
    "rank 0 6 0 27 21 21 0-5" \
    "rank 1 4 2 63 37 34 6-11" \
    "max - - - 63 37 34" \
    "mean - - - 45.0 29.0 27.5" \
    "imbalance - - - 1.400 1.276 1.236" \
    "total - - - 90 58 55" \
    "cp1 - - - 75 55 55"

# T 16, cp 4: chunks of 2 = the halves, every tile 4 pairs. Over the ring a rank
# meets all 8 chunks as keys; its query chunk i computes the key chunks j <= i
# (j = i MASKED with 3 visible, j < i FULL with 4).
#   round_robin: rank r owns chunks r and 7-r: (r+1) + (8-r) = 9 tiles = 36
#      computed, 2 masked + 7 full = 34 visible on every rank (0+1 and 14+15 ->
#      1+2+15+16 = 34); imbalance 1.000
#   contiguous: rank r owns chunks 2r and 2r+1: (2r+1) + (2r+2) = 4r+3 tiles =
#      12, 28, 44, 60 computed (mean 36, 60/36 = 1.667), visible 4r+3 tiles
#      minus 2 = 10, 26, 42, 58 (mean 34, 58/34 = 1.706)
#   cp1: 3*8*8 = 192 computed, 16*17/2 = 136 visible
expect "-t 16 -cp 4 -cl round_robin" \
    "rank 0 4 0 36 34 34 0-1 14-15" \
    "rank 1 4 0 36 34 34 2-3 12-13" \
    "rank 2 4 0 36 34 34 4-5 10-11" \
    "rank 3 4 0 36 34 34 6-9" \
    "max - - - 36 34 34" \
    "mean - - - 36.0 34.0 34.0" \
    "imbalance - - - 1.000 1.000 1.000" \
    "total - - - 144 136 136" \
    "cp1 - - - 192 136 136"
expect "-t 16 -cp 4 -cl contiguous" \
    "rank 0 4 0 12 10 10 0-3" \
    "rank 1 4 0 28 26 26 4-7" \
    "rank 2 4 0 44 42 42 8-11" \
    "rank 3 4 0 60 58 58 12-15" \
    "max - - - 60 58 58" \
    "mean - - - 36.0 34.0 34.0" \
    "imbalance - - - 1.667 1.706 1.706" \
    "total - - - 144 136 136" \
    "cp1 - - - 192 136 136"

# -steps 1: the ring step by step, one "halves" line per (step, rank), against the
# table worked out here from the layouts' definitions alone. Rank r holds, with n =
# T/cp tokens per rank (T a multiple of 2 cp: no padding), in local order:
#   contiguous   r*n .. r*n+n-1
#   round_robin  chunk r then chunk 2cp-1-r, chunks of n/2
#   striped      r, r+cp, r+2cp, ...
# At step s rank r meets the block of rank (r - s) mod cp; each side is cut into
# halves of local positions [0, n/2) and [n/2, n), and a (query half, key half)
# pair is SKIP when every key index exceeds every query index, FULL when every
# key index is at most every query index, else MASKED.
expected_halves() {
    awk -v layout="$1" -v T="$2" -v cp="$3" '
        # the global index of local token i of rank r
        function g(r, i,   c) {
            if (layout == "contiguous") return r * n + i
            if (layout == "striped") return i * cp + r
            c = n / 2
            return i < c ? r * c + i : (2 * cp - 1 - r) * c + i - c
        }
        # lo, hi: the least and greatest index of half h of rank r
        function half_range(r, h,   i, x) {
            lo = T; hi = -1
            for (i = int(h * n / 2); i < int((h + 1) * n / 2); i++) {
                x = g(r, i); if (x < lo) lo = x; if (x > hi) hi = x
            }
        }
        function visibility(q, a, k, b,   qlo, qhi) {
            half_range(q, a); qlo = lo; qhi = hi
            half_range(k, b)
            return lo > qhi ? "SKIP" : hi <= qlo ? "FULL" : "MASKED"
        }
        BEGIN {
            n = T / cp
            for (s = 0; s < cp; s++) for (r = 0; r < cp; r++) {
                src = (r - s + cp) % cp
                line = "halves step " s " rank " r " <- K/V of rank " src ":"
                for (a = 0; a < 2; a++) for (b = 0; b < 2; b++) line = line " q" a "k" b " " visibility(r, a, src, b)
                print line
            }
        }'
}
for cl in contiguous round_robin striped; do
    for tc in "16 4" "24 3" "8 2"; do
        read -r T cp <<< "$tc"
        got=$("$tool" -t "$T" -cp "$cp" -cl "$cl" -steps 1 | awk '$1 == "halves" { $1 = $1; print }')
        want=$(expected_halves "$cl" "$T" "$cp")
        [ "$got" = "$want" ] || fail "cp_layout -t $T -cp $cp -cl $cl -steps 1"$'\n'"got:"$'\n'"$got"$'\n'"want:"$'\n'"$want"
    done
done
# the zigzag's three cases as cp/ring_attention.h states them, at T 16, cp 4: every
# step-0 line is the diagonal, a block from an earlier rank has q0k0 q1k0 FULL and
# both k1 SKIP, one from a later rank both q0 SKIP and both q1 FULL
"$tool" -t 16 -cp 4 -cl round_robin -steps 1 | awk '$1 == "halves" {
        src = $10 + 0
        if (src == $5) want = "MASKED SKIP FULL MASKED"
        else if (src < $5) want = "FULL SKIP FULL SKIP"
        else want = "SKIP SKIP FULL FULL"
        if ($12 " " $14 " " $16 " " $18 != want) { print; bad = 1 }
    } END { exit bad }' > "$tmp/why" || fail "round_robin T 16 cp 4 is not the three cases: $(cat "$tmp/why")"
[ -z "$("$tool" -t 16 -cp 4 -cl round_robin -steps 0 | awk '$1 == "halves"')" ] || fail "-steps 0 printed halves"

# ----------------------------------------------------------------------------
# Properties over many (T, cp, layout): the owned ranges cover 0..P-1 exactly once,
# real + pad = P and real sums to T, computed >= visible >= useful on every rank,
# useful sums to T*(T+1)/2 and visible to P*(P+1)/2. A configuration that leaves a
# rank without a real token must be refused with that reason, nothing else.
checked=0
for T in 1 2 3 5 8 10 17 31 64 100 257 1000; do
    for cp in 1 2 3 4 8; do
        for cl in contiguous round_robin striped identity; do
            [ "$cl" = identity ] && [ "$cp" != 1 ] && continue
            if ! "$tool" -t "$T" -cp "$cp" -cl "$cl" > "$tmp/out" 2> "$tmp/err"; then
                grep -q "without a real token" "$tmp/err" || fail "-t $T -cp $cp -cl $cl: $(tail -1 "$tmp/err")"
                continue
            fi
            awk -v T="$T" -v cp="$cp" '
                /^# cp_layout/ { for (i = 1; i < NF; i++) if ($i == "P") P = $(i + 1) + 0 }
                $1 == "rank" {
                    ranks++; real += $3
                    if ($3 + $4 != P / cp) { print "rank " $2 ": real + pad != P/cp"; bad = 1 }
                    if (!($5 >= $6 && $6 >= $7)) { print "rank " $2 ": not computed >= visible >= useful"; bad = 1 }
                    visible += $6; useful += $7
                    for (i = 8; i <= NF; i++) {
                        n = split($i, ab, "-"); lo = ab[1]; hi = n == 2 ? ab[2] : ab[1]
                        for (g = lo; g <= hi; g++) { owned[g]++; count++ }
                    }
                }
                END {
                    if (ranks != cp) { print "rank lines " ranks " != cp"; bad = 1 }
                    if (real != T) { print "real tokens " real " != T"; bad = 1 }
                    if (count != P) { print "owned tokens " count " != P " P; bad = 1 }
                    for (g = 0; g < P; g++) if (owned[g] != 1) { print "token " g " owned " owned[g] + 0 " times"; bad = 1 }
                    if (useful != T * (T + 1) / 2) { print "useful sum " useful " != T(T+1)/2"; bad = 1 }
                    # pads (document -1) see only the pads at or before them
                    pads = P - T
                    if (visible != T * (T + 1) / 2 + pads * (pads + 1) / 2) {
                        print "visible sum " visible " != T(T+1)/2 + pads(pads+1)/2"; bad = 1
                    }
                    exit bad
                }' "$tmp/out" > "$tmp/why" || fail "-t $T -cp $cp -cl $cl: $(cat "$tmp/why")"
            checked=$((checked + 1))
        done
    done
done
[ "$checked" -ge 100 ] || fail "only $checked configurations were valid"

# round_robin balances T 1024, cp 4 (imbalance 1.000) where contiguous does not
# (1.667 computed, 1.749 useful)
imbalance() { table -t 1024 -cp 4 -cl "$1" | awk -v c="$2" '$1 == "imbalance" { print $c }'; }
for col in 5 7; do
    rr=$(imbalance round_robin $col); co=$(imbalance contiguous $col)
    awk -v a="$rr" -v b="$co" 'BEGIN { exit !(a < b && a == 1.0) }' \
        || fail "T 1024 cp 4 column $col: round_robin imbalance $rr, contiguous $co"
done

# ----------------------------------------------------------------------------
# Real data (-i, -b, -dm): token files in llm.c's format, written here.

# le N BYTES: N as BYTES little-endian bytes
le() {
    local out="" i
    for ((i = 0; i < $2; i++)); do out+=$(printf '\\x%02x' $(( ($1 >> (8 * i)) & 255 ))); done
    printf "$out"
}
# write_tokens FILE TOKEN...: header (magic 20240520, version 1, count), then uint16 tokens
write_tokens() {
    local file=$1; shift
    { le 20240520 4; le 1 4; le $# 4; head -c $((253 * 4)) /dev/zero; for t in "$@"; do le "$t" 2; done; } > "$file"
}
EOT=50256

# T 10, cp 2, packed, one row with an EOT at t = 6 (the worked example of
# cp/layout.h): documents [0, 6) and [6, 10), padded to 8 and 4, P 12. Each
# document splits head-tail on its own: r0 = [0 1 6 7 8 11], r1 = [2 3 4 5 9 10];
# slots 6, 7 are pad (document -1), slots 8..11 hold tokens 6..9 (document 1).
# Halves of 3: r0 {0,1,6} {7,8,11}, r1 {2,3,4} {5,9,10}; documents r0 {0,0,-1}
# {-1,1,1}, r1 {0,0,0} {0,1,1}. A tile is SKIP when every key lies after every query
# or the halves share no document, FULL only within one document; here every other
# tile mixes documents and is MASKED (9 pairs computed).
#   r0 step 0 (own): {0,1,6}x{0,1,6} MASKED, visible q0:1 q1:2 pad 6:1 = 4;
#      x{7,8,11} SKIP (keys after queries); {7,8,11}x{0,1,6} MASKED, pad 7 sees
#      pad 6 = 1; {7,8,11}x{7,8,11} MASKED, pad 7:1, q8:1, q11:{8,11} 2 = 4
#      -> 27 computed, 9 visible
#   r0 step 1 (r1's {2,3,4} {5,9,10}): all four tiles MASKED (index ranges overlap,
#      documents overlap), only q11 sees 9 and 10 -> 36 computed, 2 visible
#   r0: 63 computed, 11 visible, useful (tokens 0, 1, 6, 9: 1+2+1+4) 8
#   r1 step 0: {2,3,4}x{2,3,4} MASKED 6; x{5,9,10} SKIP; {5,9,10}x{2,3,4} MASKED,
#      q5 sees 3; {5,9,10}x{5,9,10} MASKED, q5:1 q9:1 q10:2 = 4 -> 27, 13
#   r1 step 1 (r0's): {2,3,4}x{0,1,6} MASKED, 2 each = 6; x{7,8,11} SKIP;
#      {5,9,10}x{0,1,6} MASKED, q5 sees 0, 1 = 2; {5,9,10}x{7,8,11} MASKED, q9 and
#      q10 see 8 = 2 -> 27, 10
#   r1: 54 computed, 23 visible = useful (tokens 2..5 of document 0: 3+4+5+6,
#      tokens 7, 8 of document 1: 2+3)
#   mean 58.5, 17.0, 15.5: imbalance 63/58.5 = 1.077, 23/17 = 1.353, 23/15.5 = 1.484
#   totals 117, 34 = 31 + pads (1+2), 31 = 6*7/2 + 4*5/2
#   cp1: halves {0..4} (document 0), {5..9} (0,1,1,1,1): MASKED 15 visible, SKIP,
#   MASKED (q5 sees 5), MASKED (q5:1, q6..q9: 1+2+3+4) -> 75 computed, 31 visible
# Tokens 1..10 but for the EOT; an 11th for the last target.
write_tokens "$tmp/doc2.bin" 1 2 3 4 5 6 $EOT 8 9 10 11
expect "-t 10 -cp 2 -cl packed -i $tmp/doc2.bin -dm 1" \
    "rank 0 4 2 63 11 8 0-1 6-8 11" \
    "rank 1 6 0 54 23 23 2-5 9-10" \
    "max - - - 63 23 23" \
    "mean - - - 58.5 17.0 15.5" \
    "imbalance - - - 1.077 1.353 1.484" \
    "total - - - 117 34 31" \
    "cp1 - - - 75 31 31"
# T 256, cp 2, solver in chunks of 64 (the worked example of cp/layout.h): one
# causal document, chunk c holds queries 64c..64c+63 of area sum(g + 1) = 2080,
# 6176, 10272, 14368; the greedy gives chunk 3 to r0, 2 to r1, 1 to r1 (the less
# loaded), 0 to r0 (the only room): r0 = [0-63 192-255], r1 = [64-191], 2080 +
# 14368 = 6176 + 10272 = 16448 useful (= visible: no pad) each. Halves are the
# chunks: r0 own step {0-63}x{0-63} MASKED, x{192-255} SKIP, {192-255}x{0-63}
# FULL, x{192-255} MASKED = 3 x 4096; r0 meets r1's {64-127} {128-191}: only
# {192-255} sees them, FULL twice = 2 x 4096 -> 20480; r1 own: MASKED, SKIP,
# FULL, MASKED = 3 x 4096, r0's blocks: {64-127} and {128-191} see {0-63} FULL,
# {192-255} SKIP = 2 x 4096 -> 20480. cp1: halves of 128, 3 x 16384 computed,
# 256 x 257 / 2 = 32896 visible
expect "-t 256 -cp 2 -cl solver" \
    "rank 0 128 0 20480 16448 16448 0-63 192-255" \
    "rank 1 128 0 20480 16448 16448 64-191" \
    "max - - - 20480 16448 16448" \
    "mean - - - 20480.0 16448.0 16448.0" \
    "imbalance - - - 1.000 1.000 1.000" \
    "total - - - 40960 32896 32896" \
    "cp1 - - - 49152 32896 32896"
# chunks of 128 at T 256, cp 2: one chunk each, 128 x 129 / 2 = 8256 and 32896 - 8256
# = 24640 useful: the most expensive chunk on rank 0
expect "-t 256 -cp 2 -cl solver -cc 128" \
    "rank 0 128 0 28672 24640 24640 128-255" \
    "rank 1 128 0 12288 8256 8256 0-127" \
    "max - - - 28672 24640 24640" \
    "mean - - - 20480.0 16448.0 16448.0" \
    "imbalance - - - 1.400 1.498 1.498" \
    "total - - - 40960 32896 32896" \
    "cp1 - - - 49152 32896 32896"
# the same file without document masking is one causal row: the numbers of the
# dummy row of T 10 (above), whatever the tokens are
[ "$(table -t 10 -cp 2 -cl round_robin -i "$tmp/doc2.bin" -dm 0)" = "$(table -t 10 -cp 2 -cl round_robin)" ] \
    || fail "-i without documents differs from the layout alone"

# Properties on the embedded Austen data, B rows of T tokens from its start: the
# useful pairs summed over the ranks equal the document-masked causal pair count,
# sum over the rows' documents of n(n+1)/2, computed here in awk from the file's
# tokens (od); every row holds P - T pads of document -1, each seeing the pads at
# or before it, so visible = useful + B (P-T)(P-T+1)/2; the ranks hold B T real
# tokens and B P slots.
austen=dev/data/austen/austen_train.bin
B=8
for T in 257 1024; do
    pairs=$(od -An -v -tu2 -j 1024 -N $((B * T * 2)) "$austen" | awk -v T="$T" -v eot=$EOT '
        { for (i = 1; i <= NF; i++) { t = n % T; n++
              if (t == 0 || $i == eot) { total += len * (len + 1) / 2; len = 0 }
              len++ } }
        END { total += len * (len + 1) / 2; printf "%d\n", total }')
    for cp in 2 3 4; do
        for cl in contiguous round_robin striped packed solver; do
            "$tool" -t "$T" -cp "$cp" -cl "$cl" -i "$austen" -b "$B" -dm 1 > "$tmp/out" \
                || fail "-i austen -t $T -cp $cp -cl $cl failed"
            awk -v B="$B" -v T="$T" -v cp="$cp" -v pairs="$pairs" '
                /^# cp_layout/ { for (i = 1; i < NF; i++) if ($i == "P") P = $(i + 1) + 0 }
                $1 == "rank" { real += $3; slots += $3 + $4; visible += $6; useful += $7 }
                END {
                    if (useful != pairs) { print "useful " useful " != document-masked pairs " pairs; bad = 1 }
                    pads = P - T
                    if (visible != useful + B * pads * (pads + 1) / 2) { print "visible " visible " != useful + pad pairs"; bad = 1 }
                    if (real != B * T) { print "real tokens " real " != B T"; bad = 1 }
                    if (slots != B * P) { print "slots " slots " != B P"; bad = 1 }
                    exit bad
                }' "$tmp/out" > "$tmp/why" || fail "-i austen -t $T -cp $cp -cl $cl: $(cat "$tmp/why")"
        done
    done
done

# Documents unbalance round_robin's ring steps (each rank's share of each document
# differs from step to step); striped gives every rank 1/cp of every document at
# every step: on the first 8 rows of T 1024 with -dm 1 at cp 4, striped's ring in
# lock step (visible pairs) is within 1% of balanced, round_robin's is not
ring_visible() { steps -t 1024 -cp 4 -cl "$1" -i "$austen" -b 8 -dm 1 | awk '$1 == "ring" { print $6 }'; }
st=$(ring_visible striped) rr=$(ring_visible round_robin)
awk -v s="$st" -v r="$rr" 'BEGIN { exit !(s < 1.01 && r > s) }' ||
    fail "Austen T 1024 cp 4 -dm 1: the ring's visible imbalance is $st for striped, $rr for round_robin"
echo "Austen T 1024 cp 4 -dm 1, the ring in lock step, visible pairs: striped $st, round_robin $rr"

# The solver balances the useful pairs (its cost) on the same data: within 1% of
# the mean over 8 rows of T 1024 at cp 4 with -dm 1, better than round_robin, and
# it keeps documents on fewer ranks than packed and striped, which put every
# document on every rank
useful_imbalance() { table -t 1024 -cp 4 -cl "$1" -i "$austen" -b 8 -dm 1 | awk '$1 == "imbalance" { print $7 }'; }
spread() { "$tool" -t 1024 -cp 4 -cl "$1" -i "$austen" -b 8 -dm 1 | awk '$2 == "spread" { print $3 }'; }
sv=$(useful_imbalance solver) rr=$(useful_imbalance round_robin)
awk -v s="$sv" -v r="$rr" 'BEGIN { exit !(s <= 1.01 && s < r) }' ||
    fail "Austen T 1024 cp 4 -dm 1: the useful imbalance is $sv for solver, $rr for round_robin"
sv_spread=$(spread solver) pk_spread=$(spread packed) st_spread=$(spread striped)
[ -n "$sv_spread" ] && [ "$sv_spread" -lt "$pk_spread" ] && [ "$sv_spread" -lt "$st_spread" ] ||
    fail "Austen T 1024 cp 4 -dm 1: (rank, document) pairs: solver $sv_spread, packed $pk_spread, striped $st_spread"
echo "Austen T 1024 cp 4 -dm 1: useful imbalance solver $sv, round_robin $rr; (rank, document) pairs solver" \
    "$sv_spread, packed $pk_spread, striped $st_spread"

# ----------------------------------------------------------------------------
# Bad flags: the usage, then exactly one error line, and a non-zero exit.
bad_flags() {
    local reason=$1; shift
    if "$tool" "$@" > "$tmp/out" 2> "$tmp/err"; then fail "'$*' was accepted"; fi
    grep -q '^usage: cp_layout' "$tmp/err" || fail "'$*' printed no usage"
    [ "$(grep -c '^error: ' "$tmp/err")" = 1 ] || fail "'$*' did not print one error line"
    grep -q "^error: .*$reason" "$tmp/err" || fail "'$*': expected '$reason', got '$(tail -1 "$tmp/err")'"
    [ ! -s "$tmp/out" ] || fail "'$*' printed a table"
}
bad_flags "-t is required"
bad_flags "-cl is required" -t 8 -cp 2
bad_flags "unknown layout 'zigzag'" -t 8 -cp 2 -cl zigzag
bad_flags "-tile 0: a tile has at least 1 row" -t 8 -cp 2 -cl striped -tile 0
bad_flags "-steps 2: must be 0 or 1" -t 8 -cp 2 -cl striped -steps 2
bad_flags "needs an integer" -t 8x -cp 2 -cl contiguous
bad_flags "needs a value" -t 8 -cp 2 -cl contiguous -png
bad_flags "unknown flag" -t 8 -cp 2 -cl contiguous -x 1
bad_flags "must be at least 1" -t 8 -cp 0 -cl contiguous
bad_flags "identity needs cp 1" -t 8 -cp 2 -cl identity
bad_flags "leaves rank 3 without a real token" -t 3 -cp 4 -cl round_robin
bad_flags "they need -i" -t 8 -cp 2 -cl contiguous -b 2
bad_flags "layout packed needs documents" -t 8 -cp 2 -cl packed
bad_flags "layout packed needs documents" -t 10 -cp 2 -cl packed -i "$tmp/doc2.bin" -dm 0
bad_flags "must be 0 or 1" -t 10 -cp 2 -cl packed -i "$tmp/doc2.bin" -dm 2
bad_flags "chunk size 100 is not a positive multiple of the 64-row tiles" -t 256 -cp 2 -cl solver -cc 100
bad_flags "-cc 64: the chunk size is for -cl solver" -t 256 -cp 2 -cl striped -cc 64

# ----------------------------------------------------------------------------
# -png: without gnuplot on the PATH a clear error and no file; with gnuplot (when
# installed) a PNG file. The pixels are not checked.
if PATH=/nonexistent "$tool" -t 16 -cp 4 -cl round_robin -png "$tmp/none.png" > /dev/null 2> "$tmp/err"; then
    fail "-png without gnuplot succeeded"
fi
grep -q "^error: -png needs gnuplot" "$tmp/err" || fail "-png without gnuplot: '$(cat "$tmp/err")'"
[ ! -e "$tmp/none.png" ] || fail "-png without gnuplot left a file"
if command -v gnuplot > /dev/null; then
    for T in 16 1000; do
        "$tool" -t "$T" -cp 4 -cl round_robin -png "$tmp/layout.png" > /dev/null
        magic=$(head -c 8 "$tmp/layout.png" | od -An -tx1 | tr -d ' \n')
        [ "$magic" = 89504e470d0a1a0a ] || fail "-t $T -png wrote no PNG (magic '$magic')"
        rm "$tmp/layout.png"
    done
    # a write that fails (a full device; a full file system, a tmpfs mounted as root)
    # ends with one line naming the file and the reason, and leaves no file behind
    if "$tool" -t 16 -cp 4 -cl round_robin -png /dev/full > /dev/null 2> "$tmp/err"; then
        fail "-png /dev/full exited 0"
    fi
    [ "$(grep -c '^error: ' "$tmp/err")" -eq 1 ] && grep -q "^error: cannot write '/dev/full': No space left on device" "$tmp/err" ||
        fail "-png /dev/full: '$(cat "$tmp/err")'"
    mkdir -p "$tmp/tiny"
    if mount -t tmpfs -o size=8k tmpfs "$tmp/tiny" 2> /dev/null; then
        rc=0
        "$tool" -t 16 -cp 4 -cl round_robin -png "$tmp/tiny/layout.png" > /dev/null 2> "$tmp/err" || rc=$?
        left=$(ls -A "$tmp/tiny")
        umount "$tmp/tiny"
        [ $rc -ne 0 ] && grep -Eq "^error: cannot write '.*tiny/layout\.png\.tmp\.[A-Za-z0-9]+': No space left on device" "$tmp/err" &&
            [ -z "$left" ] || fail "-png on a full file system: rc $rc, '$(cat "$tmp/err")', left: '$left'"
        echo "png: a full device and a full file system end with one error line, nothing left behind"
    else
        echo "png: a full device ends with one error line (no tmpfs mount here: the full file system case is skipped)"
    fi
    echo "png: drawn with gnuplot"
else
    echo "png: gnuplot not installed, checked the error only (apt-get install gnuplot-nox)"
fi

# ----------------------------------------------------------------------------
# -m: each algorithm's bytes and messages per layer (cp/attention_cost.h, from the
# sizes) must be what the running code sends: dev/bench counts them on its Comms,
# at cp 4 (hybrid 2 x 2) and T 100 (padded to 104), GPT-2 124M's sizes
make -s bench_attention > /dev/null
MPIRUN=${MPIRUN:-mpirun}
"$tool" -t 100 -cp 4 -cl round_robin -m d12 > "$tmp/comm"
for algorithm in ring allgather ulysses hybrid; do
    OMP_NUM_THREADS=1 "$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np 4 ./bench_attention \
        -a "$algorithm" -t 100 -u 2 > "$tmp/bench_$algorithm"
    # "# comm ring forward B M backward B M step B M"
    read -r fb fm bb bm sb sm < <(awk -v a="$algorithm" '$2 == "comm" && $3 == a { print $5, $6, $8, $9, $11, $12 }' "$tmp/comm")
    got=$(awk '/^forward per layer: bytes sent/ {fb=$(NF-1)} /^forward per layer: messages/ {fm=$NF}
               /^backward per layer: bytes sent/ {bb=$(NF-1)} /^backward per layer: messages/ {bm=$NF}
               /^per step \(binding\): bytes sent/ {sb=$(NF-1)} /^per step \(binding\): messages/ {sm=$NF}
               END {print fb, fm, bb, bm, sb, sm}' "$tmp/bench_$algorithm")
    [ "$got" = "$fb $fm $bb $bm $sb $sm" ] ||
        fail "$algorithm: cp_layout -m says '$fb $fm $bb $bm $sb $sm', the running code sent '$got' (bytes, messages: forward, backward, step)"
    echo "comm $algorithm: forward $fb bytes in $fm messages, backward $bb in $bm (counted on the running code)"
done
# group-cast's line counts the batch's plans: the mean bytes over the ranks, the
# largest rank's messages, then "largest" and the largest rank's bytes. By hand on
# two batches at T 1024, cp 4, contiguous (Tl 256), C 768 of d12; a token's K|V is
# 2 C fp32 = 6144 bytes. Rank r sends S(r) tokens and receives G(r); forward it
# sends S(r), backward S(r) again and the dK|dV of its G(r):
#  - one causal document: rank r needs every token of the ranks before it, so
#    S(r) = (3 - r) x 256, G(r) = r x 256: forward mean 1.5 x 256 tokens, largest
#    3 x 256 (rank 0); backward 3 x 256 on every rank; 3 messages either way.
#  - documents of 50 tokens (an EOT at 0, 50, 100, ...) with -dm 1: rank r needs of
#    rank r-1 only the head of the document that crosses their boundary r x 256,
#    n(r) = (r x 256) mod 50 tokens: S(r) = n(r+1), G(r) = n(r).
#    Both at most the ring's, the documents far below it.
token_bytes=$((2 * 768 * 4))
# groupcast_expect FILE WHAT S0 S1 S2 S3 G0 G1 G2 G3: the line of FILE against S and G
groupcast_expect() {
    local file=$1 what=$2 fwd_sum=0 bwd_sum=0 fwd_max=0 bwd_max=0 r
    local -a S=("$3" "$4" "$5" "$6") G=("$7" "$8" "$9" "${10}")
    for r in 0 1 2 3; do
        local f=${S[r]} b=$((S[r] + G[r]))
        fwd_sum=$((fwd_sum + f)); bwd_sum=$((bwd_sum + b))
        if ((f > fwd_max)); then fwd_max=$f; fi
        if ((b > bwd_max)); then bwd_max=$b; fi
    done
    local expected="$((fwd_sum * token_bytes / 4)) $((bwd_sum * token_bytes / 4)) $((fwd_max * token_bytes)) $((bwd_max * token_bytes))"
    local got
    got=$(awk '$2 == "comm" && $3 == "groupcast" && $13 == "largest" { print $5, $8, $14, $15 }' "$file")
    [ "$got" = "$expected" ] ||
        fail "groupcast, $what: mean forward, backward, largest forward, backward '$got', expected '$expected'"
}
"$tool" -t 1024 -cp 4 -cl contiguous -m d12 > "$tmp/comm_one"
groupcast_expect "$tmp/comm_one" "one document at cp 4 contiguous" 768 512 256 0 0 256 512 768
read -r fm bm < <(awk '$2 == "comm" && $3 == "groupcast" { print $6, $9 }' "$tmp/comm_one")
[ "$fm $bm" = "3 3" ] || fail "groupcast, one document: the largest rank's messages are '$fm $bm', expected 3 forward and 3 backward"
docs=()
for ((t = 0; t <= 1024; t++)); do docs+=($((t % 50 == 0 ? EOT : 7))); done
write_tokens "$tmp/docs50.bin" "${docs[@]}"
"$tool" -t 1024 -cp 4 -cl contiguous -i "$tmp/docs50.bin" -b 1 -dm 1 -m d12 > "$tmp/comm_docs"
n() { echo $(($1 * 256 % 50)); }
groupcast_expect "$tmp/comm_docs" "documents of 50 at cp 4 contiguous" "$(n 1)" "$(n 2)" "$(n 3)" 0 0 "$(n 1)" "$(n 2)" "$(n 3)"
for file in comm_one comm_docs; do
    read -r ring gc < <(awk '$2 == "comm" && $3 == "ring" { r = $5 } $2 == "comm" && $3 == "groupcast" { g = $14 } END { print r, g }' "$tmp/$file")
    [ "$gc" -le "$ring" ] || fail "$file: the largest group-cast rank sends $gc bytes forward, more than the ring's $ring"
done
read -r ring_docs gc_docs < <(awk '$2 == "comm" && $3 == "ring" { r = $5 } $2 == "comm" && $3 == "groupcast" { g = $14 } END { print r, g }' "$tmp/comm_docs")
[ $((gc_docs * 10)) -lt "$ring_docs" ] || fail "documents of 50: group-cast's largest rank sends $gc_docs bytes forward, not a tenth of the ring's $ring_docs"
echo "comm groupcast: by hand on one document and on documents of 50 tokens (largest rank forward $gc_docs bytes, the ring $ring_docs)"
echo "OK: hand-computed cases, the ring's halves step by step, $checked configurations, real data with documents, bad flags, png, communication"
