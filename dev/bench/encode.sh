#!/usr/bin/env bash
# The BPE encoder's throughput (./encode, llmc/bpe.h) in MB of UTF-8 text per second,
# one core: read, UTF-8 check, pre-tokenizer, merges (the piece cache starts empty each
# run). Two texts: the Austen novels (English prose, ASCII but for one pound sign:
# the shipped token files decoded back to their 269 chapters, 4.0 MB) and the Unicode
# edge cases (test/encoder/, mostly multi-byte: combining marks, emoji, CJK, ...)
# repeated to 4 MB. Each is encoded REPEATS times (default 5); the best and the median
# run are printed, with the load average.
# Then ./encode beside two other encoders on the Austen text, every process pinned to
# one core (taskset -c 0): tiktoken's Rust core built as WebAssembly (npm's tiktoken,
# dev/data/package.json) and Hugging Face's tokenizers (its Rust core as a native Node
# module, dev/bench/package.json), both run by dev/bench/encode_others.js; the median
# MB/s of REPEATS runs, the tokens (all three must agree), and the peak resident memory
# of the whole process (GNU time's %M). `npm ci` installs them where missing; without
# node and npm this part is left out, saying so.
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

# ---- ./encode beside tiktoken (WebAssembly) and Hugging Face's tokenizers, one core
for dir in dev/data dev/bench; do
    package=$([ $dir = dev/data ] && echo tiktoken || echo tokenizers)
    if [ ! -f "$dir/node_modules/$package/package.json" ]; then
        if ! command -v npm > /dev/null || ! (cd $dir && npm ci --no-audit --no-fund --loglevel=error) > "$work/npm.out" 2>&1; then
            echo "left out: the comparison with tiktoken and Hugging Face's tokenizers (npm ci in $dir failed or no npm)"
            exit 0
        fi
    fi
done
pin=(); command -v taskset > /dev/null && pin=(taskset -c 0)
# run NAME: one run of an encoder on the Austen chapters; prints "MB/s tokens peak_KiB"
run() {
    local out
    if [ "$1" = encode ]; then
        out=$(/usr/bin/time -f 'peak %M' "${pin[@]}" ./encode -o "$work/out.bin" "$work"/austen/*.txt 2>&1)
        echo "$(sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p' <<< "$out") $(sed -n 's/.*: \([0-9]*\) tokens (EOT.*/\1/p' <<< "$out")" \
             "$(sed -n 's/^peak //p' <<< "$out")"
    else
        out=$(/usr/bin/time -f 'peak %M' env UV_THREADPOOL_SIZE=1 RAYON_NUM_THREADS=1 "${pin[@]}" \
              node dev/bench/encode_others.js "$1" "$work"/austen/*.txt 2>&1)
        read -r bytes tokens seconds <<< "$(head -n 1 <<< "$out")"
        echo "$(awk -v b="$bytes" -v s="$seconds" 'BEGIN { printf "%.2f", b / 1e6 / s }') $tokens $(sed -n 's/^peak //p' <<< "$out")"
    fi
}
echo
printf "%-34s %12s %10s %14s   %s\n" "encoder (Austen, one core)" "median MB/s" tokens "peak RSS MiB" "load average (1, 5, 15 min)"
for name in encode tiktoken hf; do
    results=()
    for ((i = 0; i < repeats; i++)); do results+=("$(run $name)"); done
    median=$(printf '%s\n' "${results[@]}" | sort -g -k1,1 | sed -n "$(((repeats + 1) / 2))p")
    read -r rate tokens peak <<< "$median"
    label=$(case $name in encode) echo "./encode (C, PCRE2)" ;; tiktoken) echo "tiktoken 1.0.22 (Rust as WASM)" ;;
            hf) echo "HF tokenizers 0.23.2 (Rust, native)" ;; esac)
    printf "%-34s %12s %10s %14s   %s\n" "$label" "$rate" "$tokens" "$(awk -v k="$peak" 'BEGIN { printf "%.1f", k / 1024 }')" \
        "$(cut -d' ' -f1-3 /proc/loadavg)"
done
