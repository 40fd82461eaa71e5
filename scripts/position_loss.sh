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
# own). Prints a table of each run's mean loss in a few position ranges.
set -euo pipefail
png=docs/position_loss.png last=0.5 bins=4 title="Mean training loss by position in the sequence"
usage="usage: $0 [-o PNG] [-l FRACTION] [-n BINS] [-t TITLE] LABEL=FILE.tl:T ..."
while getopts "o:l:n:t:" opt; do
    case $opt in
    o) png=$OPTARG ;;
    l) last=$OPTARG ;;
    n) bins=$OPTARG ;;
    t) title=$OPTARG ;;
    *) echo "$usage" >&2; exit 1 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "$usage" >&2; exit 1; }
[[ $bins =~ ^[1-9][0-9]*$ ]] || { echo "error: -n $bins: bins per doubling are a positive number" >&2; exit 1; }
command -v gnuplot > /dev/null || { echo "error: gnuplot is missing (apt-get install gnuplot-nox)" >&2; exit 1; }
awk -v f="$last" 'BEGIN { exit !(f > 0 && f <= 1) }' || { echo "error: -l $last: a fraction in (0, 1]" >&2; exit 1; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
plot=""
printf "%-24s %10s %10s %10s %10s %10s\n" run "rows used" "pos 0-15" "16-255" "256-1023" "1024-4095"
i=0
for spec in "$@"; do
    label=${spec%%=*} rest=${spec#*=}
    file=${rest%:*} T=${rest##*:}
    [[ $spec == *=*:* && $T =~ ^[0-9]+$ && $T -gt 0 ]] || { echo "error: '$spec': expected LABEL=FILE.tl:T" >&2; exit 1; }
    [ -r "$file" ] || { echo "error: cannot read '$file'" >&2; exit 1; }
    size=$(stat -c %s "$file")
    rows=$((size / (4 * T)))
    if [ $((rows * 4 * T)) -ne "$size" ] || [ "$rows" -eq 0 ]; then
        echo "error: '$file' holds $size bytes, not a whole number of rows of T $T float32 losses" >&2; exit 1
    fi
    skip=$(awk -v r="$rows" -v f="$last" 'BEGIN { s = int(r * (1 - f) + 0.5); if (s >= r) s = r - 1; print s }')
    i=$((i + 1))
    dat=$scratch/run$i.dat
    # one float per line; the row-major position is the line number modulo T
    od -A n -v -t f4 -w4 -j $((skip * T * 4)) "$file" | awk -v T="$T" -v B="$bins" -v dat="$dat" -v label="$label" \
        -v used=$((rows - skip)) '
        { p = (NR - 1) % T; sum[p] += $1; n[p]++ }
        END {
            # bins: B per doubling of the position (one position each below B)
            b = -1
            for (p = 0; p < T; p++) {
                k = p < B ? p : int(B + B * log((p + 1) / B) / log(2))
                if (k != b) { if (b >= 0) flush(); b = k; s = 0; c = 0; lo = p }
                s += sum[p]; c += n[p]; hi = p
            }
            flush()
            for (r = 0; r < 4; r++) { rs[r] = 0; rc[r] = 0 }
            for (p = 0; p < T; p++) { r = p < 16 ? 0 : p < 256 ? 1 : p < 1024 ? 2 : 3; rs[r] += sum[p]; rc[r] += n[p] }
            printf "%-24s %10d", label, used
            for (r = 0; r < 4; r++) { if (rc[r]) printf " %10.4f", rs[r] / rc[r]; else printf " %10s", "-" }
            printf "\n"
        }
        function flush() { printf "%.1f %.6f\n", (lo + hi) / 2 + 1, s / c > dat }'
    plot+="'$dat' using 1:2 with linespoints lw 2 pt 7 ps 0.5 title '$label', "
done

mkdir -p "$(dirname "$png")"
gnuplot <<GNUPLOT
set terminal pngcairo noenhanced size 1100,650 font ",11"
set output '$png'
set title "$title"
set grid
set logscale x 2
set xlabel 'position in the sequence (1 = first target; log scale, $bins bins per doubling)'
set ylabel 'mean training loss (nats)'
set key top right
plot ${plot%, }
GNUPLOT
echo "wrote $png"
