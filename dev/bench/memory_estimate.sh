#!/usr/bin/env bash
# The start-up memory estimate (train/memory.h) against the measured peak of every
# rank (GNU time's maximum resident set), for the CPU twin over layouts, attention
# algorithms and options; prints a markdown table (dev/bench/README.md).
#
#   bash dev/bench/memory_estimate.sh
#
# Each run is two steps (-x 2 -v 0); every rank one OpenMP thread.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s train_gpt2cp_cpu
command -v /usr/bin/time > /dev/null || { echo "error: needs GNU time (/usr/bin/time; apt-get install time)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source test/lib/binary_files.sh # tiny_documents
tiny_documents "$work/tiny_docs.bin"
# each rank's peak (KiB) into a file of its own: mpirun's interleaved output could
# lose a line
cat > "$work/rank.sh" <<SH
#!/bin/bash
exec /usr/bin/time -o "$work/peak.\$OMPI_COMM_WORLD_RANK" -f "%M" ./train_gpt2cp_cpu "\$@"
SH
chmod +x "$work/rank.sh"
runs=(
    "1|-e d2 -b 1 -t 1024 -cp 1"
    "1|-e d2 -b 1 -t 4096 -cp 1"
    "4|-e d2 -b 1 -t 1024 -cp 4"
    "4|-e d2 -b 1 -t 4096 -cp 4"
    "4|-e d2 -b 2 -t 512 -cp 4 -cl contiguous"
    "4|-e d2 -b 2 -t 1024 -cp 4 -cl packed -dm 1 -i $work/tiny_docs.bin"
    "4|-e d4 -b 1 -t 1024 -cp 4 -ca ulysses"
    "4|-e d2 -b 1 -t 1024 -cp 4 -ca allgather"
    "4|-e d2 -b 1 -t 1024 -cp 2 -z 1"
    "2|-e d2 -b 2 -t 1024 -cp 2 -r 0"
    "2|-e d1 -b 1 -t 512 -cp 2 -s 1 -g 256"
    "1|-e d6 -b 1 -t 256 -cp 1"
    "1|-e d12 -b 1 -t 256 -cp 1"
)
echo "| np | flags | estimated peak per rank (MiB) | measured peak per rank, each rank (MiB) | most / estimate |"
echo "| ---: | --- | ---: | --- | ---: |"
for run in "${runs[@]}"; do
    np=${run%%|*} flags=${run#*|}
    rm -f "$work"/peak.*
    # shellcheck disable=SC2086
    out=$(OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$work/rank.sh" $flags -x 2 -v 0 2>&1)
    est=$(awk -F'|' '$2 ~ /est\. peak per rank/ { split($3, v, " "); print (v[2] == "GiB" ? v[1] * 1024 : v[1]) }' <<<"$out")
    ranks=$(for ((r = 0; r < np; r++)); do tail -n 1 "$work/peak.$r"; done)
    peaks=$(awk '{ printf "%s%.1f", (NR > 1 ? ", " : ""), $1 / 1024 }' <<<"$ranks")
    most=$(awk '{ if ($1 > m) m = $1 } END { print m / 1024 }' <<<"$ranks")
    printf "| %d | \`%s\` | %.1f | %s | %.3f |\n" "$np" "${flags/$work\//}" "$est" "$peaks" "$(awk -v m="$most" -v e="$est" 'BEGIN { print m / e }')"
done
