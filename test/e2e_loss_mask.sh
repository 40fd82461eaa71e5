#!/usr/bin/env bash
# End to end, loss masks (-lm 1: NAME.mask beside each token file NAME.bin; a masked
# target counts neither in the loss nor in its mean, and -tl writes NaN there):
#
# 1. A masked target is a padded one. Rows of T0 64 whose last 8 targets are masked
#    train as rows of T1 56 with no mask, whose cp padding (or none) ends them there:
#    the tokens before the masked targets are the same (the data is made so), and
#    the masked tail can change nothing before it (causal attention) nor the
#    gradients (its losses count for nothing). At cp 1, 2, 3, 4 and every layout
#    (identity, contiguous, round_robin, striped, packed with -dm 1) and with the
#    all-gather attention, the masked runs' losses per step, and per token on the
#    unmasked targets, equal the unmasked run's (compare_runs, DESIGN 5 tolerances),
#    and their -tl holds NaN exactly on the masked targets.
# 2. Masks inside the rows (runs of masked and learned targets, as prompts and
#    answers), over 5 steps: cp 2, 3, 4 reproduce the masked cp 1 run (compare_runs
#    --masked); its
#    first step, whose weights are the init, has the unmasked run's per-token losses
#    on the learned targets (bit for bit) and NaN on the masked ones, and its loss
#    is their mean (computed here from the unmasked run's -tl); with -d, micro-
#    batches of different numbers of learned targets give the one large batch's
#    losses and gradient norms (the global mean over learned targets), also at cp 3
#    under group-cast in 2 stages.
# 3. dev/loss_mask.c on a hand-made tokenizer and token file gives the mask worked
#    out by hand, and the trainer trains on it, writing NaN where it masks.
# 4. A step, or a validation, whose targets the masks all leave out has no loss:
#    its line says so (never "loss 0.000000"), main.log holds NaN there, the other
#    steps train, and the end counts them, and the outlier detectors (-sl, -sg)
#    never see them; masks that keep no target at all
#    (-i's, or -j's) refuse to start, naming the mask file.
#
#   bash test/e2e_loss_mask.sh COMPARE_RUNS      (env: see test/lib/e2e_lib.sh)
set -euo pipefail
COMPARE=${1:?usage: e2e_loss_mask.sh COMPARE_RUNS}
E2E_NAME=e2e_loss_mask
source "$(dirname "$0")/lib/e2e_lib.sh"

STEPS=10 B=2
COMMON=(-e d1 -b $B -x $STEPS -l 1e-3 -v 0 -s 0 -sh 0)
SOURCE=dev/data/austen/austen_val.bin

# ---- 1. masked targets against padding
T0=64 T1=56
PADDED=$WORK/padded.bin MASKED=$WORK/masked.bin
# padded.bin: Austen's text. masked.bin: row r holds padded.bin's row r of T1 tokens
# and the token after it (the last learned target), then T0 - T1 - 1 other tokens;
# its mask leaves out the targets of the row's last T0 - T1 places
python3 - "$SOURCE" "$PADDED" "$MASKED" $T0 $T1 $((STEPS * B + 1)) <<'PY'
import struct, sys
from array import array
source, padded, masked, T0, T1, rows = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])
with open(source, 'rb') as f:
    f.read(1024)
    text = array('H'); text.frombytes(f.read())
def write(path, toks):
    with open(path, 'wb') as f:
        f.write(struct.pack('<256i', 20240520, 1, len(toks), *[0] * 253))
        f.write(array('H', toks).tobytes())
def write_mask(path, mask):
    with open(path, 'wb') as f:
        f.write(struct.pack('<256i', 20240613, 1, len(mask), *[0] * 253))
        f.write(bytes(mask))
write(padded, list(text))
filler = 5000 # other text for the masked places
tokens = []
for r in range(rows):
    tokens += list(text[r * T1:r * T1 + T1 + 1]) + list(text[filler + r * T0:filler + r * T0 + T0 - T1 - 1])
tokens.append(text[rows * T1])
write(masked, tokens)
# token j is the target of place (j - 1) % T0 of its row
write_mask(masked[:-4] + '.mask', [1 if j == 0 or (j - 1) % T0 < T1 else 0 for j in range(len(tokens))])
write_mask(padded[:-4] + '.mask', [1] * len(text)) # every target learned: -lm 1 on the reference is a no-op
PY
runs=()
train ref_padded 1 -cp 1 -t $T1 -i "$PADDED" -o "$WORK/ref_padded" -tl "$WORK/ref_padded.tl"
train ref_padded_documents 1 -cp 1 -t $T1 -i "$PADDED" -dm 1 -o "$WORK/ref_padded_documents" -tl "$WORK/ref_padded_documents.tl"
train ref_padded_lm 1 -cp 1 -t $T1 -i "$PADDED" -lm 1 -o "$WORK/ref_padded_lm" -tl "$WORK/ref_padded_lm.tl"
cmp -s "$WORK/ref_padded.tl" "$WORK/ref_padded_lm.tl" || fail "a mask of ones changes the run"
# masked NAME NP [flags...]: a run on masked.bin at T0, its -tl cut to the first T1
# tokens of each row in NAME.cut.tl, after checking that it holds NaN exactly on the masked places
masked_run() {
    local name=$1 np=$2
    shift 2
    train "$name" "$np" -t $T0 -i "$MASKED" -lm 1 -o "$WORK/$name" -tl "$WORK/$name.tl" "$@"
    python3 - "$WORK/$name.tl" "$WORK/$name.cut.tl" $T0 $T1 <<'PY' || fail "$name: NaN not exactly on the masked targets"
import math, sys
from array import array
tl, cut, T0, T1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
x = array('f'); x.frombytes(open(tl, 'rb').read())
assert len(x) % T0 == 0
bad = [i for i, v in enumerate(x) if math.isnan(v) != (i % T0 >= T1)]
if bad: sys.exit(f'{tl}: {len(bad)} places where NaN and the mask disagree, the first at row {bad[0] // T0} place {bad[0] % T0}')
out = array('f', [v for i, v in enumerate(x) if i % T0 < T1])
open(cut, 'wb').write(out.tobytes())
PY
    runs+=("$name" "$WORK/$name/main.log" "$WORK/$name.cut.tl")
}
masked_run masked_cp1 1 -cp 1
masked_run masked_contiguous_cp2 2 -cp 2 -cl contiguous
masked_run masked_round_robin_cp3 3 -cp 3 -cl round_robin
masked_run masked_striped_cp4 4 -cp 4 -cl striped
masked_run masked_striped_cp3_allgather 3 -cp 3 -cl striped -ca allgather
echo
echo "== the last $((T0 - T1)) of $T0 targets masked, against rows of $T1 (B $B, $STEPS steps)"
"$COMPARE" $STEPS $((B * T1)) "$WORK/ref_padded/main.log" "$WORK/ref_padded.tl" "${runs[@]}" ||
    fail "a masked run does not match the padded one"
runs=()
masked_run masked_packed_cp2_documents 2 -cp 2 -cl packed -dm 1
masked_run masked_round_robin_cp4_documents 4 -cp 4 -cl round_robin -dm 1
echo
echo "== the same with -dm 1, packed and round_robin"
"$COMPARE" $STEPS $((B * T1)) "$WORK/ref_padded_documents/main.log" "$WORK/ref_padded_documents.tl" "${runs[@]}" ||
    fail "a masked run with documents does not match the padded one"

# ---- 2. masks inside the rows. 5 steps: a token seen only at masked places gets a
# vocabulary row whose gradient nearly cancels, and AdamW's division by sqrt(v)
# magnifies its last bits into changes of a few later losses by up to 5e-4 (measured:
# step 5 of 20, then back to 1e-5), fp32 noise past DESIGN 5's 1e-4. Five steps
# still tell a wrong weighting apart: micro-batches weighted by their own counts
# move step 1's loss by 7.6e-4 and step 0's gradient norm by 1.7%.
STEPS=5
COMMON+=(-x $STEPS)
T=100
PROMPTS=$WORK/prompts.bin
# Austen's text, every target in runs of 3 to 30 learned then 2 to 20 masked
cp "$SOURCE" "$PROMPTS"
python3 - "$PROMPTS" <<'PY'
import struct, sys
path = sys.argv[1]
ntok = struct.unpack('<3i', open(path, 'rb').read(12))[2]
mask, learn, j = [], True, 0
while len(mask) < ntok:
    run = 3 + (j * 37) % 28 if learn else 2 + (j * 11) % 19
    mask += [int(learn)] * run
    learn, j = not learn, j + 1
with open(path[:-4] + '.mask', 'wb') as f:
    f.write(struct.pack('<256i', 20240613, 1, ntok, *[0] * 253))
    f.write(bytes(mask[:ntok]))
PY
COMMON+=(-t $T -i "$PROMPTS")
reference prompts_ref 1 -cp 1 -lm 1
run prompts_round_robin_cp2 2 -cp 2 -cl round_robin -lm 1
run prompts_striped_cp3_allgather 3 -cp 3 -cl striped -lm 1 -ca allgather
run prompts_contiguous_cp4 4 -cp 4 -cl contiguous -lm 1
run prompts_striped_cp3_groupcast_accumulated 3 -cp 3 -cl striped -lm 1 -ca groupcast -co 2 -b 1 -d $((B * T))
echo
echo "== masks inside the rows, B $B, T $T, $STEPS steps: cp > 1 against cp 1"
"$COMPARE" --masked $STEPS $((B * T)) "$WORK/prompts_ref/main.log" "$WORK/prompts_ref.tl" "${runs[@]}" ||
    fail "a masked run does not match cp 1"
# the first step against the unmasked run: the same weights, so the same losses
train prompts_unmasked 1 -cp 1 -x 1 -o "$WORK/prompts_unmasked" -tl "$WORK/prompts_unmasked.tl"
python3 - "$WORK" $((B * T)) <<'PY' || fail "the masked first step is not the unmasked one's on the learned targets"
import math, re, sys
from array import array
work, n = sys.argv[1], int(sys.argv[2])
masked = array('f'); masked.frombytes(open(f'{work}/prompts_ref.tl', 'rb').read()[:4 * n])
plain = array('f'); plain.frombytes(open(f'{work}/prompts_unmasked.tl', 'rb').read())
mask = open(f'{work}/prompts.mask', 'rb').read()[1024:]
# -sh 0: step 0 reads targets 1 .. n of the file
learned = [i for i in range(n) if mask[i + 1]]
assert 0 < len(learned) < n, f'{len(learned)} of {n} targets learned'
for i in range(n):
    if mask[i + 1] and masked[i] != plain[i]: sys.exit(f'target {i}: masked run {masked[i]}, unmasked {plain[i]}')
    if not mask[i + 1] and not math.isnan(masked[i]): sys.exit(f'target {i} is masked, but its loss is {masked[i]}')
mean = sum(plain[i] for i in learned) / len(learned)
logged = float(re.search(r'^s:0 trl:(\S+)', open(f'{work}/prompts_ref/main.log').read(), re.M).group(1))
print(f'step 0: {len(learned)} of {n} targets learned; their mean loss in the unmasked run {mean:.6f}, the masked run logs {logged:.6f}')
if abs(mean - logged) > 1e-5: sys.exit('the masked loss is not the mean over the learned targets')
PY
# -d: two micro-batches of one row each, holding different numbers of learned
# targets, against one batch of both rows (-sh 0: the same rows)
train prompts_accumulated 1 -cp 1 -lm 1 -b 1 -d $((B * T)) -o "$WORK/prompts_accumulated" -tl "$WORK/prompts_accumulated.tl"
"$COMPARE" --masked $STEPS $((B * T)) "$WORK/prompts_ref/main.log" "$WORK/prompts_ref.tl" \
    accumulated "$WORK/prompts_accumulated/main.log" "$WORK/prompts_accumulated.tl" ||
    fail "-d with masks does not match the one large batch"
paste <(awk -F'norm:' '/trl:/ { print $2 + 0 }' "$WORK/prompts_ref/main.log") \
      <(awk -F'norm:' '/trl:/ { print $2 + 0 }' "$WORK/prompts_accumulated/main.log") |
    awk -v steps=$STEPS '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
        END { printf "-d: max relative |gradient norm difference| %.2e over %d steps\n", m, NR; exit !(NR == steps && m < 1e-5) }' ||
    fail "-d with masks: the gradient norms are not the large batch's"

# ---- 3. dev/loss_mask.c on data worked out by hand
[[ -x loss_mask ]] || fail "./loss_mask is missing: build it with 'make loss_mask'"
QA=$WORK/qa.bin
# a tokenizer of 8 tokens (EOT 7, the last), and 22 tokens of 4 documents:
#   doc 0  EOT Q : what | " A" "ns" "wer:" yes yes    "Answer:" spans 3 tokens
#   doc 1  EOT Q " A" "ns" : what                      " Ans:" is not the marker
#   doc 2  EOT " A" "ns" "wer:" yes
#   doc 3  EOT yes
python3 - "$WORK/qa_tokenizer.bin" "$QA" <<'PY'
import struct, sys
from array import array
pieces = [b'Q', b':', b' what', b' A', b'ns', b'wer:', b' yes', b'<|endoftext|>']
with open(sys.argv[1], 'wb') as f:
    f.write(struct.pack('<256i', 20240328, 2, len(pieces), 7, *[0] * 252))
    for p in pieces: f.write(bytes([len(p)]) + p)
tokens = [7, 0, 1, 2, 3, 4, 5, 6, 6, 7, 0, 3, 4, 1, 2, 7, 3, 4, 5, 6, 7, 6]
with open(sys.argv[2], 'wb') as f:
    f.write(struct.pack('<256i', 20240520, 1, len(tokens), *[0] * 253))
    f.write(array('H', tokens).tobytes())
PY
./loss_mask -i "$QA" -a "Answer:" -tk "$WORK/qa_tokenizer.bin" >"$WORK/qa_mask.out" || fail "loss_mask failed: $(cat "$WORK/qa_mask.out")"
# by hand: doc 0's prompt up to "wer:" 0, its answer 1 1; the EOT that ends it
# (opens doc 1) 1; doc 1 has no marker: 0 throughout, and the EOT that ends it 0;
# doc 2: 0 0 0 1, and the EOT that ends it 1; doc 3 has no marker: 0
expected="0 0 0 0 0 0 0 1 1 1 0 0 0 0 0 0 0 0 0 1 1 0"
got=$(od -An -v -tu1 -j 1024 "$WORK/qa.mask" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[[ $got == "$expected" ]] || fail "loss_mask: '$got', expected '$expected'"
grep -q "22 tokens, 4 documents, 2 with the marker 'Answer:'; 5 tokens learned" "$WORK/qa_mask.out" ||
    fail "loss_mask's summary: $(cat "$WORK/qa_mask.out")"
cat "$WORK/qa_mask.out"
# the trainer reads it: one step of 21 targets, NaN where the mask is 0
train qa_train 1 -e d1 -b 1 -t 21 -x 1 -i "$QA" -lm 1 -tl "$WORK/qa_train.tl"
nan=$(od -An -v -f "$WORK/qa_train.tl" | tr -s ' \n' '\n' | grep -v '^$' | awk '{ printf "%d ", ($1 == "nan" || $1 == "-nan") ? 0 : 1 }' | sed 's/ $//')
[[ $nan == "${expected#0 }" ]] || fail "the trainer's -tl on the tool's mask: learned '$nan', expected '${expected#0 }'"

# ---- 4. steps and validations with no target
T=16
NOTARGET=$WORK/notarget.bin VAL=$WORK/val_notarget.bin ZEROS=$WORK/zeros.bin
for f in "$NOTARGET" "$VAL" "$ZEROS"; do cp "$SOURCE" "$f"; done
# -sh 0, B 1, T 16: step k reads the targets 16k + 1 .. 16k + 16, and so does
# validation batch k. notarget.mask: every target learned but step 1's;
# val_notarget.mask: every target learned but batch 0's (what -m 1 reads); zeros.mask: all 0.
python3 - "$NOTARGET" "$VAL" "$ZEROS" $T <<'PY'
import struct, sys
notarget, val, zeros, T = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ntok = struct.unpack('<3i', open(notarget, 'rb').read(12))[2]
def write_mask(path, mask):
    with open(path[:-4] + '.mask', 'wb') as f:
        f.write(struct.pack('<256i', 20240613, 1, ntok, *[0] * 253))
        f.write(bytes(mask))
write_mask(notarget, [0 if T + 1 <= j <= 2 * T else 1 for j in range(ntok)])
write_mask(val, [0 if j <= T else 1 for j in range(ntok)])
write_mask(zeros, [0] * ntok)
PY
COMMON=(-e d1 -b 1 -t $T -l 1e-3 -s 0 -sh 0 -lm 1)
train notarget_steps 1 -x 3 -v 0 -n 3 -i "$NOTARGET" -o "$WORK/notarget_steps"
out=$WORK/notarget_steps.out log=$WORK/notarget_steps/main.log
grep -q '^step    2/3 | loss none (no target: the loss masks keep none) | norm 0.0000 |' "$out" ||
    fail "step 2 of 3 (no target) does not say so: $(grep '^step' "$out")"
[[ $(grep -cE '^step +[13]/3 \| loss [0-9]+\.[0-9]{6} \| norm [0-9.]*[1-9]' "$out") -eq 2 ]] ||
    fail "steps 1 and 3 (with targets) have no loss or no gradient: $(grep '^step' "$out")"
[[ $(grep -c ' trl:nan ' "$log") -eq 1 ]] && grep -q '^s:1 trl:nan ' "$log" ||
    fail "main.log: NaN is not exactly step 1's loss: $(cat "$log")"
grep -q '^no target: the loss masks kept none of the targets of 1 of the 3 training step(s) run and of 0 validation(s)' "$out" ||
    fail "the end does not count the step with no target: $(tail -n 3 "$out")"
# the outlier detectors of -sl and -sg saw the 2 steps with a loss, not the third's
# zeros: their counts, the first uint64 of each after the state file's 1024 + 32 x 8
# header bytes (train/checkpoint_files.h), are 2
counts=$(od -An -tu8 -j $((1024 + 32 * 8)) -N 8 "$WORK/notarget_steps/state_00000003_00000.bin" | tr -d ' ')
counts+=" $(od -An -tu8 -j $((1024 + 32 * 8 + (4 + 128) * 8)) -N 8 "$WORK/notarget_steps/state_00000003_00000.bin" | tr -d ' ')"
[[ $counts == "2 2" ]] || fail "the outlier detectors saw the step with no target: counts $counts, expected 2 2"
# -v 1 over 2 steps validates before steps 0, 1 and at the end: 3 times, each on
# batch 0 of val_notarget.bin, which keeps no target
train notarget_val 1 -x 2 -v 1 -m 1 -i "$NOTARGET" -j "$VAL" -o "$WORK/notarget_val"
out=$WORK/notarget_val.out log=$WORK/notarget_val/main.log
[[ $(grep -c '^val loss none (no target: the loss masks keep none)$' "$out") -eq 3 && $(grep -c '^val loss' "$out") -eq 3 ]] ||
    fail "validations with no target do not say so: $(grep '^val' "$out")"
[[ $(grep -c ' tel:nan$' "$log") -eq 3 ]] || fail "main.log: the validations' losses are not NaN: $(cat "$log")"
grep -q '^no target: the loss masks kept none of the targets of 1 of the 2 training step(s) run and of 3 validation(s)' "$out" ||
    fail "the end does not count the validations with no target: $(tail -n 3 "$out")"
# -m 2 reads batch 1 too, which is learned: a loss, and nothing said of no target
train val_targets 1 -x 1 -v 1 -m 2 -i "$NOTARGET" -j "$VAL" -o "$WORK/val_targets"
[[ $(grep -cE '^val loss [0-9]+\.[0-9]{6}$' "$WORK/val_targets.out") -eq 2 ]] ||
    fail "validations with targets: $(grep '^val' "$WORK/val_targets.out")"
if grep -q 'no target' "$WORK/val_targets.out"; then fail "a run where every step and validation has targets speaks of none"; fi
# masks with no target at all refuse to start, naming the file, as -i and as -j
for flags in "-i $ZEROS -v 0" "-i $NOTARGET -j $ZEROS -v 1"; do
    rc=0
    # shellcheck disable=SC2086 # the flags are words
    timeout 300 "${LAUNCH[@]}" -np 2 "$TRAINER" "${COMMON[@]}" -x 1 $flags >"$WORK/zeros.out" 2>&1 || rc=$?
    [[ $rc -ne 0 ]] || fail "masks of zeros ($flags): the run started"
    [[ $(grep -c "keep no target" "$WORK/zeros.out") -eq 1 ]] && grep -q "'$WORK/zeros.mask'" "$WORK/zeros.out" ||
        fail "masks of zeros ($flags): not one line naming zeros.mask: $(head -n 5 "$WORK/zeros.out")"
    if grep -q "^step" "$WORK/zeros.out"; then fail "masks of zeros ($flags): a step ran"; fi
done
finish
