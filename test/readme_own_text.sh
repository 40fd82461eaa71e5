#!/usr/bin/env bash
# The README's "Train on your own text" runs as written: its three commands, taken
# from the README itself, in a scratch copy of the repository's top level (links to
# it), on a text of 5 KB as mytext.txt (the README promises that much is enough: the
# first 5,000 characters of Persuasion, cut at a space); the trainer gets `-x 2`
# appended (a later flag wins) so that two steps stand for the 500. Checks: two token
# files with llm.c's header, their tokens 90% / 10% of the whole, and a run whose
# first loss is that of a fresh model on GPT-2's vocabulary (about ln 50257 = 10.8),
# that validates (a val loss line), and whose sample prints as UTF-8 text (whole
# characters, anything else escaped).
#
#   bash test/readme_own_text.sh     (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=readme_own_text
source "$(dirname "$0")/lib/e2e_lib.sh"
need python3 python3

commands=$(awk '/^## Train on your own text/ { inside = 1; next }
                inside && /^```/ { if (block) exit; block = 1; next }
                inside && block' README.md)
n=$(grep -c . <<< "$commands")
[[ $n -ge 1 && $n -le 3 ]] || { echo "FAIL: the README's 'Train on your own text' has $n commands, expected 1 to 3"; exit 1; }
echo "the README's commands:"
echo "$commands" | sed 's/^/    /'

# the scratch copy: every top-level entry of the repository but build outputs, linked
scratch=$WORK/repo
mkdir -p "$scratch"
for entry in "$REPO_ROOT"/* "$REPO_ROOT"/.[!.]*; do
    case ${entry##*/} in build | out | .git) continue ;; esac
    ln -s "$entry" "$scratch/${entry##*/}"
done
python3 dev/data/decode_tokens.py dev/data/austen/austen_val.bin dev/data/gpt2_tokenizer.bin "$WORK/chapters" > /dev/null
python3 -c '
import sys
text = open(sys.argv[1], encoding="utf-8").read()[:5000]
open(sys.argv[2], "w", encoding="utf-8").write(text[:text.rfind(" ")] + "\n")' "$WORK/chapters/0000.txt" "$scratch/mytext.txt"
size=$(stat -c %s "$scratch/mytext.txt")
[[ $size -gt 4500 && $size -le 5120 ]] || { echo "FAIL: mytext.txt is $size bytes, not about 5 KB"; exit 1; }
echo "mytext.txt: $size bytes"

cd "$scratch"
while IFS= read -r line; do
    [[ -z $line ]] && continue
    [[ $line == *train_gpt2cp* ]] && line+=" -x 2"
    echo "\$ $line"
    if ! timeout 300 bash -c "$line" > "$WORK/command.out" 2>&1; then
        fail "the command exited non-zero: $line"
        tail -n 15 "$WORK/command.out"
        finish
    fi
    tail -n 3 "$WORK/command.out" | sed 's/^/    /'
    [[ $line == *train_gpt2cp* ]] && cp "$WORK/command.out" "$WORK/train.out"
done <<< "$commands"

# the run printed a sample; its output is text: UTF-8, no control byte but tab and newline
grep -q '^generating:' "$WORK/train.out" || fail "the run printed no sample"
grep -q '^val loss ' "$WORK/train.out" || fail "the run printed no validation loss"
python3 -c '
import sys
data = open(sys.argv[1], "rb").read()
data.decode("utf-8")
bad = [b for b in data if b < 32 and b not in (9, 10)]
sys.exit(f"{len(bad)} control byte(s)" if bad else 0)' "$WORK/train.out" || fail "the run's output (its sample) is no clean UTF-8 text"

tokens() { od -A n -t d4 -j 8 -N 4 "$1" | tr -d ' '; }
train_n=$(tokens mytext_train.bin) val_n=$(tokens mytext_val.bin)
total=$((train_n + val_n))
[[ $(od -A n -t d4 -N 8 mytext_train.bin | tr -s ' ') == " 20240520 1" ]] || fail "mytext_train.bin has no llm.c header"
[[ $val_n -eq $(((total * 10 + 50) / 100)) ]] || fail "the validation split is $val_n of $total tokens, not 10%"
first=$(grep -m1 '^s:0 trl:' out/mytext/main.log | sed 's/.*trl:\([0-9.]*\).*/\1/' || true)
if [[ -n $first ]] && awk -v l="$first" 'BEGIN { exit !(l > 10.5 && l < 11.2) }'; then
    echo "ok   $train_n + $val_n tokens (10% validation); the run's first loss $first (ln 50257 = 10.82)"
else
    fail "the run's first loss is '${first:-none}', expected about 10.8"
fi
finish
