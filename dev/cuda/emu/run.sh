#!/usr/bin/env bash
# Runs the GPU tests and the GPU trainer on the CPU through the CUDA emulation
# (cuda_emu.h): the kernel launches are rewritten as function calls, the sources
# compiled with g++ against the fake CUDA headers of this folder.
#
#     bash dev/cuda/emu/run.sh            the GPU tests, 1 to 4 ranks, in both precisions
#                                         (-DENABLE_FP32 and -DENABLE_BF16, llmc/precision.cuh)
#     bash dev/cuda/emu/run.sh trainer    also train_gpt2cp (-ct mpi; ring, all-gather, Ulysses):
#                                         the FP32 build vs the CPU twin, -r 0/1/2, its resume,
#                                         and -e an llm.c bf16 model file; the BF16 build vs
#                                         the FP32 build
#
# Slow (every thread is a fiber): small sizes only. NCCL is not emulated.
set -euo pipefail
cd "$(dirname "$0")/../../.."
REPO=$(pwd)
EMU=$REPO/dev/cuda/emu
WORK=${BUILD_DIR:-$REPO/build}/emu
rm -rf "$WORK"
mkdir -p "$WORK/src"
# the sources with every kernel<<<grid, block, shared, stream>>>(args) as
# make_launcher(kernel, grid, block, shared, stream)(args)
python3 - "$REPO" "$WORK/src" <<'PY'
import os, re, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
# a kernel name, with its template arguments if any: kernel<<<...>>>( or kernel<P, D><<<...>>>(
LAUNCH = r'(\w+(?:<[^<>;()]*>)?)<<<(.+?)>>>\('
for d in ['cp', 'llmc', 'test', 'train']:
    os.makedirs(os.path.join(dst, d), exist_ok=True)
    for f in os.listdir(os.path.join(src, d)):
        p = os.path.join(src, d, f)
        if not os.path.isfile(p) or not f.endswith(('.h', '.cuh', '.cu', '.c')):
            continue
        s = open(p).read()
        if f.endswith(('.cuh', '.cu')):
            s = s.replace('extern __shared__ float shared[];', 'float *shared = (float *)emu_dynamic_shared;')
            s = re.sub(LAUNCH, r'make_launcher(\1, \2)(', s)
        open(os.path.join(dst, d, f), 'w').write(s)
s = open(os.path.join(src, 'train_gpt2cp.cu')).read()
open(os.path.join(dst, 'train_gpt2cp.cu'), 'w').write(re.sub(LAUNCH, r'make_launcher(\1, \2)(', s))
shutil.copy(os.path.join(src, 'train_common.h'), dst)
PY
CXX=(g++ -x c++ -std=c++17 -O2 -w -I"$EMU" -I"$WORK/src" $(mpicc --showme:compile) -DNO_BLAS -DOMPI_SKIP_MPICXX)
LINK=($(mpicc --showme:link))
MPIRUN=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
export OMP_NUM_THREADS=1
# build NAME SOURCE PRECISION: $WORK/NAME_PRECISION in the background; built waits
# for them all, failing if any failed
BUILDS=()
build() { "${CXX[@]}" -DENABLE_$3 "$WORK/src/$2" -o "$WORK/$1_$3" "${LINK[@]}" & BUILDS+=($!); }
built() { for pid in "${BUILDS[@]}"; do wait "$pid"; done; BUILDS=(); }
for p in FP32 BF16; do
    build test_gpu_kernels test/test_gpu_kernels.cu $p
    build test_gpu_ring_attention test/test_gpu_ring_attention.cu $p
    built
done
# each test's verdict line, and any check that failed
for p in FP32 BF16; do
    echo "== $p"
    "${MPIRUN[@]}" -np 1 "$WORK/test_gpu_kernels_$p" | grep -v '^ok '
    for np in 1 2 3 4; do "${MPIRUN[@]}" -np $np "$WORK/test_gpu_ring_attention_$p" | grep -v '^ok '; done
done
echo "emulated GPU tests: $SECONDS s"
[[ ${1:-} == trainer ]] || exit 0
build train_gpt2cp train_gpt2cp.cu FP32
build train_gpt2cp train_gpt2cp.cu BF16
built
make -s train_gpt2cp_cpu
ARGS=(-e d1 -b 1 -t 64 -x 2 -f 0 -l 1e-3 -v 0 -s 0 -n 1) # -n 1: a checkpoint every step (the resume below)
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
source test/binary_files.sh
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
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${ARGS[@]}" -e "$WORK/d1_2heads.bin" -i "$WORK/docs.bin" -dm 1 \
    -o "$WORK/cpu_ulysses" -tl "$WORK/cpu_ulysses.tl" > "$WORK/cpu_ulysses.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -e "$WORK/d1_2heads.bin" -i "$WORK/docs.bin" -dm 1 -cp 2 \
    -cl packed -ca ulysses -ct mpi -o "$WORK/gpu_ulysses" -tl "$WORK/gpu_ulysses.tl" > "$WORK/gpu_ulysses.out"
compare cpu_ulysses gpu_ulysses
# resume: 1 step, a checkpoint, then -y 1 on to step 2 gives the 2-step run's losses
# and weights bit for bit (the AdamW moments go through the host copy both ways)
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -cp 2 -ct mpi -x 1 -o "$WORK/gpu_resume" > "$WORK/gpu_resume1.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -cp 2 -ct mpi -y 1 -o "$WORK/gpu_resume" > "$WORK/gpu_resume2.out"
grep -q '^resuming from step 1: ' "$WORK/gpu_resume2.out"
diff "$WORK/gpu/main.log" "$WORK/gpu_resume/main.log"
same_model "$WORK/gpu/model_00000002.bin" "$WORK/gpu_resume/model_00000002.bin" # but the run id (binary_files.sh)
echo "resume at step 1: main.log and the step-2 weights bit for bit"
# -z 1 (ZeRO-1): each rank's AdamW shard updated on the device, the parameters
# all-gathered over the world's device transport: -z 0's main.log, per-token losses
# and weights bit for bit, state files of half the size, and its resume bit for bit
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -cp 2 -ct mpi -z 1 -o "$WORK/gpu_z1" -tl "$WORK/gpu_z1.tl" > "$WORK/gpu_z1.out"
diff "$WORK/gpu/main.log" "$WORK/gpu_z1/main.log"
cmp "$WORK/gpu.tl" "$WORK/gpu_z1.tl"
same_model "$WORK/gpu/model_00000002.bin" "$WORK/gpu_z1/model_00000002.bin"
for r in 00000 00001; do
    z0=$(stat -c %s "$WORK/gpu/state_00000002_$r.bin") z1=$(stat -c %s "$WORK/gpu_z1/state_00000002_$r.bin")
    [[ $((2 * (z1 - STATE_HEADER_BYTES))) -eq $((z0 - STATE_HEADER_BYTES)) ]] || { echo "-z 1 state of rank $r: $z1 bytes, -z 0: $z0"; exit 1; }
done
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -cp 2 -ct mpi -z 1 -x 1 -o "$WORK/gpu_z1_resume" > "$WORK/gpu_z1_resume1.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -cp 2 -ct mpi -z 1 -y 1 -o "$WORK/gpu_z1_resume" > "$WORK/gpu_z1_resume2.out"
diff "$WORK/gpu/main.log" "$WORK/gpu_z1_resume/main.log"
same_model "$WORK/gpu/model_00000002.bin" "$WORK/gpu_z1_resume/model_00000002.bin"
echo "-z 1: -z 0's main.log, per-token losses and weights bit for bit, state files halved, resume bit for bit"
# llm.c's bf16 model file (version 5, written by test/llmc_files.py): the trainer
# loads it and trains as the CPU twin does from its fp32 twin (the same weights)
mkdir -p "$WORK/bf16_files"
python3 test/llmc_files.py bf16_models "$WORK/bf16_files" > /dev/null
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu "${ARGS[@]}" -e "$WORK/bf16_files/exact_v3.bin" -i "$WORK/bf16_files/tokens.bin" -o "$WORK/cpu_v3" -tl "$WORK/cpu_v3.tl" > "$WORK/cpu_v3.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_FP32" "${ARGS[@]}" -e "$WORK/bf16_files/exact_v5.bin" -i "$WORK/bf16_files/tokens.bin" -cp 2 -ct mpi -o "$WORK/gpu_v5" -tl "$WORK/gpu_v5.tl" > "$WORK/gpu_v5.out"
compare cpu_v3 gpu_v5
echo "-e a version 5 (bf16) file: the CPU twin's losses from its version 3 twin"
# BF16 vs FP32: the per-step training loss over 20 steps at cp 1, 2 and 4, contiguous
# and round_robin, within BF16_LOSS_TOL (docs/DESIGN.md section 5: measured, and
# why). The model is d2 (2 layers, 2 heads) cut to a vocabulary of 256 and 64
# positions, on the Austen text's 255 most frequent tokens and one token for the
# rest, so that 20 emulated steps take seconds, not minutes (the classifier over
# GPT-2's 50257 tokens is most of a d1 step)
BF16_LOSS_TOL=0.02
"${MPIRUN[@]}" -np 1 ./train_gpt2cp_cpu -e d2 -b 1 -t 32 -x 0 -n 1 -v 0 -s 0 -o "$WORK/d2" > "$WORK/d2.out"
python3 - "$WORK/d2/model_00000000.bin" "$WORK/small.bin" dev/data/austen/austen_train.bin "$WORK/small_train.bin" <<'PY'
import struct, sys
from array import array
from collections import Counter
V, MAXT = 256, 64
model_in, model_out, data_in, data_out = sys.argv[1:5]
with open(model_in, 'rb') as f:
    h = list(struct.unpack('<256i', f.read(1024)))
    p = array('f'); p.frombytes(f.read())
C, Vp, rows = h[6], h[7], h[2]
# wte's first V rows, wpe's first MAXT rows, the layers as they are; no checksum (llm.c's header slots 8..10)
cut = p[:V * C] + p[Vp * C:Vp * C + MAXT * C] + p[(Vp + rows) * C:]
h[2], h[3], h[7], h[8], h[9], h[10] = MAXT, V, V, 0, 0, 0
with open(model_out, 'wb') as f:
    f.write(struct.pack('<256i', *h)); f.write(cut.tobytes())
with open(data_in, 'rb') as f:
    header = f.read(1024); tokens = array('H'); tokens.frombytes(f.read())
rank = {t: i for i, (t, _) in enumerate(Counter(tokens).most_common(V - 1))}
with open(data_out, 'wb') as f:
    f.write(header); f.write(array('H', [rank.get(t, V - 1) for t in tokens]).tobytes())
PY
SMALL=(-e "$WORK/small.bin" -i "$WORK/small_train.bin" -j "$WORK/small_train.bin" -b 1 -t 32 -x 20 -f 0 -l 1e-3 -v 0 -s 0 -n 0 -ct mpi)
for run in "1 contiguous" "2 contiguous" "2 round_robin" "4 contiguous" "4 round_robin"; do
    read -r cp layout <<< "$run"
    for p in FP32 BF16; do
        "${MPIRUN[@]}" -np $cp "$WORK/train_gpt2cp_$p" "${SMALL[@]}" -cp $cp -cl $layout -o "$WORK/${p}_cp${cp}_$layout" > "$WORK/${p}_cp${cp}_$layout.out"
    done
    paste <(awk -F'trl:' '/trl:/ { print $2 + 0 }' "$WORK/FP32_cp${cp}_$layout/main.log") \
          <(awk -F'trl:' '/trl:/ { print $2 + 0 }' "$WORK/BF16_cp${cp}_$layout/main.log") |
        awk -v what="cp $cp $layout" -v tol=$BF16_LOSS_TOL '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
            END { printf "BF16 vs FP32, %s: max |dloss| %.2e over %d steps (tol %g)\n", what, m, NR, tol; exit !(NR == 20 && m <= tol) }'
done
# the BF16 build at -z 1: each rank updates its shard of the master weights and their
# bf16 copy, the other shards come gathered in fp32 and are rounded: -z 0's main.log bit for bit
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_BF16" "${SMALL[@]}" -cp 2 -cl round_robin -z 1 -o "$WORK/BF16_z1" > "$WORK/BF16_z1.out"
diff "$WORK/BF16_cp2_round_robin/main.log" "$WORK/BF16_z1/main.log"
echo "BF16 -z 1: -z 0's main.log bit for bit"
# the BF16 build's checkpoints: llm.c's bf16 model files (version 5, 1024 + 2 bytes a
# parameter) and the fp32 master weights in the state files, so that a resume at
# step 1 gives the 2-step run's main.log and step-2 model file bit for bit
CKPT=(-e "$WORK/small.bin" -i "$WORK/small_train.bin" -b 1 -t 32 -f 0 -l 1e-3 -v 0 -s 0 -n 1 -ct mpi -cp 2)
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_BF16" "${CKPT[@]}" -x 2 -o "$WORK/BF16_ckpt" > "$WORK/BF16_ckpt.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_BF16" "${CKPT[@]}" -x 1 -o "$WORK/BF16_resume" > "$WORK/BF16_resume1.out"
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_BF16" "${CKPT[@]}" -x 2 -y 1 -o "$WORK/BF16_resume" > "$WORK/BF16_resume2.out"
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
"${MPIRUN[@]}" -np 2 "$WORK/train_gpt2cp_BF16" "${ARGS[@]}" -e "$WORK/bf16_files/exact_v5.bin" -i "$WORK/bf16_files/tokens.bin" -cp 2 -ct mpi -x 1 -o "$WORK/gpu_v5_bf16" > "$WORK/gpu_v5_bf16.out"
echo "BF16 checkpoints: version 5 model files, resume at step 1 bit for bit; the BF16 build trains from llm.c's v5 file"
echo "emulation: $SECONDS s in all"
