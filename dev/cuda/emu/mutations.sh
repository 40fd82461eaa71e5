#!/usr/bin/env bash
# The mutation test (run.sh mutations, which builds the emulated tests and sets
# REPO, WORK and MPIRUN_LINE): every synchronisation site of the library code that
# rewrite.py numbered (each __syncthreads, __syncwarp and cp_async_wait of the
# kernels, each cudaStreamWaitEvent and cudaEventSynchronize between the streams;
# the list is $WORK/src/mutation_sites.txt) is skipped in turn (EMU_MUTATE=N), and
# the emulated tests that exercise it must then fail. A site whose removal nothing notices is
# either not needed or a gap in the checks; either way this test fails.
#
# Prints a line per site: what was removed and what caught it (the first report:
# racecheck, initcheck, synccheck, memcheck, or a wrong result).
set -euo pipefail
cd "$REPO"
read -ra MPIRUN <<< "$MPIRUN_LINE"
SEED=${EMU_MUTATION_SEED:-1}

# the runs that exercise a file's sites, each "ranks binary", cheapest first: a run
# that catches the removal ends at its first report, in seconds; one that does not
# runs to its end. The flash kernels' sites go to 2 ranks first: there each was
# caught in seconds, while 1 rank misses the cp.async waits for a tile that nothing
# sees (a block of another rank, wholly masked), each a whole single-rank run lost
runs_for() {
    case $1 in
        cp/attention_block.cuh | cp/attention_row_steps.cuh)
            echo "1:test_gpu_attention_algorithms_FP32 1:test_gpu_attention_algorithms_BF16" ;;
        cp/attention_block_flash.cuh) echo "2:test_gpu_attention_algorithms_BF16 1:test_gpu_attention_algorithms_BF16" ;;
        cp/comm_*) echo "2:test_gpu_attention_algorithms_FP32" ;;
        llmc/*) echo "1:test_gpu_kernels_FP32 1:test_gpu_kernels_BF16" ;;
        *) echo "" ;;
    esac
}

missed=0
total=0
while read -r number where what; do
    total=$((total + 1))
    file=${where%%:*}
    caught=""
    for run in $(runs_for "$file"); do
        np=${run%%:*} binary=${run#*:}
        out=$WORK/mutation_$number.out
        if EMU_MUTATE=$number EMU_SEED=$SEED "${MPIRUN[@]}" -np "$np" "$WORK/$binary" > "$out" 2>&1 < /dev/null; then
            continue
        fi
        caught=$(grep -m 1 -o '^EMU [a-z]*:' "$out" | cut -c5- | tr -d : || true)
        [[ -n $caught ]] || caught=$(grep -q '^FAIL' "$out" && echo "a wrong result" || echo "exit $(tail -c 200 "$out" | tr '\n' ' ')")
        caught="$caught ($binary, $np rank(s))"
        break
    done
    if [[ -z $caught ]]; then
        printf "%-3s %-30s %-22s MISSED: nothing fails without it\n" "$number" "$where" "$what"
        missed=$((missed + 1))
    else
        printf "%-3s %-30s %-22s caught by %s\n" "$number" "$where" "$what" "$caught"
    fi
done < "$WORK/src/mutation_sites.txt"
echo "mutation test: $((total - missed)) of $total synchronisation sites caught when removed"
[[ $missed -eq 0 ]]
