#!/usr/bin/env bash
# mpirun with what one machine needs, so that the README's commands run as written
# as root or not, with more ranks than cores:
#   --oversubscribe        more ranks than cores (Open MPI refuses them otherwise)
#   --bind-to none         a rank's OpenMP threads may use every core, not one
#   --allow-run-as-root    where we are root (Open MPI refuses root otherwise)
#   OMP_NUM_THREADS        cores / ranks (at least 1) unless set, so the ranks'
#                          threads do not fight over the cores
# Everything else goes to mpirun as it is:
#
#     scripts/mpirun.sh -np 4 ./train_gpt2cp_cpu -cp 2 ...
set -euo pipefail
flags=(--oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
# the rank count: -np N among mpirun's own flags, which end at the program (the first
# word that is neither a flag nor a flag's value)
ranks=1
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    a=${args[i]}
    [[ $a != -* && ( $i -eq 0 || ${args[i - 1]} != -* ) ]] && break
    [[ $a == -np || $a == -n || $a == --np ]] && ranks=${args[i + 1]:-1}
done
if [ -z "${OMP_NUM_THREADS:-}" ]; then
    cores=$(nproc)
    threads=1
    [[ $ranks =~ ^[0-9]+$ ]] && [ "$ranks" -gt 0 ] && [ $((cores / ranks)) -gt 1 ] && threads=$((cores / ranks))
    export OMP_NUM_THREADS=$threads
fi
exec mpirun "${flags[@]}" -x OMP_NUM_THREADS "$@"
