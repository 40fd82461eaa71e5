# What the scripts share (sourced; `usage` set by the script, its first line the synopsis):
#
#   die MESSAGE           "error: MESSAGE" on stderr, exit 1
#   usage_error MESSAGE   the same, with the synopsis: how to run the script
#   no_arguments "$@"     a script that takes no argument: -h prints $usage (exit 0),
#                         any other argument is refused with the synopsis
#   getopts_error OPT OPTARG  what getopts (its optstring starting with ':') found
#                         wrong: OPT ':' a flag without its value, else an unknown flag
#   sourced_only USAGE "$@"   a file meant to be sourced, called at its top: when it
#                         is run instead, -h prints USAGE (exit 0), else it says how
#                         it is used (exit 1); sourced, it does nothing
#   value_flags FLAG VARIABLE ... -- "$@"   a command line parsed by the table before
#                         `--`: each FLAG's value goes into its VARIABLE (the last one
#                         given wins); a switch, an entry FLAG VARIABLE=VALUE, takes no
#                         value and sets VARIABLE to VALUE. A flag not in the table, or
#                         one without its value, runs the script's usage function
#                         (which exits)
#   from_caller PATH      PATH as the caller meant it: a relative one from the
#                         caller's directory ($caller, recorded before any cd)
#   precision_tree SRC TREE   SRC's sources copied into TREE, for a GPU build of one
#                         precision (both builds write the same names), without
#                         build/, gpu_prep/, gpu_bundle/, dev/data and .git, and without
#                         the trainer and the attention benchmark at the top: a copy of
#                         SRC's own (another precision's) would be newer than the sources
#                         and make would keep it as up to date
#   gnuplot_string TEXT   TEXT as one gnuplot string literal: single-quoted, where
#                         gnuplot expands nothing (no backquote, macro or escape),
#                         a quote doubled, a control character (a newline would end
#                         the command) a space. A label is then text, never code.

die() { echo "error: $*" >&2; exit 1; }

usage_error() {
    local newline=$'\n'
    die "$1 (${usage%%"$newline"*}; -h explains each flag)"
}

no_arguments() {
    [ $# -eq 0 ] && return 0
    case $1 in -h|--help) echo "$usage"; exit 0 ;; esac
    usage_error "unknown argument '$1': the script takes none"
}

getopts_error() {
    [[ $1 == : ]] && usage_error "-$2 needs a value"
    [[ $2 == - ]] && usage_error "unknown flag: long flags (--...) are not taken"
    usage_error "unknown flag -$2"
}

sourced_only() {
    [[ ${BASH_SOURCE[1]} == "$0" ]] || return 0
    case ${2:-} in -h|--help) printf '%s\n  -h    this help\n' "$1"; exit 0 ;; esac
    echo "error: ${BASH_SOURCE[1]} is sourced, not run (${1%%$'\n'*})" >&2
    exit 1
}

value_flags() {
    local table=() entry target taken
    while [ $# -gt 0 ] && [ "$1" != -- ]; do table+=("$1" "$2"); shift 2; done
    shift
    while [ $# -gt 0 ]; do
        taken=0 # the words the flag takes, itself included; 0: not in the table
        for ((entry = 0; entry < ${#table[@]}; entry += 2)); do
            [ "${table[entry]}" = "$1" ] || continue
            target=${table[entry + 1]}
            if [[ $target == *=* ]]; then
                printf -v "${target%%=*}" '%s' "${target#*=}"
                taken=1
            else
                [ $# -ge 2 ] || usage
                printf -v "$target" '%s' "$2"
                taken=2
            fi
        done
        [ $taken -gt 0 ] || usage
        shift $taken
    done
}

from_caller() {
    case $1 in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "${caller:?from_caller needs the directory of the call}/$1" ;;
    esac
}

precision_tree() {
    local src=$1 tree=$2
    mkdir -p "$tree" &&
        tar -C "$src" --exclude=./build --exclude=./gpu_bundle --exclude=./gpu_prep --exclude=./dev/data \
            --exclude=./.git -cf - . | tar -C "$tree" -xf - &&
        rm -f "$tree/train_gpt2cp" "$tree/bench_attention_gpu"
}

gnuplot_string() {
    local text q
    q="'"
    text=${1//[[:cntrl:]]/ }
    text=${text//$q/$q$q}
    printf '%s%s%s' "$q" "$text" "$q"
}

sourced_only "usage: source scripts/script_lib.sh (by the other scripts, once they set usage)" "$@"
