# cli_lib.sh — sourced by the CLI tests (tests/*/cli_test.sh) after setting zinc (the binary),
# cmd (the subcommand) and name (the test's name): the temporary files, the counters, and
#   expect CODE PATTERN ARGS...   runs `zinc CMD ARGS`, wants exit CODE and, unless PATTERN is
#                                 "-", a stderr line matching it (grep -E)
#   cli_finish                    the summary line; the status is 0 when every check passed.
tmp=${TMPDIR:-/tmp}/zinc-$name.$$
fails=0
checks=0
if [ ! -x "$zinc" ]; then
    echo "$name: $zinc is not built"
    exit 1
fi

expect() {
    code=$1; pat=$2; shift 2
    checks=$((checks + 1))
    "$zinc" "$cmd" "$@" >"$tmp.out" 2>"$tmp.err"
    got=$?
    if [ "$got" != "$code" ]; then
        echo "FAIL: zinc $cmd $*: exit $got, want $code"; cat "$tmp.err"
        fails=$((fails + 1)); return
    fi
    if [ "$pat" != "-" ] && ! grep -Eq -- "$pat" "$tmp.err"; then
        echo "FAIL: zinc $cmd $*: stderr lacks /$pat/"; cat "$tmp.err"; fails=$((fails + 1))
    fi
}

cli_finish() {
    rm -f "$tmp.out" "$tmp.err"
    echo "$name: $checks checks, $((checks - fails)) passed, $fails failed"
    [ "$fails" = 0 ]
}
