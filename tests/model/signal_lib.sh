# signal_lib.sh — sourced by the tests that stop a zinc run with a signal.
# Sourcing it checks for env --default-signal (a non-interactive shell starts background jobs
# with SIGINT ignored, which zinc honours: `env --default-signal=INT zinc ...` gives the run the
# default disposition, as a terminal's foreground job has) and enters a fresh directory, `dir`,
# removed at exit.
env --default-signal=INT true 2>/dev/null ||
    { echo "$0: env --default-signal is missing (coreutils < 8.31)"; exit 1; }
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
# The script stopped (ctest's timeout, a Ctrl-C) stops its runs too: a `zinc train --steps
# 10000000` left behind trained on after it.
trap 'kill -9 $(jobs -p) 2>/dev/null; exit 143' INT TERM
cd "$dir" || exit 1

# wait_for_step PID FILE STEP: until FILE (a run's stdout) shows step STEP's progress line, PID
# ends, or 120 s pass.
wait_for_step() {
    n=0
    while ! grep -q "^step *$3/" "$2" 2>/dev/null && kill -0 "$1" 2>/dev/null &&
        [ "$n" -lt 600 ]; do
        sleep 0.2; n=$((n + 1))
    done
}

# signal_and_wait PID SIG TENTHS [OTHER]: sends SIG to PID (then SIGKILL to OTHER, when given)
# and waits up to TENTHS tenths of a second for PID to end; one still running then is killed (a
# hang) and `hung` is 1, else 0. `rc` is its exit status (PID must be a child of the calling
# shell).
signal_and_wait() {
    kill "-$2" "$1"
    [ -z "${4:-}" ] || kill -9 "$4"
    n=0 hung=0
    while kill -0 "$1" 2>/dev/null && [ "$n" -lt "$3" ]; do sleep 0.1; n=$((n + 1)); done
    if kill -0 "$1" 2>/dev/null; then
        kill -9 "$1"
        hung=1
    fi
    wait "$1"
    rc=$?
}
