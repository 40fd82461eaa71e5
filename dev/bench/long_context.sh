#!/usr/bin/env bash
# Long sequences on the CPU twin: per-rank peak memory and step time against T, one
# run per (T, cp), a small model, B 1, round_robin. Each run's figures are the
# trainer's own: the estimated peak per rank of its start-up table, the measured
# peak resident memory per rank of its last line, and the ms of its last step.
#
#   bash dev/bench/long_context.sh [-e d2] [-t "1024 2048 4096 8192 16384 32768"]
#                                  [-c "1 2 4"] [-x 1] [-s SECONDS] [-j THREADS] [-o OUT] [-w] [-r]
#
# -s: the longest a run may take (it is then reported as timed out). Every rank
# runs one OpenMP thread (-j sets another number), so at cp 4 on two cores four
# ranks share them: those times are oversubscribed. A run the trainer refuses at
# start-up (it will not fit) is reported as such.
#
# Writes OUT/long_context.dat (T cp est_MiB peak_MiB ms, "-" where there is none),
# OUT/long_context.md (the table) and OUT/long_context.png (memory per rank and
# step time against T, one line per cp). OUT defaults to out/long_context. -w also
# puts the table into dev/bench/README.md (between its long_context markers) and
# the plot at docs/long_context.png. -r runs nothing: the table and the plot of an
# existing OUT/long_context.dat (e.g. the lines of several partial runs put together).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/default_config.sh # MPIRUN_FLAGS; value_flags (scripts/script_lib.sh)

model=d2 lengths="1024 2048 4096 8192 16384 32768" cps="1 2 4" steps=1 limit=3600 threads=1 out=out/long_context write=0 report_only=0
usage() { echo "usage: $0 [-e MODEL] [-t \"T ...\"] [-c \"CP ...\"] [-x STEPS] [-s SECONDS] [-j THREADS] [-o OUT] [-w] [-r]" >&2; exit 1; }
value_flags -e model -t lengths -c cps -x steps -s limit -j threads -o out -w write=1 -r report_only=1 -- "$@"
command -v gnuplot > /dev/null || { echo "error: gnuplot is missing (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$out"
dat=$out/long_context.dat
if [ $report_only -eq 0 ]; then
    make -s train_gpt2cp_cpu
    echo "# T cp est_MiB peak_MiB ms_per_step   (-e $model, B 1, round_robin, $steps step(s), $threads thread(s) per rank)" > "$dat"

    # MiB of "123.4 MiB" or "12.3 GiB"
    to_mib() { awk '{ v = $1; if ($2 == "GiB") v *= 1024; printf "%.1f", v }'; }

    for T in $lengths; do
        for cp in $cps; do
            name=T${T}_cp$cp
            echo "T $T, cp $cp ($threads thread(s) per rank)..."
            rc=0
            OMP_NUM_THREADS=$threads timeout "$limit" mpirun "${MPIRUN_FLAGS[@]}" -np "$cp" ./train_gpt2cp_cpu \
                -e "$model" -b 1 -t "$T" -cp "$cp" -cl $([ "$cp" -eq 1 ] && echo identity || echo round_robin) \
                -x "$steps" -v 0 -s 0 > "$out/$name.out" 2>&1 || rc=$?
            est=$(sed -n 's/^| est. peak per rank *| \([0-9.]* [MG]iB\).*/\1/p' "$out/$name.out" | to_mib)
            [ -n "$est" ] || est=-
            peak=- ms=-
            if [ $rc -eq 0 ]; then
                peak=$(sed -n 's/^peak resident memory per rank: \([0-9.]*\) MiB.*/\1/p' "$out/$name.out")
                ms=$(grep '^step ' "$out/$name.out" | tail -1 | sed 's/.*| \([0-9.]*\) ms |.*/\1/')
            elif [ $rc -eq 124 ]; then
                echo "  timed out after $limit s"
            elif grep -q "will not fit" "$out/$name.out"; then
                echo "  refused: $(grep -m1 -o 'needs an estimated [0-9.]* [MG]iB per rank' "$out/$name.out")"
            else
                echo "  failed (exit $rc):"; tail -5 "$out/$name.out"
            fi
            echo "  estimated $est MiB, peak $peak MiB per rank, $ms ms/step"
            echo "$T $cp $est $peak $ms" >> "$dat"
        done
    done
fi

# the table
md=$out/long_context.md
{
    echo "| T | cp | est. peak per rank (MiB) | measured peak per rank (MiB) | ms/step |"
    echo "| ---: | ---: | ---: | ---: | ---: |"
    awk -v threads="$threads" -v cores="$(getconf _NPROCESSORS_ONLN)" '!/^#/ {
        ms = $5 == "-" ? "-" : sprintf("%.0f", $5)
        if ($2 * threads > cores && ms != "-") ms = ms " (oversubscribed)"
        peak = $4 == "-" ? "not measured" : $4
        printf "| %d | %d | %s | %s | %s |\n", $1, $2, $3, peak, ms }' <(sort -n -k1,1 -k2,2 "$dat")
} > "$md"
cat "$md"

# one file per cp, so that each cp's points join into one line
plot_mem="" plot_ms=""
for cp in $cps; do
    awk -v cp="$cp" '!/^#/ && $2 == cp' "$dat" | sort -n -k1,1 > "$out/long_context_cp$cp.dat"
    f=$out/long_context_cp$cp.dat
    plot_mem+="'$f' using 1:4 with linespoints lw 2 title 'cp $cp (measured)', "
    plot_mem+="'$f' using 1:3 with lines dt 2 lw 1 title 'cp $cp (estimate)', "
    plot_ms+="'$f' using 1:(\$5 / 1000) with linespoints lw 2 title 'cp $cp', "
done
gnuplot <<GNUPLOT
set terminal pngcairo size 1100,900 font ",11" noenhanced
set output '$out/long_context.png'
set multiplot layout 2,1 title "CPU twin, -e $model, B 1, round_robin: per-rank memory and step time against T"
set grid
set logscale xy 2
set xlabel 'sequence length T'
set key top left
set datafile missing '-'
set ylabel 'peak memory per rank (MiB)'
plot ${plot_mem%, }
set logscale y 10
set ylabel 'seconds per step (cp 4: four ranks on two cores)'
plot ${plot_ms%, }
unset multiplot
GNUPLOT
echo "wrote $dat, $md and $out/long_context.png"
if [ $write -eq 1 ]; then
    readme=dev/bench/README.md
    begin='<!-- long_context table: written by dev/bench/long_context.sh -w -->'
    end='<!-- end of long_context table -->'
    grep -qF "$begin" "$readme" || { echo "error: $readme has no line '$begin'" >&2; exit 1; }
    awk -v begin="$begin" -v end="$end" -v table="$md" '
        $0 == begin { print; while ((getline line < table) > 0) print line; skip = 1; next }
        $0 == end { skip = 0 }
        !skip' "$readme" > "$readme.tmp"
    mv "$readme.tmp" "$readme"
    cp "$out/long_context.png" docs/long_context.png
    echo "wrote the table into $readme and the plot to docs/long_context.png"
fi
