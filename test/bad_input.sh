#!/usr/bin/env bash
# Bad input is rejected: every bad file, flag or size ends the job with one clear
# `error: ...` line naming the problem and a non-zero exit, never a hang or a crash.
#
#   bash test/bad_input.sh
#
# Env: MPIRUN, BUILD_DIR (scratch: the bad files are made there), REPO_ROOT (the
# trainer is REPO_ROOT/train_gpt2cp_cpu). The bad files are made here with
# head/dd/printf from the repo's own data, tokenizer and a hand-built checkpoint.
set -euo pipefail

REPO_ROOT=${REPO_ROOT:-$(pwd)}
MPIRUN=${MPIRUN:-mpirun}
BUILD_DIR=${BUILD_DIR:-$REPO_ROOT/build}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
TRAINER=$REPO_ROOT/train_gpt2cp_cpu
WORK=$BUILD_DIR/bad_input
TOKENS=$REPO_ROOT/dev/data/austen/austen_val.bin
TOKENIZER=$REPO_ROOT/dev/data/gpt2_tokenizer.bin

if [[ ! -x $TRAINER ]]; then
    echo "FAIL: $TRAINER is missing: build it first with 'make train_gpt2cp_cpu' at the repo root" >&2
    exit 1
fi
for f in "$TOKENS" "$TOKENIZER"; do
    if [[ ! -f $f ]]; then echo "FAIL: $f is missing" >&2; exit 1; fi
done
cd "$REPO_ROOT"
rm -rf "$WORK"
mkdir -p "$WORK"

# put_i32, put_u16
source "$(dirname "$0")/binary_files.sh"

# a small and fast run; each case appends the flags that make it bad (a later flag
# wins), so that a check that stopped working ends in one quick step, not a hang
BASE=(-e d1 -b 1 -t 16 -x 1 -v 0 -s 0)
failures=0
cases=0
summary=()

# run_trainer NP OUT ERR [flags...]: NP 0 runs the trainer as one process without
# mpirun (an MPI singleton); sets rc. MEMORY_LIMIT_KIB, when set, limits the
# address space of the launch (ulimit -v).
MEMORY_LIMIT_KIB=
run_trainer() {
    local np=$1 out=$2 err=$3
    shift 3
    local launcher=()
    if [[ $np -gt 0 ]]; then
        launcher=("$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np "$np")
    fi
    rc=0
    (
        if [[ -n $MEMORY_LIMIT_KIB ]]; then ulimit -v "$MEMORY_LIMIT_KIB"; fi
        exec timeout 60 "${launcher[@]}" "$TRAINER" "$@"
    ) >"$out" 2>"$err" || rc=$?
}

# expect_error NAME NP PATTERN [flags...]: the run must exit non-zero within 60 s,
# without a crash, with exactly one `error:` line on stderr that matches PATTERN
# (an extended regex)
expect_error() {
    local name=$1 np=$2 pattern=$3
    shift 3
    cases=$((cases + 1))
    local out=$WORK/$name.out err=$WORK/$name.err
    run_trainer "$np" "$out" "$err" "$@"
    local problems=()
    if [[ $rc -eq 124 ]]; then problems+=("timed out after 60 s (a hang)"); fi
    if [[ $rc -eq 0 ]]; then problems+=("exited 0"); fi
    if [[ $rc -gt 128 ]]; then problems+=("killed by signal $((rc - 128))"); fi
    if grep -qiE 'segmentation fault|core dumped|signal [0-9]|sanitizer|backtrace' "$out" "$err"; then
        problems+=("crash in the output: $(grep -hiE -m1 'segmentation fault|core dumped|signal [0-9]|sanitizer|backtrace' "$out" "$err")")
    fi
    local nerr
    nerr=$(grep -c '^error: ' "$err" || true)
    if [[ $nerr -ne 1 ]]; then problems+=("$nerr 'error:' lines on stderr, expected 1"); fi
    if ! grep '^error: ' "$err" | grep -qE -- "$pattern"; then problems+=("no error line matches /$pattern/"); fi
    local line
    line=$(grep -m1 '^error: ' "$err" || true)
    local where="np $np"
    if [[ $np -eq 0 ]]; then where="1 process"; fi
    if [[ ${#problems[@]} -eq 0 ]]; then
        printf 'ok   %-28s %-10s rc %d, %d error line(s): %s\n' "$name" "($where)" "$rc" "$nerr" "$line"
        summary+=("$name|$where|$nerr")
    else
        failures=$((failures + 1))
        printf 'FAIL %-28s %-10s rc %d: %s\n' "$name" "($where)" "$rc" "$(IFS=';'; echo "${problems[*]}")"
        echo "     flags: $*"
        echo "     --- stderr (last 15 lines):"
        tail -n 15 "$err" | sed 's/^/     /'
        echo "     --- stdout (last 5 lines):"
        tail -n 5 "$out" | sed 's/^/     /'
    fi
}

# expect_success NAME NP [flags...]: a control run with a good file must exit 0,
# so that the bad cases fail for their one defect and not for the rest of the file
expect_success() {
    local name=$1 np=$2
    shift 2
    cases=$((cases + 1))
    local out=$WORK/$name.out err=$WORK/$name.err
    run_trainer "$np" "$out" "$err" "$@"
    if [[ $rc -ne 0 ]]; then
        failures=$((failures + 1))
        echo "FAIL $name: the good control run exited $rc; flags: $*"
        tail -n 15 "$err" | sed 's/^/     /'
    else
        printf 'ok   %-28s good control run exits 0\n' "$name"
    fi
}

# ---------------------------------------------------------------------------
# token files (-i, -j)
ntok=$((($(stat -c %s "$TOKENS") - 1024) / 2))
tok() { cp "$TOKENS" "$WORK/$1"; }
tok tokens_good.bin
tok tokens_magic.bin;     put_i32 "$WORK/tokens_magic.bin" 0 12345
tok tokens_version.bin;   put_i32 "$WORK/tokens_version.bin" 4 2
tok tokens_negative.bin;  put_i32 "$WORK/tokens_negative.bin" 8 -5
tok tokens_big_id.bin;    put_u16 "$WORK/tokens_big_id.bin" $((1024 + 2 * 500)) 50257
head -c $((1024 + 2 * ntok - 7)) "$TOKENS" >"$WORK/tokens_truncated.bin"
head -c $((1024 + 2 * 10)) "$TOKENS" >"$WORK/tokens_few.bin"; put_i32 "$WORK/tokens_few.bin" 8 10

echo "== token files"
expect_success tokens_good_control 2 "${BASE[@]}" -cp 2 -i "$WORK/tokens_good.bin"
expect_error tokens_no_match 2 "-i '.*/none_\*\.bin': no file matches" \
    "${BASE[@]}" -cp 2 -i "$WORK/none_*.bin"
expect_error tokens_bad_magic 2 "token file '.*tokens_magic\.bin': bad magic 12345" \
    "${BASE[@]}" -cp 2 -i "$WORK/tokens_magic.bin"
expect_error tokens_bad_version 2 "token file '.*tokens_version\.bin': version 2" \
    "${BASE[@]}" -cp 2 -i "$WORK/tokens_version.bin"
expect_error tokens_truncated 2 "token file '.*tokens_truncated\.bin': [0-9]+ bytes, but its header promises $ntok tokens" \
    "${BASE[@]}" -cp 2 -i "$WORK/tokens_truncated.bin"
expect_error tokens_negative_count 2 "token file '.*tokens_negative\.bin': negative token count -5" \
    "${BASE[@]}" -cp 2 -i "$WORK/tokens_negative.bin"
expect_error tokens_id_too_big 2 "token file '.*tokens_big_id\.bin': token 50257 at index 500 is not below the vocabulary size 50257" \
    "${BASE[@]}" -cp 2 -i "$WORK/tokens_big_id.bin"
expect_error tokens_too_few 2 "token file '.*tokens_few\.bin': 10 tokens, fewer than one step needs" \
    "${BASE[@]}" -cp 2 -i "$WORK/tokens_few.bin"
cp "$TOKENS" "$WORK/tokens_oversized.bin"; head -c 6 /dev/zero >>"$WORK/tokens_oversized.bin"
expect_error tokens_oversized 2 "token file '.*tokens_oversized\.bin': $((1024 + 2 * ntok + 6)) bytes, but its header promises $ntok tokens" \
    "${BASE[@]}" -cp 2 -i "$WORK/tokens_oversized.bin"
expect_error tokens_directory 2 "token file '$WORK': not a regular file" \
    "${BASE[@]}" -cp 2 -i "$WORK"
expect_error val_tokens_bad_magic 2 "token file '.*tokens_magic\.bin': bad magic" \
    "${BASE[@]}" -cp 2 -v 1 -j "$WORK/tokens_magic.bin"

# ---------------------------------------------------------------------------
# checkpoints (-e): a hand-built fp32 checkpoint of a tiny model, zero weights
# maxT 64 (the default -g 64 must fit), V = Vp 50257, L 1, NH 1, C 4; llm.c's order
maxT=64 V=50257 Vp=50257 L=1 NH=1 C=4
params=$((Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C))
# make_checkpoint NAME [CHANNELS]: zero weights of the model above (C = CHANNELS)
make_checkpoint() {
    local f=$WORK/$1 c=${2:-$C}
    head -c $((1024 + 4 * (Vp * c + maxT * c + L * (12 * c * c + 13 * c) + 2 * c))) /dev/zero >"$f"
    local i=0
    for v in 20240326 3 $maxT $V $L $NH $c $Vp; do
        put_i32 "$f" $((4 * i)) "$v"
        i=$((i + 1))
    done
}
make_checkpoint ckpt_good.bin
make_checkpoint ckpt_magic.bin;   put_i32 "$WORK/ckpt_magic.bin" 0 20240520
make_checkpoint ckpt_bf16.bin;    put_i32 "$WORK/ckpt_bf16.bin" 4 5
make_checkpoint ckpt_size.bin;    head -c 4 /dev/zero >>"$WORK/ckpt_size.bin"
make_checkpoint ckpt_heads.bin;   put_i32 "$WORK/ckpt_heads.bin" 20 3
make_checkpoint ckpt_nan.bin;     put_i32 "$WORK/ckpt_nan.bin" $((1024 + 4 * 1000)) 0x7fc00000

echo "== checkpoints"
expect_success ckpt_good_control 2 "${BASE[@]}" -cp 2 -e "$WORK/ckpt_good.bin"
expect_error ckpt_missing 0 "checkpoint '.*/no_such_checkpoint\.bin': cannot open it: No such file" \
    "${BASE[@]}" -e "$WORK/no_such_checkpoint.bin"
expect_error ckpt_missing_np2 2 "checkpoint '.*/no_such_checkpoint\.bin': cannot open it: No such file" \
    "${BASE[@]}" -cp 2 -e "$WORK/no_such_checkpoint.bin"
expect_error ckpt_bad_magic 2 "checkpoint '.*ckpt_magic\.bin': bad magic 20240520" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_magic.bin"
expect_error ckpt_bf16 2 "checkpoint '.*ckpt_bf16\.bin': version 5 is bf16" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_bf16.bin"
expect_error ckpt_size 2 "checkpoint '.*ckpt_size\.bin': $((1028 + 4 * params)) bytes, but its header describes $params parameters" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_size.bin"
expect_error ckpt_heads 2 "checkpoint '.*ckpt_heads\.bin'.*channels 4 are not divisible by heads 3" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_heads.bin"
expect_error ckpt_nan 2 "checkpoint '.*ckpt_nan\.bin': parameter 1000 is not a finite number" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_nan.bin"

make_checkpoint ckpt_oversized.bin; head -c 64 /dev/zero >>"$WORK/ckpt_oversized.bin"
expect_error ckpt_oversized 2 "checkpoint '.*ckpt_oversized\.bin': $((1024 + 64 + 4 * params)) bytes, but its header describes" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_oversized.bin"
expect_error ckpt_directory 2 "checkpoint '$WORK': not a regular file" \
    "${BASE[@]}" -cp 2 -e "$WORK"
expect_error init_too_deep 2 "-e d100000: sizes beyond this trainer's bounds" \
    "${BASE[@]}" -cp 2 -e d100000
# the checkpoint's position table (maxT 64) is shorter than -t: both numbers and the way out
expect_error t_past_position_table 2 "-t 100 needs a position table of 100 rows, but the checkpoint '.*ckpt_good\.bin' has 64 \(maxT\): train at -t 64 or less, or from a random init whose table covers -t \(-e dN, with -mt 100 or more" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_good.bin" -t 100
expect_error mt_with_checkpoint 2 "-mt 4096 sets the position table of a random init \(-e dN\); the checkpoint -e '.*ckpt_good\.bin' brings its own" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_good.bin" -mt 4096

# ---------------------------------------------------------------------------
# checkpoints to resume from (-y 1): a step-0 checkpoint of the tiny model by 2
# ranks, then one defect per copy; every rank must exit with the one line
echo "== resume"
# -x 0: resume, and nothing to train (no checkpoint is written over the source)
RESUME=("${BASE[@]}" -cp 2 -e "$WORK/ckpt_good.bin" -y 1 -x 0)
expect_success resume_source 2 "${BASE[@]}" -cp 2 -e "$WORK/ckpt_good.bin" -x 0 -o "$WORK/resume_good"
resume_dir() { rm -rf "$WORK/$1"; cp -r "$WORK/resume_good" "$WORK/$1"; }
state0=state_00000000_00000.bin
state1=state_00000000_00001.bin
expect_success resume_good_control 2 "${RESUME[@]}" -o "$WORK/resume_good"
resume_dir resume_truncated;  truncate -s 5000 "$WORK/resume_truncated/$state1"
expect_error state_truncated 2 "rank 1: state file '.*resume_truncated/$state1': 5000 bytes, expected [0-9]+ for $params parameters" \
    "${RESUME[@]}" -o "$WORK/resume_truncated"
resume_dir resume_missing;    rm "$WORK/resume_missing/$state1"
expect_error state_missing 2 "rank 1: state file '.*resume_missing/$state1': cannot open it: No such file" \
    "${RESUME[@]}" -o "$WORK/resume_missing"
resume_dir resume_magic;      put_i32 "$WORK/resume_magic/$state0" 0 20240326
expect_error state_bad_magic 2 "rank 0: state file '.*resume_magic/$state0': bad magic 20240326" \
    "${RESUME[@]}" -o "$WORK/resume_magic"
resume_dir resume_nan;        put_i32 "$WORK/resume_nan/$state1" $((1024 + 64 + 4 * 7)) 0x7fc00000
expect_error state_nan_moment 2 "rank 1: state file '.*resume_nan/$state1': optimizer moment 7 is not a valid number" \
    "${RESUME[@]}" -o "$WORK/resume_nan"
# the state of another model: the weights of a model with C 8 in place of C 4
resume_dir resume_other;      make_checkpoint resume_other/model_00000000.bin 8
expect_error state_other_model 2 "rank 0: state file '.*resume_other/$state0': optimizer state of $params parameters, the model has [0-9]+" \
    "${RESUME[@]}" -o "$WORK/resume_other"
resume_dir resume_model_cut;  truncate -s 2048 "$WORK/resume_model_cut/model_00000000.bin"
expect_error resume_model_truncated 2 "checkpoint '.*resume_model_cut/model_00000000\.bin': 2048 bytes, but its header describes" \
    "${RESUME[@]}" -o "$WORK/resume_model_cut"
# an error on one rank alone names it: only rank 0 writes -tl
expect_error tl_unwritable 2 "rank 0: cannot open '.*/no_such_dir/losses\.tl'" \
    "${BASE[@]}" -cp 2 -tl "$WORK/no_such_dir/losses.tl"

# ---------------------------------------------------------------------------
# tokenizer (-k)
cp "$TOKENIZER" "$WORK/tok_magic.bin";  put_i32 "$WORK/tok_magic.bin" 0 20240326
head -c $(($(stat -c %s "$TOKENIZER") / 2)) "$TOKENIZER" >"$WORK/tok_truncated.bin"
cp "$TOKENIZER" "$WORK/tok_vocab.bin";  put_i32 "$WORK/tok_vocab.bin" 8 50000

echo "== tokenizer"
expect_error tokenizer_bad_magic 2 "tokenizer '.*tok_magic\.bin': bad magic 20240326" \
    "${BASE[@]}" -cp 2 -k "$WORK/tok_magic.bin"
expect_error tokenizer_truncated 2 "tokenizer '.*tok_truncated\.bin': entry of token [0-9]+ is truncated" \
    "${BASE[@]}" -cp 2 -k "$WORK/tok_truncated.bin"
expect_error tokenizer_vocab 2 "tokenizer '.*tok_vocab\.bin': vocabulary of 50000 tokens, the model has 50257" \
    "${BASE[@]}" -cp 2 -k "$WORK/tok_vocab.bin"

# ---------------------------------------------------------------------------
# flags and sizes
echo "== flags"
expect_error mt_shorter_than_t 2 "-mt 1500 is shorter than -t 2000: the position table needs a row for every position" \
    "${BASE[@]}" -cp 2 -t 2000 -mt 1500
expect_error mt_negative 2 "-mt -1: the position table cannot have negative rows" \
    "${BASE[@]}" -cp 2 -mt -1
expect_error mt_beyond_bounds 2 "-e d1: sizes beyond this trainer's bounds \(maxT 2000000 <= 2\^20" \
    "${BASE[@]}" -cp 2 -mt 2000000
expect_error tokens_per_step_overflow 2 "-b 32768 x -t 131072 = 4294967296 tokens per step and replica, more than the 2\^31 - 1" \
    "${BASE[@]}" -cp 2 -b 32768 -t 131072
# a run that cannot fit is refused at start-up on every rank, before it allocates:
# 1024 x 131072 tokens of d1 need terabytes; under a 4 GiB address-space limit
# (not with the sanitizers, which reserve more) any attempt to allocate them first
# would end in another error
start=$SECONDS
if [[ -z ${ASAN_OPTIONS:-} ]]; then MEMORY_LIMIT_KIB=$((4 << 20)); fi
expect_error will_not_fit 2 "the run will not fit: -b 1024 -t 131072 at -cp 2 needs an estimated [0-9.]+ GiB per rank \\(activations [0-9.]+ GiB, classifier .*\\) x [0-9]+ rank\\(s\\) sharing host memory \\(MemAvailable\\), which has [0-9.]+ [MG]iB free" \
    "${BASE[@]}" -cp 2 -b 1024 -t 131072
MEMORY_LIMIT_KIB=
if [[ $((SECONDS - start)) -gt 20 ]]; then
    failures=$((failures + 1)); echo "FAIL will_not_fit: took $((SECONDS - start)) s, not at start-up"
fi
expect_error world_not_divisible 3 "-cp 2 does not divide the 3 ranks" \
    "${BASE[@]}" -cp 2
expect_error layout_bogus 2 "-cl 'bogus': unknown layout" \
    "${BASE[@]}" -cp 2 -cl bogus
expect_error identity_at_cp2 2 "-cl identity needs -cp 1, got -cp 2" \
    "${BASE[@]}" -cp 2 -cl identity
expect_error packed_without_documents 2 "-cl packed splits documents: it needs -dm 1" \
    "${BASE[@]}" -cp 2 -cl packed
expect_error document_masking_bogus 2 "-dm 2: document masking is 0 or 1" \
    "${BASE[@]}" -cp 2 -dm 2
expect_error recompute_out_of_range 2 "-r 3: recompute is 0 \\(keep every activation\\), 1 \\(recompute GELU\\) or 2" \
    "${BASE[@]}" -cp 2 -r 3
expect_error recompute_negative 2 "-r -1: recompute is 0" \
    "${BASE[@]}" -cp 2 -r -1
expect_error attention_bogus 2 "-ca 'bogus': unknown attention algorithm" \
    "${BASE[@]}" -cp 2 -ca bogus
expect_error unknown_flag 2 "unknown flag '-zz'" \
    "${BASE[@]}" -cp 2 -zz 1
if ! grep -q '^usage:' "$WORK/unknown_flag.err"; then
    failures=$((failures + 1)); echo "FAIL unknown_flag: no usage on stderr"
fi
expect_error unknown_flag_1proc 0 "unknown flag '--steps'" \
    "${BASE[@]}" --steps 3
expect_error flag_without_value 2 "flag -b needs a value" \
    "${BASE[@]}" -cp 2 -b
expect_error b_not_integer 2 "flag -b expects an integer, got 'abc'" \
    "${BASE[@]}" -cp 2 -b abc
expect_error rank_without_token 4 "sequence length 3 with layout contiguous at cp 4 leaves rank [0-9]+ without a real token" \
    "${BASE[@]}" -cp 4 -cl contiguous -t 3

# -h: the usage on stdout, naming the CP flags, and a non-zero exit
cases=$((cases + 1))
run_trainer 0 "$WORK/help.out" "$WORK/help.err" -h
help_problems=()
if [[ $rc -eq 0 || $rc -eq 124 || $rc -gt 128 ]]; then help_problems+=("exit code $rc, expected a non-zero exit"); fi
for flag in -cp -cl -tl -dm -ca -r; do
    if ! grep -qE "^ +$flag " "$WORK/help.out"; then help_problems+=("the usage does not list $flag"); fi
done
if ! grep -q '^usage:' "$WORK/help.out"; then help_problems+=("no usage line on stdout"); fi
if [[ ${#help_problems[@]} -eq 0 ]]; then
    printf 'ok   %-28s %-10s rc %d, usage lists -cp -cl -tl -dm -ca -r\n' help "(1 process)" "$rc"
else
    failures=$((failures + 1))
    echo "FAIL help: $(IFS=';'; echo "${help_problems[*]}")"
    head -n 5 "$WORK/help.out" "$WORK/help.err"
fi

echo
if [[ $failures -gt 0 ]]; then
    echo "FAIL bad_input: $failures of $cases cases failed ($SECONDS s)"
    exit 1
fi
echo "PASS bad_input: $cases cases ($SECONDS s)"
