#!/usr/bin/env bash
# The emulated GPU trainer (run.sh trainer, which builds it and sets REPO, EMU, WORK
# and MPIRUN_LINE): train_gpt2cp, FP32 and BF16 builds, on the CPU through the CUDA
# emulation, every check on.
#
#   - the FP32 build against the CPU twin, per token (1e-4): the ring over the staged
#     MPI transport, -r 0/1/2 bit for bit, documents (packed, all-gather), Ulysses
#   - over NCCL (emulated over MPI, a device per rank): the ring and Ulysses at np 2,
#     the all-gather and the hybrid at np 4, against the same CPU runs
#   - the solver layout with documents: the ring over NCCL at cp 4; group-cast over
#     MPI at cp 4 (2 stages) and over NCCL at cp 2
#   - a peer stopped in each kind of NCCL operation: the watchdog ends the job
#     (GPT2CP_TIMEOUT) naming the operation
#   - cudaGetDeviceCount failing: the trainer says why, on every rank
#   - -z 1 and its resume bit for bit, llm.c's bf16 model file, the BF16 build
#     against the FP32 build (cp 1, cp 2 round_robin), its -z 1, its checkpoints and
#     their resume
#   - the striped layout, positions per document and loss masks against the CPU twin
#   - one host wait for the device per training step over NCCL (-d, -sl/-sg on)
#   - a sample at cp 2 (the position table's rows gathered from their owners)
set -euo pipefail
cd "$REPO"
read -ra MPIRUN <<< "$MPIRUN_LINE"
make -s train_gpt2cp_cpu
# -n 1: a checkpoint every step (the resume below); -mt 64: a position table of T rows,
# so that at cp > 1 every rank owns rows of it that the tokens use (cp/position_table.cuh);
# a run from a model file sets -mt 0 before its -e (the file brings its own table)
ARGS=(-e d1 -mt 64 -b 1 -t 64 -x 2 -f 0 -l 1e-3 -v 0 -s 0 -n 1)
# compare CPU GPU: the two runs' step losses side by side, and their per-token losses
# within 1e-4
compare() {
    paste <(awk -F'trl:' '/trl:/ { print $2 }' "$WORK/$1/main.log") <(awk -F'trl:' '/trl:/ { print $2 }' "$WORK/$2/main.log")
    paste <(od -An -v -f -w4 "$WORK/$1.tl") <(od -An -v -f -w4 "$WORK/$2.tl") |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d } END { printf "max |token loss diff| %.2e over %d tokens\n", m, NR; exit !(NR > 0 && m < 1e-4) }'
}
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${ARGS[@]}" -o "$WORK/cpu" -tl "$WORK/cpu.tl" > "$WORK/cpu.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -cp 2 -ct mpi -o "$WORK/gpu" -tl "$WORK/gpu.tl" > "$WORK/gpu.out"
compare cpu gpu
# -r: the runs above recompute GELU (-r 1, the default); -r 0 (keep everything) and
# -r 2 (also the layernorms) give their per-token losses bit for bit
for r in 0 2; do
    "${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -cp 2 -ct mpi -r $r -o "$WORK/gpu_r$r" -tl "$WORK/gpu_r$r.tl" > "$WORK/gpu_r$r.out"
    cmp "$WORK/gpu.tl" "$WORK/gpu_r$r.tl"
    echo "-r $r: the per-token losses of -r 1 bit for bit"
done
# documents: the packed layout and the all-gather attention with -dm 1, on text with
# an EOT every few tokens (the GPU's packed path, and its buffers growing with a batch)
source test/lib/binary_files.sh
cp dev/data/austen/austen_val.bin "$WORK/docs.bin"
for t in 3 11 12 30 47 51 70 99 120; do put_u16 "$WORK/docs.bin" $((1024 + 2 * t)) 50256; done
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${ARGS[@]}" -i "$WORK/docs.bin" -sh 0 -dm 1 -o "$WORK/cpu_docs" -tl "$WORK/cpu_docs.tl" > "$WORK/cpu_docs.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -i "$WORK/docs.bin" -sh 0 -dm 1 -cp 2 -cl packed -ca allgather -ct mpi \
    -o "$WORK/gpu_docs" -tl "$WORK/gpu_docs.tl" > "$WORK/gpu_docs.out"
compare cpu_docs gpu_docs
# Ulysses on documents: d1's weights read as 2 heads (NH in the checkpoint header),
# all-to-all over 2 ranks, packed with -dm 1
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${ARGS[@]}" -x 0 -o "$WORK/d1" > "$WORK/d1.out"
cp "$WORK/d1/model_00000000.bin" "$WORK/d1_2heads.bin"
put_i32 "$WORK/d1_2heads.bin" 20 2
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${ARGS[@]}" -mt 0 -e "$WORK/d1_2heads.bin" -i "$WORK/docs.bin" -dm 1 \
    -o "$WORK/cpu_ulysses" -tl "$WORK/cpu_ulysses.tl" > "$WORK/cpu_ulysses.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -mt 0 -e "$WORK/d1_2heads.bin" -i "$WORK/docs.bin" -dm 1 -cp 2 \
    -cl packed -ca ulysses -ct mpi -o "$WORK/gpu_ulysses" -tl "$WORK/gpu_ulysses.tl" > "$WORK/gpu_ulysses.out"
compare cpu_ulysses gpu_ulysses
# NCCL: each emulated rank a device of its own (EMU_DEVICES=4, run.sh), as on a node
# of four GPUs; every algorithm against the CPU runs above, np 2 and 4 each met (the
# ring at np 4 and group-cast at np 2 below, on the solver layout's data)
# eot_text PATH N FIRST STEP MULT MOD: a token file of the Austen text's first N
# tokens with an EOT at FIRST and then after every STEP + (t * MULT) % MOD tokens
# (documents of varied length)
eot_text() {
    python3 - "$@" dev/data/austen/austen_val.bin <<'PY'
import struct, sys
from array import array
path, (n, t, step, mult, mod), source = sys.argv[1], map(int, sys.argv[2:7]), sys.argv[7]
with open(source, 'rb') as f:
    f.read(1024)
    tokens = array('H'); tokens.frombytes(f.read())
while t < n:
    tokens[t] = 50256
    t += step + (t * mult) % mod
tokens = tokens[:n]
with open(path, 'wb') as f:
    f.write(struct.pack('<256i', 20240520, 1, n, *[0] * 253)); f.write(tokens.tobytes())
PY
}
nccl() {
    local name=$1 np=$2 reference=$3
    shift 3
    "${MPIRUN[@]}" -np "$np" "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -ct nccl -o "$WORK/$name" -tl "$WORK/$name.tl" "$@" \
        > "$WORK/$name.out"
    printf "%s: " "$name"
    compare "$reference" "$name" | tail -n 1
}
nccl nccl_ring_cp2 2 cpu -cp 2
nccl nccl_allgather_cp4 4 cpu_docs -i "$WORK/docs.bin" -sh 0 -dm 1 -cp 4 -cl round_robin -ca allgather
nccl nccl_ulysses_cp2 2 cpu_ulysses -mt 0 -e "$WORK/d1_2heads.bin" -i "$WORK/docs.bin" -dm 1 -cp 2 -cl packed -ca ulysses
nccl nccl_hybrid_cp4 4 cpu_ulysses -mt 0 -e "$WORK/d1_2heads.bin" -i "$WORK/docs.bin" -dm 1 -cp 4 -cl round_robin \
    -ca hybrid -cu 2
# The solver layout (-cl solver): chunks of 64 placed per batch by the masked area of
# their queries and the documents' locality, on a row of 256 tokens (4 chunks) with an
# EOT every few to few dozen tokens and -dm 1, against the CPU twin at cp 1: the ring
# over NCCL at cp 4 (a chunk a rank)
eot_text "$WORK/solver_docs.bin" 1024 2 3 11 41
SOLVER=(-t 256 -mt 256 -i "$WORK/solver_docs.bin" -sh 0 -dm 1)
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${ARGS[@]}" "${SOLVER[@]}" -o "$WORK/cpu_solver" -tl "$WORK/cpu_solver.tl" \
    > "$WORK/cpu_solver.out"
nccl nccl_solver_ring_cp4 4 cpu_solver "${SOLVER[@]}" -cp 4 -cl solver -cc 64
# Group-cast (-ca groupcast: each K/V token only to the ranks whose queries see it, in
# -co stages) on the same data and layout, against the same CPU run: over MPI at cp 4
# in 2 stages (exchanges in flight while blocks are attended), over NCCL at cp 2 (the
# GPU test runs it over NCCL in as many stages as peers)
for run in "mpi 4 2" "nccl 2 1"; do
    read -r ct cp stages <<< "$run"
    name=groupcast_${ct}_cp${cp}_co$stages
    "${MPIRUN[@]}" -np "$cp" "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" "${SOLVER[@]}" -cp "$cp" -cl solver -ca groupcast \
        -co "$stages" -ct "$ct" -o "$WORK/$name" -tl "$WORK/$name.tl" > "$WORK/$name.out"
    printf "%s: " "$name"
    compare cpu_solver "$name" | tail -n 1
done
# A peer that stops (SIGSTOP, EMU_NCCL_STOP) as its device posts an NCCL operation:
# the other rank waits in that operation, its watchdog sees no progress for
# GPT2CP_TIMEOUT seconds and ends the job, naming the operation (the peer stopped
# is the broadcast's root, rank 0, or else rank 1). The 2-head model: Ulysses'
# all-to-all has sends of its own (no ring exchange in it).
stopped() {
    local kind=$1 verb=$2 rank=$3
    shift 3
    local out=$WORK/stopped_$kind.out
    set +e
    GPT2CP_TIMEOUT=10 EMU_NCCL_STOP=$kind EMU_NCCL_STOP_RANK=$rank timeout 300 "${MPIRUN[@]}" -np 2 \
        "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -x 1 -n 0 -ct nccl -cp 2 -o "$WORK/stopped_$kind" "$@" > "$out" 2>&1
    local rc=$?
    set -e
    if [[ $rc -eq 0 || $rc -eq 124 ]] || ! grep -q "no progress from .* in $verb (GPT2CP_TIMEOUT=10)" "$out"; then
        echo "a rank stopped in NCCL $kind: exit $rc, no watchdog line naming $verb"
        tail -n 20 "$out"
        exit 1
    fi
    echo "rank $rank stopped in NCCL $kind: $(grep -m 1 -o "no progress from .* in $verb" "$out")"
}
stopped broadcast broadcast 0                  # the start: rank 0's weights to every rank
stopped all_gather all_gather 1                # the step's coordinates, before the first layer
stopped all_reduce all_reduce_sum 1            # the step's count of valid targets
stopped send all_to_all_v 1                    # the position table's rows, before the first layer
# -z 1: the position table whole on every rank (nothing sent before the attention)
stopped send "ring exchange" 1 -z 1            # the first K/V block around the ring
stopped reduce_scatter reduce_scatter_sum 1 -ca allgather # dK, dV home from the all-gather
stopped send all_to_all 1 -z 1 -mt 0 -e "$WORK/d1_2heads.bin" -ca ulysses
stopped send all_to_all_v 1 -z 1 -ca groupcast  # rank 0's only sender of K/V: named
# cudaGetDeviceCount failing (46: the devices busy or unavailable) is said as what it
# is, by every rank, not as "no CUDA device found"
set +e
EMU_DEVICE_ERROR=46 "${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -cp 2 -o "$WORK/devices_busy" \
    > "$WORK/devices_busy.out" 2>&1
rc=$?
set -e
lines=$(grep -c "cudaGetDeviceCount failed: CUDA-capable device(s) is/are busy or unavailable (cudaErrorDevicesUnavailable)" "$WORK/devices_busy.out" || true)
if [[ $rc -eq 0 || $lines -lt 1 ]]; then
    echo "cudaGetDeviceCount failing: exit $rc, the error said $lines time(s)"
    cat "$WORK/devices_busy.out"
    exit 1
fi
echo "cudaGetDeviceCount failing: said as it is, exit $rc"
# resume_at_1 RUN NAME: $WORK/NAME holding RUN's checkpoint of step 1 (written in its
# run on to step 2, -n 1) and its main.log, for a run that resumes there (-y 1): the
# resume cuts main.log back to the checkpoint
resume_at_1() {
    mkdir "$WORK/$2"
    cp "$WORK/$1"/{DONE_00000001,model_00000001.bin,state_00000001_*.bin,main.log} "$WORK/$2"
}
# -z 1 (ZeRO-1): each rank's AdamW shard updated on the device, the parameters
# all-gathered over the world's device transport: -z 0's main.log, per-token losses
# and weights bit for bit, state files of half the size; and its resume: from its
# checkpoint of step 1, -y 1 on to step 2 gives main.log and the step-2 weights bit
# for bit (each rank's AdamW shard through the host copy both ways; the -z 0 resume
# is the BF16 build's below)
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -cp 2 -ct mpi -z 1 -o "$WORK/gpu_z1" -tl "$WORK/gpu_z1.tl" > "$WORK/gpu_z1.out"
diff "$WORK/gpu/main.log" "$WORK/gpu_z1/main.log"
cmp "$WORK/gpu.tl" "$WORK/gpu_z1.tl"
same_model "$WORK/gpu/model_00000002.bin" "$WORK/gpu_z1/model_00000002.bin"
for r in 00000 00001; do
    z0=$(stat -c %s "$WORK/gpu/state_00000002_$r.bin") z1=$(stat -c %s "$WORK/gpu_z1/state_00000002_$r.bin")
    [[ $((2 * (z1 - STATE_HEADER_BYTES))) -eq $((z0 - STATE_HEADER_BYTES)) ]] || { echo "-z 1 state of rank $r: $z1 bytes, -z 0: $z0"; exit 1; }
done
resume_at_1 gpu_z1 gpu_z1_resume
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -cp 2 -ct mpi -z 1 -y 1 -o "$WORK/gpu_z1_resume" > "$WORK/gpu_z1_resume.out"
grep -q '^resuming from step 1: ' "$WORK/gpu_z1_resume.out"
diff "$WORK/gpu/main.log" "$WORK/gpu_z1_resume/main.log"
same_model "$WORK/gpu/model_00000002.bin" "$WORK/gpu_z1_resume/model_00000002.bin" # but the run id (binary_files.sh)
echo "-z 1: -z 0's main.log, per-token losses and weights bit for bit, state files halved, resume at step 1 bit for bit"
# llm.c's bf16 model file (version 5, written by test/lib/llmc_files.py): the trainer
# loads it and trains as the CPU twin does from its fp32 twin (the same weights)
mkdir -p "$WORK/bf16_files"
python3 test/lib/llmc_files.py bf16_models "$WORK/bf16_files" > /dev/null
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${ARGS[@]}" -mt 0 -e "$WORK/bf16_files/exact_v3.bin" -i "$WORK/bf16_files/tokens.bin" -o "$WORK/cpu_v3" -tl "$WORK/cpu_v3.tl" > "$WORK/cpu_v3.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -mt 0 -e "$WORK/bf16_files/exact_v5.bin" -i "$WORK/bf16_files/tokens.bin" -cp 2 -ct mpi -o "$WORK/gpu_v5" -tl "$WORK/gpu_v5.tl" > "$WORK/gpu_v5.out"
compare cpu_v3 gpu_v5
echo "-e a version 5 (bf16) file: the CPU twin's losses from its version 3 twin"
# BF16 vs FP32: the per-step training loss over 20 steps at cp 1 and at cp 2
# round_robin, within BF16_LOSS_TOL (docs/DESIGN.md section 5: measured, and
# why). The model is d2 (2 layers, 2 heads) cut to a vocabulary of 256 and 64
# positions, on the Austen text's 255 most frequent tokens and one token for the
# rest, so that 20 emulated steps take seconds, not minutes (the classifier over
# GPT-2's 50257 tokens is most of a d1 step)
BF16_LOSS_TOL=0.02
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu -e d2 -b 1 -t 32 -x 0 -n 1 -v 0 -s 0 -o "$WORK/d2" > "$WORK/d2.out"
python3 test/lib/llmc_files.py small "$WORK/d2/model_00000000.bin" "$WORK/small.bin" dev/data/austen/austen_train.bin \
    "$WORK/small_train.bin" 256 64
SMALL=(-e "$WORK/small.bin" -i "$WORK/small_train.bin" -j "$WORK/small_train.bin" -b 1 -t 32 -x 20 -f 0 -l 1e-3 -v 0 -s 0 -n 0 -ct mpi)
for run in "1 contiguous" "2 round_robin"; do
    read -r cp layout <<< "$run"
    # the two builds' runs side by side (independent jobs: both cores busy at cp 1)
    pids=()
    for p in FP32 BF16; do
        "${MPIRUN[@]}" -np $cp "$WORK/train_gpt2cp_$p" "${SMALL[@]}" -cp $cp -cl $layout -o "$WORK/${p}_cp${cp}_$layout" \
            > "$WORK/${p}_cp${cp}_$layout.out" & pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    paste <(awk -F'trl:' '/trl:/ { print $2 + 0 }' "$WORK/FP32_cp${cp}_$layout/main.log") \
          <(awk -F'trl:' '/trl:/ { print $2 + 0 }' "$WORK/BF16_cp${cp}_$layout/main.log") |
        awk -v what="cp $cp $layout" -v tol=$BF16_LOSS_TOL '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
            END { printf "BF16 vs FP32, %s: max |dloss| %.2e over %d steps (tol %g)\n", what, m, NR, tol; exit !(NR == 20 && m <= tol) }'
done
# the BF16 build at -z 1: each rank updates its shard of the master weights and their
# bf16 copy, the other shards come gathered in fp32 and are rounded: the first 2 steps
# of -z 0's main.log bit for bit (a constant learning rate: the same steps)
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_BF16" "${SMALL[@]}" -x 2 -cp 2 -cl round_robin -z 1 -o "$WORK/BF16_z1" > "$WORK/BF16_z1.out"
diff <(head -n 2 "$WORK/BF16_cp2_round_robin/main.log") "$WORK/BF16_z1/main.log"
echo "BF16 -z 1: the first 2 steps of -z 0's main.log bit for bit"
# the BF16 build's checkpoints: llm.c's bf16 model files (version 5, 1024 + 2 bytes a
# parameter) and the fp32 master weights in the state files, so that a resume from
# the checkpoint of step 1 gives the 2-step run's main.log and step-2 model file bit
# for bit (-z 0: the AdamW moments and master weights through the host copy both ways)
CKPT=(-e "$WORK/small.bin" -i "$WORK/small_train.bin" -b 1 -t 32 -x 2 -f 0 -l 1e-3 -v 0 -s 0 -n 1 -ct mpi -cp 2)
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_BF16" "${CKPT[@]}" -o "$WORK/BF16_ckpt" > "$WORK/BF16_ckpt.out"
resume_at_1 BF16_ckpt BF16_resume
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_BF16" "${CKPT[@]}" -y 1 -o "$WORK/BF16_resume" > "$WORK/BF16_resume.out"
grep -q '^resuming from step 1: ' "$WORK/BF16_resume.out"
python3 - "$WORK/BF16_ckpt/model_00000002.bin" <<'PY'
import os, struct, sys
h = struct.unpack('<256i', open(sys.argv[1], 'rb').read(1024))
maxT, V, L, NH, C, Vp = h[2:8]
n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
size = os.path.getsize(sys.argv[1])
if h[1] != 5 or size != 1024 + 2 * n: sys.exit(f"BF16 checkpoint: version {h[1]}, {size} bytes; expected 5, {1024 + 2 * n}")
PY
diff "$WORK/BF16_ckpt/main.log" "$WORK/BF16_resume/main.log"
same_model "$WORK/BF16_ckpt/model_00000002.bin" "$WORK/BF16_resume/model_00000002.bin"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_BF16" "${ARGS[@]}" -mt 0 -e "$WORK/bf16_files/exact_v5.bin" -i "$WORK/bf16_files/tokens.bin" -cp 2 -ct mpi -x 1 -o "$WORK/gpu_v5_bf16" > "$WORK/gpu_v5_bf16.out"
echo "BF16 checkpoints: version 5 model files, resume at step 1 bit for bit; the BF16 build trains from llm.c's v5 file"
# The sharder contract's striped layout, positions that restart at each document
# (-rp 1) and loss masks (-lm 1), on the GPU: the FP32 build at cp 2 (striped over
# the ring, packed over the all-gather) against the CPU twin at cp 1, both with all
# three and -dm 1, on text with an EOT every few tokens and a mask that leaves out
# runs of targets: per-step losses and per-token losses on the learned targets within
# 1e-4, NaN on exactly the masked ones; and with -d, two micro-batches holding
# different numbers of learned targets against the CPU twin's one batch of both rows
eot_text "$WORK/sharder.bin" 400 3 5 7 13
python3 - "$WORK/sharder.bin" <<'PY'
import struct, sys
path, n = sys.argv[1], 400
mask = bytes(0 if (j // 6) % 3 == 1 else 1 for j in range(n))
with open(path[:-4] + '.mask', 'wb') as f:
    f.write(struct.pack('<256i', 20240613, 1, n, *[0] * 253)); f.write(mask)
PY
SHARDER=(-e d1 -mt 64 -t 64 -x 2 -f 0 -l 1e-3 -v 0 -s 0 -sh 0 -dm 1 -rp 1 -lm 1 -i "$WORK/sharder.bin")
# compare_masked CPU GPU: step losses and learned per-token losses within 1e-4, NaN alike
compare_masked() {
    python3 - "$WORK/$1" "$WORK/$2" <<'PY'
import math, re, sys
from array import array
def steps(d): return [float(x) for x in re.findall(r'^s:\d+ trl:(\S+)', open(f'{d}/main.log').read(), re.M)]
def losses(d): a = array('f'); a.frombytes(open(f'{d}.tl', 'rb').read()); return a
a, b = sys.argv[1:3]
sa, sb, ta, tb = steps(a), steps(b), losses(a), losses(b)
assert len(sa) == len(sb) == 2 and len(ta) == len(tb) > 0, 'runs of other lengths'
masked = [i for i in range(len(ta)) if math.isnan(ta[i])]
assert masked == [i for i in range(len(tb)) if math.isnan(tb[i])], 'NaN at other places'
assert 0 < len(masked) < len(ta), f'{len(masked)} of {len(ta)} targets masked'
dt = max(abs(ta[i] - tb[i]) for i in range(len(ta)) if not math.isnan(ta[i]))
ds = max(abs(x - y) for x, y in zip(sa, sb))
print(f'{b}: max |step loss diff| {ds:.2e}, max |token loss diff| {dt:.2e} over {len(ta) - len(masked)} learned, {len(masked)} masked alike')
sys.exit(not (ds < 1e-4 and dt < 1e-4))
PY
}
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${SHARDER[@]}" -b 1 -o "$WORK/sharder_cpu" -tl "$WORK/sharder_cpu.tl" > "$WORK/sharder_cpu.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${SHARDER[@]}" -b 1 -cp 2 -cl striped -ct mpi -o "$WORK/sharder_striped" \
    -tl "$WORK/sharder_striped.tl" > "$WORK/sharder_striped.out"
compare_masked sharder_cpu sharder_striped
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${SHARDER[@]}" -b 1 -cp 2 -cl packed -ca allgather -ct mpi \
    -o "$WORK/sharder_packed" -tl "$WORK/sharder_packed.tl" > "$WORK/sharder_packed.out"
compare_masked sharder_cpu sharder_packed
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${SHARDER[@]}" -b 2 -o "$WORK/sharder_cpu_b2" -tl "$WORK/sharder_cpu_b2.tl" > "$WORK/sharder_cpu_b2.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${SHARDER[@]}" -b 1 -d 128 -cp 2 -cl striped -ct mpi \
    -o "$WORK/sharder_accumulated" -tl "$WORK/sharder_accumulated.tl" > "$WORK/sharder_accumulated.out"
compare_masked sharder_cpu_b2 sharder_accumulated
echo "striped, -rp 1 and -lm 1 on the GPU: the CPU twin's losses, masked targets alike, -d with masks"
# One host wait per training step (GPT2CP_TEST_HOST_WAITS=1: each rank prints how often
# each step waited for the device): over NCCL at cp 2, -d with two micro-batches of
# different learned targets and the outlier detectors on (-sl, -sg: their decision
# needs the loss and norm before the update), every step of every rank waits once,
# and the run gives the CPU twin's step losses (the -d case above's reference)
GPT2CP_TEST_HOST_WAITS=1 "${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${SHARDER[@]}" -b 1 -d 128 -cp 2 -cl striped \
    -ct nccl -sl 3 -sg 3 -o "$WORK/host_waits" > "$WORK/host_waits.out"
once=$(grep -c '^rank [01] step [01]: 1 host wait(s)$' "$WORK/host_waits.out" || true)
if [[ $once -ne 4 || $(grep -c 'host wait' "$WORK/host_waits.out") -ne 4 ]]; then
    echo "host waits: expected one a step on each rank (2 ranks, 2 steps), got:"
    grep 'host wait' "$WORK/host_waits.out"
    exit 1
fi
paste <(awk -F'trl:' '/trl:/ { print $2 + 0 }' "$WORK/sharder_cpu_b2/main.log") \
      <(awk -F'trl:' '/trl:/ { print $2 + 0 }' "$WORK/host_waits/main.log") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
        END { printf "one host wait a step (NCCL, cp 2, -d, -sl/-sg), the CPU twin'"'"'s step losses within %.2e\n", m; exit !(NR == 2 && m < 1e-4) }'
# A sample at cp 2, where each rank holds half of the position table's weights: the
# rows of its 40 positions (both ranks' rows) gathered from their owners, it is the
# cp 1 sample token for token (the same unsharded forward passes, the same weights)
sample_of() { grep -A 2 '^generating:' "$WORK/$1.out" | tail -n 1; }
"${MPIRUN[@]}" -np 1 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -x 0 -n 0 -s 1 -g 40 -o "$WORK/sample_cp1" > "$WORK/sample_cp1.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -x 0 -n 0 -s 1 -g 40 -cp 2 -ct mpi -o "$WORK/sample_cp2" \
    > "$WORK/sample_cp2.out"
if [[ -z $(sample_of sample_cp1) || $(sample_of sample_cp1) != "$(sample_of sample_cp2)" ]]; then
    echo "the cp 2 sample ($(sample_of sample_cp2)) is not cp 1's ($(sample_of sample_cp1))"
    exit 1
fi
echo "a sample at cp 2 (the position table's rows from their owners): cp 1's, token for token"
echo "emulated trainer: $SECONDS s"
