#!/usr/bin/env bash
# The tools that write files (./encode, dev/loss_mask, dev/cp_layout, llmc/tool_outputs.h)
# never destroy what they read and never leave half a result:
#   1. an output that is an input, the tokenizer or another output, by any path (./x,
#      a hard link, a symbolic link, standard input, a file not made yet spelled twice),
#      is refused with one line naming both, before anything is written;
#   2. a run that fails while writing (a file past `ulimit -f`, a full device, a
#      missing directory, a signal) leaves every old output as it was and no temporary file;
#      a run that succeeds leaves its outputs and nothing else;
#   3. a file header whose count the file cannot hold (a tokenizer claiming 2^31 - 1
#      tokens, a token file claiming more than it has) is refused at once, and a
#      tokenizer whose EOT is not its last token too;
#   4. -h prints each tool's usage on standard output and exits 0; a bad flag does not.
# Every refused case checks the error line, the exit status and the checksum of every
# file in the work directory before and after.
#
#   bash test/tool_files.sh      (from the repository root, after `make encode loss_mask cp_layout`)
#
# Needs strace (scripts/install_deps.sh installs it), which sends the signals.
# Env: REPO_ROOT, BUILD_DIR (scratch).
set -euo pipefail
command -v strace > /dev/null || { echo "SKIP: no strace (scripts/install_deps.sh installs it)"; exit 77; }
REPO_ROOT=${REPO_ROOT:-$(pwd)}
cd "$REPO_ROOT"
for tool in encode loss_mask cp_layout; do
    [[ -x $tool ]] || { echo "FAIL: ./$tool is missing: build it with 'make $tool'"; exit 1; }
done
WORK=${BUILD_DIR:-$REPO_ROOT/build}/tool_files
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
ENCODE=$REPO_ROOT/encode LOSS_MASK=$REPO_ROOT/loss_mask CP_LAYOUT=$REPO_ROOT/cp_layout
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# every file of the work directory but the cases' own logs (*.log), with its checksum
snapshot() { find . -type f ! -name '*.log' -print0 | sort -z | xargs -0 md5sum; }

# refused NAME PATTERN COMMAND...: COMMAND fails with exactly one error line, matching
# PATTERN, and leaves every file as it was, making none (no temporary file)
refused() {
    local name=$1 pattern=$2
    shift 2
    local before rc=0 line
    before=$(snapshot)
    "$@" > "$name.log" 2>&1 || rc=$?
    line=$(grep -m1 '^error: ' "$name.log" || true)
    if [[ $rc -eq 0 || $(grep -c '^error: ' "$name.log") -ne 1 || ! $line =~ $pattern ]]; then
        fail "$name: exit $rc, output: $(head -c 400 "$name.log")"
    elif [[ $(snapshot) != "$before" ]]; then
        fail "$name: the files changed:"$'\n'"$(diff <(echo "$before") <(snapshot))"
    else
        echo "ok   $name: $line"
    fi
}

# the files the cases read and replace: a text, the tokenizer, a token file and its
# mask, and the previous results of each tool
cp "$REPO_ROOT/dev/data/gpt2_tokenizer.bin" tk.bin
cp "$REPO_ROOT/dev/data/austen/austen_val.bin" q.bin
printf 'The cat sat on the mat.\n' > in.txt
# 600 kB of words: about 150k tokens, 300 kB of token file
printf 'the cat sat on the mat and then it slept\n%.0s' {1..15000} > big.txt
"$ENCODE" -tk tk.bin -o tr.bin -v va.bin in.txt big.txt 2> /dev/null
"$LOSS_MASK" -i q.bin -a ' Elliot' -tk tk.bin -o q.mask > /dev/null
"$CP_LAYOUT" -t 16 -cp 2 -cl contiguous -png pic.png > /dev/null
[[ -s tr.bin && -s va.bin && -s q.mask && -s pic.png ]] || fail "the tools did not write their first results"
[[ -z $(find . -name '*.tmp*') ]] || fail "a successful run left a temporary file: $(find . -name '*.tmp*')"

# ---- 1. identity
E=("$ENCODE" -tk tk.bin)
refused encode_output_is_input "-o './in.txt' is the input 'in.txt' \(the same file\)" "${E[@]}" -o ./in.txt in.txt
refused encode_output_is_tokenizer "-v 'tk.bin' is the tokenizer 'tk.bin'" "${E[@]}" -o tr.bin -v tk.bin in.txt
refused encode_outputs_alias "-o 'tr.bin' and -v './tr.bin' are the same file" "${E[@]}" -o tr.bin -v ./tr.bin in.txt
refused encode_new_outputs_alias "-o 'new.bin' and -v '\./new.bin' are the same file" \
    "${E[@]}" -o new.bin -v ./new.bin in.txt
ln in.txt hard.txt
ln -s in.txt sym.txt
refused encode_hard_link "-o 'hard.txt' is the input 'in.txt'" "${E[@]}" -o hard.txt in.txt
refused encode_symbolic_link "-o 'sym.txt' is the input 'in.txt'" "${E[@]}" -o sym.txt in.txt
refused encode_standard_input "-o 'tr.bin' is the input 'standard input'" "${E[@]}" -o tr.bin - < tr.bin
refused encode_missing_directory "cannot write -v 'missing/v.bin': its directory 'missing': No such file or directory" \
    "${E[@]}" -o tr.bin -v missing/v.bin in.txt
refused encode_output_directory "cannot write -o '\.': it is a directory" "${E[@]}" -o . in.txt
refused loss_mask_output_is_tokens "-o '\./q.bin' is the -i token file 'q.bin'" \
    "$LOSS_MASK" -i q.bin -a x -tk tk.bin -o ./q.bin
refused loss_mask_output_is_tokenizer "-o 'tk.bin' is the -tk tokenizer '\./tk.bin'" \
    "$LOSS_MASK" -i q.bin -a x -tk ./tk.bin -o tk.bin
# the default -o (NAME.mask beside NAME.bin) is checked as well: here a link to the tokens
ln -s q.bin q_link.bin
ln -s q.bin q_link.mask
refused loss_mask_default_output "the default -o 'q_link.mask' is the -i token file 'q_link.bin'" \
    "$LOSS_MASK" -i q_link.bin -a x -tk tk.bin
refused cp_layout_png_is_input "-png '\./q.bin' is the -i token file 'q.bin'" \
    "$CP_LAYOUT" -t 16 -cp 2 -cl contiguous -i q.bin -png ./q.bin
refused cp_layout_png_missing_directory "cannot write -png 'missing/p.png': its directory 'missing'" \
    "$CP_LAYOUT" -t 16 -cp 2 -cl contiguous -png missing/p.png

# ---- 2. atomic writes: a failed run leaves the old files and no temporary
# (`ulimit -f` in 1024-byte blocks; SIGXFSZ is ignored by the tools, the write fails with EFBIG)
limited() { local blocks=$1; shift; bash -c 'ulimit -f "$0"; exec "$@"' "$blocks" "$@"; }
# the train split (10%, 30 kB) fits, the validation split (270 kB) does not: the first
# output is whole, yet neither replaces its old file
refused encode_second_output_too_large "cannot write 'va\.bin\.tmp\.[A-Za-z0-9]+': File too large" \
    limited 100 "${E[@]}" -o tr.bin -v va.bin -vn 90% big.txt
refused encode_first_output_too_large "cannot write 'tr\.bin\.tmp\.[A-Za-z0-9]+': File too large" \
    limited 100 "${E[@]}" -o tr.bin -v va.bin -vn 10% big.txt
refused encode_full_device "cannot write '/dev/full': No space left on device" \
    "${E[@]}" -o tr.bin -v /dev/full in.txt big.txt
refused loss_mask_too_large "cannot write 'q\.mask\.tmp\.[A-Za-z0-9]+': File too large" \
    limited 50 "$LOSS_MASK" -i q.bin -a x -tk tk.bin -o q.mask
refused cp_layout_full_device "cannot write '/dev/full': No space left on device" \
    "$CP_LAYOUT" -t 16 -cp 2 -cl contiguous -png /dev/full

# a signal while the temporaries are written (strace sends SIGTERM, SIGINT, SIGHUP at
# the first write(2), the first flush of an output) removes them, then ends the run as
# the signal does: exit 128 + its number, every old file as it was
for sig in TERM INT HUP; do
    before=$(snapshot)
    rc=0
    # (the braces keep bash's own "Terminated" line, about the process it waited for, in the log)
    { strace -f -o /dev/null -e trace=write -e inject=write:signal=SIG$sig:when=1 \
        "${E[@]}" -o tr.bin -v va.bin in.txt big.txt; } > "signal_$sig.log" 2>&1 || rc=$?
    if [[ $rc -ne $((128 + $(kill -l $sig))) || $(snapshot) != "$before" ]]; then
        fail "SIG$sig while writing: exit $rc, files:"$'\n'"$(diff <(echo "$before") <(snapshot))"
    else
        echo "ok   SIG$sig while writing: exit $rc, the old files kept, no temporary"
    fi
done

# a run that succeeds replaces its outputs and leaves nothing else
"${E[@]}" -o tr.bin -v va.bin in.txt 2> /dev/null
"$LOSS_MASK" -i q.bin -a x -tk tk.bin -o q.mask > /dev/null
"$CP_LAYOUT" -t 8 -cp 2 -cl round_robin -png pic.png > /dev/null
# -png's name never reaches gnuplot (it draws into a directory of its own): any name will do
"$CP_LAYOUT" -t 8 -cp 2 -cl round_robin -png "it's; a \"picture\".png" > /dev/null
[[ $(head -c 4 "it's; a \"picture\".png" | od -An -tx1 | tr -d ' ') == 89504e47 ]] ||
    fail "-png with quotes in its name wrote no PNG"
"${E[@]}" -o whole.bin in.txt 2> /dev/null
[[ $(($(stat -c %s tr.bin) + $(stat -c %s va.bin))) -eq $(($(stat -c %s whole.bin) + 1024)) ]] ||
    fail "the replaced split is $(stat -c %s tr.bin) + $(stat -c %s va.bin) bytes, the unsplit file $(stat -c %s whole.bin)"
[[ -z $(find . -name '*.tmp*') ]] || fail "a successful run left a temporary file: $(find . -name '*.tmp*')"
[[ $(stat -c %a tr.bin) == $(printf '%o' $((0644 & ~$(umask)))) ]] || fail "tr.bin has mode $(stat -c %a tr.bin)"
echo "ok   successful runs replace their outputs (mode $(stat -c %a tr.bin)) and leave no temporary"

# ---- 3. file headers: every count checked against the file's size before anything is
# allocated for it, the EOT the vocabulary's last token
source "$REPO_ROOT/test/lib/binary_files.sh"
cp tk.bin tk_huge.bin && put_i32 tk_huge.bin 8 2147483647
head -c 1124 tk.bin > tk_short.bin
cp tk.bin tk_eot.bin && put_i32 tk_eot.bin 12 0 # the EOT field on "!", a one-byte token
cp q.bin q_count.bin && put_i32 q_count.bin 8 2147483647
refused encode_tokenizer_huge_count "tokenizer 'tk_huge.bin': 2147483647 tokens do not fit llm.c's uint16 token files" \
    "$ENCODE" -tk tk_huge.bin -o new.bin in.txt
refused encode_tokenizer_count_past_size "tokenizer 'tk_short.bin': its header counts 50257 tokens, but its 1124 bytes hold at most 50" \
    "$ENCODE" -tk tk_short.bin -o new.bin in.txt
refused encode_tokenizer_eot "tokenizer 'tk_eot.bin': EOT token 0 is not the vocabulary's last token 50256" \
    "$ENCODE" -tk tk_eot.bin -o new.bin in.txt
refused loss_mask_tokenizer_huge_count "tokenizer 'tk_huge.bin': a vocabulary of 2147483647 tokens" \
    "$LOSS_MASK" -i q.bin -a x -tk tk_huge.bin -o new.mask
refused loss_mask_tokenizer_count_past_size "tokenizer 'tk_short.bin': its header counts 50257 tokens, but its 1124 bytes hold at most 50" \
    "$LOSS_MASK" -i q.bin -a x -tk tk_short.bin -o new.mask
refused loss_mask_tokenizer_eot "tokenizer 'tk_eot.bin': EOT token 0 is not the vocabulary's last token 50256" \
    "$LOSS_MASK" -i q.bin -a x -tk tk_eot.bin -o new.mask
refused loss_mask_token_count "token file 'q_count.bin': [0-9]+ bytes, but its header promises 2147483647 tokens" \
    "$LOSS_MASK" -i q_count.bin -a x -tk tk.bin -o new.mask
refused cp_layout_token_count "token file 'q_count.bin': [0-9]+ bytes, but its header promises 2147483647 tokens" \
    "$CP_LAYOUT" -t 16 -cp 2 -cl contiguous -i q_count.bin

# ---- 4. -h: the usage on standard output, exit 0, each flag the tool takes on one line
# of its own, once; a bad flag: nothing on standard output, one error line, exit 1
# help TOOL FLAG...: FLAG... are the flags TOOL takes (its argument parser's)
help() {
    local tool=$1 name
    shift
    name=$(basename "$tool")
    local rc=0
    "$tool" -h > "help_$name.log" 2> "help_$name.err" || rc=$?
    local listed want
    listed=$(grep -oE '^  -[a-z]+' "help_$name.log" | tr -d ' ' | sort | tr '\n' ' ')
    want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
    if [[ $rc -ne 0 || -s help_$name.err || $(head -c 7 "help_$name.log") != "usage: " || $listed != "$want" ]]; then
        fail "$name -h: exit $rc, flags listed '$listed', expected '$want', stderr: $(head -c 200 "help_$name.err")"
    else
        echo "ok   $name -h: usage on standard output, exit 0, flags $want"
    fi
    rc=0
    "$tool" -no_such_flag x > "bad_$name.log" 2> "bad_$name.err" || rc=$?
    if [[ $rc -eq 0 || -s bad_$name.log || $(grep -c '^error: ' "bad_$name.err") -ne 1 ]]; then
        fail "$name -no_such_flag: exit $rc, stdout '$(head -c 200 "bad_$name.log")', stderr '$(head -c 300 "bad_$name.err")'"
    else
        echo "ok   $name -no_such_flag: $(grep '^error: ' "bad_$name.err"), exit $rc"
    fi
}
help "$ENCODE" -o -v -vn -tk -h
help "$LOSS_MASK" -i -a -tk -o -h
help "$CP_LAYOUT" -t -cp -cl -cc -i -b -dm -tile -steps -m -cu -png -h

if [[ $failures -gt 0 ]]; then
    echo "FAIL tool_files: $failures check(s) failed"
    exit 1
fi
echo "PASS tool_files"
