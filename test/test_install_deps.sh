#!/usr/bin/env bash
# The Makefile's package check (scripts/install_deps.sh), with dpkg-query, id, apt-get
# and the compilers replaced by stand-ins on PATH that log their calls, so that
# nothing is installed or compiled and any machine can run it:
#   1. not root, libc6-dev and libpcre2-dev missing: `make -B encode` prints the one
#      command that installs exactly those two, stops with make's line, compiles nothing
#   2. as root: the same make runs apt-get install with exactly those, then compiles
#   3. `make -B train_gpt2cp_cpu` not root, OpenBLAS missing: its command names it;
#      with NO_BLAS=1 nothing is missing and the trainer compiles; `make -B cp_layout`
#      needs only gcc and libc6-dev
#   4. no set installs Slurm or munge (Debian's packages start their daemons)
#
#   bash test/test_install_deps.sh      (env: BUILD_DIR, scratch)
set -euo pipefail
cd "${REPO_ROOT:-$(pwd)}"
WORK=$(realpath -m "${BUILD_DIR:-build}/test_install_deps")
rm -rf "$WORK"
mkdir -p "$WORK/bin"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# stand-ins: dpkg-query says "installed" for every package but those in $MISSING;
# id -u prints $FAKE_UID; apt-get, cc, gcc and mpicc log their arguments to calls.log
cat > "$WORK/bin/dpkg-query" <<'EOF'
#!/bin/bash
for a; do [[ " $MISSING " == *" $a "* ]] && exit 1; done
printf 'install ok installed'
EOF
cat > "$WORK/bin/id" <<'EOF'
#!/bin/bash
echo "$FAKE_UID"
EOF
for tool in apt-get cc gcc mpicc; do
    printf '#!/bin/bash\necho "%s $*" >> "%s/calls.log"\n' "$tool" "$WORK" > "$WORK/bin/$tool"
done
chmod +x "$WORK/bin"/*
# with_fakes UID MISSING MAKE_ARGS...: make with the stand-ins first on PATH; its
# output in $WORK/out, its exit status in $rc, the stand-ins' calls in $WORK/calls.log
# (its build dir here: the flags stamps of the real builds stay as they are)
with_fakes() {
    local uid=$1 missing=$2
    shift 2
    rm -f "$WORK/calls.log"
    touch "$WORK/calls.log"
    rc=0
    env PATH="$WORK/bin:$PATH" FAKE_UID="$uid" MISSING="$missing" make --no-print-directory BUILD_DIR="$WORK/build" "$@" \
        > "$WORK/out" 2>&1 || rc=$?
}
called() { grep -c "^$1 " "$WORK/calls.log" || true; }

# ---- 1. not root: the command, nothing compiled
with_fakes 1000 "libc6-dev libpcre2-dev" -B encode
if [[ $rc -ne 0 ]] &&
        grep -qx "gpt2cp needs: libc6-dev libpcre2-dev" "$WORK/out" &&
        grep -qx "run as root:  apt-get update && apt-get install -y --no-install-recommends libc6-dev libpcre2-dev" "$WORK/out" &&
        grep -q "the packages above are missing" "$WORK/out" &&
        [[ $(called cc) -eq 0 && $(called apt-get) -eq 0 ]]; then
    # (not even the OpenBLAS probe: make stops before it reads on)
    echo "ok   make encode, not root, libc6-dev and libpcre2-dev missing: the one install command, exit $rc, nothing compiled"
else
    fail "make encode not as root (exit $rc, cc called $(called cc) times):"
    cat "$WORK/out"
fi

# ---- 2. as root: installed, then compiled
with_fakes 0 "libc6-dev libpcre2-dev" -B encode
if [[ $rc -eq 0 ]] && grep -qx "apt-get update -q" "$WORK/calls.log" &&
        grep -qE "^apt-get install -y -q --no-install-recommends .* libc6-dev libpcre2-dev$" "$WORK/calls.log" &&
        [[ $(grep -c '^cc .* encode.c ' "$WORK/calls.log") -eq 1 ]]; then
    echo "ok   make encode as root: apt-get installs exactly libc6-dev libpcre2-dev, then encode.c compiles"
else
    fail "make encode as root (exit $rc):"
    cat "$WORK/out" "$WORK/calls.log"
fi

# ---- 3. the trainer's OpenBLAS; a tool's C library
with_fakes 1000 "libopenblas-openmp-dev" -B train_gpt2cp_cpu
if [[ $rc -ne 0 ]] && grep -qx "gpt2cp needs: libopenblas-openmp-dev" "$WORK/out" && [[ $(called mpicc) -eq 0 ]]; then
    echo "ok   make train_gpt2cp_cpu, OpenBLAS missing: its install command, nothing compiled"
else
    fail "make train_gpt2cp_cpu without OpenBLAS (exit $rc):"
    cat "$WORK/out"
fi
with_fakes 1000 "libopenblas-openmp-dev" -B train_gpt2cp_cpu NO_BLAS=1
if [[ $rc -eq 0 && $(called mpicc) -eq 1 ]] && grep -q -- "-DNO_BLAS" "$WORK/calls.log"; then
    echo "ok   NO_BLAS=1 needs no OpenBLAS: the trainer compiles with the plain matmuls"
else
    fail "make train_gpt2cp_cpu NO_BLAS=1 without OpenBLAS (exit $rc):"
    cat "$WORK/out"
fi
with_fakes 1000 "libc6-dev libpcre2-dev libopenblas-openmp-dev openmpi-bin" -B cp_layout
if [[ $rc -ne 0 ]] && grep -qx "gpt2cp needs: libc6-dev" "$WORK/out"; then
    echo "ok   make cp_layout needs libc6-dev of those four, not PCRE2, MPI or OpenBLAS"
else
    fail "make cp_layout (exit $rc):"
    cat "$WORK/out"
fi

# ---- 4. no daemons
daemons=$(bash scripts/install_deps.sh --list cc encode mpi run gpu plots test emu | grep -xE 'slurm.*|munge' || true)
[[ -z $daemons ]] && echo "ok   no set installs Slurm or munge" || fail "a set installs $daemons"

if [[ $failures -eq 0 ]]; then echo PASS; else echo "FAILED: $failures"; exit 1; fi
