#!/usr/bin/env bash
# Runs one libFuzzer target briefly from a seed corpus of small valid files.
#
#   bash test/fuzz/run_fuzz.sh FUZZER tokens|loss_mask|checkpoint|tokenizer SECONDS
#
# Passes when the fuzzer finds nothing (no crash, leak, sanitizer report or
# failed assertion) in SECONDS; prints how many inputs it executed.
set -euo pipefail
fuzzer=${1:?usage: run_fuzz.sh FUZZER KIND SECONDS}
kind=${2:?kind}
seconds=${3:?seconds}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../binary_files.sh"
work=${BUILD_DIR:-/tmp}/fuzz_work_$kind
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"

# header FILE MAGIC VERSION: a 1024-byte header with magic and version set
header() { head -c 1024 /dev/zero >"$1"; put_i32 "$1" 0 "$2"; put_i32 "$1" 4 "$3"; }

case $kind in
tokens)
    # 8 tokens, one of them EOT; and one with a token id too big
    f=$work/corpus/valid.bin; header "$f" 20240520 1; put_i32 "$f" 8 8
    for i in 0 1 2 3 4 5 6 7; do put_u16 "$f" $((1024 + 2 * i)) $((i * 7000 + 6)); done
    cp "$f" "$work/corpus/big_id.bin"; put_u16 "$work/corpus/big_id.bin" 1030 65535
    ;;
checkpoint)
    # maxT 2, V 3, L 1, NH 1, C 2, Vp 4: 90 parameters
    f=$work/corpus/valid.bin; header "$f" 20240326 3
    put_i32 "$f" 8 2; put_i32 "$f" 12 3; put_i32 "$f" 16 1; put_i32 "$f" 20 1; put_i32 "$f" 24 2; put_i32 "$f" 28 4
    head -c 360 /dev/zero >>"$f"
    put_i32 "$f" 1028 1065353216 # 1.0f
    # the same model as llm.c's bf16 file (version 5): 2 bytes a parameter
    f=$work/corpus/valid_bf16.bin; header "$f" 20240326 5
    put_i32 "$f" 8 2; put_i32 "$f" 12 3; put_i32 "$f" 16 1; put_i32 "$f" 20 1; put_i32 "$f" 24 2; put_i32 "$f" 28 4
    head -c 180 /dev/zero >>"$f"
    put_u16 "$f" 1026 16256 # 1.0 in bf16 (0x3f80)
    ;;
loss_mask)
    # a mask of 8 tokens, and one with a byte that is neither 0 nor 1
    f=$work/corpus/valid.mask; header "$f" 20240613 1; put_i32 "$f" 8 8
    printf '\x00\x01\x01\x00\x01\x01\x01\x00' >>"$f"
    cp "$f" "$work/corpus/bad_byte.mask"; printf '\x07' | dd of="$work/corpus/bad_byte.mask" bs=1 seek=1027 conv=notrunc status=none
    ;;
tokenizer)
    # V 3, EOT 2: "a", "bc", "<|e|>"
    f=$work/corpus/valid.bin; header "$f" 20240328 2; put_i32 "$f" 8 3; put_i32 "$f" 12 2
    printf '\x01a\x02bc\x05<|e|>' >>"$f"
    ;;
*)
    echo "unknown kind '$kind'" >&2
    exit 2
    ;;
esac

log=$work/fuzz.log
# leak checking stays on here: no MPI in these processes
if ! "$fuzzer" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" >"$log" 2>&1; then
    echo "FAIL: fuzzer $kind found a problem; its log ends with:" >&2
    tail -n 40 "$log" >&2
    exit 1
fi
runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
echo "fuzz $kind: $runs inputs in $seconds s, no finding"
[[ ${runs:-0} -gt 1000 ]] || { echo "FAIL: only ${runs:-0} inputs ran" >&2; exit 1; }
