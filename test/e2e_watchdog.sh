#!/usr/bin/env bash
# A rank that stops answering (SIGSTOP: alive, silent) ends the job through the
# progress watchdog (cp/comm_watchdog.h), and a healthy run is never cut short by it.
# On the CPU trainer:
#   1. GPT2CP_TIMEOUT=3, a rank SIGSTOPped after its second step: mpirun exits
#      non-zero within 3 + 20 s, no trainer process is left, and the lines read
#      'rank R: no progress from rank P for 3 s in VERB (GPT2CP_TIMEOUT=3)' with P
#      the stopped rank (or 'ranks P, Q': the ranks that have not reached a
#      collective, P among them), on every such line. Cases: rank 1 of cp 2; rank 0
#      of cp 2; rank 3 of cp 2 x dp 2 (world ranks across a cp group and the dp
#      groups' all-reduce: ranks of the other cp group wait for ranks that wait
#      themselves, and must not name them); rank 2 of cp 2 x dp 3 (a middle
#      group: stalls spread both ways); rank 1 of cp 2
#      writing a checkpoint every step (the checkpoint's barriers); rank 1 of a
#      Ulysses run (its waits are mostly all-to-alls)
#   1b. every verb of the MPI transport (test_comm_mpi stop VERB: rank 1 stops itself
#      just before it, rank 0 enters it): GPT2CP_TIMEOUT=1 ends the job within
#      1 + 20 s naming rank 1 and the verb
#   2. GPT2CP_TIMEOUT=1 on a healthy cp 2 run that lasts at least 3 times as long:
#      it passes (the timeout bounds a wait without progress, not the total wait)
#   2b. GPT2CP_TIMEOUT=1 on a healthy cp 2 run whose rank 0 samples alone (-g 768)
#      for several seconds while rank 1 waits for it: it passes (the sampling rank's
#      beacons are progress); the samples' durations are measured here from the
#      output, and a sample shorter than twice the timeout fails the test (it
#      would show nothing)
#   3. GPT2CP_TIMEOUT of 'abc', '0', '-1', 'nan', '': one error line naming it
#
#   bash test/e2e_watchdog.sh TEST_COMM_MPI      (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=e2e_watchdog
source "$(dirname "$0")/lib/e2e_lib.sh"
TEST_COMM=${1:?usage: e2e_watchdog.sh TEST_COMM_MPI (the test_comm_mpi binary)}

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
    # a line may come from a rank that waits for several (a collective): it names
    # the silent ones among them
    line=$(grep -E -m1 -- "rank [0-9]+: no progress from ranks? ([0-9]+, )*$rank(, [0-9]+)* for 3 s in [a-z_ ]+ \(GPT2CP_TIMEOUT=3\)$" "$out" || true)
    if [[ $RUN_RC -ne 0 && -n $line ]] && awk -v s="$RUN_SECONDS" 'BEGIN { exit !(s < 23) }'; then
        echo "ok   $name: mpirun exited $RUN_RC $RUN_SECONDS s after the stop: $line"
    else
        fail "$name: rc $RUN_RC after $RUN_SECONDS s; expected a non-zero exit within 23 s and a line naming rank $rank"
        tail -n 15 "$out"
    fi
    # and so does every other line of that kind: across groups (dp > 1) too, where a
    # rank waiting for a rank that waits itself must leave the naming to the one
    # that waits on the stopped rank (cp/comm_watchdog.h)
    local wrong
    wrong=$(grep -E -- "no progress from" "$out" | grep -vE -- "no progress from ranks? ([0-9]+, )*$rank[ ,]" || true)
    if [[ -n $wrong ]]; then fail "$name: a line does not name rank $rank: $wrong"; fi
}

echo "== a stopped rank ends the job, named"
stop_rank 2 2 1
stop_rank 2 2 0
stop_rank 4 2 3
stop_rank 6 2 2
# a checkpoint every step: the stop lands among the checkpoint's barriers and the
# resume-step broadcast, train/'s collectives (train/job_comm.h), watched too
rm -rf "$WORK/stop_checkpointing"
stop_rank 2 2 1 stop_checkpointing -n 1
# Ulysses: the all-to-alls (d2: 2 heads for cp 2)
stop_rank 2 2 1 stop_ulysses -e d2 -ca ulysses

# every verb of the transport, the peer stopped just before it
echo
echo "== a rank stopped before each verb of the MPI transport"
for verb in all_to_all all_gather reduce_scatter_sum all_reduce_sum broadcast barrier ring all_to_all_v; do
    out=$WORK/stop_verb_$verb.out
    start=$SECONDS
    rc=0
    GPT2CP_TIMEOUT=1 timeout 60 "${LAUNCH[@]}" -np 2 "$TEST_COMM" stop $verb >"$out" 2>&1 || rc=$?
    name=$([[ $verb == ring ]] && echo "ring exchange" || echo "$verb")
    if [[ $rc -ne 0 && $rc -ne 124 && $((SECONDS - start)) -le 21 ]] &&
       grep -q "rank 0: no progress from rank 1 for 1 s in $name (GPT2CP_TIMEOUT=1)" "$out"; then
        echo "ok   $verb: rc $rc after $((SECONDS - start)) s: $(grep -m1 'no progress' "$out")"
    else
        fail "$verb: rc $rc after $((SECONDS - start)) s (124: a hang), no line naming rank 1"
        tail -n 5 "$out"
    fi
    left=$(pgrep -f -- "$TEST_COMM stop $verb\$" || true)
    if [[ -n $left ]]; then
        fail "$verb: test_comm_mpi processes left running: $left"
        kill -KILL $left 2>/dev/null || true
    fi
done

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

# a healthy run whose rank 0 samples alone for longer than the timeout; each line
# of the output stamped with the time it arrived
echo
echo "== a healthy run whose rank 0 samples alone for longer than the timeout"
rc=0
set +o pipefail
GPT2CP_TIMEOUT=1 timeout 300 "${LAUNCH[@]}" -np 2 "$TRAINER" "${BASE[@]}" -cp 2 -x 2 -s 1 -g 768 -o "$WORK/sampling" 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done >"$WORK/sampling.out"
rc=${PIPESTATUS[0]}
set -o pipefail
# a sample: from its "generating:" line to the "---" that closes its tokens
longest=$(awk '$2 == "generating:" { start = $1; open = 1; tokens = 0; next }
               open && $2 == "---" && NF == 2 { if (tokens) { d = $1 - start; if (d > m) m = d; n++; open = 0 } next }
               open { tokens = 1 }
               END { printf "%d %.1f", n, m }' "$WORK/sampling.out")
read -r samples seconds <<<"$longest"
if [[ $rc -eq 0 && $samples -eq 2 ]] && awk -v s="$seconds" 'BEGIN { exit !(s >= 2) }'; then
    echo "ok   GPT2CP_TIMEOUT=1: rank 0 sampled alone for up to $seconds s while rank 1 waited; exit 0"
else
    fail "sampling run with GPT2CP_TIMEOUT=1: rc $rc, $samples sample(s), the longest $seconds s (expected exit 0, 2 samples, one of at least 2 s)"
    tail -n 5 "$WORK/sampling.out"
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
