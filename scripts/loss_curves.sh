#!/usr/bin/env bash
# Loss curves across cp sizes: trains the embedded default (scripts/default_config.sh),
# or another model and sequence length, at cp 1, 2, 4 x {contiguous, round_robin},
# draws the training-loss curves overlaid with a second panel of each run's
# difference to cp 1, and prints a table of the largest |loss - loss at cp 1|. CPU
# twin by default, the GPU trainer where GPUs are.
#
#   bash scripts/loss_curves.sh [-o PNG] [-d DIR] [-x STEPS] [-t T] [-e MODEL] [-b B] [-f "FLAGS"] [-p] [-r]
#
# -t, -e, -b, -x replace the default's sequence length, model, batch and steps; -f
# appends trainer flags (e.g. "-u 5" for a shorter warmup); -p trains the five
# runs at the same time (where there are cores to spare: 13 ranks in all); -r
# trains nothing and draws the runs' main.log as they are, up to the last step
# every run has reached (runs cut short, or still going). A curve needs at least
# 2 steps: fewer (-x 1, or -r over runs with fewer in common) is refused with one
# line. The default (about 15 minutes on 2 CPU cores) drew docs/loss_curves.png:
#
#   bash scripts/loss_curves.sh -o docs/loss_curves.png
#
# and the long-context plot docs/loss_curves_T4096.png came from
#
#   bash scripts/loss_curves.sh -t 4096 -e d1 -b 1 -x 30 -f "-u 5 -l 3e-3" -p -o docs/loss_curves_T4096.png
#
# Runs go to DIR/<model>_T<T>/<name>/main.log (DIR: out/loss_curves in the
# repository), and the picture, unless -o names another file, to
# DIR/<model>_T<T>/loss_curves.png: a plain run never writes over the committed
# pictures of docs/. A relative -o or -d is taken from the caller's directory; the
# trainer runs from the repository root (so do the paths -f gives it). The picture
# is drawn to a file of its own and moved into place only when gnuplot succeeded;
# no label, path or flag value is ever gnuplot code (gnuplot reads the runs' files
# by fixed names in their directory, and text goes in as quoted strings). A step a
# run has no loss for (trl:nan in its main.log: a step whose loss masks keep no
# target) is named after the table, left out of the curves and of max |Δ|, and the
# runs are compared step by step, never line by line.
set -euo pipefail
caller=$(pwd)
cd "$(dirname "$0")/.."
source scripts/default_config.sh
source scripts/script_lib.sh

usage="usage: $0 [-o PNG] [-d DIR] [-x STEPS] [-t T] [-e MODEL] [-b B] [-f \"FLAGS\"] [-p] [-r]
  -o PNG    the picture (default: DIR/<model>_T<T>/loss_curves.png)
  -d DIR    where the runs go (default: out/loss_curves in the repository)
  -x STEPS  the runs' steps (at least 2)
  -t T      the sequence length
  -e MODEL  the model (-e of the trainer)
  -b B      the batch size
  -f FLAGS  more trainer flags, one string
  -p        train the five runs at the same time
  -r        train nothing: draw the runs already in DIR
  -h        this help"
png= runs_dir=out/loss_curves
steps= T= model= B= extra_flags= parallel=0 redraw=0
while [ $# -gt 0 ]; do
    case $1 in
    -o|-d|-x|-t|-e|-b|-f) [ $# -ge 2 ] || usage_error "$1 needs a value" ;;&
    -h|--help) echo "$usage"; exit 0 ;;
    -o) png=$(from_caller "$2"); shift 2 ;;
    -d) runs_dir=$(from_caller "$2"); shift 2 ;;
    -x) steps=$2; shift 2 ;;
    -t) T=$2; shift 2 ;;
    -e) model=$2; shift 2 ;;
    -b) B=$2; shift 2 ;;
    -f) extra_flags=$2; shift 2 ;;
    -p) parallel=1; shift ;;
    -r) redraw=1; shift ;;
    *) usage_error "unknown argument '$1'" ;;
    esac
done
command -v gnuplot > /dev/null || die "gnuplot is missing (apt-get install gnuplot-nox)"

# later flags win: the default's, then the replacements
flags=("${DEFAULT_FLAGS[@]}" -v 0 -s 0)
[ -n "$steps" ] && flags+=(-x "$steps")
[ -n "$T" ] && flags+=(-t "$T")
[ -n "$model" ] && flags+=(-e "$model")
[ -n "$B" ] && flags+=(-b "$B")
read -r -a extra <<< "$extra_flags"
flags+=("${extra[@]}")
# what the runs are: the last value of each flag
flag_value() { local v= i; for ((i = 0; i < ${#flags[@]} - 1; i++)); do [ "${flags[i]}" = "$1" ] && v=${flags[i + 1]}; done; echo "$v"; }
run_model=$(flag_value -e) run_T=$(flag_value -t) run_B=$(flag_value -b) run_steps=$(flag_value -x)
[[ $run_steps =~ ^[0-9]+$ ]] || die "-x '$run_steps': the runs' steps must be a number (a curve needs at least 2)"
[ "$run_steps" -ge 2 ] || die "-x $run_steps: a curve needs at least 2 steps"
gpus=$(gpus_available)
if [ "$gpus" -gt 0 ]; then
    target=train_gpt2cp
    trainer=(./train_gpt2cp -f 0)
    # one GPU per rank where there are enough, else ranks share through MPI
    transport() { if [ "$1" -le "$gpus" ]; then echo nccl; else echo mpi; fi; }
    what="GPU trainer"
else
    target=train_gpt2cp_cpu
    trainer=(./train_gpt2cp_cpu)
    transport() { :; }
    what="CPU twin"
fi
[ $redraw -eq 1 ] || make -s $target # -r trains nothing

out=$runs_dir/${run_model}_T$run_T
[ -n "$png" ] || png=$out/loss_curves.png
[ ! -e "$png" ] || [ -f "$png" ] || die "-o $png is not a regular file: the picture is moved into place as one"
mkdir -p "$out" "$(dirname "$png")"
runs=(cp1_identity cp2_contiguous cp2_round_robin cp4_contiguous cp4_round_robin)
# step_losses NAME: the step losses of a run's main.log, "step loss" per line, every
# training line kept: a loss that is no number (nan, inf) is written '?', gnuplot's
# missing value, so that no step is dropped and none moves
step_losses() {
    awk '/^s:[0-9]+ trl:/ { split($1, s, ":"); split($2, l, ":")
        print s[2], (l[2] ~ /^-?[0-9]+(\.[0-9]*)?$/ ? l[2] : "?") }' "$out/$1/main.log" > "$out/$1.dat"
}

# progress_of NAME: "NAME: step S/N, loss L, T left" from the run's newest progress line
progress_of() {
    local line
    line=$(grep '^step ' "$out/$1.out" 2>/dev/null | tail -n 1)
    if [ -z "$line" ]; then echo "$1: starting"; return; fi
    awk -F'|' -v name="$1" '{
        step = $1; sub(/^step +/, "", step); sub(/ +$/, "", step)
        loss = $2; sub(/^ *loss /, "", loss)
        # a step with no target prints "loss none (...)"
        loss = loss ~ /^[0-9]/ ? sprintf("%.3f", loss) : "none"
        eta = $NF; sub(/^ *eta /, "", eta); sub(/ +$/, "", eta)
        printf "%s: step %s, loss %s, %s left\n", name, step, loss, eta }' <<< "$line"
}
# any_alive PID...: whether one of them still runs
any_alive() { local pid; for pid in "$@"; do kill -0 "$pid" 2>/dev/null && return 0; done; return 1; }
# watch_runs NAME...: while the runs' processes (watched_pids) go on, their progress
# every few seconds: on a terminal one line rewritten in place, else a line every 30 s
watch_runs() {
    local status tick=0
    while any_alive "${watched_pids[@]}"; do
        status=$(for name in "$@"; do progress_of "$name"; done | paste -sd'|' | sed 's/|/ | /g')
        if [ -t 1 ]; then printf '\r\033[K%s' "${status:0:$(( $(tput cols 2>/dev/null || echo 200) - 1 ))}"
        elif [ $((tick % 15)) -eq 0 ]; then echo "  $status"; fi
        tick=$((tick + 1))
        sleep 2
    done
    [ -t 1 ] && printf '\r\033[K'
    return 0
}

# train NAME: one run, its output in $out/NAME.out, its step losses in $out/NAME.dat
train() {
    local name=$1 cp layout t
    cp=${name%%_*}; cp=${cp#cp}
    layout=${name#*_}
    local transport_flags=()
    t=$(transport "$cp")
    [ -n "$t" ] && transport_flags+=(-ct "$t")
    rm -rf "${out:?}/$name" # a fresh run (a run refuses a directory with another run's checkpoints)
    mpirun "${MPIRUN_FLAGS[@]}" -np "$cp" "${trainer[@]}" "${flags[@]}" -cp "$cp" -cl "$layout" "${transport_flags[@]}" \
        -o "$out/$name" > "$out/$name.out" 2>&1 || { tail -20 "$out/$name.out" >&2; return 1; }
    step_losses "$name"
}
# train_watched NAME...: the runs one after another (at once with -p), showing progress
train_watched() {
    local name pid i=0
    for name in "$@"; do rm -f "$out/$name.out"; done
    if [ $parallel -eq 1 ]; then
        echo "training ${*} at once ($what)"
        watched_pids=()
        for name in "$@"; do train "$name" & watched_pids+=($!); done
        watch_runs "$@"
        for pid in "${watched_pids[@]}"; do wait "$pid" || return 1; done
        return 0
    fi
    for name in "$@"; do
        i=$((i + 1))
        echo "training $name ($what), run $i of $#"
        train "$name" & watched_pids=($!)
        watch_runs "$name"
        wait "${watched_pids[0]}" || return 1
        echo "  $(progress_of "$name")"
    done
}
if [ $redraw -eq 1 ]; then
    shortest=
    for name in "${runs[@]}"; do
        [ -f "$out/$name/main.log" ] || die "-r: no run $name in $out (its main.log is missing)"
        step_losses "$name"
        n=$(wc -l < "$out/$name.dat")
        if [ -z "$shortest" ] || [ "$n" -lt "$shortest" ]; then shortest=$n; fi
    done
    [ "$shortest" -ge 2 ] || die "-r: the runs in $out have $shortest step(s) in common: a curve needs at least 2"
    for name in "${runs[@]}"; do head -n "$shortest" "$out/$name.dat" > "$out/$name.dat.tmp"; mv "$out/$name.dat.tmp" "$out/$name.dat"; done
    echo "drawing the first $shortest step(s) of each run"
    what+=", the first $shortest of $(flag_value -x) steps"
else
    train_watched "${runs[@]}" || exit 1
fi

grep -q ' [^?]*$' "$out/cp1_identity.dat" ||
    die "cp1_identity has no loss at any of its $(wc -l < "$out/cp1_identity.dat") step(s) (trl:nan in its main.log): nothing to compare the runs with"
# each run's difference to cp 1, step by step (joined by the step, '?' where either has no loss)
for name in "${runs[@]}"; do
    awk 'NR == FNR { ref[$1] = $2; next }
        { r = ($1 in ref) ? ref[$1] : "?"; if (r == "?" || $2 == "?") print $1, "?"; else printf "%s %.6f\n", $1, $2 - r }' \
        "$out/cp1_identity.dat" "$out/$name.dat" > "$out/$name.diff"
done

echo
printf "%-18s %12s %14s\n" run "final loss" "max |Δ| vs cp1"
for name in "${runs[@]}"; do
    final=$(tail -1 "$out/$name.dat" | awk '{ print $2 == "?" ? "none" : $2 }')
    maxdiff=$(awk 'function abs(x) { return x < 0 ? -x : x } $2 != "?" { if (abs($2) > m) m = abs($2) } END { printf "%.6f", m }' "$out/$name.diff")
    printf "%-18s %12s %14s\n" "$name" "$final" "$maxdiff"
done
# the steps without a loss, by run
for name in "${runs[@]}"; do
    awk -v name="$name" '$2 == "?" { n++; if (n <= 10) list = list (n > 1 ? ", " : "") $1 }
        END { more = n > 10 ? ", ..." : ""
              if (n) printf "%s: no loss at %d step(s) (%s%s; trl:nan in main.log): left out of its curve and of max |Δ|\n",
                            name, n, list, more }' "$out/$name.dat"
done

plot=""
diffplot=""
for name in "${runs[@]}"; do
    title=${name/_/ }; title=${title/_/-}
    plot+="'$name.dat' using 1:2 with lines lw 2 title $(gnuplot_string "$title"), "
    diffplot+="'$name.diff' using 1:2 with lines lw 2 title $(gnuplot_string "$title"), "
done
# drawn to a file of its own in the runs' directory, where gnuplot runs, moved into
# place only when gnuplot succeeded
drawn=loss_curves.drawing.png
rm -f "$out/$drawn"
(cd "$out" && gnuplot > gnuplot.err 2>&1) <<GNUPLOT || die "gnuplot could not draw $png: $(grep -m1 -v '^ *$' "$out/gnuplot.err")"
set terminal pngcairo noenhanced size 1100,900 font ",11"
set datafile missing '?'
set output '$drawn'
set multiplot layout 2,1 title $(gnuplot_string "Training loss across cp sizes and layouts: -e $run_model, B $run_B, T $run_T ($what)")
set grid
set xlabel 'step'
set ylabel 'training loss'
set key top right
plot ${plot%, }
set ylabel 'loss - loss at cp 1'
set format y '%.1e'
plot ${diffplot%, }
unset multiplot
GNUPLOT
[ "$(head -c 4 "$out/$drawn" 2> /dev/null | od -An -tx1 | tr -d ' ')" = 89504e47 ] ||
    die "gnuplot drew no picture for $png: $(grep -m1 -v '^ *$' "$out/gnuplot.err" || echo 'no message')"
mv "$out/$drawn" "$png" || die "cannot move the picture to $png"
echo "wrote $png"
