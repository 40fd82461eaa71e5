#!/usr/bin/env bash
# ./encode (GPT-2 BPE in C) against the shipped data and the reference encoder.
#
#   bash test/test_encode.sh austen      the shipped Austen token files, byte for byte,
#                                        from their text; the -v split, standard input,
#                                        the note on a split too short for the trainers'
#                                        defaults, invalid UTF-8 and bad flags
#   bash test/test_encode.sh reference   the Unicode edge-case corpus (test/encoder/:
#                                        U+0085 and U+FEFF in the contexts where the
#                                        white-space rules part) and the shipped Austen
#                                        files against the reference encoder itself,
#                                        run here: tiktoken's GPT-2 encoding (what llm.c's
#                                        data scripts use), npm's tiktoken 1.0.22, its Rust
#                                        core as WebAssembly (dev/data's package.json),
#                                        installed by `npm ci` into dev/data/node_modules;
#                                        exit 77 (skipped) where it cannot be installed
#
# The Austen files were made by npm's gpt-3-encoder (dev/data/prepare_austen.sh) from chapter
# texts that decode from them exactly (austen_write.py checks it): decoding each
# document with the tokenizer's byte table alone (dev/data/decode_tokens.py) gives the
# text back, and encoding that text must give the files again. Env: REPO_ROOT, BUILD_DIR (scratch).
set -euo pipefail
MODE=${1:?usage: test_encode.sh austen|reference}
REPO_ROOT=${REPO_ROOT:-$(pwd)}
cd "$REPO_ROOT"
WORK=${BUILD_DIR:-$REPO_ROOT/build}/test_encode_$MODE
ENCODE=$REPO_ROOT/encode
[[ -x $ENCODE ]] || { echo "FAIL: $ENCODE is missing: build it with 'make encode'"; exit 1; }
rm -rf "$WORK"
mkdir -p "$WORK"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# token_ids FILE: the ids of an llm.c token file, one per line
token_ids() { od -A n -v -t u2 -j 1024 -w2 "$1" | tr -d ' '; }

if [[ $MODE == austen ]]; then
    command -v python3 > /dev/null || { echo "SKIP: no python3 (scripts/install_deps.sh installs it)"; exit 77; }
    # ---- 1. the shipped token files from their text
    for split in train val; do
        python3 dev/data/decode_tokens.py "dev/data/austen/austen_$split.bin" dev/data/gpt2_tokenizer.bin \
            "$WORK/chapters" "${split}_"
    done
    train_chapters=("$WORK"/chapters/train_*.txt)
    val_chapters=("$WORK"/chapters/val_*.txt)
    val_tokens=$(od -A n -t d4 -j 8 -N 4 dev/data/austen/austen_val.bin | tr -d ' ')
    "$ENCODE" -o "$WORK/train.bin" -v "$WORK/val.bin" -vn "$val_tokens" "${train_chapters[@]}" "${val_chapters[@]}" \
        2> "$WORK/austen.err"
    cat "$WORK/austen.err"
    for split in train val; do
        if cmp -s "$WORK/$split.bin" "dev/data/austen/austen_$split.bin"; then
            echo "ok   austen_$split.bin reproduced byte for byte ($(stat -c %s "$WORK/$split.bin") bytes)"
        else
            fail "austen_$split.bin differs: $(cmp "$WORK/$split.bin" "dev/data/austen/austen_$split.bin" 2>&1 | head -1)"
        fi
    done

    # ---- 2. the split is a cut of the unsplit file: train then val are its tokens
    "$ENCODE" -o "$WORK/val_alone.bin" "${val_chapters[@]}" 2>/dev/null
    cmp -s "$WORK/val_alone.bin" dev/data/austen/austen_val.bin || fail "Persuasion alone does not give austen_val.bin"
    "$ENCODE" -o "$WORK/whole.bin" "${val_chapters[@]:0:3}" 2>/dev/null
    "$ENCODE" -o "$WORK/part.bin" -v "$WORK/part_val.bin" "${val_chapters[@]:0:3}" 2>/dev/null
    whole=$(token_ids "$WORK/whole.bin" | wc -l)
    n_val=$(token_ids "$WORK/part_val.bin" | wc -l)
    want_val=$(((whole * 10 + 50) / 100))
    [[ $n_val -eq $want_val ]] || fail "-v with the default 10%: $n_val validation tokens of $whole, expected $want_val"
    cat <(token_ids "$WORK/part.bin") <(token_ids "$WORK/part_val.bin") | cmp -s - <(token_ids "$WORK/whole.bin") ||
        fail "the -v split's two files are not the unsplit file's tokens in order"
    # standard input is one document, as the file
    "$ENCODE" -o "$WORK/stdin.bin" - < "${val_chapters[0]}" 2>/dev/null
    "$ENCODE" -o "$WORK/file.bin" "${val_chapters[0]}" 2>/dev/null
    cmp -s "$WORK/stdin.bin" "$WORK/file.bin" || fail "- (standard input) encodes otherwise than the file"
    [[ $(token_ids "$WORK/file.bin" | head -1) == 50256 ]] || fail "a document does not start with EOT"
    echo "ok   -v splits the tokens in order (default 10%), - reads standard input"

    # ---- 3. a split too short for the trainers' defaults (-b 4 -t 1024: 4097 tokens a
    # step) is noted, with a -t that fits it at -b 1: the longest power of two below
    # its count; splits long enough get no note
    grep -q '^note: ' "$WORK/austen.err" && fail "the Austen splits are long enough, but: $(grep '^note: ' "$WORK/austen.err")"
    "$ENCODE" -o "$WORK/part.bin" -v "$WORK/part_val.bin" "${val_chapters[@]:0:3}" 2> "$WORK/part.err"
    fit=1
    while [[ $((2 * fit)) -le $((n_val - 1)) ]]; do fit=$((2 * fit)); done
    want="note: $WORK/part_val.bin holds $n_val tokens, fewer than one step of the trainers' default -b 4 -t 1024 takes (4097: .*): train with -b 1 -t $fit at one data-parallel replica, or encode more text"
    if [[ $n_val -lt 4097 ]] && grep -qx -- "$want" "$WORK/part.err"; then
        echo "ok   a short split is noted: $(grep '^note: ' "$WORK/part.err" | cut -c 1-150)..."
    else
        fail "no note for a validation split of $n_val tokens, expected /$want/: $(cat "$WORK/part.err")"
    fi

    # ---- 4. bad input: one line naming the problem, non-zero, nothing written
    # expect_error NAME PATTERN ENCODE_ARGS...: the run fails with one error line
    # matching PATTERN and writes no -o file
    expect_error() {
        local name=$1 pattern=$2
        shift 2
        rm -f "$WORK/bad.bin" "$WORK"/bad.bin.tmp*
        local rc=0
        "$ENCODE" -o "$WORK/bad.bin" "$@" > "$WORK/$name.out" 2>&1 || rc=$?
        local line
        line=$(grep -m1 '^error: ' "$WORK/$name.out" || true)
        if [[ $rc -eq 0 || $(grep -c '^error: ' "$WORK/$name.out") -ne 1 || ! $line =~ $pattern ]]; then
            fail "$name: exit $rc, output: $(head -c 300 "$WORK/$name.out")"
        elif [[ -e $WORK/bad.bin || -n $(compgen -G "$WORK/bad.bin.tmp*") ]]; then
            fail "$name: an output file was left behind"
        else
            echo "ok   $name: $line"
        fi
    }
    printf 'abc\xffdef' > "$WORK/ff.txt"
    printf 'caf\xc3' > "$WORK/cut.txt"
    printf 'ok\n\xed\xa0\x80' > "$WORK/surrogate.txt"
    printf '\xc0\xaf' > "$WORK/overlong.txt"
    printf 'fine\n' > "$WORK/fine.txt"
    expect_error invalid_byte "'$WORK/ff.txt' is not UTF-8: byte 3 \(0xFF\)" "$WORK/fine.txt" "$WORK/ff.txt"
    expect_error cut_character "'$WORK/cut.txt' is not UTF-8: it ends inside a character \(byte 3" "$WORK/cut.txt"
    expect_error surrogate "is not UTF-8: byte 3 \(0xED\)" "$WORK/surrogate.txt"
    expect_error overlong "is not UTF-8: byte 0 \(0xC0\)" "$WORK/overlong.txt"
    expect_error stdin_invalid "'standard input' is not UTF-8: byte 3" - < "$WORK/ff.txt"
    expect_error missing_file "cannot open '$WORK/none.txt': No such file or directory" "$WORK/none.txt"
    expect_error directory "it is a directory" "$WORK"
    expect_error vn_zero "-vn '0': give a number" -v "$WORK/v.bin" -vn 0 "$WORK/fine.txt"
    expect_error vn_all "-vn '100%': give a number" -v "$WORK/v.bin" -vn 100% "$WORK/fine.txt"
    expect_error vn_too_many "-vn 3: the validation split would be 3 of the 3 tokens" -v "$WORK/v.bin" -vn 3 "$WORK/fine.txt"
    expect_error vn_without_v "-vn sizes the validation split: give its file with -v" -vn 5 "$WORK/fine.txt"
    # a character device is written as it is (no temporary file beside it)
    "$ENCODE" -o /dev/null "$WORK/fine.txt" 2> /dev/null || fail "-o /dev/null failed"
    [[ -c /dev/null && ! -e /dev/null.tmp ]] || fail "-o /dev/null did not leave /dev/null a character device alone"
    expect_error output_as_input "-o '.*/bad.bin' is the input '.*/bad.bin' \(the same file\)" "$WORK/bad.bin"
    expect_error bad_tokenizer "tokenizer '$WORK/fine.txt': 5 bytes, shorter than its header" -tk "$WORK/fine.txt" "$WORK/fine.txt"
    # the default tokenizer is relative to the repository root
    (cd "$WORK" && expect_error default_tokenizer_elsewhere \
        "tokenizer 'dev/data/gpt2_tokenizer.bin' not found: run from the repository root, or pass -tk" "$WORK/fine.txt")
else
    # ---- the Unicode edge cases and the Austen text against the reference encoder itself
    command -v node > /dev/null || { echo "SKIP: no node (scripts/install_deps.sh installs nodejs)"; exit 77; }
    command -v python3 > /dev/null || { echo "SKIP: no python3 (scripts/install_deps.sh installs it)"; exit 77; }
    if [[ ! -f dev/data/node_modules/tiktoken/package.json ]]; then
        echo "installing the reference encoder: npm ci in dev/data (tiktoken 1.0.22)"
        # npm's download cache in the scratch directory too: nothing is kept outside the clone
        if ! (cd dev/data && npm ci --no-audit --no-fund --loglevel=error --cache "$WORK/npm_cache") \
                > "$WORK/npm.out" 2>&1; then
            echo "SKIP: npm cannot install tiktoken 1.0.22 here (no registry?): $(tail -n 3 "$WORK/npm.out" | tr '\n' ' ')"
            exit 77
        fi
    fi
    # compare NAME FILE...: ./encode and the reference give the same ids
    compare() {
        local name=$1
        shift
        node test/encoder/reference_encode.js "$@" > "$WORK/$name.reference.ids"
        "$ENCODE" -o "$WORK/$name.bin" "$@" 2> /dev/null
        token_ids "$WORK/$name.bin" > "$WORK/$name.ours.ids"
        if cmp -s "$WORK/$name.reference.ids" "$WORK/$name.ours.ids"; then
            echo "ok   $name: $(wc -l < "$WORK/$name.reference.ids") tokens, the same as tiktoken's"
        else
            fail "$name encodes otherwise than tiktoken; first difference (token index: tiktoken | ours):"
            diff <(nl -v 0 "$WORK/$name.reference.ids") <(nl -v 0 "$WORK/$name.ours.ids") | head -n 8
        fi
    }
    corpus=(test/encoder/*.txt)
    grep -q $'\xc2\x85' "${corpus[@]}" && grep -q $'\xef\xbb\xbf' "${corpus[@]}" ||
        fail "the edge-case corpus lacks U+0085 or U+FEFF, the two characters where the white-space rules part"
    compare edge_cases "${corpus[@]}"
    # the shipped token files are tiktoken's tokens of their text too: decoded to their
    # chapters, encoded by tiktoken, they give the files' ids again
    for split in train val; do
        python3 dev/data/decode_tokens.py "dev/data/austen/austen_$split.bin" dev/data/gpt2_tokenizer.bin \
            "$WORK/chapters" "${split}_" > /dev/null
        node test/encoder/reference_encode.js "$WORK/chapters/${split}_"*.txt > "$WORK/austen_$split.reference.ids"
        if token_ids "dev/data/austen/austen_$split.bin" | cmp -s - "$WORK/austen_$split.reference.ids"; then
            echo "ok   austen_$split.bin: tiktoken's tokens of its text ($(wc -l < "$WORK/austen_$split.reference.ids") tokens)"
        else
            fail "austen_$split.bin is not tiktoken's encoding of its text"
        fi
    done
fi

if [[ $failures -gt 0 ]]; then
    echo "FAIL test_encode $MODE: $failures check(s) failed"
    exit 1
fi
echo "PASS test_encode $MODE"
