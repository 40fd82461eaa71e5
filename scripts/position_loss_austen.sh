#!/usr/bin/env bash
# Draws docs/position_loss.png: the mean training loss at each position of the
# sequence (scripts/position_loss.sh) of two one-layer models (-e d1) trained on the
# Austen novels with the CPU twin at cp 2, one at T 1024 (B 4) and one at T 4096
# (B 1): the same 4096 tokens a step, the same steps, so the same tokens seen. Then
# docs/position_loss_cp.png: the T 4096 run's first steps at cp 1, 2 and 4 (both
# layouts), which draw one curve. About 25 minutes on 2 idle cores.
#
#   bash scripts/position_loss_austen.sh [-x STEPS] [-r]
#
# -r trains nothing and redraws both figures from the runs there are. Runs go to
# out/position_loss/<name>/ (main.log) and <name>.tl.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/script_lib.sh
usage="usage: $0 [-x STEPS] [-r]
  -x STEPS  the two runs' steps (default 150)
  -r        train nothing: redraw both figures from the runs there are
  -h        this help"
steps=150 redraw=0
while getopts ":x:rh" opt; do
    case $opt in
    x) steps=$OPTARG ;;
    r) redraw=1 ;;
    h) echo "$usage"; exit 0 ;;
    *) getopts_error "$opt" "$OPTARG" ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || usage_error "unknown argument '$1'"
bash scripts/install_deps.sh plots
make -s train_gpt2cp_cpu
out=out/position_loss
mkdir -p "$out"
# a small model and a learning rate that moves it (the 1e-3 of the default's d4 is slow for d1)
FLAGS=(-e d1 -l 3e-3 -u 10 -q 0.1 -v 0 -s 0)

# run NAME NP FLAGS...: one run, shown as it goes (the trainer's progress lines)
run() {
    local name=$1 np=$2
    shift 2
    [ $redraw -eq 1 ] && return 0
    rm -rf "${out:?}/$name" "$out/$name.tl"
    echo "== $name"
    scripts/mpirun.sh -np "$np" ./train_gpt2cp_cpu "${FLAGS[@]}" "$@" -o "$out/$name" -tl "$out/$name.tl" 2>&1 |
        grep --line-buffered -E '^step .*(/| 0s)|^error' | awk -v every=$((steps / 10 > 0 ? steps / 10 : 1)) \
            '{ split($2, s, "/"); if (s[1] % every == 0 || s[1] == s[2] || $1 == "error:") print; fflush() }'
}
run T1024 2 -b 4 -t 1024 -x "$steps" -cp 2
run T4096 2 -b 1 -t 4096 -x "$steps" -cp 2
bash scripts/position_loss.sh -o docs/position_loss.png \
    -t "Austen, -e d1, CPU twin at cp 2: mean training loss by position over the last half of $steps steps of 4096 tokens" \
    "T 1024 (B 4)=$out/T1024.tl:1024" "T 4096 (B 1)=$out/T4096.tl:4096"

# every cp size draws the same curve: the T 4096 run's first 10 steps at cp 1, 2, 4
cp_runs=()
for spec in 1:identity 2:round_robin 4:contiguous 4:round_robin; do
    cp=${spec%%:*} layout=${spec#*:}
    run "T4096_cp${cp}_$layout" "$cp" -b 1 -t 4096 -x 10 -cp "$cp" -cl "$layout"
    cp_runs+=("cp $cp $layout=$out/T4096_cp${cp}_$layout.tl:4096")
done
bash scripts/position_loss.sh -o docs/position_loss_cp.png -l 1 \
    -t "Austen, -e d1, T 4096, the first 10 steps at cp 1, 2 and 4: one curve" "${cp_runs[@]}"
