#!/usr/bin/env bash
# What an llm.c user relies on, end to end on the CPU trainer (issue 12):
#   1. -e d2 builds llm.c's weights bit for bit: checked by an independent Python
#      generator (test/random_init_reference.py); -e gpt2:d2 is the same model;
#      normal_ of lengths that are no multiple of 16 (the tail llm.c redraws) too
#   2. -k cosine | linear | constant | wsd: main.log's lr of every step is llm.c's
#      formula; a bad -k is refused
#   3. main.log is llm.c's: `s:N trl:X lr:X norm:X` and `s:N tel:X`, 6 decimals,
#      parsed as llm.c's dev/vislog notebook parses it
#
#   bash test/e2e_llmc_compat.sh TEST_RANDOM_INIT     (env: see e2e_lib.sh)
set -euo pipefail
E2E_NAME=e2e_llmc_compat
source "$(dirname "$0")/e2e_lib.sh"
TEST_RANDOM_INIT=${1:?usage: e2e_llmc_compat.sh TEST_RANDOM_INIT}
REFERENCE=$REPO_ROOT/test/random_init_reference.py

COMMON=(-b 2 -t 32 -v 0 -s 0)

# ---- 1. the random init
echo "== -e dN: llm.c's weights"
train init_d2 1 -e d2 -x 0 -n 1 -o "$WORK/init_d2"
train init_gpt2_d2 1 -e gpt2:d2 -x 0 -n 1 -o "$WORK/init_gpt2_d2"
python3 "$REFERENCE" model "$WORK/init_d2/model_00000000.bin" || fail "-e d2 is not llm.c's init"
if cmp -s "$WORK/init_d2/model_00000000.bin" "$WORK/init_gpt2_d2/model_00000000.bin"; then
    echo "ok   -e gpt2:d2 builds the same weights as -e d2"
else
    fail "-e gpt2:d2 and -e d2 build different weights"
fi
for n in 7 16 37 1000; do
    "$TEST_RANDOM_INIT" normals 42 $n 0.02 | python3 "$REFERENCE" normals 42 $n 0.02 || fail "normal_($n)"
done

# ---- 2. the schedules
echo
echo "== -k: llm.c's learning-rate schedules"
STEPS=10 PEAK=1e-3 WARMUP=3 FRAC=0.1
for k in cosine linear constant wsd; do
    train "k_$k" 1 -e d1 -b 1 -t 16 -x $STEPS -k $k -l $PEAK -u $WARMUP -q $FRAC -o "$WORK/k_$k"
    # llm.c's formulas (llmc/schedulers.h there), against the lr field of main.log
    python3 - "$WORK/k_$k/main.log" $k $STEPS $PEAK $WARMUP $FRAC <<'EOF' || fail "-k $k"
import math, sys
log, kind, steps, peak, warmup, frac = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
def lr(s):
    lo = peak * frac
    if kind == "constant": return peak
    if s < warmup: return peak * (s + 1) / warmup
    if kind == "cosine": return lo + 0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup))) * (peak - lo)
    if kind == "linear": return peak - (s - warmup) / (steps - warmup) * (peak - lo)
    d = int(0.8 * steps)
    return peak if s < d else lo + (1 - math.sqrt((s - d) / (steps - d))) * (peak - lo)
got = {int(l.split()[0][2:]): float(l.split()[2][3:]) for l in open(log) if " trl:" in l}
assert sorted(got) == list(range(steps)), f"steps logged: {sorted(got)}"
worst = max(abs(got[s] - lr(s)) for s in got)
# main.log keeps 6 decimals: half a unit of the last one
assert worst <= 5e-7 + 1e-9, f"largest |lr - formula| {worst:.2e}"
print(f"ok   -k {kind:8s} every step's lr is llm.c's formula (largest difference {worst:.1e}, 6 decimals)")
EOF
done
if grep -q 'lr:0.001000' "$WORK/k_constant/main.log" && [[ $(sort -u <(grep -o 'lr:[0-9.]*' "$WORK/k_constant/main.log") | wc -l) -eq 1 ]]; then
    echo "ok   -k constant keeps the peak from step 0 (no warmup)"
else
    fail "-k constant: the lr is not the peak at every step"
fi
rc=0
timeout 60 "${LAUNCH[@]}" -np 1 "$TRAINER" -k cosin -x 1 >"$WORK/k_bad.out" 2>&1 || rc=$?
if [[ $rc -ne 0 ]] && grep -q "^error: -k 'cosin': unknown learning-rate schedule" "$WORK/k_bad.out"; then
    echo "ok   -k cosin is refused: $(grep -m1 '^error:' "$WORK/k_bad.out")"
else
    fail "-k cosin: rc $rc, $(grep -m1 error "$WORK/k_bad.out" || echo 'no error line')"
fi

# ---- 3. main.log as llm.c writes it
echo
echo "== main.log"
train log 1 -e d1 -x 6 -v 3 -m 1 -o "$WORK/log"
python3 - "$WORK/log/main.log" <<'EOF' || fail "main.log format"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
num = r"-?\d+\.\d{6}"
kinds = {"trl": re.compile(rf"^s:\d+ trl:{num} lr:{num} norm:{num}$"), "tel": re.compile(rf"^s:\d+ tel:{num}$")}
for l in lines:
    kind = l.split()[1].split(":")[0]
    assert kind in kinds and kinds[kind].match(l), f"not an llm.c main.log line: {l!r}"
# llm.c's dev/vislog: step from parts[0], stream name and value from parts[1]
streams = {}
for l in lines:
    parts = l.split()
    streams.setdefault(parts[1].split(":")[0], {})[int(parts[0].split(":")[1])] = float(parts[1].split(":")[1])
assert sorted(streams["trl"]) == list(range(6)), streams["trl"]
assert sorted(streams["tel"]) == [0, 3, 6], streams["tel"]
print(f"ok   main.log: {len(lines)} lines in llm.c's format (6 decimals); vislog's parser reads trl at steps 0..5, tel at 0, 3, 6")
EOF

finish
