#!/usr/bin/env bash
# The CPU trainer's step time at cp 4 for each attention algorithm over each layout,
# on the documents data of dev/bench/make_documents.sh with document masking (-dm 1),
# as ratios to ring over round_robin measured in the same rounds: on a machine that
# others load, the times move with the load, the ratios less.
#
#   bash dev/bench/cp_step_time.sh [-e MODEL] [-b B] [-t T] [-x STEPS] [-r ROUNDS]
#                                  [-a "ALGORITHM ..."] [-l "LAYOUT ..."] [-d DIR]
#
# Defaults: -e d4 (L 4, C 256, NH 4: Ulysses fits at cp 4), B 1, T 2048, 3 steps per
# run (the first, which touches every buffer, is left out: a run's time is the mean
# of the others' ms), 2 rounds (every configuration once per round, in the same
# order; the table gives each one's median over the rounds, and its ratio to ring
# over round_robin is the median of the per-round ratios). Algorithms: ring,
# allgather, ulysses, hybrid (U 2), and groupcast where the trainer has it (-h
# lists it; else the table says it was left out). Layouts: round_robin, striped,
# packed and solver for the algorithms that attend a rank's queries to every rank's
# blocks (ring, allgather, groupcast); Ulysses and the hybrid only over round_robin
# and solver (Ulysses attends the whole row per head, so the layout moves no work).
# Every rank runs one OpenMP thread; the 4 ranks share the machine's cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/script_lib.sh # value_flags
source scripts/default_config.sh # MPIRUN_FLAGS, OMP_NUM_THREADS=1

model=d4 B=1 T=2048 steps=3 rounds=2 dir=out/documents
algorithms="ring allgather ulysses hybrid groupcast" layouts="round_robin striped packed solver"
usage() { echo "usage: $0 [-e MODEL] [-b B] [-t T] [-x STEPS] [-r ROUNDS] [-a \"ALGORITHM ...\"] [-l \"LAYOUT ...\"] [-d DIR]" >&2; exit 1; }
value_flags -e model -b B -t T -x steps -r rounds -a algorithms -l layouts -d dir -- "$@"
for v in "$B" "$T" "$steps" "$rounds"; do [[ $v =~ ^[0-9]+$ ]] || { echo "error: -b -t -x -r take whole numbers, got '$v'" >&2; exit 1; }; done
[ "$steps" -ge 2 ] || { echo "error: -x $steps: at least 2 steps (the first is left out)" >&2; exit 1; }
make -s train_gpt2cp_cpu
[ -f "$dir/documents.bin" ] || bash dev/bench/make_documents.sh -o "$dir" > /dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# the configurations, "algorithm layout", ring over round_robin first (the reference)
configs=()
left_out=""
for a in $algorithms; do
    if ! ./train_gpt2cp_cpu -h 2>&1 | grep -qw -- "$a"; then
        left_out+=" $a"
        continue
    fi
    for l in $layouts; do
        case $a in ulysses|hybrid) [[ $l == round_robin || $l == solver ]] || continue ;; esac
        configs+=("$a $l")
    done
done
[[ " ${configs[0]:-} " == " ring round_robin " ]] || { echo "error: the reference, ring over round_robin, must be measured first" >&2; exit 1; }

echo "uptime at the start: $(uptime)"
# run A L: the mean ms of the steps after the first, or "-" when the run failed
run() {
    local out=$work/run.out
    local extra=()
    [ "$1" != hybrid ] || extra=(-cu 2)
    if ! mpirun "${MPIRUN_FLAGS[@]}" -np 4 ./train_gpt2cp_cpu -e "$model" -b "$B" -t "$T" -x "$steps" -v 0 -s 0 \
            -i "$dir/documents.bin" -sh 0 -cp 4 -cl "$2" -ca "$1" "${extra[@]}" -dm 1 > "$out" 2>&1; then
        echo "  $1 over $2 failed: $(grep -m1 -i error "$out")" >&2
        echo -
        return
    fi
    grep '^step ' "$out" | tail -n +2 | sed 's/.*| \([0-9.]*\) ms |.*/\1/' | awk '{ s += $1; n++ } END { printf "%.1f", s / n }'
}
for ((round = 1; round <= rounds; round++)); do
    for c in "${configs[@]}"; do
        # shellcheck disable=SC2086 # "algorithm layout"
        ms=$(run $c)
        echo "round $round: $c: $ms ms/step" >&2
        echo "$round $c $ms" >> "$work/times"
    done
done
echo "uptime at the end: $(uptime)"
echo
echo "cp 4, -e $model, B $B, T $T, -dm 1 on $dir/documents.bin (read in order), $rounds round(s) of $steps steps"
echo
echo "| algorithm | layout | ms/step (median) | / ring, round_robin (median) | ms/step, each round |"
echo "| --- | --- | ---: | ---: | ---: |"
awk -v rounds="$rounds" '
    function median(list, n,    i, j, t, v) {
        for (i = 1; i <= n; i++) v[i] = list[i]
        for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    { key = $2 " " $3; if (!(key in seen)) { seen[key] = 1; order[++keys] = key }
      ms[key, $1] = $4; if ($2 == "ring" && $3 == "round_robin") ref[$1] = $4 }
    END {
        for (k = 1; k <= keys; k++) {
            key = order[k]; n = 0; m = 0; each = ""
            for (r = 1; r <= rounds; r++) {
                each = each (r > 1 ? " " : "") ms[key, r]
                if (ms[key, r] == "-") continue
                t[++n] = ms[key, r]
                if (ref[r] != "-" && ref[r] > 0) q[++m] = ms[key, r] / ref[r]
            }
            split(key, part, " ")
            printf "| %s | %s | %s | %s | %s |\n", part[1], part[2], n ? sprintf("%.0f", median(t, n)) : "failed",
                   m ? sprintf("%.2f", median(q, m)) : "-", each
        }
    }' "$work/times"
[ -z "$left_out" ] || echo "left out (this trainer has no such -ca):$left_out"
