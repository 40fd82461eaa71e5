#!/usr/bin/env bash
# What an llm.c user relies on, end to end on the CPU trainer:
#   1. -e d2 builds llm.c's weights bit for bit: checked by an independent Python
#      generator (test/lib/random_init_reference.py); -e gpt2:d2 is the same model;
#      normal_ of lengths that are no multiple of 16 (the tail llm.c redraws) too
#   2. -k cosine | linear | constant | wsd: main.log's lr of every step is llm.c's
#      formula (a bad -k, and a -d that is no multiple: bad_input.sh)
#   3. main.log is llm.c's: `s:N trl:X lr:X norm:X` and `s:N tel:X`, 6 decimals,
#      parsed as llm.c's dev/vislog notebook parses it
#   4. -d: gradient accumulation equals the larger batch (DESIGN §5 tolerances on the
#      losses, per token too; the weights within 1e-5), at cp 2 and at dp 2
#   5. -n 0 writes no checkpoint; -n 2 -nk 2 -nm 4 over 10 steps leaves 4, 8, 10;
#      -nk 4 -n 2^30 (a product past 2^31) keeps the checkpoint just written
#   6. -a 1 trains on the first batch of -j, as a file of exactly that batch does;
#      with -d (2 micro-batches) the batch is the first -d tokens, read again every
#      step, as llm.c reads it (a file of exactly those tokens, read in order)
#   7. -sl / -sg skip exactly the step of an injected spike (its weights unchanged),
#      at the z-score an independent recomputation from main.log gives; resumed
#      at step 70 (the detectors' windows come back from the state), bit for bit
#  11. -x -1 trains llm.c's epoch: the train tokens over a step's, rounded down
#      (here 19 steps; the shards' whole steps added up would be 18), and with -d
#      (2 micro-batches) half of it; -m -1 validates on the validation tokens over
#      a batch's (19 again); -d longer than the data: bad_input.sh
#   8. -h 1: HellaSwag on a small eval file (test/lib/llmc_files.py, llm.c's format) with
#      a model trained on a token cycle: the expected 4/6 at cp 1, cp 2 and dp 2;
#      a missing eval file is noted and skipped, as in llm.c
#  10. -sh 1 (the default) reads the training data in llm.c's shuffled order (an
#      independent Python replay of llm.c's loader, over 2 shards and 2 epochs, at
#      dp 1 and dp 2), the same at cp 4, and a resume continues it bit for bit
#   9. llm.c's flags that cannot act here are accepted with a note; -pn -pr -pg
#      that fit mpirun's world are accepted (those that do not: bad_input.sh)
#
#   bash test/e2e_llmc_compat.sh TEST_RANDOM_INIT COMPARE_RUNS     (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=e2e_llmc_compat
source "$(dirname "$0")/lib/e2e_lib.sh"
need python3 python3
source "$(dirname "$0")/lib/binary_files.sh" # same_model: model files but for their checkpoint's run id and step
TEST_RANDOM_INIT=${1:?usage: e2e_llmc_compat.sh TEST_RANDOM_INIT COMPARE_RUNS}
COMPARE=${2:?usage: e2e_llmc_compat.sh TEST_RANDOM_INIT COMPARE_RUNS}
REFERENCE=$REPO_ROOT/test/lib/random_init_reference.py

COMMON=(-b 2 -t 32 -v 0 -s 0)

# ---- 1. the random init
echo "== -e dN: llm.c's weights"
train init_d2 1 -e d2 -x 0 -n 1 -o "$WORK/init_d2"
train init_gpt2_d2 1 -e gpt2:d2 -x 0 -n 1 -o "$WORK/init_gpt2_d2"
python3 "$REFERENCE" model "$WORK/init_d2/model_00000000.bin" || fail "-e d2 is not llm.c's init"
if same_model "$WORK/init_d2/model_00000000.bin" "$WORK/init_gpt2_d2/model_00000000.bin"; then
    echo "ok   -e gpt2:d2 builds the same weights as -e d2"
else
    fail "-e gpt2:d2 and -e d2 build different weights"
fi
for n in 7 16 37 1000; do
    "$TEST_RANDOM_INIT" normals 42 $n 0.02 | python3 "$REFERENCE" normals 42 $n 0.02 || fail "normal_($n)"
done

# ---- 2. the schedules
echo
echo "== -k: llm.c's learning-rate schedules"
STEPS=10 PEAK=1e-3 WARMUP=3 FRAC=0.1
for k in cosine linear constant wsd; do
    train "k_$k" 1 -e d1 -b 1 -t 16 -x $STEPS -k $k -l $PEAK -u $WARMUP -q $FRAC -o "$WORK/k_$k"
    # llm.c's formulas (llmc/schedulers.h there), against the lr field of main.log
    python3 - "$WORK/k_$k/main.log" $k $STEPS $PEAK $WARMUP $FRAC <<'EOF' || fail "-k $k"
import math, sys
log, kind, steps, peak, warmup, frac = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
def lr(s):
    lo = peak * frac
    if kind == "constant": return peak
    if s < warmup: return peak * (s + 1) / warmup
    if kind == "cosine": return lo + 0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup))) * (peak - lo)
    if kind == "linear": return peak - (s - warmup) / (steps - warmup) * (peak - lo)
    d = int(0.8 * steps)
    return peak if s < d else lo + (1 - math.sqrt((s - d) / (steps - d))) * (peak - lo)
got = {int(l.split()[0][2:]): float(l.split()[2][3:]) for l in open(log) if " trl:" in l}
assert sorted(got) == list(range(steps)), f"steps logged: {sorted(got)}"
worst = max(abs(got[s] - lr(s)) for s in got)
# main.log keeps 6 decimals: half a unit of the last one
assert worst <= 5e-7 + 1e-9, f"largest |lr - formula| {worst:.2e}"
print(f"ok   -k {kind:8s} every step's lr is llm.c's formula (largest difference {worst:.1e}, 6 decimals)")
EOF
done
if grep -q 'lr:0.001000' "$WORK/k_constant/main.log" && [[ $(sort -u <(grep -o 'lr:[0-9.]*' "$WORK/k_constant/main.log") | wc -l) -eq 1 ]]; then
    echo "ok   -k constant keeps the peak from step 0 (no warmup)"
else
    fail "-k constant: the lr is not the peak at every step"
fi

# ---- 3. main.log as llm.c writes it
echo
echo "== main.log"
train log 1 -e d1 -x 6 -v 3 -m 1 -o "$WORK/log"
python3 - "$WORK/log/main.log" <<'EOF' || fail "main.log format"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
num = r"-?\d+\.\d{6}"
kinds = {"trl": re.compile(rf"^s:\d+ trl:{num} lr:{num} norm:{num}$"), "tel": re.compile(rf"^s:\d+ tel:{num}$")}
for l in lines:
    kind = l.split()[1].split(":")[0]
    assert kind in kinds and kinds[kind].match(l), f"not an llm.c main.log line: {l!r}"
# llm.c's dev/vislog: step from parts[0], stream name and value from parts[1]
streams = {}
for l in lines:
    parts = l.split()
    streams.setdefault(parts[1].split(":")[0], {})[int(parts[0].split(":")[1])] = float(parts[1].split(":")[1])
assert sorted(streams["trl"]) == list(range(6)), streams["trl"]
assert sorted(streams["tel"]) == [0, 3, 6], streams["tel"]
print(f"ok   main.log: {len(lines)} lines in llm.c's format (6 decimals); vislog's parser reads trl at steps 0..5, tel at 0, 3, 6")
EOF

FILES=$REPO_ROOT/test/lib/llmc_files.py
model_at() { printf '%s/model_%08d.bin' "$1" "$2"; }

# ---- 4. gradient accumulation
echo
echo "== -d: gradient accumulation equals the larger batch"
ACC=(-e d1 -t 32 -x 8 -l 1e-3 -n 8 -sh 0) # in order: the micro-batches are the larger batch's rows
train acc_big 1 "${ACC[@]}" -b 4 -o "$WORK/acc_big" -tl "$WORK/acc_big.tl"
train acc_cp2 2 "${ACC[@]}" -b 2 -d 128 -cp 2 -o "$WORK/acc_cp2" -tl "$WORK/acc_cp2.tl"
train acc_dp2 2 "${ACC[@]}" -b 1 -d 128 -cp 1 -o "$WORK/acc_dp2" -tl "$WORK/acc_dp2.tl"
"$COMPARE" 8 128 "$WORK/acc_big/main.log" "$WORK/acc_big.tl" \
    accumulated_cp2 "$WORK/acc_cp2/main.log" "$WORK/acc_cp2.tl" \
    accumulated_dp2 "$WORK/acc_dp2/main.log" "$WORK/acc_dp2.tl" || fail "-d accumulation differs from the larger batch"
# the weights: AdamW divides by sqrt(v), which magnifies the last bits of tiny
# gradients, so the limit is 1% of how far training moved any weight
train acc_init 1 "${ACC[@]}" -b 4 -x 0 -n 1 -o "$WORK/acc_init"
moved=$(python3 "$FILES" maxdiff "$(model_at "$WORK/acc_init" 0)" "$(model_at "$WORK/acc_big" 8)")
for run in acc_cp2 acc_dp2; do
    d=$(python3 "$FILES" maxdiff "$(model_at "$WORK/acc_big" 8)" "$(model_at "$WORK/$run" 8)")
    if python3 -c "import sys; sys.exit(not float('$d') <= 0.01 * float('$moved'))"; then
        echo "ok   $run: weights after 8 steps within $d of the larger batch's (limit 1% of the largest move, $moved)"
    else
        fail "$run: the weights differ from the larger batch's by $d (the largest move: $moved)"
    fi
done

# ---- 5. checkpoints: -n 0, -nk, -nm
echo
echo "== -n 0 never; -nk keeps the last N; -nm keeps the majors"
train ckpt_never 1 -e d1 -b 1 -t 16 -x 3 -n 0 -o "$WORK/ckpt_never"
left=$(cd "$WORK/ckpt_never" && ls | grep -v '^main.log$' || true)
[[ -z $left ]] && echo "ok   -n 0 wrote no checkpoint" || fail "-n 0 wrote: $left"
train ckpt_keep 2 -e d1 -b 1 -t 16 -x 10 -n 2 -nk 2 -nm 4 -cp 2 -o "$WORK/ckpt_keep"
expected="DONE_00000004 DONE_00000008 DONE_00000010 main.log model_00000004.bin model_00000008.bin model_00000010.bin"
for s in 4 8 10; do expected+=" state_$(printf %08d $s)_00000.bin state_$(printf %08d $s)_00001.bin"; done
got=$(cd "$WORK/ckpt_keep" && ls | sort | tr '\n' ' ' | sed 's/ $//')
expected=$(tr ' ' '\n' <<<"$expected" | sort | tr '\n' ' ' | sed 's/ $//')
if [[ $got == "$expected" ]]; then
    echo "ok   -x 10 -n 2 -nk 2 -nm 4 leaves checkpoints 4 (major), 8 (major, last two), 10 (last two), both ranks' states"
else
    fail "-nk/-nm: the directory holds '$got', expected '$expected'"
fi

# -nk 4 x -n 2^30 = 2^32: in 32 bits the step to delete would wrap onto the step just written
train ckpt_wrap 1 -e d1 -b 1 -t 16 -x 2 -n $((1 << 30)) -nk 4 -o "$WORK/ckpt_wrap"
if [[ -f $WORK/ckpt_wrap/DONE_00000002 && -f $WORK/ckpt_wrap/model_00000002.bin && -f $WORK/ckpt_wrap/state_00000002_00000.bin ]]; then
    echo "ok   -x 2 -n 2^30 -nk 4: the checkpoint of step 2 stays"
else
    fail "-n 2^30 -nk 4: the checkpoint just written is gone: $(ls "$WORK/ckpt_wrap" | tr '\n' ' ')"
fi

# ---- 6. overfitting one batch
echo
echo "== -a 1: the first batch of -j, every step"
python3 "$FILES" head dev/data/austen/austen_val.bin "$WORK/one_batch.bin" $((2 * 32 + 1))
train overfit 1 -e d1 -b 2 -t 32 -x 6 -l 1e-3 -a 1 -j dev/data/austen/austen_val.bin -o "$WORK/overfit"
train one_batch 1 -e d1 -b 2 -t 32 -x 6 -l 1e-3 -i "$WORK/one_batch.bin" -o "$WORK/one_batch"
if cmp -s "$WORK/overfit/main.log" "$WORK/one_batch/main.log"; then
    echo "ok   -a 1 trains exactly as a file of that one batch (main.log identical)"
else
    fail "-a 1 differs from training on the one batch"
fi
awk -F'[: ]' '$3 == "trl" { l[$2] = $4 } END { exit !(l[5] < l[0] - 0.5) }' "$WORK/overfit/main.log" ||
    fail "-a 1: the loss does not fall (overfitting one batch)"
# with -d: the step's batch is its 2 micro-batches, the first 2 x 2 x 32 tokens of -j
python3 "$FILES" head dev/data/austen/austen_val.bin "$WORK/two_batches.bin" $((2 * 2 * 32 + 1))
train overfit_acc 1 -e d1 -b 2 -t 32 -d 128 -x 6 -l 1e-3 -a 1 -j dev/data/austen/austen_val.bin -o "$WORK/overfit_acc"
train two_batches 1 -e d1 -b 2 -t 32 -d 128 -x 6 -l 1e-3 -sh 0 -i "$WORK/two_batches.bin" -o "$WORK/two_batches"
if cmp -s "$WORK/overfit_acc/main.log" "$WORK/two_batches/main.log"; then
    echo "ok   -a 1 -d 128 trains exactly as a file of those two micro-batches, read in order (main.log identical)"
else
    fail "-a 1 with -d differs from training on its first -d tokens"
fi

# ---- 7. outlier skipping
echo
echo "== -sl / -sg: the spiked step's update is skipped"
python3 "$FILES" spike "$WORK/spike.bin" 8 141 140
SPIKE=(-e d1 -b 1 -t 8 -x 141 -n 140 -l 1e-2 -i "$WORK/spike.bin" -sh 0) # in order: the spike at step 140
train skip_loss 1 "${SPIKE[@]}" -sl 3 -o "$WORK/skip_loss"
train skip_grad 1 "${SPIKE[@]}" -sg 3 -o "$WORK/skip_grad"
for kind in loss grad; do
    out=$WORK/skip_$kind.out
    skips=$(grep -c '^skipping update' "$out" || true)
    line=$(grep -m1 "^skipping update due to $kind z-score of" "$out" || true)
    # llm.c's detector recomputed from main.log: z of step 140 in the window of steps 13..140
    # (the progress line of step index 140 is "step 141/141", printed after the skip line)
    field=$([[ $kind == loss ]] && echo 2 || echo 4)
    z=$(awk -v f=$field '$2 ~ /^trl:/ { split($f, kv, ":"); v[n++] = kv[2] }
        END { for (i = n - 128; i < n; i++) { s += v[i]; q += v[i] * v[i] } m = s / 128; print (v[n - 1] - m) / sqrt(q / 128 - m * m) }' \
        "$WORK/skip_$kind/main.log")
    printed=${line##* }
    if [[ $skips -eq 1 && -n $line ]] && grep -A1 '^skipping update' "$out" | grep -q '^step  141/141' &&
        awk -v a="$z" -v b="$printed" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * b && b > 3) }'; then
        echo "ok   -s${kind:0:1} 3: only step 140 skipped, z-score $printed (recomputed from main.log: $z)"
    else
        fail "-s${kind:0:1} 3: $skips skip line(s), '$line', recomputed z $z"
    fi
    if same_model "$(model_at "$WORK/skip_$kind" 140)" "$(model_at "$WORK/skip_$kind" 141)"; then
        echo "ok   -s${kind:0:1} 3: the weights after step 140 are those before it"
    else
        fail "-s${kind:0:1} 3: the skipped step changed the weights"
    fi
done
# resumed at step 70: each detector's window of the steps before it comes back with the state
for kind in loss grad; do
    flag=-s${kind:0:1}
    train skip_${kind}_first 1 "${SPIKE[@]}" $flag 3 -x 70 -n 70 -o "$WORK/skip_${kind}_resumed"
    train skip_${kind}_rest 1 "${SPIKE[@]}" $flag 3 -y 1 -o "$WORK/skip_${kind}_resumed"
    if cmp -s "$WORK/skip_$kind/main.log" "$WORK/skip_${kind}_resumed/main.log" &&
       same_model "$(model_at "$WORK/skip_$kind" 141)" "$(model_at "$WORK/skip_${kind}_resumed" 141)" &&
       grep -q "^skipping update due to $kind z-score" "$WORK/skip_${kind}_rest.out"; then
        echo "ok   $flag 3 resumed at step 70: the same skip at step 140, main.log and weights bit for bit"
    else
        fail "$flag 3 resumed at step 70 differs from the uninterrupted run"
    fi
done

# ---- 8. HellaSwag
echo
echo "== -h 1: HellaSwag from llm.c's eval file"
python3 "$FILES" cycle "$WORK/cycle.bin" 3000
python3 "$FILES" hellaswag "$WORK/hellaswag.bin"
train cycle 1 -e d1 -b 4 -t 16 -x 30 -l 1e-2 -i "$WORK/cycle.bin" -n 30 -o "$WORK/cycle"
EVAL=(-e "$(model_at "$WORK/cycle" 30)" -t 16 -x 0 -i "$WORK/cycle.bin" -h 1 -hf "$WORK/hellaswag.bin")
train hs_cp1 1 "${EVAL[@]}" -b 4 -o "$WORK/hs_cp1"
train hs_cp2 2 "${EVAL[@]}" -b 4 -cp 2 -o "$WORK/hs_cp2"
train hs_dp2 2 "${EVAL[@]}" -b 8 -cp 1 -o "$WORK/hs_dp2"
for run in hs_cp1 hs_cp2 hs_dp2; do
    if grep -qx 's:0 eval:0.666667' "$WORK/$run/main.log" && grep -q '^HellaSwag: 4/6 = 0.666667' "$WORK/$run.out"; then
        echo "ok   $run: HellaSwag 4/6 as expected, main.log 's:0 eval:0.666667'"
    else
        fail "$run: $(grep -h 'HellaSwag\|eval' "$WORK/$run.out" "$WORK/$run/main.log" | head -2)"
    fi
done
train hs_missing 1 -e d1 -b 4 -t 16 -x 0 -h 1 -hf "$WORK/no_such_file.bin"
grep -q "^note: -h 1: no HellaSwag eval file at $WORK/no_such_file.bin" "$WORK/hs_missing.out" &&
    echo "ok   -h 1 without its file: noted and skipped, as in llm.c" || fail "-h 1 without its file: no note"

# ---- 9. flags that cannot act here, and the launch flags that fit
echo
echo "== llm.c's other flags"
train accepted 2 -e d1 -b 1 -t 16 -x 1 -cp 2 -w 0 -ge 2 -z 1 -lg 5 -pn 2 -pg 8 -pi mpi -pm mpi -ps 10.0.0.1 -pf /tmp -pp /tmp
for flag in "-w 0" "-ge 2" "-lg 5"; do
    grep -q "^note: $flag: " "$WORK/accepted.out" || fail "no note for $flag"
done
echo "ok   -w 0 -ge 2 -lg 5 accepted, each with its note (-z 1 acts: test/e2e_zero.sh); -pn 2 -pg 8 -pi/-pm mpi -ps -pf/-pp fit np 2"

# ---- 10. shuffled data
echo
echo "== -sh 1: llm.c's shuffled order"
# two_shards NAME VAL_TOKENS TRAIN_TOKENS: $WORK/NAME_a.bin, the first VAL_TOKENS of
# Austen's val split, and $WORK/NAME_b.bin, the first TRAIN_TOKENS of its train split
two_shards() {
    python3 "$FILES" head dev/data/austen/austen_val.bin "$WORK/$1_a.bin" "$2"
    python3 "$FILES" head dev/data/austen/austen_train.bin "$WORK/$1_b.bin" "$3"
}
two_shards shard $((11 * 32 + 5)) $((7 * 32 + 1))
SHUF=(-e d1 -b 2 -t 16 -l 0 -i "$WORK/shard_*.bin")  # -l 0: a row's losses depend on its tokens alone
train val_all 1 -e d1 -b 2 -t 16 -x 0 -v 1 -m -1 -j "$WORK/shard_a.bin"
grep -qE '^\| val batches +\| 11 ' "$WORK/val_all.out" && echo "ok   -m -1 validates on all 11 batches of the -j data" ||
    fail "-m -1: $(grep 'val batches' "$WORK/val_all.out")"
train in_order 1 "${SHUF[@]}" -sh 0 -x 18 -tl "$WORK/in_order.tl"
train shuffled 1 "${SHUF[@]}" -x 22 -tl "$WORK/shuffled.tl"
train shuffled_dp2 2 "${SHUF[@]}" -cp 1 -x 12 -tl "$WORK/shuffled_dp2.tl"
python3 "$FILES" shuffle_check "$WORK/shuffled.tl" "$WORK/in_order.tl" 2 16 1 22 "$WORK"/shard_*.bin || fail "-sh 1 at dp 1"
python3 "$FILES" shuffle_check "$WORK/shuffled_dp2.tl" "$WORK/in_order.tl" 2 16 2 12 "$WORK"/shard_*.bin || fail "-sh 1 at dp 2"
train shuffled_cp4 4 "${SHUF[@]}" -cp 4 -x 22 -tl "$WORK/shuffled_cp4.tl"
python3 "$FILES" tl_close "$WORK/shuffled.tl" "$WORK/shuffled_cp4.tl" 1e-5 || fail "-sh 1: cp 4 reads another order than cp 1"
train shuffled_first 1 "${SHUF[@]}" -l 1e-3 -x 20 -n 20 -o "$WORK/shuffled_resume" -tl "$WORK/shuffled_resume.tl"
train shuffled_rest 1 "${SHUF[@]}" -l 1e-3 -x 22 -y 1 -o "$WORK/shuffled_resume" -tl "$WORK/shuffled_resume.tl"
train shuffled_whole 1 "${SHUF[@]}" -l 1e-3 -x 22 -o "$WORK/shuffled_whole" -tl "$WORK/shuffled_whole.tl"
if cmp -s "$WORK/shuffled_resume.tl" "$WORK/shuffled_whole.tl" && cmp -s "$WORK/shuffled_resume/main.log" "$WORK/shuffled_whole/main.log"; then
    echo "ok   resumed at step 20 (in the second epoch), the shuffled run continues bit for bit"
else
    fail "-sh 1: the resumed run differs from the uninterrupted one"
fi

# ---- 11. one epoch, as llm.c counts it
echo
echo "== -x -1 and -m -1: the tokens over a step's (a batch's)"
two_shards epoch $((11 * 32 + 25)) $((7 * 32 + 25))
tokens=$(((11 * 32 + 25) + (7 * 32 + 25)))
EPOCH=(-e d1 -b 2 -t 16 -l 0 -i "$WORK/epoch_*.bin" -j "$WORK/epoch_*.bin" -v 1000 -m -1)
train epoch 1 "${EPOCH[@]}" -x -1 -o "$WORK/epoch"
train epoch_acc 1 "${EPOCH[@]}" -x -1 -d 64 -o "$WORK/epoch_acc"
for run in "epoch 32" "epoch_acc 64"; do
    read -r name step_tokens <<<"$run"
    want=$((tokens / step_tokens))
    got=$(grep -c ' trl:' "$WORK/$name/main.log" || true)
    table=$(awk -F'|' '$2 ~ /^ steps / { gsub(/ /, "", $3); print $3 }' "$WORK/$name.out")
    if [[ $got -eq $want && $table -eq $want ]]; then
        echo "ok   $name: -x -1 trains $want steps ($tokens tokens / $step_tokens a step, rounded down)"
    else
        fail "$name: -x -1 trained $got steps (table: $table), llm.c's epoch is $want"
    fi
done
val=$(awk -F'|' '$2 ~ /^ val batches / { gsub(/ /, "", $3); print $3 }' "$WORK/epoch.out")
[[ $val -eq $((tokens / 32)) ]] && echo "ok   -m -1: $val validation batches, llm.c's count" ||
    fail "-m -1: $val validation batches, llm.c's count is $((tokens / 32))"

finish
