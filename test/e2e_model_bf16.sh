#!/usr/bin/env bash
# llm.c's bf16 model files (version 5), against files written independently by
# test/llmc_files.py (plain Python, llm.c's format; its bf16 rounding checked there
# against a hand-computed table of ties, NaN, infinities, overflow and subnormals):
#
#   1. the CPU trainer loads a v5 file and trains as from the v3 file of the same
#      (bf16-exact) weights: main.log and the per-token losses bit for bit, with
#      gpt2cp's checksum in the header and without (as llm.c writes it); the
#      checkpoint it writes (v3) is, byte for byte, the script's v3 file: the
#      widening is exact
#   2. the trainers' writer (gpt2_save_checkpoint through test/model_file_writer.c)
#      turns weights of any bits, the table's among them, into exactly the bytes
#      of the script's v5 file (and of its v3 file), checksum included
#
#   bash test/e2e_model_bf16.sh MODEL_FILE_WRITER      (env: see e2e_lib.sh)
set -euo pipefail
WRITER=${1:?usage: e2e_model_bf16.sh MODEL_FILE_WRITER}
E2E_NAME=e2e_model_bf16
source "$(dirname "$0")/e2e_lib.sh"
need python3 python3
source "$(dirname "$0")/binary_files.sh" # same_model

FILES=$WORK/files
mkdir -p "$FILES"
read -r maxT V Vp L NH C < <(python3 test/llmc_files.py bf16_models "$FILES") ||
    { echo "FAIL: llmc_files.py bf16_models"; exit 1; }
echo "the script's files: maxT $maxT, V $V (Vp $Vp), L $L, NH $NH, C $C; its bf16 rounding matches the table"

# ---- 1. loading
COMMON=(-b 2 -t 32 -x 3 -v 0 -s 0 -i "$FILES/tokens.bin")
for f in exact_v3 exact_v5 exact_v5_llmc; do
    train "$f" 1 -e "$FILES/$f.bin" -o "$WORK/$f" -tl "$WORK/$f.tl"
done
for f in exact_v5 exact_v5_llmc; do
    if cmp -s "$WORK/exact_v3/main.log" "$WORK/$f/main.log" && cmp -s "$WORK/exact_v3.tl" "$WORK/$f.tl"; then
        echo "ok   -e $f.bin: main.log and per-token losses of -e exact_v3.bin bit for bit"
    else
        fail "-e $f.bin does not train as -e exact_v3.bin"
        diff "$WORK/exact_v3/main.log" "$WORK/$f/main.log" || true
    fi
done
grep -q "L $L, NH $NH, C $C, maxT $maxT" "$WORK/exact_v5.out" || fail "the v5 run does not show the file's model"
train exact_v5_saved 1 -e "$FILES/exact_v5.bin" -x 0 -n 1 -o "$WORK/exact_v5_saved"
if same_model "$FILES/exact_v3.bin" "$WORK/exact_v5_saved/model_00000000.bin"; then
    echo "ok   the CPU trainer's checkpoint of -e exact_v5.bin is the script's exact_v3.bin byte for byte (but the checkpoint's run id and step)"
else
    fail "the checkpoint of -e exact_v5.bin is not the script's exact_v3.bin"
fi

# ---- 2. writing
for version in 5 3; do
    "$WRITER" "$FILES/weights.f32" "$maxT" "$V" "$Vp" "$L" "$NH" "$C" $version "$WORK/written_v$version.bin" ||
        { fail "model_file_writer, version $version"; continue; }
    if cmp "$FILES/weights_v$version.bin" "$WORK/written_v$version.bin"; then
        echo "ok   version $version: the writer's file is the script's byte for byte"
    else
        fail "version $version: the writer's file differs from the script's"
    fi
done
finish
