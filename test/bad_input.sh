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
WORK=$(cd "$WORK" && pwd) # absolute: the symbolic links made below must lead somewhere

# put_i32, put_u16
source "$(dirname "$0")/lib/binary_files.sh"

# a small and fast run; each case appends the flags that make it bad (a later flag
# wins), so that a check that stopped working ends in one quick step, not a hang
BASE=(-e d1 -b 1 -t 16 -x 1 -v 0 -s 0)
failures=0
cases=0
summary=()

# Error cases run up to CASES_AT_ONCE at a time: each is its own processes and files,
# and most of its time is the launch, not the cores. A case that uses an -o directory
# or resumes, a control run, a note check and every hand-written block run alone,
# after the cases before them have ended (settle), so that no case sees another's
# files half made; the verdicts print in the order the cases were given.
CASES_AT_ONCE=3
case_pids=()
case_results=()
# settle_oldest: waits for the oldest running case, prints its verdict, counts a failure
settle_oldest() {
    wait "${case_pids[0]}" || true
    cat "${case_results[0]}"
    if grep -q '^FAIL' "${case_results[0]}"; then failures=$((failures + 1)); fi
    case_pids=("${case_pids[@]:1}")
    case_results=("${case_results[@]:1}")
}
# settle: waits for every running case (only the script itself has cases to wait for)
settle() {
    [[ $BASHPID -eq $$ ]] || return 0
    while [[ ${#case_pids[@]} -gt 0 ]]; do settle_oldest; done
}

# run_trainer NP OUT ERR [flags...]: NP 0 runs the trainer as one process without
# mpirun (an MPI singleton); sets rc. MEMORY_LIMIT_KIB, when set, limits the
# address space of the launch (ulimit -v).
MEMORY_LIMIT_KIB=
run_trainer() {
    local np=$1 out=$2 err=$3
    shift 3
    settle
    local launcher=()
    if [[ $np -gt 0 ]]; then
        launcher=("$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np "$np")
    fi
    for attempt in 1 2; do
        rc=0
        (
            if [[ -n $MEMORY_LIMIT_KIB ]]; then ulimit -v "$MEMORY_LIMIT_KIB"; fi
            # each launch its own Open MPI session base: cases run at once, and one
            # mpirun removing the shared base it emptied made another's start fail
            # in orte_init ("orte_session_dir failed")
            export OMPI_MCA_orte_tmpdir_base="${OMPI_MCA_orte_tmpdir_base:-/tmp/gpt2cp-mpi-$(id -u)}/$BASHPID"
            exec timeout 60 "${launcher[@]}" "$TRAINER" "$@"
        ) >"$out" 2>"$err" || rc=$?
        # Open MPI 4.1's mpirun itself now and then segfaults in its own finalize
        # after a job's MPI_Abort (open-mpi/ompi#13650): that is not the trainer's
        # crash (it has no frame of the trainer, and no rank died of a signal), so
        # the case runs once more; a second time counts as a crash
        if [[ $rc -eq 139 && $attempt -eq 1 ]] && grep -q 'orte_finalize' "$err" &&
           ! grep -qE 'rank [0-9]+: killed by signal|exited on signal' "$out" "$err"; then
            echo "note: mpirun crashed in its own finalize (open-mpi/ompi#13650); running the case again"
            continue
        fi
        break
    done
}

# expect_error NAME NP PATTERN [flags...]: the run must exit non-zero within 60 s,
# without a crash, with exactly one `error:` line on stderr that matches PATTERN
# (an extended regex); with EXPECT_CLEAN_EXIT=1, no MPI_ABORT banner either (the
# problem is one every rank sees). Runs beside other cases unless it names -o or -y.
expect_error() {
    cases=$((cases + 1))
    if [[ " $* " == *" -o "* || " $* " == *" -y "* ]]; then
        settle
        check_error "$@"
        return
    fi
    [[ ${#case_pids[@]} -ge $CASES_AT_ONCE ]] && settle_oldest
    check_error "$@" > "$WORK/$1.verdict" 2>&1 &
    case_pids+=($!)
    case_results+=("$WORK/$1.verdict")
}
# check_error: expect_error's checks, run in the foreground
check_error() {
    local name=$1 np=$2 pattern=$3
    shift 3
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
    # an input problem every rank sees ends every rank cleanly: no abort banner
    if [[ ${EXPECT_CLEAN_EXIT:-0} -eq 1 ]] && grep -q 'MPI_ABORT' "$out" "$err"; then
        problems+=("an MPI_ABORT banner: every rank sees this problem and must end cleanly")
    fi
    # messages are for users: no place in the source
    if grep '^error: ' "$err" | grep -qE '\.(c|h|cu|cuh):[0-9]+'; then problems+=("a source location in the error line"); fi
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

# expect_note NAME REGEX: the stdout of case NAME has a line matching REGEX
expect_note() {
    settle
    if grep -qE -- "$2" "$WORK/$1.out"; then
        printf 'ok   %-28s says: %s\n' "$1" "$(grep -m1 -E -- "$2" "$WORK/$1.out")"
    else
        failures=$((failures + 1))
        echo "FAIL $1: no line on stdout matches /$2/"
        tail -n 5 "$WORK/$1.out" | sed 's/^/     /'
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
head -c $((1024 + 2 * 50)) "$TOKENS" >"$WORK/tokens_50.bin"; put_i32 "$WORK/tokens_50.bin" 8 50

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
# a file too short for one step (dp x B x T + 1 tokens) is an input problem every
# rank sees: one line naming the longest -t that fits, (N - 1) / (dp x B), at this
# -b and at -b 1, and every rank ends cleanly (no abort banner)
EXPECT_CLEAN_EXIT=1 expect_error tokens_too_few 2 \
    "token file '.*tokens_few\.bin': 10 tokens, fewer than one step needs \(dp 1 x B 1 x T 16 \+ 1 = 17\): -b 1 -t $(((10 - 1) / 1)) fits it" \
    "${BASE[@]}" -cp 2 -i "$WORK/tokens_few.bin"
EXPECT_CLEAN_EXIT=1 expect_error val_tokens_too_few 2 \
    "token file '.*tokens_50\.bin': 50 tokens, fewer than one step needs \(dp 2 x B 4 x T 16 \+ 1 = 129\): -b 4 -t $(((50 - 1) / (2 * 4))) or -b 1 -t $(((50 - 1) / 2)) fit it" \
    "${BASE[@]}" -b 4 -v 1 -j "$WORK/tokens_50.bin"
cp "$TOKENS" "$WORK/tokens_oversized.bin"; head -c 6 /dev/zero >>"$WORK/tokens_oversized.bin"
expect_error tokens_oversized 2 "token file '.*tokens_oversized\.bin': $((1024 + 2 * ntok + 6)) bytes, but its header promises $ntok tokens" \
    "${BASE[@]}" -cp 2 -i "$WORK/tokens_oversized.bin"
expect_error tokens_directory 2 "token file '$WORK': not a regular file" \
    "${BASE[@]}" -cp 2 -i "$WORK"
expect_error val_tokens_bad_magic 2 "token file '.*tokens_magic\.bin': bad magic" \
    "${BASE[@]}" -cp 2 -v 1 -j "$WORK/tokens_magic.bin"

# ---------------------------------------------------------------------------
# loss mask files (-lm 1): NAME.mask beside each token file NAME.bin (llmc/loss_mask.h:
# magic 20240613, version 1, the token count, then one byte 0 or 1 per token)
# mask FILE COUNT: a mask of COUNT tokens, every byte 1
mask() {
    head -c 1024 /dev/zero >"$WORK/$1"
    put_i32 "$WORK/$1" 0 20240613; put_i32 "$WORK/$1" 4 1; put_i32 "$WORK/$1" 8 "$2"
    head -c "$2" /dev/zero | tr '\0' '\1' >>"$WORK/$1"
}
tok masked_good.bin;      mask masked_good.mask $ntok
tok masked_magic.bin;     mask masked_magic.mask $ntok;   put_i32 "$WORK/masked_magic.mask" 0 20240520
tok masked_version.bin;   mask masked_version.mask $ntok; put_i32 "$WORK/masked_version.mask" 4 3
tok masked_count.bin;     mask masked_count.mask $((ntok - 1))
tok masked_short.bin;     mask masked_short.mask $ntok;   truncate -s -5 "$WORK/masked_short.mask"
tok masked_byte.bin;      mask masked_byte.mask $ntok;    printf '\x02' | dd of="$WORK/masked_byte.mask" bs=1 seek=$((1024 + 700)) conv=notrunc status=none
tok masked_none.bin
echo "== loss mask files"
expect_success mask_good_control 2 "${BASE[@]}" -cp 2 -lm 1 -i "$WORK/masked_good.bin"
expect_error mask_missing 2 "loss mask file '.*masked_none\.mask' \(of token file '.*masked_none\.bin'\): cannot open it: No such file" \
    "${BASE[@]}" -cp 2 -lm 1 -i "$WORK/masked_none.bin"
# expect_mask_error NAME FILE REASON: training on FILE.bin with -lm 1 is refused for
# FILE.mask with REASON (a regex)
expect_mask_error() {
    expect_error "$1" 2 "loss mask file '.*$2\.mask' .*: $3" "${BASE[@]}" -cp 2 -lm 1 -i "$WORK/$2.bin"
}
expect_mask_error mask_bad_magic masked_magic "bad magic 20240520 \(expected 20240613, a loss mask file\)"
expect_mask_error mask_bad_version masked_version "version 3, only 1 is supported"
expect_mask_error mask_other_count masked_count "its header counts $((ntok - 1)) tokens, but its token file has $ntok"
expect_mask_error mask_truncated masked_short "$((1024 + ntok - 5)) bytes, but a mask of $ntok tokens is $((1024 + ntok)) bytes"
expect_mask_error mask_bad_byte masked_byte "byte 2 at token 700 is neither 0 \(masked\) nor 1 \(learned\)"
expect_error val_mask_missing 2 "loss mask file '.*masked_none\.mask'" \
    "${BASE[@]}" -cp 2 -lm 1 -i "$WORK/masked_good.bin" -v 1 -j "$WORK/masked_none.bin"
expect_error mask_flag_bogus 2 "-lm 2: loss masks are 0 or 1" "${BASE[@]}" -cp 2 -lm 2
expect_error restart_positions_bogus 2 "-rp 2: restarting positions at each document is 0 or 1" "${BASE[@]}" -cp 2 -rp 2

# ---------------------------------------------------------------------------
# checkpoints (-e): a hand-built fp32 checkpoint of a tiny model, zero weights
# maxT 64 (the default -g 64 must fit), V = Vp 50257, L 1, NH 1, C 4; llm.c's order
maxT=64 V=50257 Vp=50257 L=1 NH=1 C=4
params=$((Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C))
# make_checkpoint NAME [CHANNELS [VERSION]]: zero weights of the model above (C =
# CHANNELS), fp32 (version 3, the default) or bf16 (version 5: 2 bytes a parameter)
# (V and Vp may be set for one call: V=64 Vp=64 make_checkpoint ...)
make_checkpoint() {
    local f=$WORK/$1 c=${2:-$C} version=${3:-3}
    local bytes=$([[ $version -eq 5 ]] && echo 2 || echo 4)
    head -c $((1024 + bytes * (Vp * c + maxT * c + L * (12 * c * c + 13 * c) + 2 * c))) /dev/zero >"$f"
    local i=0
    for v in 20240326 "$version" $maxT $V $L $NH $c $Vp; do
        put_i32 "$f" $((4 * i)) "$v"
        i=$((i + 1))
    done
}
make_checkpoint ckpt_good.bin
make_checkpoint ckpt_magic.bin;   put_i32 "$WORK/ckpt_magic.bin" 0 20240520
make_checkpoint ckpt_version.bin; put_i32 "$WORK/ckpt_version.bin" 4 4
# bf16 (version 5): cut by one parameter; fp32-sized; a NaN (0x7fc0) and an infinity (0x7f80)
make_checkpoint ckpt_bf16.bin $C 5
make_checkpoint ckpt_bf16_cut.bin $C 5;  truncate -s -2 "$WORK/ckpt_bf16_cut.bin"
make_checkpoint ckpt_bf16_fp32_size.bin; put_i32 "$WORK/ckpt_bf16_fp32_size.bin" 4 5
make_checkpoint ckpt_bf16_nan.bin $C 5;  put_u16 "$WORK/ckpt_bf16_nan.bin" $((1024 + 2 * 1000)) 0x7fc0
make_checkpoint ckpt_bf16_inf.bin $C 5;  put_u16 "$WORK/ckpt_bf16_inf.bin" $((1024 + 2 * 7)) 0xff80
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
expect_error ckpt_version 2 "checkpoint '.*ckpt_version\.bin': version 4, only 3 \(fp32\) and 5 \(bf16\) are supported" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_version.bin"
expect_success ckpt_bf16_control 2 "${BASE[@]}" -cp 2 -e "$WORK/ckpt_bf16.bin"
expect_error ckpt_bf16_truncated 2 "checkpoint '.*ckpt_bf16_cut\.bin': $((1022 + 2 * params)) bytes, but its header describes $params parameters \($((1024 + 2 * params)) bytes as version 5, bf16\)" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_bf16_cut.bin"
expect_error ckpt_bf16_fp32_size 2 "checkpoint '.*ckpt_bf16_fp32_size\.bin': $((1024 + 4 * params)) bytes, but its header describes $params parameters \($((1024 + 2 * params)) bytes as version 5, bf16\)" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_bf16_fp32_size.bin"
expect_error ckpt_bf16_nan 2 "checkpoint '.*ckpt_bf16_nan\.bin': parameter 1000 is not a finite number" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_bf16_nan.bin"
expect_error ckpt_bf16_inf 2 "checkpoint '.*ckpt_bf16_inf\.bin': parameter 7 is not a finite number" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_bf16_inf.bin"
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
# -x 0: resume, and nothing to train (no checkpoint is written over the source);
# -sh 0: read in order, so that the state's data shard and position are used
RESUME=("${BASE[@]}" -cp 2 -sh 0 -e "$WORK/ckpt_good.bin" -y 1 -x 0)
expect_success resume_source 2 "${BASE[@]}" -cp 2 -sh 0 -e "$WORK/ckpt_good.bin" -x 0 -n 1 -o "$WORK/resume_good"
resume_dir() { rm -rf "$WORK/$1"; cp -r "$WORK/resume_good" "$WORK/$1"; }
state0=state_00000000_00000.bin
state1=state_00000000_00001.bin
expect_success resume_good_control 2 "${RESUME[@]}" -o "$WORK/resume_good"
resume_dir resume_truncated;  truncate -s $((STATE_HEADER_BYTES + 5000)) "$WORK/resume_truncated/$state1"
expect_error state_truncated 2 "rank 1: state file '.*resume_truncated/$state1': $((STATE_HEADER_BYTES + 5000)) bytes, expected [0-9]+ for $params parameters" \
    "${RESUME[@]}" -o "$WORK/resume_truncated"
# a DONE marker whose files are gone: passed over with a note (here for none: afresh)
resume_dir resume_missing;    rm "$WORK/resume_missing/$state1"
expect_success state_missing 2 "${RESUME[@]}" -o "$WORK/resume_missing"
expect_note state_missing "^note: checkpoint 0 has its DONE marker, but '.*resume_missing/$state1' is missing: falling back"
resume_dir resume_magic;      put_i32 "$WORK/resume_magic/$state0" 0 20240326
expect_error state_bad_magic 2 "rank 0: state file '.*resume_magic/$state0': bad magic 20240326" \
    "${RESUME[@]}" -o "$WORK/resume_magic"
# one flipped float of the moments, one flipped byte of the header, one of the weights
resume_dir resume_nan;        put_i32 "$WORK/resume_nan/$state1" $((STATE_HEADER_BYTES + 4 * 7)) 0x7fc00000
expect_error state_flipped_moment 2 "rank 1: state file '.*resume_nan/$state1': its optimizer moments do not match their checksum" \
    "${RESUME[@]}" -o "$WORK/resume_nan"
resume_dir resume_flip;       put_i32 "$WORK/resume_flip/$state1" 36 17
expect_error state_flipped_header 2 "rank 1: state file '.*resume_flip/$state1': its header does not match its checksum" \
    "${RESUME[@]}" -o "$WORK/resume_flip"
resume_dir resume_weights;    put_i32 "$WORK/resume_weights/model_00000000.bin" $((1024 + 4 * 123)) 0x3f800000
expect_error model_flipped_weight 2 "checkpoint '.*resume_weights/model_00000000\.bin': its parameters do not match the checksum in its header" \
    "${RESUME[@]}" -o "$WORK/resume_weights"
# fields whose checksum is right but whose values cannot be this run's (sealed
# again after the edit): every field is checked before it is used
# crafted_state NAME FILE OFFSET VALUE BITS: a copy of the good checkpoint, field edited, resealed
crafted_state() {
    resume_dir "$1"
    if [[ $5 -eq 64 ]]; then put_u64 "$WORK/$1/$2" "$3" "$4"; else put_i32 "$WORK/$1/$2" "$3" "$4"; fi
    state_reseal "$WORK/$1/$2"
}
crafted_state resume_padded $state0 1056 18 64
expect_error state_padded_len 2 "rank 0: state file '.*resume_padded/$state0': padded row length 18 is impossible for T 16 at cp 2, layout round_robin" \
    "${RESUME[@]}" -o "$WORK/resume_padded"
crafted_state resume_padded_huge $state0 1056 2147483000 64
expect_error state_padded_len_huge 2 "rank 0: state file '.*resume_padded_huge/$state0': corrupt header .*padded length 2147483000" \
    "${RESUME[@]}" -o "$WORK/resume_padded_huge"
crafted_state resume_layout $state0 28 9 32
expect_error state_layout 2 "rank 0: state file '.*resume_layout/$state0': layout 9 is not one of this trainer's" \
    "${RESUME[@]}" -o "$WORK/resume_layout"
crafted_state resume_shard $state0 1032 5 64
expect_error state_data_shard 2 "rank 0: state file '.*resume_shard/$state0': data shard 5, but the pattern matches 1 file" \
    "${RESUME[@]}" -o "$WORK/resume_shard"
crafted_state resume_position $state0 1040 999999999 64
expect_error state_data_position 2 "rank 0: state file '.*resume_position/$state0': data position 999999999 is past" \
    "${RESUME[@]}" -o "$WORK/resume_position"
crafted_state resume_other_T $state1 36 32 32
expect_error state_rank_disagrees 2 "rank 1: state file '.*resume_other_T/$state1': its header differs from rank 0's" \
    "${RESUME[@]}" -o "$WORK/resume_other_T"
# resuming another job: another -e, other data (allowed with -yd 1), a fresh run
# into a directory with checkpoints
expect_error resume_other_init 2 "rank 0: state file .*was written by a run with -e .*ckpt_good\.bin, this run has -e d1" \
    "${RESUME[@]}" -e d1 -o "$WORK/resume_good"
cp "$TOKENS" "$WORK/tokens_other.bin"; put_u16 "$WORK/tokens_other.bin" $((1024 + 2 * 99)) 7
expect_error resume_other_data 2 "rank 0: state file .*was written with other -i data \(1 file\(s\), [0-9]+ tokens, fingerprint [0-9a-f]+\) than this run's \(1 file\(s\), [0-9]+ tokens, fingerprint [0-9a-f]+\).*-yd 1" \
    "${RESUME[@]}" -i "$WORK/tokens_other.bin" -o "$WORK/resume_good"
resume_dir resume_yd
expect_success resume_other_data_allowed 2 "${RESUME[@]}" -x 1 -i "$WORK/tokens_other.bin" -yd 1 -o "$WORK/resume_yd"
expect_note resume_other_data_allowed "^note: -yd 1: the checkpoint was written with other -i data"
expect_error fresh_run_over_checkpoints 2 "-o .*resume_good holds the checkpoints of an earlier run \(the newest complete one: step 0\): -y 1 resumes it" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_good.bin" -o "$WORK/resume_good"
# -z: a checkpoint resumes with its own ZeRO stage and, sharded (-z 1), its own
# world size; a -z 1 state file of another rank (whole and sealed) is refused
expect_error resume_other_zero_stage 2 "rank 0: state file '.*resume_good/$state0': was written at -z 0, this run has -z 1: resume with -z 0" \
    "${RESUME[@]}" -z 1 -o "$WORK/resume_good"
expect_success resume_z1_source 2 "${BASE[@]}" -cp 2 -sh 0 -e "$WORK/ckpt_good.bin" -x 0 -n 1 -z 1 -o "$WORK/resume_z1"
expect_error resume_z1_at_z0 2 "rank 0: state file '.*resume_z1/$state0': was written at -z 1, this run has -z 0: resume with -z 1" \
    "${RESUME[@]}" -o "$WORK/resume_z1"
expect_error resume_z1_other_world 4 "rank 0: state file '.*resume_z1/$state0': holds a -z 1 optimizer state sharded over 2 ranks, this run has 4: resume it with mpirun -np 2" \
    "${RESUME[@]}" -z 1 -o "$WORK/resume_z1"
cp -r "$WORK/resume_z1" "$WORK/resume_z1_swapped"; cp "$WORK/resume_z1/$state0" "$WORK/resume_z1_swapped/$state1"
expect_error resume_z1_swapped_shard 2 "rank 1: state file '.*resume_z1_swapped/$state1': holds the optimizer state of the parameters \[0, [0-9]+\) \(-z 1\), this rank holds \[[0-9]+, $params\)" \
    "${RESUME[@]}" -z 1 -o "$WORK/resume_z1_swapped"
# ranks whose moments differ (each file whole and sealed): two runs one step apart
# in the learning rate, rank 1's state of the other
# (the moments after step 1 do not depend on the learning rate; after step 2 they do)
# (and the zero weights of ckpt_good.bin have zero gradients: a random init here)
expect_success moments_run_a 2 "${BASE[@]}" -cp 2 -x 2 -n 2 -l 1e-3 -o "$WORK/moments_a"
expect_success moments_run_b 2 "${BASE[@]}" -cp 2 -x 2 -n 2 -l 2e-3 -o "$WORK/moments_b"
# (run b's moments and their checksum, uint64 [8], under the rest of run a's own
# header, sealed again: a file whose header is another run's is refused before its
# moments are read)
f=$WORK/moments_a/state_00000002_00001.bin
{ head -c $STATE_HEADER_BYTES "$f"; tail -c +$((STATE_HEADER_BYTES + 1)) "$WORK/moments_b/state_00000002_00001.bin"; } >"$f.new"
put_u64 "$f.new" $((1024 + 8 * 8)) "$(od -An -td8 -j $((1024 + 8 * 8)) -N 8 "$WORK/moments_b/state_00000002_00001.bin" | tr -d ' ')"
state_reseal "$f.new"
mv "$f.new" "$f"
expect_error moments_disagree 2 "rank 1: the optimizer state is checksum [0-9a-f]+, but checksum [0-9a-f]+ on rank 0 \(every rank must resume the same optimizer state\)" \
    "${BASE[@]}" -cp 2 -x 2 -y 1 -o "$WORK/moments_a"
# the state of another model: the weights of a model with C 8 in place of C 4
resume_dir resume_other;      make_checkpoint resume_other/model_00000000.bin 8
expect_error state_other_model 2 "rank 0: state file '.*resume_other/$state0': optimizer state of $params parameters, the model has [0-9]+" \
    "${RESUME[@]}" -o "$WORK/resume_other"
resume_dir resume_model_cut;  truncate -s 2048 "$WORK/resume_model_cut/model_00000000.bin"
expect_error resume_model_truncated 2 "checkpoint '.*resume_model_cut/model_00000000\.bin': 2048 bytes, but its header describes" \
    "${RESUME[@]}" -o "$WORK/resume_model_cut"
# a checkpoint is one unit: every file of it carries the run id of the job that
# wrote it, and a file of another run (here an identical twin run's, which holds
# other bytes only in its run id) is refused, naming both runs
expect_success resume_twin_source 2 "${BASE[@]}" -cp 2 -sh 0 -e "$WORK/ckpt_good.bin" -x 0 -n 1 -o "$WORK/resume_twin"
resume_dir resume_mix_model;  cp "$WORK/resume_twin/model_00000000.bin" "$WORK/resume_mix_model/"
expect_error mixed_model_file 2 "model file '.*resume_mix_model/model_00000000\.bin' was written by run [0-9a-f]{16} at step 0, the state files by run [0-9a-f]{16} at step 0: files of two runs in one checkpoint" \
    "${RESUME[@]}" -o "$WORK/resume_mix_model"
resume_dir resume_mix_state;  cp "$WORK/resume_twin/$state1" "$WORK/resume_mix_state/"
expect_error mixed_state_file 2 "rank 1: state file '.*resume_mix_state/$state1': written by run [0-9a-f]{16}, rank 0's by run [0-9a-f]{16}: files of two runs in one checkpoint" \
    "${RESUME[@]}" -o "$WORK/resume_mix_state"
resume_dir resume_mix_done;   cp "$WORK/resume_twin/DONE_00000000" "$WORK/resume_mix_done/"
expect_error mixed_done_marker 2 "DONE marker '.*resume_mix_done/DONE_00000000' was written by run [0-9a-f]{16} at step 0, the state files by run" \
    "${RESUME[@]}" -o "$WORK/resume_mix_done"
resume_dir resume_untagged;   cp "$WORK/ckpt_good.bin" "$WORK/resume_untagged/model_00000000.bin"
expect_error untagged_model_file 2 "model file '.*resume_untagged/model_00000000\.bin': records no run id and step: not the model file of a checkpoint" \
    "${RESUME[@]}" -o "$WORK/resume_untagged"
# a -z 1 optimizer shard of a twin run (the same shard of the same parameters)
expect_success resume_z1_twin_source 2 "${BASE[@]}" -cp 2 -sh 0 -e "$WORK/ckpt_good.bin" -x 0 -n 1 -z 1 -o "$WORK/resume_z1_twin"
cp -r "$WORK/resume_z1" "$WORK/resume_z1_mixed"; cp "$WORK/resume_z1_twin/$state1" "$WORK/resume_z1_mixed/"
expect_error mixed_z1_shard 2 "rank 1: state file '.*resume_z1_mixed/$state1': written by run [0-9a-f]{16}, rank 0's by run" \
    "${RESUME[@]}" -z 1 -o "$WORK/resume_z1_mixed"
# -y 1 with no checkpoint to resume leaves the outputs of the run it could not
# resume as they were (a DONE marker whose files are gone: nothing usable)
resume_dir resume_lost;       rm "$WORK/resume_lost/$state0"
echo "s:0 trl:10.000000 lr:0.000100 norm:1.000000" >"$WORK/resume_lost/main.log"
cp "$WORK/resume_lost/main.log" "$WORK/resume_lost_log.copy"
expect_error resume_nothing_keeps_log 2 "-y 1: no complete checkpoint in .*resume_lost to resume, and starting from scratch would write over '.*resume_lost/main\.log' \([0-9]+ bytes of the run that wrote it\)" \
    "${RESUME[@]}" -o "$WORK/resume_lost"
cmp -s "$WORK/resume_lost/main.log" "$WORK/resume_lost_log.copy" || { failures=$((failures + 1)); echo "FAIL resume_nothing_keeps_log: main.log changed"; }
: >"$WORK/resume_lost/main.log"
head -c 64 /dev/urandom >"$WORK/resume_lost.tl"; cp "$WORK/resume_lost.tl" "$WORK/resume_lost_tl.copy"
expect_error resume_nothing_keeps_tl 2 "-y 1: no complete checkpoint .* would write over '.*resume_lost\.tl' \(64 bytes" \
    "${RESUME[@]}" -o "$WORK/resume_lost" -tl "$WORK/resume_lost.tl"
cmp -s "$WORK/resume_lost.tl" "$WORK/resume_lost_tl.copy" || { failures=$((failures + 1)); echo "FAIL resume_nothing_keeps_tl: -tl changed"; }
# a resume with -tl naming a file that holds other bytes than the checkpoint's run
# wrote: cutting it back would lose them
head -c 100 /dev/urandom >"$WORK/other_losses.tl"; cp "$WORK/other_losses.tl" "$WORK/other_losses.copy"
expect_error resume_other_tl 2 "-tl '.*other_losses\.tl' holds 100 bytes that are not the per-token losses the checkpoint's run wrote \(0 bytes: it had no -tl\)" \
    "${RESUME[@]}" -o "$WORK/resume_good" -tl "$WORK/other_losses.tl"
cmp -s "$WORK/other_losses.tl" "$WORK/other_losses.copy" || { failures=$((failures + 1)); echo "FAIL resume_other_tl: the file changed"; }
# the batch count of a shuffled run is bounded by its steps and the most batches a
# step read (-d): at the bound a state is a run's (here 2 steps of 70000 batches),
# one past it is refused (the fields sealed again)
expect_success batches_source 2 "${BASE[@]}" -cp 2 -x 2 -n 2 -o "$WORK/batches_good"
for case in "batches_at_bound 140000" "batches_past_bound 140001"; do
    read -r name batches <<<"$case"
    rm -rf "$WORK/$name"; cp -r "$WORK/batches_good" "$WORK/$name"
    for r in 00000 00001; do
        put_u64 "$WORK/$name/state_00000002_$r.bin" $((1024 + 17 * 8)) 70000
        put_u64 "$WORK/$name/state_00000002_$r.bin" $((1024 + 9 * 8)) "$batches"
        state_reseal "$WORK/$name/state_00000002_$r.bin"
    done
done
expect_success batches_at_bound 2 "${BASE[@]}" -cp 2 -x 2 -y 1 -o "$WORK/batches_at_bound"
expect_error batches_past_bound 2 "rank 0: state file '.*batches_past_bound/state_00000002_00000\.bin': 140001 batches read in 2 steps of at most 70000 batches is impossible" \
    "${BASE[@]}" -cp 2 -x 2 -y 1 -o "$WORK/batches_past_bound"
# -e longer than the 256 bytes a state once kept: recorded whole, its own checkpoint resumes
long_dir=$WORK/$(printf 'a%.0s' {1..120})/$(printf 'b%.0s' {1..120})/$(printf 'c%.0s' {1..60})
mkdir -p "$long_dir"; cp "$WORK/ckpt_good.bin" "$long_dir/init.bin"
expect_success long_init_source 2 "${BASE[@]}" -cp 2 -sh 0 -e "$long_dir/init.bin" -x 0 -n 1 -o "$WORK/long_init"
expect_success long_init_resumed 2 "${BASE[@]}" -cp 2 -sh 0 -e "$long_dir/init.bin" -x 1 -y 1 -o "$WORK/long_init"
expect_note long_init_resumed "^resuming from step 0: "
# -mt on a resume: the checkpoint's table stays, and the run says so
expect_success mt_on_resume 2 "${BASE[@]}" -cp 2 -x 2 -y 1 -mt 2048 -o "$WORK/batches_good"
expect_note mt_on_resume "^note: -mt 2048 sets the position table of a fresh start; the checkpoint brings its own of 1024 rows"
# an error on one rank alone names it: only rank 0 writes -tl
expect_error tl_unwritable 2 "rank 0: cannot open '.*/no_such_dir/losses\.tl' for writing: No such file or directory" \
    "${BASE[@]}" -cp 2 -tl "$WORK/no_such_dir/losses.tl"

# ---------------------------------------------------------------------------
# tokenizer (-tk)
cp "$TOKENIZER" "$WORK/tok_magic.bin";  put_i32 "$WORK/tok_magic.bin" 0 20240326
head -c $(($(stat -c %s "$TOKENIZER") / 2)) "$TOKENIZER" >"$WORK/tok_truncated.bin"
cp "$TOKENIZER" "$WORK/tok_vocab.bin";  put_i32 "$WORK/tok_vocab.bin" 8 50000
cp "$TOKENIZER" "$WORK/tok_eot.bin";    put_i32 "$WORK/tok_eot.bin" 12 0

echo "== tokenizer"
# the tokenizer is read to print samples (-s 1: one at the end)
SAMPLES=(-s 1 -g 4)
expect_error tokenizer_bad_magic 2 "tokenizer '.*tok_magic\.bin': bad magic 20240326" \
    "${BASE[@]}" "${SAMPLES[@]}" -cp 2 -tk "$WORK/tok_magic.bin"
expect_error tokenizer_truncated 2 "tokenizer '.*tok_truncated\.bin': entry of token [0-9]+ is truncated" \
    "${BASE[@]}" "${SAMPLES[@]}" -cp 2 -tk "$WORK/tok_truncated.bin"
expect_error tokenizer_vocab 2 "tokenizer '.*tok_vocab\.bin': vocabulary of 50000 tokens, the model has 50257" \
    "${BASE[@]}" "${SAMPLES[@]}" -cp 2 -tk "$WORK/tok_vocab.bin"
expect_error tokenizer_eot 2 "tokenizer '.*tok_eot\.bin': EOT token 0 is not the vocabulary's last token 50256" \
    "${BASE[@]}" "${SAMPLES[@]}" -cp 2 -tk "$WORK/tok_eot.bin"
# only samples need it: a run that prints none does not stop for it
expect_success tokenizer_vocab_no_samples 2 "${BASE[@]}" -s 0 -cp 2 -tk "$WORK/tok_vocab.bin"

# a model whose vocabulary (64) holds no GPT-2 EOT (50256): samples start from a
# token inside it, with a note, and print token ids (no tokenizer of 64 tokens)
V=64 Vp=64 make_checkpoint ckpt_small_vocab.bin
{ head -c 1024 /dev/zero; head -c 4000 /dev/zero; } >"$WORK/tokens_zero.bin"
put_i32 "$WORK/tokens_zero.bin" 0 20240520; put_i32 "$WORK/tokens_zero.bin" 4 1; put_i32 "$WORK/tokens_zero.bin" 8 2000
expect_success small_vocab_samples 2 "${BASE[@]}" -s 1 -g 8 -cp 2 -e "$WORK/ckpt_small_vocab.bin" \
    -i "$WORK/tokens_zero.bin" -tk "$WORK/no_tokenizer.bin"
expect_note small_vocab_samples "^note: samples start from token 0: the model's vocabulary of 64 tokens holds no EOT token"
# -dm 1 needs the EOT inside the vocabulary
expect_error small_vocab_documents 2 "-dm 1: documents open with the EOT token 50256, outside the model's vocabulary of 64" \
    "${BASE[@]}" -cp 2 -dm 1 -e "$WORK/ckpt_small_vocab.bin" -i "$WORK/tokens_zero.bin"
expect_error small_vocab_positions 2 "-rp 1: documents open with the EOT token 50256, outside the model's vocabulary of 64" \
    "${BASE[@]}" -cp 2 -rp 1 -e "$WORK/ckpt_small_vocab.bin" -i "$WORK/tokens_zero.bin"

# ---------------------------------------------------------------------------
# files of another type: a FIFO never blocks an open (for reading it waits for a
# writer, for writing for a reader): the type is checked first
echo "== FIFOs and other non-regular files"
mkfifo "$WORK/fifo"
expect_error fifo_tokens 2 "token file '.*/fifo': not a regular file: it is a FIFO" \
    "${BASE[@]}" -cp 2 -i "$WORK/fifo"
expect_error fifo_val_tokens 2 "token file '.*/fifo': not a regular file: it is a FIFO" \
    "${BASE[@]}" -cp 2 -v 1 -j "$WORK/fifo"
expect_error fifo_checkpoint 2 "checkpoint '.*/fifo': not a regular file: it is a FIFO" \
    "${BASE[@]}" -cp 2 -e "$WORK/fifo"
expect_error fifo_tokenizer 2 "tokenizer '.*/fifo': not a regular file: it is a FIFO" \
    "${BASE[@]}" "${SAMPLES[@]}" -cp 2 -tk "$WORK/fifo"
expect_error fifo_token_losses 2 "rank 0: cannot write '.*/fifo': it is a FIFO, not a regular file" \
    "${BASE[@]}" -cp 2 -tl "$WORK/fifo"
mkdir -p "$WORK/fifo_log"; mkfifo "$WORK/fifo_log/main.log"
expect_error fifo_main_log 2 "rank 0: cannot write '.*fifo_log/main\.log': it is a FIFO, not a regular file" \
    "${BASE[@]}" -cp 2 -o "$WORK/fifo_log"
expect_error fifo_output_dir 2 "-o '.*/fifo': not a directory: it is a FIFO" \
    "${BASE[@]}" -cp 2 -o "$WORK/fifo"
resume_dir resume_fifo_state; rm "$WORK/resume_fifo_state/$state1"; mkfifo "$WORK/resume_fifo_state/$state1"
expect_error fifo_state 2 "rank 1: state file '.*resume_fifo_state/$state1': not a regular file: it is a FIFO" \
    "${RESUME[@]}" -o "$WORK/resume_fifo_state"
resume_dir resume_fifo_model; rm "$WORK/resume_fifo_model/model_00000000.bin"; mkfifo "$WORK/resume_fifo_model/model_00000000.bin"
expect_error fifo_resume_model 2 "checkpoint '.*resume_fifo_model/model_00000000\.bin': not a regular file: it is a FIFO" \
    "${RESUME[@]}" -o "$WORK/resume_fifo_model"
mkdir -p "$WORK/fifo_tmp"; mkfifo "$WORK/fifo_tmp/model_00000001.bin.tmp"
expect_error fifo_checkpoint_tmp 2 "rank 0: cannot write '.*fifo_tmp/model_00000001\.bin\.tmp': it is a FIFO" \
    "${BASE[@]}" -cp 2 -n 1 -o "$WORK/fifo_tmp"
expect_error char_device_tokens 2 "token file '/dev/zero': not a regular file: it is a character device" \
    "${BASE[@]}" -cp 2 -i /dev/zero

# ---------------------------------------------------------------------------
# a run owns its -o directory (DIR/LOCK: host and pid)
echo "== the lock of -o"
host=$(hostname)
mkdir -p "$WORK/locked_live" "$WORK/locked_stale" "$WORK/locked_elsewhere"
echo "$host $$" >"$WORK/locked_live/LOCK" # this script: alive
expect_error lock_live_run 2 "rank 0: -o '.*locked_live' is in use by the run of pid $$ on host $host \(its lock file '.*locked_live/LOCK'\)" \
    "${BASE[@]}" -cp 2 -o "$WORK/locked_live"
sleep 0 & dead_pid=$!; wait "$dead_pid"
echo "$host $dead_pid" >"$WORK/locked_stale/LOCK"
expect_success lock_stale 2 "${BASE[@]}" -cp 2 -o "$WORK/locked_stale"
expect_note lock_stale "^note: -o .*locked_stale: taking over the lock of the run of pid $dead_pid on $host, which is no longer running"
if [[ -e $WORK/locked_stale/LOCK ]]; then failures=$((failures + 1)); echo "FAIL lock_stale: the run left its lock behind"; fi
echo "some-other-host 4242" >"$WORK/locked_elsewhere/LOCK"
expect_error lock_other_host 2 "in use by the run of pid 4242 on host some-other-host .*remove the lock file if that run is gone" \
    "${BASE[@]}" -cp 2 -o "$WORK/locked_elsewhere"
# two runs at once into one directory: the second refuses, naming the first, and
# the first goes on undisturbed (its log keeps growing; then this test stops it)
cases=$((cases + 1))
settle
"$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np 1 "$TRAINER" "${BASE[@]}" -x 100000 \
    -o "$WORK/two_runs" >"$WORK/two_runs_first.out" 2>&1 &
first=$!
until grep -q '^step ' "$WORK/two_runs_first.out" 2>/dev/null || ! kill -0 $first 2>/dev/null; do sleep 0.1; done
run_trainer 1 "$WORK/two_runs_second.out" "$WORK/two_runs_second.err" "${BASE[@]}" -x 40 -o "$WORK/two_runs"
second_rc=$rc
steps_then=$(grep -c ' trl:' "$WORK/two_runs/main.log" || true)
sleep 1
steps_later=$(grep -c ' trl:' "$WORK/two_runs/main.log" || true)
kill -TERM $first 2>/dev/null || true
wait $first 2>/dev/null || true
if [[ $second_rc -ne 0 && $second_rc -ne 124 ]] &&
   grep -qE "^error: rank 0: -o '.*two_runs' is in use by the run of pid [0-9]+ on host" "$WORK/two_runs_second.err" &&
   [[ $steps_later -gt $steps_then ]]; then
    printf 'ok   %-28s the second run refused (rc %d), the first went on (%d -> %d steps logged)\n' two_runs_one_dir \
        "$second_rc" "$steps_then" "$steps_later"
else
    failures=$((failures + 1))
    echo "FAIL two_runs_one_dir: second rc $second_rc, first logged $steps_then then $steps_later steps"
    grep '^error' "$WORK/two_runs_second.err"
fi

# ---------------------------------------------------------------------------
# no output of the run is one of its inputs
echo "== outputs are not inputs"
cp "$TOKENS" "$WORK/tokens_input.bin"
expect_error tl_is_train_data 2 "rank 0: -tl '.*tokens_input\.bin' is the -i input '.*tokens_input\.bin'" \
    "${BASE[@]}" -cp 2 -i "$WORK/tokens_input.bin" -tl "$WORK/tokens_input.bin"
ln -sf "$WORK/ckpt_good.bin" "$WORK/link_to_init"
expect_error tl_is_init_via_link 2 "rank 0: -tl '.*link_to_init' is the -e input '.*ckpt_good\.bin'" \
    "${BASE[@]}" -cp 2 -e "$WORK/ckpt_good.bin" -tl "$WORK/link_to_init"
ln -f "$WORK/tokens_input.bin" "$WORK/hard_link.bin"
expect_error tl_is_val_data_hard_link 2 "rank 0: -tl '.*hard_link\.bin' is the -j input" \
    "${BASE[@]}" -cp 2 -v 1 -j "$WORK/tokens_input.bin" -tl "$WORK/hard_link.bin"
expect_error tl_is_tokenizer 2 "rank 0: -tl '.*gpt2_tokenizer\.bin' is the -tk input" \
    "${BASE[@]}" "${SAMPLES[@]}" -cp 2 -tl "$TOKENIZER"
# every file an input flag names is compared, read by this run or not (a run without
# samples reads no tokenizer, one that does not validate no -j; -hf is read by -h 1)
cp "$TOKENIZER" "$WORK/tokenizer_copy.bin"
expect_error tl_is_unread_tokenizer 2 "rank 0: -tl '.*tokenizer_copy\.bin' is the -tk input" \
    "${BASE[@]}" -s 0 -cp 2 -tk "$WORK/tokenizer_copy.bin" -tl "$WORK/tokenizer_copy.bin"
expect_error tl_is_unread_val_data 2 "rank 0: -tl '.*tokens_input\.bin' is the -j input" \
    "${BASE[@]}" -v 0 -cp 2 -j "$WORK/tokens_input.bin" -tl "$WORK/tokens_input.bin"
cp "$TOKENS" "$WORK/hellaswag_input.bin"
expect_error tl_is_hellaswag_file 2 "rank 0: -tl '.*hellaswag_input\.bin' is the -hf input" \
    "${BASE[@]}" -cp 2 -h 1 -hf "$WORK/hellaswag_input.bin" -tl "$WORK/hellaswag_input.bin"
# no cap on the inputs compared: -tl is the last of 5000 -i files (each its own file)
python3 - "$WORK/many" <<'PY'
import os, struct, sys
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
tokens = struct.pack("<256i", 20240520, 1, 64, *([0] * 253)) + bytes(range(128))
for i in range(5000):
    with open(os.path.join(d, "shard_%05d.bin" % i), "wb") as f: f.write(tokens)
PY
expect_error tl_is_last_of_5000_inputs 2 "rank 0: -tl '.*many/shard_04999\.bin' is the -i input '.*many/shard_04999\.bin'" \
    "${BASE[@]}" -cp 2 -i "$WORK/many/shard_*.bin" -tl "$WORK/many/shard_04999.bin"
mkdir -p "$WORK/log_input"; cp "$TOKENS" "$WORK/log_input/main.log"
expect_error main_log_is_train_data 2 "rank 0: the -i input '.*log_input/main\.log' is a file the run writes in its -o directory" \
    "${BASE[@]}" -cp 2 -i "$WORK/log_input/main.log" -o "$WORK/log_input"
ln -sf "$WORK/log_input/main.log" "$WORK/link_to_log"
expect_error main_log_is_train_data_via_link 2 "rank 0: the -i input '.*link_to_log' is a file the run writes in its -o directory" \
    "${BASE[@]}" -cp 2 -i "$WORK/link_to_log" -o "$WORK/log_input"
expect_error tl_is_main_log 2 "rank 0: -tl '.*tl_log/main\.log' is a file the run writes in its -o directory" \
    "${BASE[@]}" -cp 2 -o "$WORK/tl_log" -tl "$WORK/tl_log/main.log"
cp "$WORK/ckpt_good.bin" "$WORK/init_in_output_dir.bin"; mkdir -p "$WORK/init_dir"
cp "$WORK/ckpt_good.bin" "$WORK/init_dir/model_00000001.bin"
expect_error init_is_a_checkpoint_name 2 "rank 0: the -e input '.*init_dir/model_00000001\.bin' is a file the run writes in its -o directory" \
    "${BASE[@]}" -cp 2 -e "$WORK/init_dir/model_00000001.bin" -o "$WORK/init_dir"

# ---------------------------------------------------------------------------
# every write is checked: the error names the file and the system's reason
echo "== write errors"
expect_error tl_disk_full 2 "rank 0: cannot write '/dev/full': No space left on device" \
    "${BASE[@]}" -cp 2 -tl /dev/full
mkdir -p "$WORK/log_full"; ln -sf /dev/full "$WORK/log_full/main.log"
expect_error main_log_disk_full 2 "rank 0: cannot write '.*log_full/main\.log': No space left on device" \
    "${BASE[@]}" -cp 2 -o "$WORK/log_full"
expect_error output_dir_under_a_file 2 "-o '.*tokens_good\.bin/run': cannot create directory '.*tokens_good\.bin/run': Not a directory" \
    "${BASE[@]}" -cp 2 -o "$WORK/tokens_good.bin/run"
expect_error tl_under_a_file 2 "rank 0: cannot open '.*tokens_good\.bin/losses\.tl' for writing: Not a directory" \
    "${BASE[@]}" -cp 2 -tl "$WORK/tokens_good.bin/losses.tl"
# a read-only file system and a full one (tmpfs mounts, as root; skipped with a note elsewhere)
mounts=()
cleanup_mounts() { settle; for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || true; done; }
trap cleanup_mounts EXIT
mkdir -p "$WORK/ro" "$WORK/tiny"
if mount -t tmpfs -o ro,size=64k tmpfs "$WORK/ro" 2>/dev/null; then
    mounts+=("$WORK/ro")
    expect_error output_dir_read_only 2 "-o '.*ro/run': cannot create directory '.*ro/run': Read-only file system" \
        "${BASE[@]}" -cp 2 -o "$WORK/ro/run"
    expect_error tl_read_only 2 "rank 0: cannot open '.*ro/losses\.tl' for writing: Read-only file system" \
        "${BASE[@]}" -cp 2 -tl "$WORK/ro/losses.tl"
else
    echo "note: cannot mount a tmpfs here (not root?): the read-only file system cases are skipped"
fi
if mount -t tmpfs -o size=256k tmpfs "$WORK/tiny" 2>/dev/null; then
    mounts+=("$WORK/tiny")
    # the 800 KiB model file of the tiny model does not fit in 256 KiB; every rank
    # that fails to write its own file says so (one line each, naming its file)
    cases=$((cases + 1))
    run_trainer 2 "$WORK/checkpoint_disk_full.out" "$WORK/checkpoint_disk_full.err" "${BASE[@]}" -cp 2 \
        -e "$WORK/ckpt_good.bin" -n 1 -o "$WORK/tiny/run"
    if [[ $rc -ne 0 && $rc -ne 124 && $rc -lt 128 ]] &&
       grep -qE "^error: rank [01]: cannot write '.*tiny/run/(model|state)_[0-9_]+\.bin(\.tmp)?': No space left on device" \
           "$WORK/checkpoint_disk_full.err" &&
       [[ $(grep '^error: ' "$WORK/checkpoint_disk_full.err" | grep -cv 'No space left on device') -eq 0 ]]; then
        printf 'ok   %-28s %-10s rc %d: %s\n' checkpoint_disk_full "(np 2)" "$rc" "$(grep -m1 '^error: ' "$WORK/checkpoint_disk_full.err")"
    else
        failures=$((failures + 1))
        echo "FAIL checkpoint_disk_full: rc $rc"; grep '^error' "$WORK/checkpoint_disk_full.err"
    fi
    if [[ -e $WORK/tiny/run/DONE_00000001 ]]; then failures=$((failures + 1)); echo "FAIL checkpoint_disk_full: a DONE marker"; fi
else
    echo "note: cannot mount a tmpfs here (not root?): the full file system case is skipped"
fi

# ---------------------------------------------------------------------------
# -h given to one rank only (an MPMD launch): every rank stops, none hangs
echo "== -h on some ranks"
cases=$((cases + 1))
settle
rc=0
timeout 60 "$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np 1 "$TRAINER" "${BASE[@]}" -cp 2 \
    : -np 1 "$TRAINER" "${BASE[@]}" -cp 2 -h >"$WORK/help_mpmd.out" 2>&1 || rc=$?
if [[ $rc -ne 0 && $rc -ne 124 && $rc -lt 128 ]] && grep -q '^usage:' "$WORK/help_mpmd.out" &&
   grep -q '^note: -h was given to 1 of the 2 ranks: every rank stops' "$WORK/help_mpmd.out"; then
    printf 'ok   %-28s %-10s rc %d, usage and a note, no hang\n' help_one_rank "(np 2)" "$rc"
else
    failures=$((failures + 1))
    echo "FAIL help_one_rank: rc $rc (124: a hang)"; tail -n 5 "$WORK/help_mpmd.out"
fi

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
expect_error solver_chunk_not_tiles 2 "-cc 100: the solver's chunk size must be a positive multiple of the 64-row tiles" \
    "${BASE[@]}" -cp 2 -cl solver -cc 100
expect_error chunk_without_solver 2 "-cc 64: the chunk size applies to -cl solver only" \
    "${BASE[@]}" -cp 2 -cl round_robin -cc 64
expect_error solver_chunk_past_row 2 "-cl solver -cc 64: the chunk is longer than the row .-t 16.: give -t 64 or more" \
    "${BASE[@]}" -cp 2 -cl solver
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
# Ulysses: whole heads per rank (d6: 6 heads), -cu with hybrid only
expect_error ulysses_heads 4 "-ca ulysses: the model's 6 heads are not divisible by -cp 4" \
    "${BASE[@]}" -e d6 -cp 4 -ca ulysses
expect_error hybrid_heads 4 "-ca hybrid: the model's 1 heads are not divisible by -cu 2" \
    "${BASE[@]}" -cp 4 -ca hybrid -cu 2
expect_error hybrid_without_degree 4 "-ca hybrid needs -cu U, a Ulysses degree that divides -cp 4 .*got -cu 0" \
    "${BASE[@]}" -cp 4 -ca hybrid
expect_error hybrid_degree_not_dividing 4 "-ca hybrid needs -cu U, a Ulysses degree that divides -cp 4 .*got -cu 3" \
    "${BASE[@]}" -cp 4 -ca hybrid -cu 3
expect_error degree_without_hybrid 2 "-cu 2: the Ulysses degree applies to -ca hybrid only \(-ca ring\)" \
    "${BASE[@]}" -cp 2 -cu 2
# group-cast's stages (-co): 1 to cp - 1, with -ca groupcast only, an integer
expect_error stages_without_groupcast 2 "-co 1: the stages apply to -ca groupcast only \(-ca ring\)" \
    "${BASE[@]}" -cp 2 -co 1
expect_error stages_past_peers 3 "-co 3: -ca groupcast takes 1 to 2 stages at -cp 3 \(at most one per other rank of the CP group\)" \
    "${BASE[@]}" -cp 3 -ca groupcast -co 3
expect_error stages_negative 2 "-co -1: -ca groupcast takes 1 to 1 stages at -cp 2" \
    "${BASE[@]}" -cp 2 -ca groupcast -co -1
expect_error stages_not_integer 2 "flag -co expects an integer \(within 32 bits\), got '1.5'" \
    "${BASE[@]}" -cp 2 -ca groupcast -co 1.5
expect_error zero_stage_2 2 "-z 2: ZeRO stage 2 \(sharded gradients\) is not implemented here: -z 1 shards the AdamW state" \
    "${BASE[@]}" -cp 2 -z 2
expect_error zero_stage_3 2 "-z 3: ZeRO stage 3 \(sharded gradients and parameters\) is not implemented here" \
    "${BASE[@]}" -cp 2 -z 3
expect_error zero_stage_bogus 2 "-z 4: llm.c's ZeRO stages are 0 to 3" \
    "${BASE[@]}" -cp 2 -z 4
expect_error unknown_flag 2 "unknown flag '-zz'" \
    "${BASE[@]}" -cp 2 -zz 1
settle
if ! grep -q '^usage:' "$WORK/unknown_flag.err"; then
    failures=$((failures + 1)); echo "FAIL unknown_flag: no usage on stderr"
fi
expect_error unknown_flag_1proc 0 "unknown flag '--steps'" \
    "${BASE[@]}" --steps 3
expect_error flag_without_value 2 "flag -b needs a value" \
    "${BASE[@]}" -cp 2 -b
expect_error b_not_integer 2 "flag -b expects an integer \(within 32 bits\), got 'abc'" \
    "${BASE[@]}" -cp 2 -b abc
expect_error lr_too_large 2 "flag -l expects a number within float's range, got '1e50'" \
    "${BASE[@]}" -cp 2 -l 1e50
# a learning rate too small for a float is a number (it underflows to 0 or a denormal)
expect_success lr_tiny 2 "${BASE[@]}" -cp 2 -l 1e-50
expect_success warmup_past_the_end 2 "${BASE[@]}" -cp 2 -x 2 -u 10
expect_note warmup_past_the_end "^note: the warmup of 10 steps \(-u\) is longer than the run's 2 steps"
# an absurd OMP_NUM_THREADS is clamped to the cores, each rank saying so
OMP_NUM_THREADS=100000 expect_success omp_threads_absurd 2 "${BASE[@]}" -cp 2
expect_note omp_threads_absurd "^note: rank 1: OMP_NUM_THREADS=100000 is more than the [0-9]+ core\(s\) of this machine"
expect_error rank_without_token 4 "sequence length 3 with layout contiguous at cp 4 leaves rank [0-9]+ without a real token" \
    "${BASE[@]}" -cp 4 -cl contiguous -t 3

# llm.c's multi-node flags that do not fit mpirun's world, and llm.c's own start-up
expect_error launch_pn 2 "-pn 3, but mpirun started 2 rank\(s\)" "${BASE[@]}" -cp 2 -pn 3
expect_error launch_pr 2 "rank 1: -pr 0, but mpirun made this process rank 1" "${BASE[@]}" -cp 2 -pr 0
expect_error launch_pg 2 "-pg 1, but mpirun put 2 ranks on this node" "${BASE[@]}" -cp 2 -pg 1
expect_error launch_pi_tcp 2 "-pi tcp: this trainer's ranks start under mpirun" "${BASE[@]}" -cp 2 -pi tcp
expect_error schedule_unknown 2 "-k 'cosin': unknown learning-rate schedule" "${BASE[@]}" -cp 2 -k cosin
expect_error total_batch_not_multiple 2 "-d 100 is not a multiple of the 16 tokens of a micro-batch \(dp 1 x B 1 x T 16\)" \
    "${BASE[@]}" -cp 2 -d 100
expect_error total_batch_zero 2 "-d 0: the total batch is a number of tokens" "${BASE[@]}" -cp 2 -d 0
# -x -1 with a step longer than the data: llm.c would train 0 steps and exit 0
head -c $((1024 + 2 * 100)) "$TOKENS" >"$WORK/tokens_100.bin"; put_i32 "$WORK/tokens_100.bin" 8 100
expect_error epoch_shorter_than_step 2 "-x -1 trains one epoch, but the -i data holds 100 tokens, fewer than the 112 of one step \(-d\)" \
    "${BASE[@]}" -cp 2 -x -1 -d 112 -i "$WORK/tokens_100.bin"
expect_error hellaswag_two 2 "-h 2: HellaSwag is 0 or 1" "${BASE[@]}" -cp 2 -h 2

# the default data are paths from the repository root: from another directory the
# error says so (the case runs there, alone)
cases=$((cases + 1))
settle
(cd "$WORK" && check_error default_data_elsewhere 2 \
    "the default data 'dev/data/austen/austen_train.bin' is not there from this directory: run from the repository root, or pass -i/-j/-tk" \
    "${BASE[@]}" -cp 2) > "$WORK/default_data_elsewhere.verdict" 2>&1 || true
cat "$WORK/default_data_elsewhere.verdict"
if grep -q '^FAIL' "$WORK/default_data_elsewhere.verdict"; then failures=$((failures + 1)); fi

settle
echo
if [[ $failures -gt 0 ]]; then
    echo "FAIL bad_input: $failures of $cases cases failed ($SECONDS s)"
    exit 1
fi
echo "PASS bad_input: $cases cases ($SECONDS s)"
