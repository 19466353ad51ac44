#!/bin/sh
# zinc train under `mpirun -np 2` reports the loss averaged over the ranks (zinc_mean_over_ranks):
# the same numbers, digit for digit, as the same run on 2 local ranks (the mpi and local backends
# do the same arithmetic, and the local run averages the ranks' losses in the same order). And a
# --metrics whose writes fail (/dev/full) stops every process after a step, saving, exit 1 (not
# 130 from the ranks that only heard of it).
# usage: mpi_loss_test.sh ZINC MPIEXEC CONFIG
zinc=$1 mpiexec=$2 cfg=$3
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
"$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$zinc" train --config "$cfg" --steps 12 \
    --metrics "$dir/mpi.jsonl" > "$dir/mpi.log" 2>&1 || { cat "$dir/mpi.log"; echo "0 passed, 1 failed"; exit 1; }
"$zinc" train --config "$cfg" --ranks 2 --steps 12 --metrics "$dir/local.jsonl" > "$dir/local.log" 2>&1 ||
    { cat "$dir/local.log"; echo "0 passed, 1 failed"; exit 1; }
a=$(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/mpi.jsonl")
b=$(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/local.jsonl")
if [ -w /dev/full ]; then
    "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$zinc" train --config "$cfg" --steps 40 \
        --metrics /dev/full --save-dir "$dir/ck" > "$dir/full.log" 2>&1
    rc=$?
    if [ "$rc" != 1 ] || ! grep -q "writing --metrics /dev/full failed" "$dir/full.log" ||
       [ ! -f "$dir/ck/latest" ] || [ "$(cat "$dir/ck/latest")" = step000040 ]; then
        cat "$dir/full.log"
        echo "mpi_loss: --metrics /dev/full: exit $rc (want 1, stopped early and saved)"
        echo "0 passed, 1 failed"
        exit 1
    fi
else
    echo "mpi_loss: no writable /dev/full here: a failing --metrics is not checked"
fi
if [ -n "$a" ] && [ "$a" = "$b" ]; then
    echo "mpi_loss: losses of both runs identical ($(echo "$a" | wc -l) logged steps)"
    echo "1 passed, 0 failed"
else
    printf 'mpi losses:\n%s\nlocal losses:\n%s\n' "$a" "$b"
    echo "0 passed, 1 failed"
    exit 1
fi
