#!/usr/bin/env bash
# The BPE encoder's throughput (./encode, llmc/bpe.h) in MB of UTF-8 text per second,
# one core: read, UTF-8 check, pre-tokenizer, merges (the piece cache starts empty each
# run). Two texts: the Austen novels (English prose, ASCII but for one pound sign:
# the shipped token files decoded back to their 269 chapters, 4.0 MB) and the Unicode
# edge cases (test/encoder/, mostly multi-byte: combining marks, emoji, CJK, ...)
# repeated to 4 MB. Each is encoded REPEATS times (default 5); the best and the median
# run are printed, with the load average.
#
#   bash dev/bench/encode.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=${1:-5}
make -s encode
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for split in train val; do
    python3 dev/data/decode_tokens.py "dev/data/austen/austen_$split.bin" dev/data/gpt2_tokenizer.bin \
        "$work/austen" "${split}_" > /dev/null
done
: > "$work/unicode.txt"
while [ "$(stat -c %s "$work/unicode.txt")" -lt 4000000 ]; do cat test/encoder/*.txt >> "$work/unicode.txt"; done

printf "%-22s %10s %10s %10s   %s\n" text MB "best MB/s" "median" "load average (1, 5, 15 min)"
for name in austen unicode; do
    if [ $name = austen ]; then files=("$work"/austen/*.txt); else files=("$work/unicode.txt"); fi
    rates=()
    for ((i = 0; i < repeats; i++)); do
        rates+=("$(./encode -o "$work/out.bin" "${files[@]}" 2>&1 | sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p')")
    done
    mb=$(cat "${files[@]}" | wc -c | awk '{ printf "%.2f", $1 / 1e6 }')
    sorted=$(printf '%s\n' "${rates[@]}" | sort -g)
    printf "%-22s %10s %10s %10s   %s\n" "$name (${#files[@]} file(s))" "$mb" "$(tail -1 <<< "$sorted")" \
        "$(sed -n "$(((repeats + 1) / 2))p" <<< "$sorted")" "$(cut -d' ' -f1-3 /proc/loadavg)"
done
