#!/bin/sh
# demo_interrupt_test.sh ZINC — `zinc` alone (the demo) makes its checkpoint directory in $TMPDIR
# (it used /tmp whatever TMPDIR said) and removes it when SIGINT stops it, exiting 130 (the
# signal killed it and left /tmp/zinc-train-XXXXXX behind). The run is signalled once its
# directory appears, and waited for up to 300 s after the signal (a hang is a failure).
# A non-interactive shell starts background jobs with SIGINT ignored, which zinc honours: env
# --default-signal=INT gives the demo the default disposition, as a terminal's foreground job has.
# usage: demo_interrupt_test.sh ZINC
zinc=$1
case "$zinc" in /*) ;; *) zinc=$(pwd)/$zinc ;; esac
. "$(dirname "$0")/signal_lib.sh"   # checks env --default-signal; cd to a fresh $dir
mkdir tmp || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# (env execs zinc: $! is the demo's own pid; the demo runs from the source tree's configs)
TMPDIR=$dir/tmp env --default-signal=INT "$zinc" >out.log 2>err.log &
pid=$!
n=0
while [ -z "$(ls -A tmp)" ] && kill -0 "$pid" 2>/dev/null && [ "$n" -lt 3000 ]; do
    sleep 0.1; n=$((n + 1))
done
[ -n "$(ls -A tmp)" ] || fail "no directory appeared in TMPDIR (the demo ended, or 300 s passed)"
signal_and_wait "$pid" INT 3000
[ "$hung" = 0 ] || fail "still running 300 s after SIGINT"
[ "$rc" = 130 ] || fail "exit $rc after SIGINT, want 130: $(tail -5 err.log)"
[ -z "$(ls -A tmp)" ] || fail "TMPDIR not empty after SIGINT: $(ls -A tmp)"

[ "$fails" = 0 ] && echo "demo_interrupt: all checks passed"
[ "$fails" = 0 ]
