#!/usr/bin/env bash
# Every layout on two data sets (dev/bench/make_documents.sh: many documents of
# log-normal length, and one long document), by dev/cp_layout: how much attention
# work each layout computes and how evenly, and what each attention algorithm sends.
# One markdown table on standard output, one row per (data, T, cp, layout):
#
#   computed / cp 1   the pairs computed in tiles of 64 rows (what a tiled kernel
#                     computes, masked tiles in full) over one rank's on the same rows
#   imbalance         the largest rank's work over the mean: computed pairs (tiles of
#                     64), and the masked area (cp/attention_area.h, the solver's cost)
#   ring              the ring in lock step: the sum over its steps of the slowest
#                     rank's computed pairs, over the sum of the means
#   ranks / doc       how many ranks hold a real token of a document, on average
#   MiB fwd + bwd     forward + backward bytes sent per rank and layer (GPT-2 124M,
#                     C 768, NH 12; hybrid U 2), for every algorithm cp_layout's -m
#                     reports ("-": its heads do not divide, or this cp_layout has no
#                     such line); group-cast's depend on the batch and the rank: the
#                     mean over the ranks, then the largest rank's, and the largest
#                     over the ring's
#
#   bash dev/bench/layouts.sh [-t "4096 16384"] [-c "4 8"] [-l "contiguous round_robin striped packed solver"]
#                             [-n TOKENS] [-d DIR]
#
# Every run reads TOKENS (default 65536) tokens, B = TOKENS / T rows from the start
# of each file, with -dm 1 (an EOT opens a document; packed needs it). -d: where the
# token files are (made there by make_documents.sh when missing; default
# out/documents). cp_layout counts every pair: about 2 s per 65536 tokens at T 4096 on
# one core, 4 times that at T 16384.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/script_lib.sh # value_flags
lengths="4096 16384" cps="4 8" layouts="contiguous round_robin striped packed solver" tokens=65536 dir=out/documents
usage() { echo "usage: $0 [-t \"T ...\"] [-c \"CP ...\"] [-l \"LAYOUT ...\"] [-n TOKENS] [-d DIR]" >&2; exit 1; }
value_flags -t lengths -c cps -l layouts -n tokens -d dir -- "$@"
[[ $tokens =~ ^[0-9]+$ ]] || { echo "error: -n takes a number of tokens, got '$tokens'" >&2; exit 1; }
make -s cp_layout
if [ ! -f "$dir/documents.bin" ] || [ ! -f "$dir/one_document.bin" ]; then
    bash dev/bench/make_documents.sh -o "$dir" > /dev/null
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT

algorithms="ring allgather ulysses hybrid groupcast"
echo "load average (1, 5, 15 min) at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf "| data | T | cp | layout | P | computed / cp 1 | imbalance computed | imbalance area | ring | ranks / doc |"
for a in $algorithms; do printf " %s MiB |" "$a"; done
printf " groupcast largest MiB | largest / ring |"
printf "\n| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for a in $algorithms; do printf " ---: |"; done
printf " ---: | ---: |\n"
for data in documents one_document; do
    for T in $lengths; do
        B=$((tokens / T))
        [ "$B" -ge 1 ] || { echo "error: -n $tokens is less than one row of T $T" >&2; exit 1; }
        for cp in $cps; do
            for layout in $layouts; do
                ./cp_layout -t "$T" -cp "$cp" -cl "$layout" -i "$dir/$data.bin" -b "$B" -dm 1 -tile 64 -m d12 > "$out"
                awk -v data="$data" -v T="$T" -v cp="$cp" -v layout="$layout" -v algorithms="$algorithms" '
                    /^# cp_layout / { for (i = 1; i <= NF; i++) if ($i == "P") P = $(i + 1); sub(",", "", P) }
                    $1 == "imbalance" { computed = $5; area = $7 }
                    $1 == "total" { total = $5 }
                    $1 == "cp1" { cp1 = $5 }
                    $1 == "ring" { ring = $5 }
                    $1 == "#" && $2 == "spread" { spread = $(NF - 3) }
                    $1 == "#" && $2 == "comm" && $4 == "forward" {
                        mib[$3] = sprintf("%.2f", ($5 + $8) / 1048576)
                        if ($3 == "ring") ring_bytes = $5 + $8
                        if ($3 == "groupcast" && $(NF - 2) == "largest") largest = $(NF - 1) + $NF
                    }
                    END {
                        printf "| %s | %d | %d | %s | %d | %.3f | %.3f | %.3f | %.3f | %.2f |", data, T, cp, layout,
                               P, total / cp1, computed, area, ring, spread
                        n = split(algorithms, a, " ")
                        for (i = 1; i <= n; i++) printf " %s |", (a[i] in mib) ? mib[a[i]] : "-"
                        if (largest == "") printf " - | - |"
                        else printf " %.2f | %.3f |", largest / 1048576, largest / ring_bytes
                        printf "\n"
                    }' "$out"
            done
        done
    done
done
echo
echo "load average (1, 5, 15 min) at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
