# signal_lib.sh — sourced by the tests that stop a zinc run with a signal.
# signal_and_wait PID SIG TENTHS: sends SIG to PID and waits up to TENTHS tenths of a second for
# it to end; one still running then is killed (a hang) and `hung` is 1, else 0. `rc` is its exit
# status (PID must be a child of the calling shell).
signal_and_wait() {
    kill "-$2" "$1"
    n=0 hung=0
    while kill -0 "$1" 2>/dev/null && [ "$n" -lt "$3" ]; do sleep 0.1; n=$((n + 1)); done
    if kill -0 "$1" 2>/dev/null; then
        kill -9 "$1"
        hung=1
    fi
    wait "$1"
    rc=$?
}
