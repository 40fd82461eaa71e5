#!/usr/bin/env bash
# Checkpoint and resume (-n, -y) on the CPU trainer, against the uninterrupted run:
#   1. cp 2 round_robin: 20 steps in one go (A), and 10 steps then -y 1 to 20 (B):
#      B's main.log lines and -tl losses of steps 10..19, and its final model and
#      state files, are byte-identical to A's
#   2. resuming the cp 2 checkpoint at cp 1 prints a note and matches A within 1e-4
#   3. crash safety: with the newest step's DONE marker gone, its model file cut
#      short and .tmp leftovers around, -y 1 resumes from the previous complete step
#      (again bit for bit); -y 1 on a directory without a checkpoint starts afresh
#   4. the packed layout with short documents resumes bit for bit too, at dp 1 and
#      at dp 2 (each replica pads its own rows: a per-replica state field)
#   4b. the solver layout (chunks chosen per batch from the documents) resumes bit
#      for bit; resumed with another -cc it says that the shape changed
#   5. resumed at another shape (cp 1, B 1), the -tl file keeps the rows of the 10
#      steps before the checkpoint byte for byte and the new rows follow (of the
#      new shape); so does a copy of the run's files (the -tl file is known by its
#      contents, not its name)
#   6. gradient accumulation (-d: 4 micro-batches a step), shuffled: resumed at
#      step 3, bit for bit; and so under group-cast at cp 3 in 2 stages
#   7. a checkpoint written with -dm 1 -rp 1 -lm 1 resumes with the same flags, and
#      with any one of them 0 refuses in one line naming the flag and both values,
#      leaving main.log as it was
#
#   bash test/e2e_resume.sh        (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=e2e_resume
source "$(dirname "$0")/lib/e2e_lib.sh"

B=2 T=64
# warmup over 15 steps, so that the schedule is mid-warmup at the resume point;
# validation every 10 steps and a checkpoint every 10
COMMON=(-e d1 -b $B -t $T -l 1e-3 -u 15 -v 10 -m 2 -s 0 -n 10)
STEP_BYTES=$((B * T * 4)) # one step of -tl at dp 1
# same_checkpoint_file WHAT same_model|same_state FILE1 FILE2: the checkpoint files
# are identical but for the run id of the job that wrote them (binary_files.sh)
same_checkpoint_file() {
    if "$2" "$3" "$4"; then echo "ok   $1 identical but for the run id ($(stat -c %s "$3") bytes)"; else fail "$1: $3 and $4 differ"; fi
}
# same_resumed_run WHAT WHOLE RESUMED STEP: the run cut and resumed in $WORK/RESUMED
# ended as the uninterrupted one in $WORK/WHOLE did: main.log, -tl and the model at STEP
same_resumed_run() {
    local model
    model=$(printf 'model_%08d.bin' "$4")
    same_bytes "$1 main.log" "$WORK/$2/main.log" "$WORK/$3/main.log"
    same_bytes "$1 -tl" "$WORK/$2.tl" "$WORK/$3.tl"
    same_checkpoint_file "$1 model at step $4" same_model "$WORK/$2/$model" "$WORK/$3/$model"
}
# train lines of steps FIRST..LAST of a main.log
trl_lines() { awk -F'[: ]' -v a="$2" -v b="$3" '$3 == "trl" && $2 >= a && $2 <= b' "$1"; }

source "$(dirname "$0")/lib/binary_files.sh" # short_documents, same_model, same_state

# same_bytes WHAT FILE1 FILE2 [SKIP]: the files are identical (from byte SKIP on)
same_bytes() {
    local skip=${4:-0}
    if ! cmp -s <(tail -c +$((skip + 1)) "$2") <(tail -c +$((skip + 1)) "$3"); then
        fail "$1: $2 and $3 differ$( [[ $skip -gt 0 ]] && echo " after byte $skip")"
    else
        echo "ok   $1 identical ($(($(stat -c %s "$2") - skip)) bytes)"
    fi
}

# ---- 1. cp 2 round_robin: uninterrupted vs interrupted at step 10
echo "== resume at the same cp: bit for bit"
train A 2 -cp 2 -cl round_robin -x 20 -o "$WORK/A" -tl "$WORK/A.tl"
train B_first 2 -cp 2 -cl round_robin -x 10 -o "$WORK/B" -tl "$WORK/B.tl"
train B_resumed 2 -cp 2 -cl round_robin -x 20 -y 1 -o "$WORK/B" -tl "$WORK/B.tl"
grep -q '^resuming from step 10: ' "$WORK/B_resumed.out" || fail "B_resumed does not say it resumed from step 10"
if grep -q '^note:' "$WORK/B_resumed.out"; then fail "B_resumed printed a note: $(grep -m1 '^note:' "$WORK/B_resumed.out")"; fi
if [[ $(trl_lines "$WORK/A/main.log" 10 19 | wc -l) -ne 10 ]]; then fail "A's main.log lacks steps 10..19"; fi
if [[ "$(trl_lines "$WORK/A/main.log" 10 19)" == "$(trl_lines "$WORK/B/main.log" 10 19)" ]]; then
    echo "ok   main.log trl lines of steps 10..19 identical"
else
    fail "main.log trl lines of steps 10..19 differ:"
    diff <(trl_lines "$WORK/A/main.log" 10 19) <(trl_lines "$WORK/B/main.log" 10 19) || true
fi
# main.log was appended to, nothing repeated: the whole log is A's
same_bytes "main.log" "$WORK/A/main.log" "$WORK/B/main.log"
[[ $(stat -c %s "$WORK/B.tl") -eq $((20 * STEP_BYTES)) ]] || fail "B.tl holds $(stat -c %s "$WORK/B.tl") bytes, expected 20 steps"
same_bytes "-tl losses of steps 10..19" "$WORK/A.tl" "$WORK/B.tl" $((10 * STEP_BYTES))
same_checkpoint_file "final weights" same_model "$WORK/A/model_00000020.bin" "$WORK/B/model_00000020.bin"
for r in 00000 00001; do
    same_checkpoint_file "final state of rank $r" same_state "$WORK/A/state_00000020_$r.bin" "$WORK/B/state_00000020_$r.bin"
done
for f in DONE_00000010 DONE_00000020 model_00000010.bin state_00000010_00001.bin; do
    [[ -f $WORK/A/$f ]] || fail "A wrote no $f"
done

# ---- 2. the cp 2 checkpoint at cp 1: allowed, with a note, close but not bit for bit
echo
echo "== resume at another cp"
mkdir -p "$WORK/C"
cp "$WORK/B"/*00000010* "$WORK/C/"
train C 1 -cp 1 -x 20 -y 1 -o "$WORK/C"
note=$(grep -m1 '^note: the checkpoint was written by 2 rank(s) at cp 2, layout round_robin' "$WORK/C.out" || true)
if [[ -n $note ]]; then echo "ok   note printed: ${note:0:100}..."; else fail "no note about the other cp in C's output"; fi
paste <(trl_lines "$WORK/A/main.log" 10 19) <(trl_lines "$WORK/C/main.log" 10 19) | awk -F'trl:' '
    { split($2, a, /[ \t]/); d = a[1] - $3; if (d < 0) d = -d; if (d > m) m = d; n++ }
    END { printf "max |loss(cp 1 resumed) - loss(cp 2)| over %d steps: %.2e\n", n, m; exit !(n == 10 && m <= 1e-4) }' ||
    fail "cp 1 resumed from cp 2 does not match within 1e-4 over steps 10..19"

# ---- 3. crash safety: an incomplete newest checkpoint is never trusted
echo
echo "== crash in the middle of checkpoint 20"
cp -r "$WORK/A" "$WORK/D"
rm "$WORK/D/DONE_00000020"
truncate -s 4096 "$WORK/D/model_00000020.bin"
touch "$WORK/D/DONE_00000030.tmp" "$WORK/D/model_00000030.bin.tmp"
cp "$WORK/A.tl" "$WORK/D.tl"
train D 2 -cp 2 -cl round_robin -x 20 -y 1 -o "$WORK/D" -tl "$WORK/D.tl"
if grep -q '^resuming from step 10: ' "$WORK/D.out"; then echo "ok   resumed from step 10, the newest complete checkpoint"
else fail "D did not resume from step 10: $(grep -m1 '^resuming\|^error' "$WORK/D.out" || true)"; fi
# A's -tl file held 20 steps: the resumed run cut it back to the 10 before its checkpoint
same_bytes "-tl after resuming a longer file" "$WORK/A.tl" "$WORK/D.tl"
same_checkpoint_file "rewritten checkpoint 20" same_model "$WORK/A/model_00000020.bin" "$WORK/D/model_00000020.bin"
# so did main.log: the steps past checkpoint 10 are not there twice
grep -q "^note: $WORK/D/main.log: [0-9]* line(s) logged after checkpoint 10" "$WORK/D.out" ||
    fail "D does not say that it cut main.log back"
same_bytes "main.log after resuming past a crash" "$WORK/A/main.log" "$WORK/D/main.log"

# a DONE marker whose files went missing: the newest complete checkpoint before it
# takes over, with a note, and the run is again A's bit for bit
echo
echo "== a DONE marker whose files are missing"
# (a missing state file: test/bad_input.sh's state_missing)
for missing in model_00000020.bin; do
    rm -rf "$WORK/F"
    cp -r "$WORK/A" "$WORK/F"
    rm "$WORK/F/$missing"
    cp "$WORK/A.tl" "$WORK/F.tl"
    train F 2 -cp 2 -cl round_robin -x 20 -y 1 -o "$WORK/F" -tl "$WORK/F.tl"
    if grep -q "^note: checkpoint 20 has its DONE marker, but '$WORK/F/$missing' is missing: falling back" "$WORK/F.out" &&
       grep -q '^resuming from step 10: ' "$WORK/F.out"; then
        echo "ok   $missing missing: fell back to step 10 with a note"
    else
        fail "$missing missing: no fallback to step 10 with a note: $(grep -m1 '^note\|^resuming\|^error' "$WORK/F.out" || true)"
    fi
    same_checkpoint_file "final weights after the fallback" same_model "$WORK/A/model_00000020.bin" "$WORK/F/model_00000020.bin"
    same_bytes "main.log after the fallback" "$WORK/A/main.log" "$WORK/F/main.log"
done

# ---- 4. the packed layout (data-dependent length): short documents make the
# batches' padded length grow during the run; the resumed run pads its batches to
# the same length as the uninterrupted one (the state keeps it), so again bit for bit
echo
echo "== packed layout with documents: resume bit for bit"
source "$(dirname "$0")/lib/binary_files.sh" # short_documents
short_documents "$WORK/docs.bin" $((20 * B * T + 1))
PACKED=(-cp 2 -cl packed -dm 1 -i "$WORK/docs.bin")
train P 2 "${PACKED[@]}" -x 20 -o "$WORK/P" -tl "$WORK/P.tl"
train Q_first 2 "${PACKED[@]}" -x 10 -o "$WORK/Q" -tl "$WORK/Q.tl"
train Q_resumed 2 "${PACKED[@]}" -x 20 -y 1 -o "$WORK/Q" -tl "$WORK/Q.tl"
same_resumed_run "packed" P Q 20
# dp 2: each replica's rows pad to their own length, and each replica resumes its own
# (documents all through the data the 18 steps read; validation at the checkpoint;
# at step 12 the replicas' rows pad to 68 and 64 tokens)
short_documents "$WORK/docs_dp2.bin" $((18 * 2 * B * T + 1))
PACKED2=(-cp 2 -cl packed -dm 1 -i "$WORK/docs_dp2.bin" -v 6)
train P2 4 "${PACKED2[@]}" -x 18 -o "$WORK/P2" -tl "$WORK/P2.tl"
train Q2_first 4 "${PACKED2[@]}" -x 12 -o "$WORK/Q2" -tl "$WORK/Q2.tl"
pads=$(for r in 0 2; do od -An -tu8 -j $((1024 + 4 * 8)) -N 8 "$(printf '%s/state_00000012_%05d.bin' "$WORK/Q2" $r)"; done)
read -r pad0 pad1 <<<"$(echo $pads)"
[[ $pad0 -ne $pad1 ]] && echo "ok   the replicas' rows pad to $pad0 and $pad1 tokens at step 12" ||
    fail "both replicas pad to $pad0 tokens: the case shows nothing (other documents are needed)"
train Q2_resumed 4 "${PACKED2[@]}" -x 18 -y 1 -o "$WORK/Q2" -tl "$WORK/Q2.tl"
same_resumed_run "packed dp 2" P2 Q2 18

# ---- 4b. the solver layout: T 128 in chunks of 64, 2 per rank, placed per batch by
# the documents; the chunk size is in the state, and another one is another shape
echo
echo "== solver layout with documents: resume bit for bit"
short_documents "$WORK/docs_solver.bin" $((20 * B * 128 + 1))
SOLVER=(-cp 2 -cl solver -dm 1 -t 128 -i "$WORK/docs_solver.bin")
train S 2 "${SOLVER[@]}" -x 20 -o "$WORK/S" -tl "$WORK/S.tl"
train R_first 2 "${SOLVER[@]}" -x 10 -o "$WORK/R" -tl "$WORK/R.tl"
cp -r "$WORK/R" "$WORK/R128"
train R_resumed 2 "${SOLVER[@]}" -x 20 -y 1 -o "$WORK/R" -tl "$WORK/R.tl"
same_resumed_run "solver" S R 20
train R128_resumed 2 "${SOLVER[@]}" -cc 128 -x 12 -y 1 -o "$WORK/R128"
grep -q "layout solver (chunks of 64), B 2, T 128, this run has 2 rank(s) at cp 2, layout solver (chunks of 128)" \
    "$WORK/R128_resumed.out" && echo "ok   resumed with -cc 128: the note names both chunk sizes" ||
    fail "resumed with -cc 128, no note of the other chunk size: $(grep -m1 '^note: the checkpoint' "$WORK/R128_resumed.out")"

# ---- 5. -tl across a resume at another shape: the rows of earlier steps stay
echo
echo "== -tl: resumed at cp 1, B 1, the rows of the steps before the checkpoint stay"
mkdir -p "$WORK/G"
cp "$WORK/B"/*00000010* "$WORK/G/"
cp "$WORK/A.tl" "$WORK/G.tl" # the 20 steps of the uninterrupted run: its first 10 are the checkpoint's
train G 1 -cp 1 -b 1 -x 12 -y 1 -o "$WORK/G" -tl "$WORK/G.tl"
expected=$((10 * STEP_BYTES + 2 * 1 * T * 4))
[[ $(stat -c %s "$WORK/G.tl") -eq $expected ]] && echo "ok   G.tl: $expected bytes (10 steps of 2 x $T, 2 of 1 x $T)" ||
    fail "G.tl holds $(stat -c %s "$WORK/G.tl") bytes, expected $expected"
cmp -s <(head -c $((10 * STEP_BYTES)) "$WORK/A.tl") <(head -c $((10 * STEP_BYTES)) "$WORK/G.tl") &&
    echo "ok   the rows of steps 0..9 are the uninterrupted run's byte for byte" ||
    fail "the -tl rows of steps 0..9 changed at the resume at another shape"

# ---- 6. gradient accumulation, shuffled
echo
echo "== -d: 4 micro-batches a step, shuffled, resumed at step 3"
ACC=(-cp 2 -d $((4 * B * T)) -sh 1 -n 3 -v 3)
train H 2 "${ACC[@]}" -x 6 -o "$WORK/H" -tl "$WORK/H.tl"
train I_first 2 "${ACC[@]}" -x 3 -o "$WORK/I" -tl "$WORK/I.tl"
train I_resumed 2 "${ACC[@]}" -x 6 -y 1 -o "$WORK/I" -tl "$WORK/I.tl"
same_resumed_run "accumulated" H I 6
ACC_GROUPCAST=(-cp 3 -ca groupcast -co 2 -d $((4 * B * T)) -sh 1 -n 3 -v 3)
train HG 3 "${ACC_GROUPCAST[@]}" -x 6 -o "$WORK/HG" -tl "$WORK/HG.tl"
train IG_first 3 "${ACC_GROUPCAST[@]}" -x 3 -o "$WORK/IG" -tl "$WORK/IG.tl"
train IG_resumed 3 "${ACC_GROUPCAST[@]}" -x 6 -y 1 -o "$WORK/IG" -tl "$WORK/IG.tl"
same_resumed_run "group-cast accumulated" HG IG 6

# ---- 7. -dm, -rp, -lm recorded and compared at resume
echo
echo "== -dm, -rp, -lm: a resume with others refuses"
MASKED=$WORK/masked.bin
cp dev/data/austen/austen_val.bin "$MASKED"
# every third target left out
python3 - "$MASKED" <<'PY'
import struct, sys
path = sys.argv[1]
ntok = struct.unpack('<3i', open(path, 'rb').read(12))[2]
with open(path[:-4] + '.mask', 'wb') as f:
    f.write(struct.pack('<256i', 20240613, 1, ntok, *[0] * 253))
    f.write(bytes(int(j % 3 != 0) for j in range(ntok)))
PY
DOCS=(-cp 2 -i "$MASKED" -j "$MASKED" -n 2 -v 2)
train J_first 2 "${DOCS[@]}" -dm 1 -rp 1 -lm 1 -x 2 -o "$WORK/J"
cp "$WORK/J/main.log" "$WORK/J.log"
for flag in -dm -rp -lm; do
    flags=(-dm 1 -rp 1 -lm 1)
    case $flag in -dm) flags[1]=0 ;; -rp) flags[3]=0 ;; -lm) flags[5]=0 ;; esac
    rc=0
    timeout 300 "${LAUNCH[@]}" -np 2 "$TRAINER" "${COMMON[@]}" "${DOCS[@]}" "${flags[@]}" -x 4 -y 1 -o "$WORK/J" \
        >"$WORK/J_$flag.out" 2>&1 || rc=$?
    [[ $rc -ne 0 ]] || fail "resumed with $flag 0 over a checkpoint of $flag 1"
    [[ $(grep -c '^error: ' "$WORK/J_$flag.out") -eq 1 ]] &&
        grep -qE "^error: (rank 0: )?state file '.*': was written by a run with $flag 1, this run has $flag 0: resume with $flag 1" "$WORK/J_$flag.out" ||
        fail "$flag 0 over $flag 1: not one line naming $flag and both values: $(grep '^error' "$WORK/J_$flag.out")"
    if grep -q '^step' "$WORK/J_$flag.out"; then fail "$flag 0 over $flag 1: a step ran"; fi
done
same_bytes "main.log after the refused resumes" "$WORK/J.log" "$WORK/J/main.log"
train J_resumed 2 "${DOCS[@]}" -dm 1 -rp 1 -lm 1 -x 4 -y 1 -o "$WORK/J"
grep -q '^resuming from step 2: ' "$WORK/J_resumed.out" || fail "the same -dm -rp -lm do not resume"

echo
echo "== -y 1 without a checkpoint starts afresh"
train E 2 -cp 2 -cl round_robin -x 2 -y 1 -o "$WORK/E"
grep -q "^-y 1: no complete checkpoint in $WORK/E: starting from scratch" "$WORK/E.out" ||
    fail "E does not say that it starts from scratch"
[[ "$(trl_lines "$WORK/E/main.log" 0 1)" == "$(trl_lines "$WORK/A/main.log" 0 1)" ]] ||
    fail "E's first steps differ from A's"

echo
finish
