#!/usr/bin/env bash
# mpirun with what one machine needs, so that the README's commands run as written
# as root or not, with more ranks than cores:
#   --oversubscribe        more ranks than cores (Open MPI refuses them otherwise)
#   --bind-to none         a rank's OpenMP threads may use every core, not one
#   --allow-run-as-root    where we are root (Open MPI refuses root otherwise)
#   OMP_NUM_THREADS        cores / ranks (at least 1) unless set, so the ranks'
#                          threads do not fight over the cores
#   HWLOC_COMPONENTS=-gl   unless set: no hwloc OpenGL plugin, which at every MPI start
#                          probes X displays, each a lookup of "localhost" that without
#                          /etc/hosts goes to DNS (seconds where a reply is lost)
# Everything else goes to mpirun as it is:
#
#     scripts/mpirun.sh -np 4 ./train_gpt2cp_cpu -cp 2 ...
#
# Only the words before the program are mpirun's (and this script's: -h); from the
# program on, every word is the program's own, as mpirun reads them. The program is
# the first word that is neither a flag nor the value of one of mpirun's flags that
# take a value (WITH_VALUE below; -mca and its kin take two): a flag not listed
# there stands alone. The rank count is -np's (or -n's, -c's); without it mpirun
# starts one rank per core, so OMP_NUM_THREADS is then 1.
set -euo pipefail
source "$(dirname "$0")/script_lib.sh"
usage="usage: $0 [MPIRUN FLAGS] PROGRAM [PROGRAM ARGS]
  -h    this help (before PROGRAM; after it, every word is the program's)
  MPIRUN FLAGS  mpirun's own, e.g. -np N (the ranks: OMP_NUM_THREADS is cores / N)"
# mpirun's flags (Open MPI 4 and 5) that take one value
WITH_VALUE=" -np -n --n --np -c -H -host --host -hostfile --hostfile -machinefile --machinefile -default-hostfile
 --default-hostfile -x -am --am -app --app -bind-to --bind-to -map-by --map-by -rank-by --rank-by -N -npernode
 --npernode -npersocket --npersocket -cpus-per-proc --cpus-per-proc -cpus-per-rank --cpus-per-rank -cpu-set --cpu-set
 -output-filename --output-filename -path --path -prefix --prefix -preload-files --preload-files -rankfile --rankfile
 -stdin --stdin -tune --tune -wd --wd -wdir --wdir -timeout --timeout -report-uri --report-uri -ompi-server
 --ompi-server -server-wait-time --server-wait-time --output --personality --runtime-options --pmixmca-file "
# ... and two (a parameter and its value)
WITH_TWO=" -mca --mca -gmca --gmca --pmixmca --prtemca "
ranks= program=
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    a=${args[i]}
    case $a in
    -h|--help) echo "$usage"; exit 0 ;;
    -np=*|--np=*|-n=*|--n=*|-c=*) ranks=${a#*=} ;;
    -*)
        if [[ $WITH_TWO == *" $a "* ]]; then
            [ $((i + 2)) -lt ${#args[@]} ] || usage_error "$a needs a parameter and its value"
            i=$((i + 2))
        elif [[ $WITH_VALUE == *[[:space:]]"$a"[[:space:]]* ]]; then
            [ $((i + 1)) -lt ${#args[@]} ] || usage_error "$a needs a value"
            i=$((i + 1))
            [[ $a == -np || $a == --np || $a == -n || $a == --n || $a == -c ]] && ranks=${args[i]}
        fi ;;
    *) program=$a; break ;;
    esac
done
[ -n "$program" ] || usage_error "no program to run"
if [ -n "$ranks" ] && ! [[ $ranks =~ ^[1-9][0-9]*$ ]]; then usage_error "-np '$ranks': the ranks are a positive number"; fi
flags=(--oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
if [ -z "${OMP_NUM_THREADS:-}" ]; then
    cores=$(nproc)
    ranks=${ranks:-$cores} # mpirun's default: a rank per core
    threads=$((cores / ranks))
    [ "$threads" -ge 1 ] || threads=1
    export OMP_NUM_THREADS=$threads
fi
export HWLOC_COMPONENTS=${HWLOC_COMPONENTS:--gl}
exec mpirun "${flags[@]}" -x OMP_NUM_THREADS -x HWLOC_COMPONENTS "$@"
