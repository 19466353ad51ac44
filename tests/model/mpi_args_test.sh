#!/bin/sh
# zinc train under `mpirun -np 2` when rank 1 is given other options than rank 0 (each process
# reads its own command line): the options that decide the run's collectives or data (--steps,
# --save-dir, --save-every, --seed) are compared across the ranks before anything is loaded or
# trained, and the run stops with exit 2 naming the option, on every rank, in seconds. Before,
# --save-dir on one rank crashed in MPI (MPI_ERR_TRUNCATE, no zinc message), and --steps waited
# for comm_timeout_s (300 s) and then blamed a background save that never failed. Another config
# on one rank: exit 2 too. And mpirun -np 1: one rank. And a resume's warnings, once.
# usage: mpi_args_test.sh ZINC MPIEXEC CONFIG
zinc=$1 mpiexec=$2 cfg=$3
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
# rank 1 runs with $R1ARGS appended; each rank's stderr goes to a file of its own, rank.N.log:
# mpirun forwards it through a pipe, and what is still in flight there when the job ends at the
# first non-zero exit is lost (a rank's message went missing once under a loaded ctest -j2)
cat > wrap.sh <<EOS
#!/bin/sh
exec 2>"rank.\$OMPI_COMM_WORLD_RANK.log"
[ "\$OMPI_COMM_WORLD_RANK" = 1 ] && exec "$zinc" "\$@" \$R1ARGS
exec "$zinc" "\$@"
EOS
chmod +x wrap.sh
pass=0 fail=0
check() {   # R1ARGS, the option the message must name
    rm -rf sv rank.*.log
    R1ARGS=$1 timeout 100 "$mpiexec" --allow-run-as-root --oversubscribe -x R1ARGS -np 2 \
        ./wrap.sh train --config "$cfg" --model L1-D16-H2-T16 --steps 4 --save-dir sv \
        >out.log 2>err.log
    rc=$?
    cat rank.*.log >>err.log 2>/dev/null
    n=$(grep -c "the ranks were given different $2" err.log)
    if [ "$rc" = 2 ] && [ "$n" = 2 ] && [ ! -e sv/latest ]; then
        pass=$((pass + 1))
    else
        echo "FAIL: rank 1 with '$1': exit $rc (want 2), $n ranks named $2 (want 2), latest: $(ls sv 2>/dev/null)"
        cat err.log
        fail=$((fail + 1))
    fi
}
check "--steps 2" "--steps"
check "--save-dir sv1" "--save-dir"
check "--save-every 1" "--save-every"
check "--seed 2" "--seed"
# another config on rank 1 (here --micro-batch, which overrides the file's): zinc_finalize names
# it, exit 2 on every rank, as for the options above (it was exit 1, a runtime failure)
rm -rf sv rank.*.log
R1ARGS="--micro-batch 3" timeout 100 "$mpiexec" --allow-run-as-root --oversubscribe -x R1ARGS \
    -np 2 ./wrap.sh train --config "$cfg" --model L1-D16-H2-T16 --steps 4 >out.log 2>err.log
# (at least one rank says so: mpirun ends the job when the first process exits, which may be
# before the other has printed)
rc=$?
cat rank.*.log >>err.log 2>/dev/null
n=$(grep -c "run a different config than rank 0" err.log)
if [ "$rc" = 2 ] && [ "$n" -ge 1 ]; then pass=$((pass + 1)); else
    echo "FAIL: rank 1 with another config: exit $rc (want 2), $n ranks said so (want 1 or 2)"
    cat err.log; fail=$((fail + 1)); fi
# mpirun -np 1 is a world of one process (it ran --ranks' default, 4 local ranks: a global batch
# 4 times the one its checkpoint's run had), and --ranks must agree with it
"$mpiexec" --allow-run-as-root --oversubscribe -np 1 "$zinc" train --config "$cfg" \
    --model L1-D16-H2-T16 --steps 1 >out.log 2>err.log
if [ $? = 0 ] && grep -q "x 1 ranks x" out.log; then pass=$((pass + 1)); else
    echo "FAIL: mpirun -np 1: $(grep -E 'world|batch' out.log)"; cat err.log; fail=$((fail + 1)); fi
"$mpiexec" --allow-run-as-root --oversubscribe -np 1 "$zinc" train --config "$cfg" \
    --model L1-D16-H2-T16 --steps 1 --ranks 2 >out.log 2>err.log
if [ $? = 2 ] && grep -q "ranks 2 but mpirun started 1 process" err.log; then pass=$((pass + 1))
else echo "FAIL: mpirun -np 1 --ranks 2 not refused"; cat err.log; fail=$((fail + 1)); fi
# A resume beside a damaged tag warns once: every process's checks before the load looked too,
# each printing the load's warnings as rank 0's.
rm -rf sv
"$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$zinc" train --config "$cfg" \
    --model L1-D16-H2-T16 --steps 2 --save-every 1 --save-dir sv >out.log 2>err.log &&
    rm sv/step000001/manifest.json &&
    "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$zinc" train --config "$cfg" \
        --model L1-D16-H2-T16 --steps 3 --save-dir sv --resume auto >out.log 2>err.log
rc=$? n=$(grep -c "skipping damaged checkpoint" err.log)
if [ "$rc" = 0 ] && [ "$n" = 1 ]; then pass=$((pass + 1)); else
    echo "FAIL: resume beside a damaged tag: exit $rc (want 0), $n warnings (want 1)"
    cat err.log; fail=$((fail + 1)); fi
echo "mpi_args: $pass passed, $fail failed"
[ "$fail" = 0 ]
