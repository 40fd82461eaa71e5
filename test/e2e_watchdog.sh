#!/usr/bin/env bash
# A rank that stops answering (SIGSTOP: alive, silent) ends the job through the
# progress watchdog (cp/comm_watchdog.h), and a healthy run is never cut short by it.
# On the CPU trainer:
#   1. GPT2CP_TIMEOUT=3, a rank SIGSTOPped after its second step: mpirun exits
#      non-zero within 3 + 20 s, no trainer process is left, and the lines read
#      'rank R: no progress from rank P for 3 s in VERB (GPT2CP_TIMEOUT=3)' with P
#      the stopped rank (or 'ranks P, Q': the ranks that have not reached a
#      collective, P among them). Cases: rank 1 of cp 2; rank 0 of cp 2; rank 3 of cp 2 x dp 2
#      (world ranks across a cp group and the world's all-reduce); rank 1 of cp 2
#      writing a checkpoint every step (the checkpoint's barriers)
#   2. GPT2CP_TIMEOUT=1 on a healthy cp 2 run that lasts at least 3 times as long:
#      it passes (the timeout bounds a wait without progress, not the total wait)
#   3. GPT2CP_TIMEOUT of 'abc', '0', '-1', 'nan', '': one error line naming it
#
#   bash test/e2e_watchdog.sh      (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=e2e_watchdog
source "$(dirname "$0")/lib/e2e_lib.sh"

BASE=(-e d1 -b 2 -t 64 -v 0 -s 0 -n 0)

# ---- 1. a stopped rank
# stop_rank NP CP RANK [NAME FLAGS...]: a long run, rank RANK stopped after step 2
stop_rank() {
    local np=$1 cp=$2 rank=$3
    local name=${4:-stop_np${np}_r$rank}
    shift $(($# < 4 ? $# : 4))
    local out=$WORK/$name.out
    GPT2CP_TIMEOUT=3 signal_mid_run "$name" "$np" "$rank" STOP 2 "${BASE[@]}" -cp "$cp" -x 100000 "$@" || return 0
    local line
    # the first line may come from a rank of another cp group, which names both
    # ranks of the stopped rank's group: neither has reached the world's collective
    line=$(grep -E -m1 -- "rank [0-9]+: no progress from ranks? ([0-9]+, )*$rank(, [0-9]+)* for 3 s in [a-z_ ]+ \(GPT2CP_TIMEOUT=3\)$" "$out" || true)
    if [[ $RUN_RC -ne 0 && -n $line ]] && awk -v s="$RUN_SECONDS" 'BEGIN { exit !(s < 23) }'; then
        echo "ok   $name: mpirun exited $RUN_RC $RUN_SECONDS s after the stop: $line"
    else
        fail "$name: rc $RUN_RC after $RUN_SECONDS s; expected a non-zero exit within 23 s and a line naming rank $rank"
        tail -n 15 "$out"
    fi
    # and so does every other line of that kind, where every rank waits on the
    # stopped one directly (one cp group); across groups (dp > 1) a rank waiting in
    # the world's collective can name a rank that is itself waiting (see the note in
    # cp/comm_mpi.h), so there only the first line is held to it
    [[ $np -eq $cp ]] || return 0
    local wrong
    wrong=$(grep -E -- "no progress from" "$out" | grep -vE -- "no progress from ranks? ([0-9]+, )*$rank[ ,]" || true)
    if [[ -n $wrong ]]; then fail "$name: a line does not name rank $rank: $wrong"; fi
}

echo "== a stopped rank ends the job, named"
stop_rank 2 2 1
stop_rank 2 2 0
stop_rank 4 2 3
# a checkpoint every step: the stop lands among the checkpoint's barriers and the
# resume-step broadcast, train/'s collectives (train/job_comm.h), watched too
rm -rf "$WORK/stop_checkpointing"
stop_rank 2 2 1 stop_checkpointing -n 1

# ---- 2. a healthy run with a short timeout
echo
echo "== a healthy run longer than the timeout"
start=$SECONDS
rc=0
GPT2CP_TIMEOUT=1 timeout 300 "${LAUNCH[@]}" -np 2 "$TRAINER" "${BASE[@]}" -cp 2 -x 80 -o "$WORK/healthy" \
    >"$WORK/healthy.out" 2>&1 || rc=$?
seconds=$((SECONDS - start))
if [[ $rc -eq 0 && $seconds -ge 3 ]] && grep -q "^step  *80/80 " "$WORK/healthy.out"; then
    echo "ok   GPT2CP_TIMEOUT=1: 80 steps in $seconds s, exit 0"
else
    fail "healthy run with GPT2CP_TIMEOUT=1: rc $rc after $seconds s (expected exit 0 after at least 3 s)"
    tail -n 10 "$WORK/healthy.out"
fi

# ---- 3. bad values
echo
echo "== bad GPT2CP_TIMEOUT values"
for value in abc 0 -1 nan ''; do
    out=$WORK/bad_timeout.out
    rc=0
    GPT2CP_TIMEOUT=$value timeout 60 "${LAUNCH[@]}" -np 2 "$TRAINER" "${BASE[@]}" -cp 2 -x 1 -o "$WORK/bad" \
        >"$out" 2>&1 || rc=$?
    n=$(grep -c '^error: ' "$out" || true)
    if [[ $rc -ne 0 && $rc -ne 124 && $n -eq 1 ]] &&
        grep -q "^error: GPT2CP_TIMEOUT='$value': expected a positive number of seconds" "$out"; then
        echo "ok   GPT2CP_TIMEOUT='$value': rc $rc: $(grep -m1 '^error: ' "$out")"
    else
        fail "GPT2CP_TIMEOUT='$value': rc $rc, $n error line(s)"
        tail -n 5 "$out"
    fi
done

echo
finish
