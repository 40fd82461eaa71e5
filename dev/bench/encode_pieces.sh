#!/usr/bin/env bash
# The encoder on hostile text: one pre-tokenizer piece of N bytes (the merge of
# llmc/bpe.h sees the whole run at once), its seconds (wall clock, and the CPU time
# in user mode: on a loaded machine the wall clock waits for the cores) and peak
# memory (maximum resident set, GNU time). Texts: random lowercase letters (one ` ?\p{L}+` piece),
# random digits, random DNA letters (ACGT), and runs of dashes and of spaces.
#
#   bash dev/bench/encode_pieces.sh [SIZE...]         default: 100000 1000000 10000000 50000000
#   ENCODE=/path/to/encode bash dev/bench/encode_pieces.sh 100000 200000
#                                                     another build (an earlier commit's)
#   TEXTS="letters spaces" bash dev/bench/encode_pieces.sh   only those texts
#
# Needs python3 (the texts, seeded) and GNU time (/usr/bin/time; Debian: apt-get install time).
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100000 1000000 10000000 50000000)
texts=(${TEXTS:-letters digits dna dashes spaces})
if [ -z "${ENCODE:-}" ]; then
    make -s encode
    ENCODE=./encode
fi
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf "%-8s %10s %10s %9s %9s %9s %8s   %s\n" text bytes tokens seconds "user s" "peak MB" "B/byte" \
    "load average (1, 5, 15 min)"
for text in "${texts[@]}"; do
    for n in "${sizes[@]}"; do
        python3 - "$text" "$n" "$work/in.txt" <<'PY'
import random, sys
text, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
random.seed(1)
alphabet = {'letters': 'abcdefghijklmnopqrstuvwxyz', 'digits': '0123456789', 'dna': 'ACGT',
            'dashes': '-', 'spaces': ' '}[text]
with open(path, 'w') as f:
    f.write(''.join(random.choices(alphabet, k=n)))
PY
        /usr/bin/time -f '%e %U %M' -o "$work/time" "$ENCODE" -o "$work/out.bin" "$work/in.txt" 2> "$work/log" ||
            { cat "$work/log" >&2; exit 1; }
        read -r seconds user kb < "$work/time"
        tokens=$(sed -n 's/.*: \([0-9]*\) tokens (EOT included).*/\1/p' "$work/log")
        printf "%-8s %10d %10d %9.2f %9.2f %9.0f %8.1f   %s\n" "$text" "$n" "$tokens" "$seconds" "$user" "$((kb / 1024))" \
            "$(awk -v kb="$kb" -v n="$n" 'BEGIN { print kb * 1024 / n }')" "$(cut -d' ' -f1-3 /proc/loadavg)"
    done
done
