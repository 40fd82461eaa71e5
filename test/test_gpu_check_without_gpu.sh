#!/usr/bin/env bash
# The one-call GPU check on a machine without a GPU driver says so in one line, at
# once, and exits non-zero: no list of failed steps. gpu_check.sh runs in a copy of
# scripts/ beside a gpu_prep/ that holds the GPU sizes (what the call carries), so
# the missing driver is the only thing wrong. Skipped (77) where libcuda.so.1 loads
# (a GPU machine: the call itself checks it there).
set -uo pipefail
REPO_ROOT=${REPO_ROOT:-$(pwd)}
if python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2> /dev/null; then
    echo "SKIP: libcuda.so.1 loads here (a GPU machine runs the call itself)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/repo/gpu_prep" "$tmp/out"
cp -r "$REPO_ROOT/scripts" "$tmp/repo/"
printf 'PREP_SIZES=gpu\nTIME_SCALE=1\n' > "$tmp/repo/gpu_prep/sizes.sh"
failures=0
check() {
    if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}
for script in scripts/gpu_check.sh dev/bench/gpu_bench.sh; do
    if [[ $script == dev/* ]]; then mkdir -p "$tmp/repo/dev/bench" && cp "$REPO_ROOT/$script" "$tmp/repo/$script"; fi
    name=$(basename "$script" .sh)
    t0=$SECONDS
    out=$(OUT=$tmp/out timeout 60 bash "$tmp/repo/$script" 2>&1)
    rc=$?
    took=$((SECONDS - t0))
    echo "$name: exit $rc in $took s: $out"
    check "$name: non-zero exit, not a timeout" "[[ $rc -ne 0 && $rc -ne 124 ]]"
    check "$name: one line of output" "[[ $(wc -l <<< "$out") -eq 1 ]]"
    check "$name: it names the missing driver" "grep -q '^error: no NVIDIA driver here (libcuda.so.1 does not load: ' <<< \"\$out\""
    check "$name: in seconds" "[[ $took -le 10 ]]"
    check "$name: the same line in the summary" "grep -qF \"\${out#error: }\" '$tmp/out/summary.txt'"
done
echo "$((10 - failures)) of 10 checks ok"
[[ $failures -eq 0 ]]
