#!/usr/bin/env bash
# The Slurm batch script (scripts/slurm_train.sbatch) under a real Slurm: munged,
# slurmctld and slurmd from Debian's packages, started here on this machine (one
# node of 4 CPUs, on loopback ports of this run's own), torn down after, nothing
# left running. The CPU twin at np 2 and 4 (cp 2; cp 2 x dp 2), submitted with
# `sbatch --wait` through the script (srun starts the ranks over Slurm's PMIx),
# matches the same run under mpirun step for step: main.log and the per-token
# losses (-tl) identical, byte for byte (the same ranks compute the same sums).
# Exit 77 (skipped) with the reason where Slurm cannot start: not root; Slurm not
# installed (scripts/install_deps.sh never installs it, as Debian's packages start its
# daemons as services: CI installs slurm-wlm and munge itself); a daemon that fails,
# named with its own error line from its log.
#
#   bash test/e2e_slurm.sh     (env: see test/lib/e2e_lib.sh)
set -euo pipefail
E2E_NAME=e2e_slurm
source "$(dirname "$0")/lib/e2e_lib.sh"

skip() { echo "SKIP e2e_slurm: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "slurmd runs as root to start jobs; not root here"
for tool in munged mungekey slurmctld slurmd sbatch sinfo scancel; do
    command -v "$tool" > /dev/null ||
        skip "Slurm is not installed (no $tool): apt-get install slurm-wlm munge to run this test"
done

# ---- a one-node cluster in $WORK/slurm
S=$WORK/slurm
mkdir -p "$S/munge" "$S/ctld" "$S/spool"
chmod 700 "$S/munge"
# two free loopback ports (the controller's and the node daemon's)
used_ports=$(ss -Htln 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }' | sort -u)
ports=()
for ((p = 20000 + $$ % 20000; ${#ports[@]} < 2; p++)); do
    grep -qx "$p" <<< "$used_ports" || ports+=("$p")
done
export SLURM_CONF=$S/slurm.conf
cat > "$SLURM_CONF" <<EOF
ClusterName=gpt2cptest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=${ports[0]}
SlurmdPort=${ports[1]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge/socket
CredType=cred/munge
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SchedulerType=sched/builtin
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

daemon_pids=()
teardown() {
    scancel --quiet --partition=test 2>/dev/null || true
    local pid
    for pid in "${daemon_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for _ in $(seq 50); do
        local alive=0
        for pid in "${daemon_pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [[ $alive -eq 0 ]] && break
        sleep 0.2
    done
    for pid in "${daemon_pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    # job steps of this cluster's jobs (slurmstepd) end with their daemon; any left are ended
    for pid in $(pgrep -f "slurmstepd.*" || true); do
        tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" && kill -9 "$pid" 2>/dev/null
    done
    return 0
}
trap teardown EXIT
# daemon_error NAME LOG: why daemon NAME stopped, in its own words: the first fatal
# line of its log or of what it printed when started (NAME.start), else the first
# error line (the cause: the lines after it are its consequences, as slurmd's "No
# filesystem mounted on /sys/fs/cgroup", then "Unable to initialize cgroup plugin",
# then "slurmd initialization failed"), else the last line of either; never blank
daemon_error() {
    local name=$1 log=$2 line
    line=$(grep -hi 'fatal' "$log" "$S/$name.start" 2>/dev/null | head -n 1 || true)
    [[ -n $line ]] || line=$(grep -hi 'error' "$log" "$S/$name.start" 2>/dev/null | head -n 1 || true)
    [[ -n $line ]] || line=$(cat "$log" "$S/$name.start" 2>/dev/null | grep -v '^[[:space:]]*$' | tail -n 1 || true)
    echo "${line:-nothing in its log $log nor in what it printed}"
}
# start NAME PIDFILE LOG COMMAND...: a daemon that forks; its pid is read from PIDFILE
start() {
    local name=$1 pidfile=$2 log=$3
    shift 3
    "$@" > "$S/$name.start" 2>&1 || skip "$name cannot start here: $(daemon_error "$name" "$log")"
    for _ in $(seq 50); do [[ -s $pidfile ]] && break; sleep 0.1; done
    [[ -s $pidfile ]] || skip "$name started but wrote no pid file: $(daemon_error "$name" "$log")"
    daemon_pids+=("$(cat "$pidfile")")
}
mungekey --create --keyfile="$S/munge/key" > /dev/null 2>&1 || skip "mungekey cannot make a key"
start munged "$S/munge/pid" "$S/munge/log" munged --force --socket="$S/munge/socket" --key-file="$S/munge/key" \
    --log-file="$S/munge/log" --pid-file="$S/munge/pid" --seed-file="$S/munge/seed"
start slurmctld "$S/slurmctld.pid" "$S/slurmctld.log" slurmctld -i
start slurmd "$S/slurmd.pid" "$S/slurmd.log" slurmd -N localhost
state=
for _ in $(seq 60); do
    state=$(sinfo -h -o %T 2>/dev/null || true)
    [[ $state == idle ]] && break
    sleep 0.5
done
[[ $state == idle ]] || skip "the Slurm node is '${state:-unknown}', not idle, after 30 s: $(daemon_error slurmd "$S/slurmd.log")"
echo "Slurm up: $(sinfo -h -o '%P %D node(s) %c CPUs %T'), controller port ${ports[0]}"

COMMON=(-e d1 -b 2 -t 64 -x 8 -l 1e-3 -v 4 -m 2 -s 0)
# ---- np 2 (cp 2) and np 4 (cp 2 x dp 2), under mpirun and through the batch script
for np in 2 4; do
    run_flags=(-cp 2 -cl round_robin)
    train "mpirun_np$np" "$np" "${run_flags[@]}" -o "$WORK/mpirun_np$np" -tl "$WORK/mpirun_np$np.tl"
    start_s=$SECONDS
    rc=0
    timeout 300 sbatch --wait --ntasks="$np" --output="$WORK/slurm_np$np.out" scripts/slurm_train.sbatch \
        "$TRAINER" "${COMMON[@]}" "${run_flags[@]}" -o "$WORK/slurm_np$np" -tl "$WORK/slurm_np$np.tl" \
        > "$WORK/sbatch_np$np.out" 2>&1 || rc=$?
    echo "run slurm_np$np (sbatch --ntasks=$np): $((SECONDS - start_s)) s, exit $rc"
    if [[ $rc -ne 0 ]]; then
        fail "the batch job at np $np failed:"
        tail -n 15 "$WORK/sbatch_np$np.out" "$WORK/slurm_np$np.out" 2>/dev/null
        continue
    fi
    grep -q "^gpt2cp: job .* $np rank(s)" "$WORK/slurm_np$np.out" || fail "np $np: the job did not run $np ranks"
    lines=$(wc -l < "$WORK/mpirun_np$np/main.log")
    if cmp -s "$WORK/mpirun_np$np/main.log" "$WORK/slurm_np$np/main.log" &&
            cmp -s "$WORK/mpirun_np$np.tl" "$WORK/slurm_np$np.tl" && [[ $lines -eq 11 ]]; then
        echo "ok   np $np: main.log ($lines lines) and -tl identical to the mpirun run's"
    else
        fail "np $np: the Slurm run differs from the mpirun run (or is short: $lines log lines, expected 11: 8 steps, 3 validations)"
        diff "$WORK/mpirun_np$np/main.log" "$WORK/slurm_np$np/main.log" | head -n 6
    fi
done

teardown
left=0
for pid in "${daemon_pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=$((left + 1)); done
[[ $left -eq 0 ]] || fail "$left Slurm or munge daemon(s) still running after the teardown"
echo "Slurm torn down: munged, slurmctld, slurmd ended"
finish
