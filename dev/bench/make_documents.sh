#!/usr/bin/env bash
# The two token files the layout benchmarks run on, made from the Austen text the
# repo ships (dev/data/austen/austen_train.bin decoded back to its text) by ./encode,
# the same every time (a fixed seed; a few seconds):
#
#   OUT/documents.bin     many documents of varied length: document lengths drawn
#                         from a log-normal distribution (mean MEAN tokens, sigma
#                         SIGMA of the log; at least 1 token), each cut from the
#                         running text and written to a file of its own, one
#                         ./encode input file per document (encode puts the EOT token
#                         before each). A cut falls before the first token at or past
#                         the drawn length that starts with a space and a letter: a
#                         word boundary, where re-encoding the piece gives the same
#                         tokens, so the lengths are the drawn ones to a token or so
#                         (the line printed at the end gives the encoded ones).
#   OUT/one_document.bin  the same amount of text as one document: one EOT at the
#                         start, none after, so every row read from it (-dm 1) is one
#                         causal document.
#
#   bash dev/bench/make_documents.sh [-o OUT] [-n TOKENS] [-m MEAN] [-s SIGMA] [-r SEED]
#
# Defaults: OUT out/documents, TOKENS 131072 (the text taken from the start of the
# Austen train split), MEAN 300, SIGMA 1, SEED 1 (Python's random.Random).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/script_lib.sh # value_flags
out=out/documents tokens=131072 mean=300 sigma=1 seed=1
usage() { echo "usage: $0 [-o OUT] [-n TOKENS] [-m MEAN] [-s SIGMA] [-r SEED]" >&2; exit 1; }
value_flags -o out -n tokens -m mean -s sigma -r seed -- "$@"
for v in "$tokens" "$seed"; do [[ $v =~ ^[0-9]+$ ]] || { echo "error: -n and -r take whole numbers, got '$v'" >&2; exit 1; }; done
for v in "$mean" "$sigma"; do [[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "error: -m and -s take numbers, got '$v'" >&2; exit 1; }; done
make -s encode
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# the texts: work/docs/NNNNN.txt (one per document) and work/one.txt
python3 - "$tokens" "$mean" "$sigma" "$seed" "$work" <<'PY'
import math, os, random, sys
sys.path.insert(0, "dev/data")
from decode_tokens import read_tokenizer, read_tokens

total, mean, sigma, seed, work = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if total < 1 or mean < 1 or sigma < 0:
    sys.exit(f"make_documents: -n {total} -m {mean} -s {sigma}: need TOKENS >= 1, MEAN >= 1, SIGMA >= 0")
table, eot = read_tokenizer("dev/data/gpt2_tokenizer.bin")
text = [t for t in read_tokens("dev/data/austen/austen_train.bin", eot) if t != eot]
if total > len(text):
    sys.exit(f"make_documents: -n {total}: the Austen train split has {len(text)} tokens of text")
text = text[:total]
# a word boundary: the token starts with a space and a letter (re-encoding stops there too)
starts_word = [len(table[t]) > 1 and table[t][:1] == b" " and table[t][1:2].isalpha() for t in text]
rng = random.Random(seed)
mu = math.log(mean) - sigma * sigma / 2 # the log-normal's mean is exp(mu + sigma^2 / 2)
os.makedirs(os.path.join(work, "docs"))
start, n = 0, 0
while start < total:
    end = start + max(1, round(rng.lognormvariate(mu, sigma)))
    while end < total and not starts_word[end]:
        end += 1
    with open(os.path.join(work, "docs", f"{n:05d}.txt"), "wb") as f:
        f.write(b"".join(table[t] for t in text[start:end]))
    start, n = end, n + 1
with open(os.path.join(work, "one.txt"), "wb") as f:
    f.write(b"".join(table[t] for t in text))
PY
./encode -o "$out/documents.bin" "$work"/docs/*.txt 2> "$work/encode.log" || { cat "$work/encode.log" >&2; exit 1; }
./encode -o "$out/one_document.bin" "$work/one.txt" 2> "$work/encode.log" || { cat "$work/encode.log" >&2; exit 1; }

# the encoded lengths (EOT not counted)
python3 - "$out/documents.bin" "$out/one_document.bin" <<'PY'
import statistics, sys
sys.path.insert(0, "dev/data")
from decode_tokens import read_tokenizer, read_tokens
_, eot = read_tokenizer("dev/data/gpt2_tokenizer.bin")
for path in sys.argv[1:]:
    ids = read_tokens(path, eot)
    lengths, n = [], 0
    for t in list(ids[1:]) + [eot]:
        if t == eot:
            lengths.append(n)
            n = 0
        else:
            n += 1
    q = sorted(lengths)
    print(f"{path}: {len(ids)} tokens, {len(lengths)} documents of {min(q)} to {max(q)} tokens, mean "
          f"{statistics.mean(q):.0f}, median {q[len(q) // 2]}, 90th percentile {q[len(q) * 9 // 10]}")
PY
