#!/usr/bin/env bash
# No blocking MPI call outside the watchdog: every call of the trainers' code that
# waits for other ranks is either non-blocking (posted, then waited for in the
# transport's watched loop: cp/comm_mpi.h) or one that has no non-blocking form
# and runs under the timer of COMM_BLOCKING (cp/comm_watchdog.h). This lists every
# call of a blocking MPI function (collectives, communicator creation, blocking
# point-to-point and waits, MPI_Init and MPI_Finalize) and of NCCL's communicator
# init in the code both trainers are built from, and fails on any not written as
# COMM_BLOCKING("...", call) on its line. A stopped rank then always ends the job
# within GPT2CP_TIMEOUT (test/e2e_hang.sh runs that end to end).
#
#   bash test/blocking_calls.sh
set -euo pipefail
cd "${REPO_ROOT:-$(pwd)}"

blocking='MPI_(Init|Init_thread|Finalize|Barrier|Bcast|Gatherv?|Scatterv?|Allgatherv?|Alltoall[vw]?|Reduce|Allreduce|Reduce_scatter(_block)?|Scan|Exscan|Comm_dup|Comm_dup_with_info|Comm_split|Comm_split_type|Comm_create|Comm_create_group|Intercomm_create|Intercomm_merge|Send|Recv|Ssend|Rsend|Bsend|Sendrecv|Sendrecv_replace|Wait|Waitall|Waitany|Waitsome|Probe|Mprobe)|ncclCommInitRank|ncclCommInitAll'
files=(train_gpt2cp_cpu.c train_gpt2cp.cu train_common.h train/*.h cp/*.h cp/*.cuh llmc/*.h llmc/*.cuh)
# every call: the name followed by an opening parenthesis, outside // comments
calls=$(grep -nE "\\b($blocking)\\(" "${files[@]}" | grep -vE '^[^:]+:[0-9]+: *(//|\*)' || true)
if [[ -z $calls ]]; then
    echo "FAIL: no blocking call found at all: the pattern or the file list is wrong"
    exit 1
fi
unguarded=$(grep -vE 'COMM_BLOCKING\("[A-Za-z_]+", ' <<<"$calls" || true)
total=$(wc -l <<<"$calls")
if [[ -n $unguarded ]]; then
    echo "FAIL: blocking MPI/NCCL calls outside the watchdog (write them as COMM_BLOCKING(\"NAME\", call), or use the transport's non-blocking verbs):"
    echo "$unguarded"
    exit 1
fi
echo "PASS blocking_calls: all $total blocking call(s) of the trainers run under COMM_BLOCKING:"
sed 's/^/    /' <<<"$calls"
