#!/bin/sh
# plot_test.sh ZINC — zinc plot on values at the edges of what a metrics file can hold:
#   losses of +-1e308 (their range overflowed to inf: NaN coordinates, no y labels, exit 0),
#   equal losses of 1e20 (+1 was lost in rounding: a range of 0), steps near the largest double;
#   no SVG may hold "nan" or "inf", and each still has its line and y labels;
#   --log with losses <= 0: the points left out are counted on stderr (they went silently),
#   and a file with nothing but such losses is refused (exit 2).
# usage: plot_test.sh ZINC
zinc=$1
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# drawn NAME LINES...: the plot of those lines exits 0 with a finite line and y labels
drawn() {
    name=$1; shift
    printf '%s\n' "$@" >"$name.jsonl"
    "$zinc" plot "$name.jsonl" -o "$name.svg" >/dev/null 2>"$name.err"
    rc=$?
    [ "$rc" = 0 ] || { fail "$name: exit $rc: $(cat "$name.err")"; return; }
    ! grep -Eqi 'nan|inf' "$name.svg" || fail "$name: the SVG holds nan/inf: $(grep -Ei 'nan|inf' "$name.svg" | head -3)"
    grep -Eq '<polyline [^>]*points="[0-9.]+,[0-9.]+' "$name.svg" || fail "$name: no line drawn"
    grep -q 'text-anchor="end">' "$name.svg" || fail "$name: no y labels"
}
drawn extreme '{"step":1,"loss":1e308}' '{"step":2,"loss":-1e308}'
drawn largest '{"step":1,"loss":1.7976931348623157e308}' '{"step":2,"loss":-1.7976931348623157e308}' \
    '{"step":3,"loss":0}'
drawn flat '{"step":1,"loss":1e20}' '{"step":2,"loss":1e20}'
drawn steps '{"step":-1.7e308,"loss":1}' '{"step":1.7e308,"loss":2}'

# logged NAME WANT_RC MESSAGE LINES...: zinc plot --log of those lines exits WANT_RC, saying
# MESSAGE (a grep pattern) on stderr
logged() {
    name=$1 want=$2 says=$3; shift 3
    printf '%s\n' "$@" >"$name.jsonl"
    "$zinc" plot "$name.jsonl" --log -o "$name.svg" >/dev/null 2>"$name.err"
    rc=$?
    [ "$rc" = "$want" ] || fail "$name: --log: exit $rc, want $want: $(cat "$name.err")"
    grep -q "$says" "$name.err" || fail "$name: --log: stderr lacks '$says': $(cat "$name.err")"
}
logged z 0 "^zinc plot: left out 2 points with a loss <= 0, which --log cannot draw" \
    '{"step":1,"loss":0}' '{"step":2,"loss":0.5}' '{"step":3,"loss":-1}' '{"step":4,"loss":0.25}'
logged z0 2 "^zinc plot: every loss in 'z0.jsonl' is <= 0 (2 points), which --log cannot draw" \
    '{"step":1,"loss":0}' '{"step":2,"loss":-0.5}'
[ ! -e z0.svg ] || fail "--log with every loss <= 0 wrote z0.svg"

[ "$fails" = 0 ] && echo "plot: all checks passed"
[ "$fails" = 0 ]
