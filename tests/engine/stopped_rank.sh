#!/bin/sh
# stopped_rank.sh MPIEXEC PROGRAM [app] — issue 12: with one rank stopped (SIGSTOP), the others
# time out, and the whole mpirun must then exit non-zero within a bounded time instead of hanging
# in MPI_Finalize. `timeout` turns a hang into a failure (exit 124). `app`: the program
# initialises and finalizes MPI itself.
mpiexec=$1
prog=$2
mode=${3:-}
out=${TMPDIR:-/tmp}/zinc-stopped-rank.$$
timeout -k 5 45 "$mpiexec" --allow-run-as-root --oversubscribe -n 3 "$prog" $mode >"$out" 2>&1
rc=$?
fails=0
cat "$out"
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "FAIL: mpirun did not exit within 45 s (a rank waits in MPI_Finalize for the stopped one)"
    fails=1
elif [ "$rc" = 0 ]; then
    echo "FAIL: mpirun exited 0 although rank 1 never took part"
    fails=1
fi
for r in 0 2; do
    if ! grep -Eq "^stopped_rank: rank $r: ZINC_ERR_(TIMEOUT|ABORTED): " "$out"; then
        echo "FAIL: rank $r did not report ZINC_ERR_TIMEOUT or ZINC_ERR_ABORTED"
        fails=1
    fi
done
if ! grep -Eq "^stopped_rank: rank [02]: ZINC_ERR_TIMEOUT: .*timed out" "$out"; then
    echo "FAIL: no live rank reported the timeout"
    fails=1
fi
rm -f "$out"
[ "$fails" = 0 ] && echo "stopped_rank: PASS (mpirun exit $rc)"
exit "$fails"
