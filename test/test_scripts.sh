#!/usr/bin/env bash
# The scripts of scripts/ say how they are run, and the wrappers run what they are given:
#   1. every script: -h prints its usage on stdout (first line "usage: "), nothing on
#      stderr, exit 0; each flag of the synopsis described, each flag described once.
#      Run with an unknown flag: exit 1, one stderr line, an error that gives the
#      synopsis (a file meant to be sourced says so), and nothing done
#   2. scripts/mpirun.sh parses only the words before the program: with -np 1
#      --tag-output PROG -n 8, PROG gets "-n 8" and OMP_NUM_THREADS is cores / 1 (not
#      cores / 8); a flag that takes a value (-x VAR) never makes its value the
#      program; -np 2: two ranks, cores / 2 threads (at least 1); a set
#      OMP_NUM_THREADS is kept; HWLOC_COMPONENTS is -gl unless set; no program: refused
#   3. scripts/slurm_train.sbatch outside a Slurm job: one line saying to submit it
#      with sbatch, exit 1 (not "unbound variable")
#
#   bash test/test_scripts.sh      (env: BUILD_DIR, scratch; MPIRUN is not used: the
#                                   wrapper calls mpirun itself)
set -euo pipefail
cd "${REPO_ROOT:-$(pwd)}"
WORK=$(mkdir -p "${BUILD_DIR:-build}/test_scripts" && cd "${BUILD_DIR:-build}/test_scripts" && pwd)
rm -rf "${WORK:?}"/*
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
command -v mpirun > /dev/null || { echo "SKIP test_scripts: no mpirun here (scripts/install_deps.sh installs openmpi-bin)"; exit 77; }

# ---- 1. -h and an unknown flag, every script
for script in scripts/*; do
    name=${script#scripts/}
    rc=0
    timeout 30 bash "$script" -h > "$WORK/$name.help" 2> "$WORK/$name.help.err" || rc=$?
    # the flags the synopsis names ([-o PNG], [-r]) and those the lines below describe
    synopsis=$(head -n 1 "$WORK/$name.help")
    named=$(grep -oE '\[-[A-Za-z]+' <<< "$synopsis" | tr -d '[' | sort -u || true)
    described=$(tail -n +2 "$WORK/$name.help" | grep -oE '^ +-[A-Za-z-]+' | tr -d ' ' | sort || true)
    twice=$(uniq -d <<< "$described")
    missing=$(comm -23 <(echo "$named") <(echo "$described" | sort -u) | grep . || true)
    if [[ $rc -eq 0 && ! -s $WORK/$name.help.err && $synopsis == "usage: "* && -z $twice && -z $missing ]] &&
        grep -qx -- '-h' <<< "$described"; then
        echo "ok   $name -h: $synopsis"
    else
        fail "$name -h: rc $rc, first line '$synopsis', described twice '$twice', not described '$missing', stderr $(head -c 200 "$WORK/$name.help.err")"
    fi
    rc=0
    (cd "$WORK" && timeout 30 bash "$OLDPWD/$script" --no-such-flag > "$WORK/$name.bad" 2> "$WORK/$name.bad.err") || rc=$?
    if [[ $rc -eq 1 && $(wc -l < "$WORK/$name.bad.err") -eq 1 && ! -s $WORK/$name.bad ]] &&
        grep -qE '^error: .*(\(usage: |is sourced, not run)' "$WORK/$name.bad.err"; then
        echo "ok   $name --no-such-flag: $(cut -c1-110 "$WORK/$name.bad.err")"
    else
        fail "$name --no-such-flag: rc $rc, stdout $(head -c 200 "$WORK/$name.bad"), stderr $(head -c 300 "$WORK/$name.bad.err")"
    fi
done
# nothing done: the unknown flag stopped every script before it wrote anything here
[[ -z $(find "$WORK" -mindepth 1 ! -name '*.help' ! -name '*.help.err' ! -name '*.bad' ! -name '*.bad.err' | head -n 1) ]] ||
    fail "a refused script left $(find "$WORK" -mindepth 1 ! -name '*.help*' ! -name '*.bad*' | head -n 3)"

# ---- 2. scripts/mpirun.sh
cores=$(nproc)
per() { local t=$((cores / $1)); echo $((t > 0 ? t : 1)); }
PROG=$WORK/prog.sh
printf '#!/usr/bin/env bash\necho "args: $* threads: $OMP_NUM_THREADS"\n' > "$PROG"
chmod +x "$PROG"
# wrapped NAME EXPECTED_LINES ARGS...: the wrapper's output in $WORK/NAME.out, its
# "args: ... threads: N" lines (tags cut) compared with EXPECTED_LINES (sorted)
wrapped() {
    local name=$1 expected=$2 rc=0
    shift 2
    timeout 60 bash scripts/mpirun.sh "$@" > "$WORK/$name.out" 2>&1 || rc=$?
    local got
    got=$(grep -o 'args: .*' "$WORK/$name.out" | sort || true)
    if [[ $rc -eq 0 && $got == "$expected" ]]; then
        echo "ok   mpirun.sh $*: $(head -n 1 <<< "$got")"
    else
        fail "mpirun.sh $*: rc $rc, got '$got', expected '$expected': $(head -c 300 "$WORK/$name.out")"
    fi
}
(unset OMP_NUM_THREADS; wrapped tag_output "args: -n 8 threads: $(per 1)" -np 1 --tag-output "$PROG" -n 8) || failures=$((failures + 1))
(unset OMP_NUM_THREADS; wrapped with_value "$(printf 'args: -np 5 threads: %s\n' "$(per 2)" "$(per 2)")" \
    -np 2 -x FOO "$PROG" -np 5) || failures=$((failures + 1))
(export OMP_NUM_THREADS=3; wrapped kept "args: a threads: 3" -np 1 "$PROG" a) || failures=$((failures + 1))
# hwloc's OpenGL plugin off unless HWLOC_COMPONENTS is set (docs/troubleshooting.md)
HWLOC_PROG=$WORK/hwloc.sh
printf '#!/usr/bin/env bash\necho "args: hwloc ${HWLOC_COMPONENTS-unset}"\n' > "$HWLOC_PROG"
chmod +x "$HWLOC_PROG"
(unset HWLOC_COMPONENTS; wrapped hwloc_default "args: hwloc -gl" -np 1 "$HWLOC_PROG") || failures=$((failures + 1))
(export HWLOC_COMPONENTS=-gl,-opencl; wrapped hwloc_kept "args: hwloc -gl,-opencl" -np 1 "$HWLOC_PROG") || failures=$((failures + 1))
rc=0
timeout 30 bash scripts/mpirun.sh -np 2 > /dev/null 2> "$WORK/no_program.err" || rc=$?
[[ $rc -eq 1 ]] && grep -q '^error: no program to run (usage: ' "$WORK/no_program.err" &&
    echo "ok   mpirun.sh -np 2 (no program): $(cat "$WORK/no_program.err")" ||
    fail "mpirun.sh without a program: rc $rc, $(cat "$WORK/no_program.err")"

# ---- 3. the batch script outside Slurm
rc=0
env -u SLURM_JOB_ID -u SLURM_TASKS_PER_NODE bash scripts/slurm_train.sbatch ./train_gpt2cp_cpu -x 1 \
    > "$WORK/sbatch.out" 2> "$WORK/sbatch.err" || rc=$?
if [[ $rc -eq 1 && $(wc -l < "$WORK/sbatch.err") -eq 1 ]] &&
    grep -q '^error: not inside a Slurm job (no SLURM_JOB_ID): submit the script with sbatch (usage: sbatch ' "$WORK/sbatch.err"; then
    echo "ok   slurm_train.sbatch outside Slurm: $(cat "$WORK/sbatch.err")"
else
    fail "slurm_train.sbatch outside Slurm: rc $rc, $(cat "$WORK/sbatch.err")"
fi

[[ $failures -eq 0 ]] || { echo "FAIL test_scripts: $failures check(s) failed"; exit 1; }
echo "PASS test_scripts"
