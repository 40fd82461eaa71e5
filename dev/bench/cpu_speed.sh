#!/usr/bin/env bash
# The CPU twin's speed end to end, against the machine and against PyTorch, in one
# run (dev/bench/README.md):
#   1. OpenBLAS's sgemm rate on the same threads (bench_sgemm, 2048^3), the bar;
#   2. `-e d12 -b 1` at each T of -t: ms per step, tok/s, and the rate of the FLOPs
#      the model needs, as a share of sgemm's. FLOPs per token, causal attention's
#      visible half: 6 (12 L C^2 + V C) + 6 L C T, V = 50257 (the padding is not
#      needed), whatever the code happens to compute besides; with -r R, at cp R
#      over R ranks (mpirun), the threads shared among them (THREADS / R each): the
#      gradient's all-reduce joins the step;
#   3. with -c 1, the four shapes of the PyTorch comparison, ours and
#      dev/bench/gpt2_torch.py -d cpu (Debian's torch, same threads) side by side:
#      tiny (1 layer, C 64, a vocabulary of 512, B 4, T 256), d2 (B 4, T 1024),
#      6 layers C 384 (d6, B 4, T 1024) and d12 (B 1, T 1024). Without torch the
#      table says so and goes on. Both sides run with malloc's large blocks on
#      transparent huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, glibc >= 2.35),
#      where the kernel gives them only on request (THP mode madvise, as here):
#      PyTorch allocates its activations afresh every step, and on a VM whose page
#      faults are dear it spent 30% of its time faulting them in (d2 ran 2.9x
#      faster with huge pages; ours, whose buffers are allocated once, 2%). -g 0
#      leaves malloc as installed on both sides (ours still advises its own buffers).
#
#   bash dev/bench/cpu_speed.sh [-t "1024 8192"] [-x STEPS] [-n THREADS] [-r RANKS] [-c 0|1] [-g 0|1] [-p TRAINER]
#   bash dev/bench/cpu_speed.sh -t "" -c 1          (the PyTorch comparison alone)
#
# A trainer's time is the mean of its steps after the first (the first touches every
# buffer). -p times another build of the trainer (an older one, for a before/after
# in the same run). The load average is printed before and after: the figures mean
# something only on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/script_lib.sh # value_flags
Ts="1024 8192" steps=3 threads=2 ranks=1 compare=0 hugepages=1 trainer=./train_gpt2cp_cpu
usage() { echo "usage: $0 [-t \"T ...\"] [-x STEPS (>= 2)] [-n THREADS] [-r RANKS (divides THREADS)] [-c 0|1] [-g 0|1] [-p TRAINER]" >&2; exit 1; }
value_flags -t Ts -x steps -n threads -r ranks -c compare -g hugepages -p trainer -- "$@"
[[ $steps =~ ^[0-9]+$ && $steps -ge 2 && $threads =~ ^[1-9][0-9]*$ && $ranks =~ ^[1-9][0-9]*$ &&
   $((threads % ranks)) -eq 0 && $compare =~ ^[01]$ && $hugepages =~ ^[01]$ ]] || usage
make -s train_gpt2cp_cpu bench_sgemm
[ -x "$trainer" ] || { echo "error: trainer '$trainer' is not an executable" >&2; exit 1; }
source scripts/default_config.sh # MPIRUN_FLAGS, for -r
export OMP_NUM_THREADS=$threads
launch=()
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "load average before: $(load); $threads thread(s) over $ranks rank(s) at the d12 rows; trainer $trainer"

# OPENBLAS_VERBOSE=2: the library names the kernels it picked (its guess of the CPU,
# or the environment's OPENBLAS_CORETYPE), which set both the bar and the trainer's rate
out=$(OPENBLAS_VERBOSE=2 ./bench_sgemm 2>&1)
echo "OpenBLAS kernels: $(grep -m1 '^Core:' <<< "$out" | cut -d' ' -f2-) (OPENBLAS_CORETYPE ${OPENBLAS_CORETYPE:-not set})"
line=$(grep -m1 '^sgemm' <<< "$out")
echo "$line"
sgemm=$(awk '{ print $4 }' <<< "$line")

# train FLAGS...: the run (under launch: mpirun and its flags, or nothing), the mean ms of the steps after the first ("-" when the run failed)
train() {
    "${launch[@]}" "$trainer" "$@" -x "$steps" -v 0 -s 0 > "$work/run.out" 2>&1 || { echo "-"; return; }
    awk '$1 == "step" && ++n > 1 { s += $13; k++ } END { if (k) printf "%.1f", s / k; else print "-" }' "$work/run.out"
}

if [ -n "$Ts" ]; then
    echo
    echo "| T | ms per step | tok/s | MFLOP per token | GFLOP/s | of sgemm's $sgemm GFLOP/s |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
    # the d12 rows at -r RANKS: mpirun, the threads shared among the ranks
    rank_launch=()
    if [ "$ranks" -gt 1 ]; then rank_launch=(mpirun "${MPIRUN_FLAGS[@]}" -np "$ranks"); fi
    for T in $Ts; do
        ms=$(launch=("${rank_launch[@]}"); OMP_NUM_THREADS=$((threads / ranks)) train -e d12 -b 1 -t "$T" -cp "$ranks")
        awk -v T="$T" -v ms="$ms" -v peak="$sgemm" 'BEGIN {
            L = 12; C = 768; V = 50257
            flop = 6 * (12 * L * C * C + V * C) + 6 * L * C * T
            if (ms == "-") { printf "| %d | failed | | %.0f | | |\n", T, flop / 1e6; exit }
            tps = T / (ms / 1000); rate = tps * flop / 1e9
            printf "| %d | %.1f | %.1f | %.0f | %.1f | %.1f%% |\n", T, ms, tps, flop / 1e6, rate, 100 * rate / peak }'
    done
fi

if [ "$compare" = 1 ]; then
    echo
    # Debian's torch is in the system's python3, which a python3 of one's own may hide
    have_torch=0
    for torch_python in python3 /usr/bin/python3; do
        "$torch_python" -c "import torch" 2> /dev/null && { have_torch=1; break; }
    done
    [ $have_torch = 1 ] || echo "(no torch in python3 or /usr/bin/python3: PyTorch left out; apt-get install python3-torch)"
    if [ "$hugepages" = 1 ]; then export GLIBC_TUNABLES=glibc.malloc.hugetlb=1; fi
    echo "malloc's large blocks on huge pages, both sides: $([ "$hugepages" = 1 ] && echo yes || echo "no (-g 0)")"
    # the tiny model: d1's random init cut to a vocabulary of 512 and its data mapped to it
    "$trainer" -e d1 -x 0 -n 1 -v 0 -s 0 -o "$work/d1" > /dev/null
    python3 test/lib/llmc_files.py small "$work/d1/model_00000000.bin" "$work/tiny.bin" \
        dev/data/austen/austen_train.bin "$work/tiny_data.bin" 512 256
    echo "| shape | ours (tok/s) | PyTorch (tok/s) | ours / PyTorch |"
    echo "| --- | ---: | ---: | ---: |"
    # name|our flags|gpt2_torch.py's flags|steps (the tiny one's take milliseconds: more of them)
    for shape in "tiny|-e $work/tiny.bin -i $work/tiny_data.bin -j $work/tiny_data.bin -b 4 -t 256|-L 1 -C 64 -NH 1 -V 512 -b 4 -t 256|50" \
                 "d2|-e d2 -b 4 -t 1024|-L 2 -C 128 -NH 2 -V 50304 -b 4 -t 1024|$steps" \
                 "d6|-e d6 -b 4 -t 1024|-L 6 -C 384 -NH 6 -V 50304 -b 4 -t 1024|$steps" \
                 "d12|-e d12 -b 1 -t 1024|-L 12 -C 768 -NH 12 -V 50304 -b 1 -t 1024|$steps"; do
        IFS='|' read -r name ours theirs shape_steps <<< "$shape"
        # shellcheck disable=SC2086
        ms=$(steps=$shape_steps train $ours)
        B=$(awk '{ for (i = 1; i < NF; i++) if ($i == "-b") print $(i + 1) }' <<< "$ours")
        T=$(awk '{ for (i = 1; i < NF; i++) if ($i == "-t") print $(i + 1) }' <<< "$ours")
        our_tps=$(awk -v ms="$ms" -v n=$((B * T)) 'BEGIN { if (ms == "-") print "-"; else printf "%.0f", n / (ms / 1000) }')
        torch_tps=-
        if [ $have_torch = 1 ]; then
            # shellcheck disable=SC2086
            torch_tps=$("$torch_python" dev/bench/gpt2_torch.py -d cpu -p fp32 -x "$shape_steps" $theirs 2> "$work/torch.err" |
                        awk '{ for (i = 1; i < NF; i++) if ($(i + 1) ~ /^tok\/s,?$/) print $i }')
            [ -n "$torch_tps" ] || torch_tps=-
        fi
        ratio=$(awk -v a="$our_tps" -v b="$torch_tps" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.2f×", a / b }')
        echo "| $name (B $B, T $T) | $our_tps | $torch_tps | $ratio |"
    done
fi
echo
echo "load average after: $(load)"
