#!/usr/bin/env bash
# What long context buys: the mean training loss at each position of the sequence,
# from the trainers' per-token losses (-tl FILE: float32 [steps][rows][T]), one line
# per run, positions binned on a log scale (4 bins per doubling), drawn with gnuplot.
# A model that uses its context predicts later tokens better: its line falls with
# the position. Files of one run at different cp sizes and layouts hold the same
# numbers (gathered to global order), so they draw the same line.
#
#   bash scripts/position_loss.sh [-o PNG] [-l FRACTION] [-n BINS] [-t TITLE] LABEL=FILE.tl:T ...
#
# -l: average over the last FRACTION of each file's rows (later steps: the trained
# model rather than the random init; default 0.5; 1 takes every step); -n: bins per
# doubling of the position (default 4; each position below BINS has a bin of its
# own); -o: the picture (default: docs/position_loss.png in the repository; a
# relative path is the caller's). Prints a table of each run's mean loss in a few
# position ranges. A NaN loss (a target its loss mask leaves out, -lm 1) is no
# token's loss: it counts nowhere, and the rows and bins with no valid token are
# named under the table, the bins left out of the line (a run with none at all is
# not drawn; when no run has one, nothing is, and the script says so and fails).
# Labels, the title and paths are text to gnuplot, never code.
set -euo pipefail
caller=$(pwd)
source "$(dirname "$0")/script_lib.sh"
png=$(cd "$(dirname "$0")/.." && pwd)/docs/position_loss.png last=0.5 bins=4
title="Mean training loss by position in the sequence"
usage="usage: $0 [-o PNG] [-l FRACTION] [-n BINS] [-t TITLE] LABEL=FILE.tl:T ...
  -o PNG       the picture (default: docs/position_loss.png in the repository)
  -l FRACTION  average over the last FRACTION of each file's rows (default 0.5)
  -n BINS      bins per doubling of the position (default 4)
  -t TITLE     the picture's title
  -h           this help
  LABEL=FILE.tl:T  a run: its label, its -tl file, its sequence length"
while getopts ":o:l:n:t:h" opt; do
    case $opt in
    o) png=$(from_caller "$OPTARG") ;;
    l) last=$OPTARG ;;
    n) bins=$OPTARG ;;
    t) title=$OPTARG ;;
    h) echo "$usage"; exit 0 ;;
    *) getopts_error "$opt" "$OPTARG" ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage_error "no run given"
[[ $bins =~ ^[1-9][0-9]*$ ]] || die "-n $bins: bins per doubling are a positive number"
command -v gnuplot > /dev/null || die "gnuplot is missing (apt-get install gnuplot-nox)"
awk -v f="$last" 'BEGIN { exit !(f > 0 && f <= 1) }' || die "-l $last: a fraction in (0, 1]"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
plot=""
printf "%-24s %10s %10s %10s %10s %10s\n" run "rows used" "pos 0-15" "16-255" "256-1023" "1024-4095"
i=0
for spec in "$@"; do
    label=${spec%%=*} rest=${spec#*=}
    file=${rest%:*} T=${rest##*:}
    [[ $spec == *=*:* && $T =~ ^[0-9]+$ && $T -gt 0 ]] || die "'$spec': expected LABEL=FILE.tl:T"
    [ -r "$file" ] || die "cannot read '$file'"
    size=$(stat -c %s "$file")
    rows=$((size / (4 * T)))
    if [ $((rows * 4 * T)) -ne "$size" ] || [ "$rows" -eq 0 ]; then
        die "'$file' holds $size bytes, not a whole number of rows of T $T float32 losses"
    fi
    skip=$(awk -v r="$rows" -v f="$last" 'BEGIN { s = int(r * (1 - f) + 0.5); if (s >= r) s = r - 1; print s }')
    i=$((i + 1))
    # gnuplot reads the runs by these names, in the scratch directory
    dat=run$i.dat
    # one float per line; the row-major position is the line number modulo T; a
    # loss that is no number (NaN: a masked target) is no token's
    od -A n -v -t f4 -w4 -j $((skip * T * 4)) "$file" | awk -v T="$T" -v B="$bins" -v dat="$scratch/$dat" \
        -v label="$label" -v used=$((rows - skip)) -v skip="$skip" '
        { p = (NR - 1) % T; r = int((NR - 1) / T)
          if ($1 ~ /nan|inf/) { invalid[r]++; next }
          sum[p] += $1; n[p]++ }
        END {
            # bins: B per doubling of the position (one position each below B)
            b = -1; empty = ""; empties = 0; drawn = 0
            for (p = 0; p < T; p++) {
                k = p < B ? p : int(B + B * log((p + 1) / B) / log(2))
                if (k != b) { if (b >= 0) flush(); b = k; s = 0; c = 0; lo = p }
                s += sum[p]; c += n[p]; hi = p
            }
            flush()
            for (q = 0; q < 4; q++) { rs[q] = 0; rc[q] = 0 }
            for (p = 0; p < T; p++) { q = p < 16 ? 0 : p < 256 ? 1 : p < 1024 ? 2 : 3; rs[q] += sum[p]; rc[q] += n[p] }
            printf "%-24s %10d", label, used
            for (q = 0; q < 4; q++) { if (rc[q]) printf " %10.4f", rs[q] / rc[q]; else printf " %10s", "-" }
            printf "\n"
            none = 0; list = ""
            for (r = 0; r < used; r++) {
                if (invalid[r] == T) { none++; if (none <= 10) list = list (none > 1 ? ", " : "") (skip + r) }
            }
            more = none > 10 ? ", ..." : ""
            if (none) printf "  %s: no valid token (every loss NaN) in %d of the %d rows used: row(s) %s%s of the file, from 0\n", label, none, used, list, more
            if (empties) printf "  %s: no valid token at position(s) %s (1 = the first target): left out of the line\n", label, empty
            if (!drawn) printf "  %s: no valid token at all in the rows used: not drawn\n", label
        }
        function flush() {
            if (c) { printf "%.1f %.6f\n", (lo + hi) / 2 + 1, s / c > dat; drawn = 1; return }
            empties++
            if (empties <= 10) empty = empty (empties > 1 ? ", " : "") (lo == hi ? lo + 1 : (lo + 1) "-" (hi + 1))
            else if (empties == 11) empty = empty ", ..."
        }'
    [ -s "$scratch/$dat" ] && plot+="'$dat' using 1:2 with linespoints lw 2 pt 7 ps 0.5 title $(gnuplot_string "$label"), "
done
[ -n "$plot" ] || die "no run has a valid token in the rows used (every loss NaN): nothing to draw"

mkdir -p "$(dirname "$png")"
(cd "$scratch" && gnuplot > gnuplot.err 2>&1) <<GNUPLOT || die "gnuplot could not draw $png: $(grep -m1 -v '^ *$' "$scratch/gnuplot.err")"
set terminal pngcairo noenhanced size 1100,650 font ",11"
set output 'drawing.png'
set title $(gnuplot_string "$title")
set grid
set logscale x 2
set xlabel 'position in the sequence (1 = first target; log scale, $bins bins per doubling)'
set ylabel 'mean training loss (nats)'
set key top right
plot ${plot%, }
GNUPLOT
[ "$(head -c 4 "$scratch/drawing.png" 2> /dev/null | od -An -tx1 | tr -d ' ')" = 89504e47 ] ||
    die "gnuplot drew no picture for $png: $(grep -m1 -v '^ *$' "$scratch/gnuplot.err" || echo 'no message')"
mv "$scratch/drawing.png" "$png" || die "cannot move the picture to $png"
echo "wrote $png"
