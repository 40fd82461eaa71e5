#!/usr/bin/env bash
# -z 1 (ZeRO-1: the AdamW state sharded over all ranks, train/zero.h) on the CPU
# trainer, against -z 0:
#   1. np 2 (dp 2) and np 4 (cp 2 x dp 2): main.log, the -tl per-token losses and
#      the model files of -z 1 are byte-identical to -z 0's
#   2. each rank's state file is the header plus 8 bytes per parameter of its
#      shard, from the parameter count: floor(N / W) parameters, the last rank the
#      rest; -z 0's hold 8 N; the start-up table's parameters/gradients/AdamW row is
#      the formula's (N x (4 + 4) + 2 x 4 x the largest shard)
#   3. resume: np 4 -z 1, 3 steps then -y 1 to 6, is the uninterrupted run bit for
#      bit (main.log, -tl, model and every state file); resumed at cp 4 (the same
#      world), with a note, as the -z 0 checkpoint resumed at cp 4, bit for bit
#   4. the master weights of the state file: with checkpoints written as the GPU's
#      BF16 build writes them (GPT2CP_TEST_BF16_MODEL_FILE=1: a bf16-rounded model
#      file, the exact fp32 master weights in the state), the model file differs
#      from the exact one, the ranks' master-weight sections put together are the
#      exact weights, and the resume, at -z 1 np 4, at -z 0 np 2 and at -z 0 np 4
#      cp 2 (where each rank holds its rows of the position table only, and the
#      others' master weights come from their owners), is again the uninterrupted
#      run bit for bit: its weights came from the state files
#   5. a shard larger than the MPI transport's per-call limit (1 GiB: GPT-2 774M at
#      np 2), here with the limit lowered to 1 MiB (GPT2CP_TEST_MPI_MAX_BYTES):
#      every collective goes in pieces, and -z 1 is again -z 0 bit for bit
# (bad -z values and resumes at another -z or world size: bad_input.sh)
#
#   bash test/e2e_zero.sh        (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=e2e_zero
source "$(dirname "$0")/lib/e2e_lib.sh"
source "$(dirname "$0")/lib/binary_files.sh"

COMMON=(-e d1 -b 2 -t 64 -l 1e-3 -u 2 -c 0.1 -v 3 -m 2 -s 0 -n 3)
# same_bytes WHAT FILE1 FILE2: the files are identical; same_checkpoint_file WHAT
# same_model|same_state FILE1 FILE2: identical but for the run id (binary_files.sh)
same_bytes() {
    if cmp -s "$2" "$3"; then echo "ok   $1 identical ($(stat -c %s "$2") bytes)"; else fail "$1: $2 and $3 differ"; fi
}
same_checkpoint_file() {
    if "$2" "$3" "$4"; then echo "ok   $1 identical but for the run id ($(stat -c %s "$3") bytes)"; else fail "$1: $3 and $4 differ"; fi
}
# the parameters of the start-up table
parameters() { awk -F'|' '$2 ~ /^ parameters / { gsub(/ /, "", $3); print $3 }' "$1"; }

# ---- 1 and 2: -z 1 equals -z 0; state files 1/world
for mesh in "2 1" "4 2"; do
    read -r np cp <<<"$mesh"
    echo "== np $np, cp $cp: -z 1 against -z 0"
    for z in 0 1; do
        train "z${z}_np$np" "$np" -cp "$cp" -x 6 -z $z -o "$WORK/z${z}_np$np" -tl "$WORK/z${z}_np$np.tl"
    done
    a=$WORK/z0_np$np b=$WORK/z1_np$np
    same_bytes "np $np main.log" "$a/main.log" "$b/main.log"
    same_bytes "np $np -tl losses" "$a.tl" "$b.tl"
    for step in 00000003 00000006; do same_checkpoint_file "np $np model $step" same_model "$a/model_$step.bin" "$b/model_$step.bin"; done
    N=$(parameters "$b.out")
    [[ $N =~ ^[0-9]+$ ]] || { fail "no parameter count in the start-up table"; continue; }
    S=$((N / np)) largest=$((N - (np - 1) * (N / np)))
    for ((r = 0; r < np; r++)); do
        shard=$S
        [[ $r -eq $((np - 1)) ]] && shard=$largest
        f=$(printf 'state_00000006_%05d.bin' $r)
        got0=$(stat -c %s "$a/$f") got1=$(stat -c %s "$b/$f")
        [[ $got0 -eq $((STATE_HEADER_BYTES + 8 * N)) ]] || fail "-z 0 rank $r: $got0 bytes, expected $((STATE_HEADER_BYTES + 8 * N))"
        if [[ $got1 -eq $((STATE_HEADER_BYTES + 8 * shard)) ]]; then
            echo "ok   rank $r state: $got1 bytes at -z 1 (shard of $shard of $N parameters), $got0 at -z 0"
        else
            fail "-z 1 rank $r: $got1 bytes, expected $((STATE_HEADER_BYTES + 8 * shard)) (shard of $shard)"
        fi
    done
    row=$(grep -m1 'params, grads, m, v' "$b.out" | awk -F'|' '{ gsub(/^ +| +$/, "", $3); print $3 }')
    want=$(awk -v n="$N" -v s="$largest" 'BEGIN { printf "%.1f MiB", (8 * n + 8 * s) / 1048576 }')
    [[ $row == "$want" ]] && echo "ok   start-up table: params, grads, m, v $row (-z 1)" ||
        fail "start-up table says '$row' for params, grads, m, v; expected $want"
    grep -q "ZeRO stage (-z) *| 1 (AdamW state sharded over $np ranks)" "$b.out" || fail "no ZeRO row in the start-up table"
done

# ---- 3. resume at -z 1
echo
echo "== np 4 -z 1: 3 steps, then -y 1 to 6"
train r_first 4 -cp 2 -z 1 -x 3 -o "$WORK/r" -tl "$WORK/r.tl"
mkdir -p "$WORK/rc" && cp "$WORK/r"/*00000003* "$WORK/rc/"
train r_resumed 4 -cp 2 -z 1 -x 6 -y 1 -o "$WORK/r" -tl "$WORK/r.tl"
grep -q "^resuming from step 3: .* and every rank's own state file$" "$WORK/r_resumed.out" || fail "r_resumed did not resume from step 3"
same_bytes "resumed main.log" "$WORK/z1_np4/main.log" "$WORK/r/main.log"
same_bytes "resumed -tl losses" "$WORK/z1_np4.tl" "$WORK/r.tl"
same_checkpoint_file "resumed final weights" same_model "$WORK/z1_np4/model_00000006.bin" "$WORK/r/model_00000006.bin"
for r in 00000 00001 00002 00003; do
    same_checkpoint_file "resumed final state of rank $r" same_state "$WORK/z1_np4/state_00000006_$r.bin" "$WORK/r/state_00000006_$r.bin"
done

# the same world at another cp (so another dp, other batches): each rank reads its
# own shard, with a note, and trains as the -z 0 checkpoint resumed at cp 4 (every
# rank reads rank 0's whole moments there), bit for bit
mkdir -p "$WORK/rc0" && cp "$WORK/z0_np4"/*00000003* "$WORK/rc0/"
train rc 4 -cp 4 -z 1 -x 6 -y 1 -o "$WORK/rc"
train rc0 4 -cp 4 -z 0 -x 6 -y 1 -o "$WORK/rc0"
grep -q "^note: the checkpoint was written by 4 rank(s) at cp 2.*(each rank's own -z 1 shard)" "$WORK/rc.out" ||
    fail "rc: no note about the other cp"
same_bytes "cp 4 resumed main.log, -z 1 and -z 0" "$WORK/rc0/main.log" "$WORK/rc/main.log"
same_checkpoint_file "cp 4 resumed final weights, -z 1 and -z 0" same_model "$WORK/rc0/model_00000006.bin" "$WORK/rc/model_00000006.bin"

# ---- 4. the master weights in the state files
echo
echo "== master weights in the state (a bf16 model file, as the GPU's BF16 build writes)"
for mesh in "4 2 1" "2 1 0" "4 2 0"; do
    read -r np cp z <<<"$mesh"
    name=m_np${np}_z$z ref=$WORK/z${z}_np$np
    GPT2CP_TEST_BF16_MODEL_FILE=1 train "${name}_first" "$np" -cp "$cp" -z "$z" -x 3 -o "$WORK/$name" -tl "$WORK/$name.tl"
    if same_model "$ref/model_00000003.bin" "$WORK/$name/model_00000003.bin"; then
        fail "$name: the bf16 model file is the exact one (the test would show nothing)"
    fi
    # the master-weight sections (after the header and m, v: 12 bytes per parameter
    # in all) of the ranks' files, in rank order, without the overlap of -z 0's copies
    : >"$WORK/$name.master"
    for ((r = 0; r < np; r++)); do
        f=$WORK/$name/$(printf 'state_00000003_%05d.bin' $r)
        count=$((($(stat -c %s "$f") - STATE_HEADER_BYTES) / 12))
        [[ $z -eq 1 || $r -eq 0 ]] && tail -c $((4 * count)) "$f" >>"$WORK/$name.master"
    done
    cmp -s "$WORK/$name.master" <(tail -c +1025 "$ref/model_00000003.bin") &&
        echo "ok   $name: the state files' master weights are the exact weights of step 3" ||
        fail "$name: the master weights of the state files are not the exact weights"
    GPT2CP_TEST_BF16_MODEL_FILE=1 train "${name}_resumed" "$np" -cp "$cp" -z "$z" -x 6 -y 1 -o "$WORK/$name" -tl "$WORK/$name.tl"
    grep -q "^resuming from step 3: .*(with the fp32 master weights, which replace the model file's)$" "$WORK/${name}_resumed.out" ||
        fail "$name: the resume does not say it took the master weights"
    same_bytes "$name resumed main.log" "$ref/main.log" "$WORK/$name/main.log"
    same_bytes "$name resumed -tl losses" "$ref.tl" "$WORK/$name.tl"
done

# ---- 5. transfers in pieces: the parameter gather of a shard past the per-call limit
echo
echo "== np 2 -z 1 with the per-call limit lowered to 1 MiB (the shard: $(($(parameters "$WORK/z1_np2.out") * 4 / 2)) bytes)"
GPT2CP_TEST_MPI_MAX_BYTES=$((1 << 20)) train z1_pieces 2 -cp 1 -x 6 -z 1 -o "$WORK/z1_pieces" -tl "$WORK/z1_pieces.tl"
same_bytes "main.log in pieces" "$WORK/z0_np2/main.log" "$WORK/z1_pieces/main.log"
same_bytes "-tl losses in pieces" "$WORK/z0_np2.tl" "$WORK/z1_pieces.tl"
same_checkpoint_file "model 6 in pieces" same_model "$WORK/z0_np2/model_00000006.bin" "$WORK/z1_pieces/model_00000006.bin"

finish
