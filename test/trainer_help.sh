#!/usr/bin/env bash
# The trainers' help: `-h` alone and `--help` print the usage on standard output and
# exit 0, nothing on standard error, every flag on one line of its own and none
# twice; the flags listed are docs/flags.md's (the independent reference: every
# flag the page names in code spans, mpirun's -np aside; -ct is the GPU trainer's
# only), no more and no fewer. The CPU twin always; the GPU trainer (./train_gpt2cp,
# `make train_gpt2cp`) where it is built, which its -h runs without a GPU.
#
#   bash test/trainer_help.sh      (env: REPO_ROOT)
set -euo pipefail
REPO_ROOT=${REPO_ROOT:-$(pwd)}
cd "$REPO_ROOT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

[[ -x train_gpt2cp_cpu ]] || { echo "FAIL: ./train_gpt2cp_cpu is missing: build it first with 'make train_gpt2cp_cpu'"; exit 1; }
trainers=(train_gpt2cp_cpu)
if [[ -x train_gpt2cp ]]; then
    trainers+=(train_gpt2cp)
else
    echo "note: ./train_gpt2cp is not built ('make train_gpt2cp'): only the CPU twin's help is checked"
fi

# docs/flags.md's flags: the words -x or -xy at the start of a code span or after a
# space inside one (the page joined into one line: a span may break across lines)
documented=$(tr '\n' ' ' < docs/flags.md | grep -o '`[^`]*`' | grep -oE '(^|[` ])-[a-z]{1,2}\b' | tr -d '` ' |
             grep -vx -- -np | sort -u)
[[ $(wc -l <<< "$documented") -ge 40 ]] || fail "docs/flags.md names only $(wc -l <<< "$documented") flags: the extraction is broken"

for trainer in "${trainers[@]}"; do
    expected=$documented
    [[ $trainer == train_gpt2cp_cpu ]] && expected=$(grep -vx -- -ct <<< "$documented")
    for ask in -h --help; do
        rc=0 before=$failures
        "./$trainer" "$ask" > "$WORK/out" 2> "$WORK/err" || rc=$?
        what="$trainer $ask"
        [[ $rc -eq 0 ]] || fail "$what: exit $rc, expected 0"
        [[ -s $WORK/err ]] && fail "$what: writes to standard error: $(head -n 2 "$WORK/err")"
        head -n 1 "$WORK/out" | grep -q "^usage: " || fail "$what: standard output does not start with a usage line"
        # a flag's line: two spaces, the flag, its help
        listed=$(grep -oE '^  -[a-z]{1,2} ' "$WORK/out" | tr -d ' ' || true)
        twice=$(sort <<< "$listed" | uniq -d | tr '\n' ' ')
        [[ -z $twice ]] || fail "$what: listed more than once: $twice"
        missing=$(comm -23 <(echo "$expected") <(sort -u <<< "$listed") | tr '\n' ' ')
        extra=$(comm -13 <(echo "$expected") <(sort -u <<< "$listed") | tr '\n' ' ')
        [[ -z $missing ]] || fail "$what: docs/flags.md names flags the usage does not list: $missing"
        [[ -z $extra ]] || fail "$what: the usage lists flags docs/flags.md does not name: $extra"
        [[ $failures -eq $before ]] && echo "ok   $what: exit 0, usage on standard output, $(wc -l <<< "$listed") flags, each once, docs/flags.md's"
    done
done

if [[ $failures -gt 0 ]]; then
    echo "FAIL trainer_help: $failures problem(s)"
    exit 1
fi
echo "PASS trainer_help: ${trainers[*]}"
