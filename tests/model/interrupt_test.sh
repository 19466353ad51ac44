#!/bin/sh
# zinc train stopped by SIGINT (Ctrl-C) or SIGTERM: the ranks finish the step in progress
# together, save it when --save-dir is given, say so and exit 130; --resume auto goes on from
# that step. Before, the process died at once with nothing said and nothing saved since the
# last --save-every. 2 local ranks (threads that must agree on the step), and under SIGTERM
# without --save-dir. Each run is waited for up to 120 s after the signal (a hang is a failure).
# A non-interactive shell starts its background jobs with SIGINT ignored, which zinc train
# honours (a script's `zinc train &` keeps running on Ctrl-C): env --default-signal=INT gives the
# runs below the default disposition, as a terminal's foreground job has.
# usage: interrupt_test.sh ZINC
zinc=$1
# (env execs zinc: $! is the run's own pid)
. "$(dirname "$0")/signal_lib.sh"   # checks env --default-signal; cd to a fresh $dir
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# start SIG ARGS...: a long run in the background; signals it once it has printed step 10
interrupted() {
    sig=$1; shift
    rm -f out.log err.log
    env --default-signal=INT "$zinc" train --model L1-D16-H2-T16 --ranks 2 --steps 10000000 "$@" \
        >out.log 2>err.log &
    pid=$!
    wait_for_step "$pid" out.log 10
    signal_and_wait "$pid" "$sig" 1200
    [ "$hung" = 0 ] || bad "SIG$sig: still running 120 s after the signal"
}

interrupted INT --save-dir ck
# the signal is answered at once, once, naming where the save goes (a user whose step takes long
# pressed Ctrl-C again, with nothing said, and lost that save)
said=$(grep -c "^zinc train: interrupted: stopping after the step in progress and saving it into ck (a second signal stops at once" err.log)
if [ "$said" = 1 ] && [ "$(grep -n 'stopping after the step' err.log | cut -d: -f1)" -lt \
     "$(grep -n 'stopped after step' err.log | cut -d: -f1)" ]; then ok; else
    bad "SIGINT: the answer to the signal said $said times (want 1, before the closing line)"
    cat err.log; fi
step=$(sed -n 's/.*interrupted: stopped after step \([0-9]*\) and saved ck\/step.*/\1/p' err.log)
if [ "$rc" = 130 ] && [ -n "$step" ] && [ "$(cat ck/latest 2>/dev/null)" = \
     "$(printf 'step%06d' "$step")" ]; then ok; else
    bad "SIGINT: exit $rc (want 130), step '$step', latest '$(cat ck/latest 2>/dev/null)'"
    cat err.log; fi
if [ -n "$step" ]; then
    "$zinc" train --model L1-D16-H2-T16 --ranks 2 --steps $((step + 2)) --save-dir ck \
        --resume auto >out.log 2>err.log
    if [ $? = 0 ] && grep -q "resumed from ck/$(printf 'step%06d' "$step") at step $step" out.log
    then ok; else bad "resume after SIGINT:"; cat out.log err.log; fi
fi

interrupted TERM
if [ "$rc" = 130 ] && grep -q "interrupted: stopped after step [0-9]*; nothing saved" err.log &&
   [ "$(grep -c '^zinc train: interrupted: stopping after the step in progress (no --save-dir: nothing is saved' err.log)" = 1 ]
then ok; else bad "SIGTERM without --save-dir: exit $rc (want 130)"; cat err.log; fi

# Ctrl-C on `zinc train ... 2>&1 | tee log` stops tee too: the run's output pipe loses its
# reader just as the signal comes. The run still saves the step and exits 130 (the answer to
# the signal, written into the dead pipe, killed it by SIGPIPE before the save: exit 141).
rm -rf ck out.log p
mkfifo p
cat p >out.log &
reader=$!
env --default-signal=INT "$zinc" train --model L1-D16-H2-T16 --ranks 2 --steps 10000000 \
    --save-dir ck >p 2>&1 &
pid=$!
wait_for_step "$pid" out.log 10
# the signal first, then the reader goes (tee's Ctrl-C is the same instant)
signal_and_wait "$pid" INT 1200 "$reader"
if [ "$hung" = 0 ] && [ "$rc" = 130 ] && [ -s ck/latest ]; then ok; else
    bad "SIGINT with the output pipe's reader gone: exit $rc (want 130), latest '$(cat ck/latest 2>/dev/null)'"
fi

# A second signal, the other one, stops the process at once (a model of ~1 s steps, so that the
# first has not ended the run yet): killed by the signal (the first one's handler reset both).
# The pipe case's out.log goes first: it holds "step 1/" lines, and wait_for_step, run before the
# new run had truncated the file (a loaded sanitizer run), sent both signals during its start-up,
# where they were lost (still running after 20 s).
rm -f out.log err.log
env --default-signal=INT "$zinc" train --model L4-D512-H8-T128 --ranks 2 --steps 10000000 \
    >out.log 2>err.log &
pid=$!
wait_for_step "$pid" out.log 1
kill -INT "$pid"; kill -TERM "$pid"
n=0
while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 100 ]; do sleep 0.2; n=$((n + 1)); done
if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; bad "SIGINT then SIGTERM: still running"; fi
wait "$pid"
rc=$?
# killed by SIGTERM (143), or by SIGINT when SIGTERM's handler ran first (130 without the closing
# line; the first signal's answer may be there)
if [ "$rc" = 143 ] || { [ "$rc" = 130 ] && ! grep -q "interrupted: stopped after" err.log; }
then ok; else
    bad "SIGINT then SIGTERM: exit $rc, $(cat err.log)"; fi

echo "interrupt: $pass passed, $fail failed"
[ "$fail" = 0 ]
