#!/bin/sh
# zinc train under `mpirun -np 2` through the staged comm over MPI (what ranks sharing one GPU
# use; here on the cpu device through the test hook ZINC_TEST_STAGED_COMM=1) trains exactly as
# the plain mpi comm: at stages 1-3 the same logged losses and gradient norms, digit for digit,
# and the same exported weights, byte for byte. Each run's report must name its comm (staged/mpi
# or mpi), so a hook that stopped working cannot pass by comparing the plain path with itself.
# usage: mpi_staged_test.sh ZINC MPIEXEC CONFIGDIR
zinc=$1 mpiexec=$2 cfgdir=$3
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fails=0 passes=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for s in 1 2 3; do
    for v in plain staged; do
        hook=0
        [ $v = staged ] && hook=1
        ZINC_TEST_STAGED_COMM=$hook "$mpiexec" --allow-run-as-root --oversubscribe -np 2 \
            "$zinc" train --config "$cfgdir/zero${s}_bf16.json" --steps 8 --model L2-D32-H4-T32 \
            --save-dir "$dir/ck-$v-$s" --save-every 8 --metrics "$dir/$v-$s.jsonl" \
            > "$dir/$v-$s.log" 2>&1 ||
            { cat "$dir/$v-$s.log"; fail "stage $s $v: zinc train"; continue; }
        "$zinc" ckpt export "$dir/ck-$v-$s" --out "$dir/$v-$s.safetensors" \
            > "$dir/export-$v-$s.log" 2>&1 || { cat "$dir/export-$v-$s.log"; fail "stage $s $v: export"; }
    done
    grep -q 'comm mpi,' "$dir/plain-$s.log" ||
        fail "stage $s: the plain run's comm is not mpi: $(grep world "$dir/plain-$s.log")"
    grep -q 'comm staged/mpi,' "$dir/staged-$s.log" ||
        fail "stage $s: the hooked run's comm is not staged/mpi: $(grep world "$dir/staged-$s.log")"
    a=$(sed -n 's/.*"loss":\([^,]*\),.*"grad_norm":\([^,]*\),.*/\1 \2/p' "$dir/plain-$s.jsonl")
    b=$(sed -n 's/.*"loss":\([^,]*\),.*"grad_norm":\([^,]*\),.*/\1 \2/p' "$dir/staged-$s.jsonl")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        passes=$((passes + 1))
    else
        printf 'stage %s plain (loss, grad norm):\n%s\nstaged:\n%s\n' "$s" "$a" "$b"
        fail "stage $s: the staged run's losses differ"
    fi
    if cmp -s "$dir/plain-$s.safetensors" "$dir/staged-$s.safetensors"; then
        passes=$((passes + 1))
    else
        fail "stage $s: the exported weights differ"
    fi
done
echo "mpi_staged: $passes passed, $fails failed (stages 1-3: losses and gradient norms of 8 steps," \
     "exported weights)"
[ $fails -eq 0 ]
