#!/usr/bin/env bash
# When a rank dies or the ranks disagree, every rank exits non-zero, quickly, with
# a line that says which rank and why; a non-finite loss stops training and keeps
# the last good checkpoint. On the CPU trainer, 2 ranks:
#   1. a rank killed with SIGKILL, SIGTERM or SIGSEGV mid-run: mpirun exits non-zero
#      within 30 s (the time is printed) and the output names the rank
#   2. an MPMD launch whose ranks get different -b: one error line naming -b
#   3. ranks whose -i names files of equal size but different tokens (each rank
#      runs in its own directory): one error line naming the -i data
#   4. -l 1e30: the loss turns non-finite; the run stops naming the step, exits
#      non-zero, writes no checkpoint after it, and the last one still resumes
#   5. the token file changed on disk during a run (a token rewritten in place,
#      bytes appended, the file replaced): every rank stops with a line naming
#      the file, instead of training on tokens nobody validated
#
#   bash test/e2e_failures.sh      (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=e2e_failures
source "$(dirname "$0")/lib/e2e_lib.sh"
source "$(dirname "$0")/lib/binary_files.sh" # put_u16

BASE=(-e d1 -b 2 -t 64 -v 0 -s 0 -cp 2)

# ---- 1. a rank killed mid-run
# kill_rank SIGNAL EXPECTED_REGEX: a long run, SIGNAL sent to rank 1 after its first step
kill_rank() {
    local sig=$1 expected=$2
    signal_mid_run "kill_$sig" 2 1 "$sig" 1 "${BASE[@]}" -x 100000 || return 0
    local line
    line=$(grep -E -m1 -- "$expected" "$WORK/kill_$sig.out" || true)
    if [[ $RUN_RC -ne 0 && -n $line ]] && awk -v s="$RUN_SECONDS" 'BEGIN { exit !(s < 30) }'; then
        printf 'ok   SIG%-5s rank 1: mpirun exited %d after %s s: %s\n' "$sig" "$RUN_RC" "$RUN_SECONDS" "$(sed 's/^ *//' <<<"$line")"
    else
        fail "kill $sig: rc $RUN_RC after $RUN_SECONDS s; expected a non-zero exit within 30 s and a line /$expected/"
        tail -n 15 "$WORK/kill_$sig.out"
    fi
}

echo "== a killed rank ends the job"
kill_rank KILL 'process rank 1 .*exited on signal 9'
kill_rank TERM '^rank 1: killed by signal 15 \(SIGTERM\)'
kill_rank SEGV '^rank 1: killed by signal 11 \(SIGSEGV\)'

# ---- 2, 3. ranks that disagree: one error line naming the difference, from rank 0
# expect_one_error NAME REGEX COMMAND...: non-zero exit within 60 s, exactly one
# 'error:' line, matching REGEX
expect_one_error() {
    local name=$1 regex=$2
    shift 2
    local out=$WORK/$name.out rc=0
    timeout 60 "$@" >"$out" 2>&1 || rc=$?
    local n
    n=$(grep -c '^error: ' "$out" || true)
    if [[ $rc -ne 0 && $rc -ne 124 && $n -eq 1 ]] && grep '^error: ' "$out" | grep -qE -- "$regex"; then
        echo "ok   $name: rc $rc: $(grep -m1 '^error: ' "$out")"
    else
        fail "$name: rc $rc, $n error line(s), expected one matching /$regex/"
        tail -n 15 "$out"
    fi
}

echo
echo "== ranks that disagree"
expect_one_error config_mismatch '^error: rank 1: -b is 3, but 2 on rank 0' \
    "${LAUNCH[@]}" -np 1 "$TRAINER" "${BASE[@]}" -x 2 : -np 1 "$TRAINER" "${BASE[@]}" -x 2 -b 3

# the same relative -i in two directories: equal size and header, one token apart
for r in 0 1; do
    mkdir -p "$WORK/rank$r"
    cp dev/data/austen/austen_val.bin "$WORK/rank$r/tokens.bin"
done
put_u16 "$WORK/rank1/tokens.bin" $((1024 + 2 * 777)) 11
DATA=(-i tokens.bin -tk "$REPO_ROOT/dev/data/gpt2_tokenizer.bin" -x 2)
expect_one_error data_mismatch '^error: rank 1: the -i data is 1 file\(s\) of [0-9]+ tokens with fingerprint [0-9a-f]+, but .* on rank 0' \
    "${LAUNCH[@]}" -np 1 -wdir "$WORK/rank0" "$TRAINER" "${BASE[@]}" "${DATA[@]}" \
    : -np 1 -wdir "$WORK/rank1" "$TRAINER" "${BASE[@]}" "${DATA[@]}"

# ---- 4. a non-finite loss
echo
echo "== a non-finite loss stops training"
NAN_DIR=$WORK/nan
expect_one_error nan '^error: step [0-9]+ .*: the loss is (-?nan|-?inf) .*training stopped before the update; the last good checkpoint is step [0-9]+' \
    "${LAUNCH[@]}" -np 2 "$TRAINER" "${BASE[@]}" -l 1e30 -x 20 -n 1 -o "$NAN_DIR"
bad_step=$(sed -nE 's/^error: step ([0-9]+) .*/\1/p' "$WORK/nan.out")
good=$(sed -nE 's/^error: .*the last good checkpoint is step ([0-9]+) .*/\1/p' "$WORK/nan.out")
newest_model=$(find "$NAN_DIR" -name 'model_*.bin' | sort | tail -n 1)
if [[ -n $bad_step && -n $good && $good -eq $bad_step && -f $NAN_DIR/DONE_$(printf %08d "$good") &&
      $newest_model == "$NAN_DIR/model_$(printf %08d "$good").bin" ]]; then
    echo "ok   loss non-finite at step $bad_step; checkpoint $good is the newest, complete (DONE)"
else
    fail "non-finite at step '$bad_step', last good '$good', newest model file '$newest_model'"
fi
# the last good checkpoint loads (its weights are finite and whole) and resumes
rc=0
timeout 60 "${LAUNCH[@]}" -np 2 "$TRAINER" "${BASE[@]}" -x "$good" -y 1 -o "$NAN_DIR" >"$WORK/nan_resume.out" 2>&1 || rc=$?
if [[ $rc -eq 0 ]] && grep -q "^resuming from step $good: " "$WORK/nan_resume.out"; then
    echo "ok   checkpoint $good loads: $(grep -m1 '^resuming' "$WORK/nan_resume.out")"
else
    fail "the last good checkpoint does not resume (rc $rc)"
    tail -n 10 "$WORK/nan_resume.out"
fi

# ---- 5. a token file changed during the run
echo
echo "== a token file changed on disk during the run"
# change_data NAME COMMAND...: a long run on its own small copy of the data (3000
# tokens: an epoch of 23 steps, so that the shard is opened again soon: a file
# replaced by another is found then, the one open is still the validated one);
# once it has stepped, COMMAND (with $DATA as the copy) changes the file
change_data() {
    local name=$1
    shift
    DATA=$WORK/$name.bin
    head -c $((1024 + 2 * 3000)) dev/data/austen/austen_val.bin >"$DATA"
    put_i32 "$DATA" 8 3000
    local out=$WORK/$name.out
    "${LAUNCH[@]}" -np 2 "$TRAINER" "${BASE[@]}" -x 100000 -i "$DATA" >"$out" 2>&1 &
    local launcher=$! waited=0
    until grep -q '^step ' "$out" 2>/dev/null || [[ $waited -gt 600 ]]; do sleep 0.1; waited=$((waited + 1)); done
    "$@"
    local i=0 rc=0
    while kill -0 "$launcher" 2>/dev/null && [[ $i -lt 600 ]]; do sleep 0.05; i=$((i + 1)); done
    if kill -0 "$launcher" 2>/dev/null; then kill -9 "$launcher"; fail "$name: still running 30 s after the change"; fi
    wait "$launcher" || rc=$?
    local line
    line=$(grep -m1 -E "^error: rank [01]: token file '$DATA' changed on disk during the run" "$out" || true)
    if [[ $rc -ne 0 && -n $line ]] && ! grep -qiE 'nan|inf' <(grep '^step ' "$out"); then
        echo "ok   $name: rc $rc: $line"
    else
        fail "$name: rc $rc, no line naming the changed file"
        tail -n 5 "$out"
    fi
}
change_data data_rewritten eval 'put_u16 "$DATA" $((1024 + 2 * 50)) 50000'
change_data data_appended eval 'head -c 64 /dev/zero >>"$DATA"'
change_data data_replaced eval 'cp "$DATA" "$DATA.new" && mv "$DATA.new" "$DATA"'

echo
finish
