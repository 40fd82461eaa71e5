# What the scripts share (sourced; `usage` set by the script, its first line the synopsis):
#
#   die MESSAGE           "error: MESSAGE" on stderr, exit 1
#   usage_error MESSAGE   the same, with the synopsis: how to run the script
#   from_caller PATH      PATH as the caller meant it: a relative one from the
#                         caller's directory ($caller, recorded before any cd)
#   gnuplot_string TEXT   TEXT as one gnuplot string literal: single-quoted, where
#                         gnuplot expands nothing (no backquote, macro or escape),
#                         a quote doubled, a control character (a newline would end
#                         the command) a space. A label is then text, never code.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    echo "error: scripts/script_lib.sh is sourced by the other scripts, not run: source scripts/script_lib.sh" >&2
    exit 1
fi

die() { echo "error: $*" >&2; exit 1; }

usage_error() {
    local newline=$'\n'
    die "$1 (${usage%%"$newline"*}; -h explains each flag)"
}

from_caller() {
    case $1 in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "${caller:?from_caller needs the directory of the call}/$1" ;;
    esac
}

gnuplot_string() {
    local text q
    q="'"
    text=${1//[[:cntrl:]]/ }
    text=${text//$q/$q$q}
    printf '%s%s%s' "$q" "$text" "$q"
}
