#!/bin/sh
# bench/gpu_compare.py kernels — the e2e phase's check of the fast kernels against the exact ones
# on a GPU lease, run here on CPU metrics files shaped as the lease's: zinc train --metrics, with
# the table line a --gpu-timing run writes last (no "step": the check failed on it with
# KeyError, whatever the kernels did). The same losses pass, and a first step 0.009 nats off;
# 0.011 nats off (model_cuda's bf16 bound is 1e-2 absolute), a NaN loss, or no exact run fail.
# usage: gpu_compare_test.sh ZINC GPU_COMPARE_PY
zinc=$1 cmp=$2
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
pass=0 fail=0
expect() {   # RC WHAT: gpu_compare.py kernels k exits RC
    python3 "$cmp" kernels k >out.log 2>&1
    rc=$?
    if [ "$rc" = "$1" ]; then pass=$((pass + 1)); else
        echo "FAIL: $2: exit $rc, want $1"; cat out.log; fail=$((fail + 1)); fi
}
mkdir k
"$zinc" train --ranks 1 --steps 3 --model L1-D16-H2-T16 --metrics k/zinc-M.jsonl >/dev/null 2>&1 ||
    { echo "FAIL: zinc train"; exit 1; }
echo '{"gpu_timing":{"rank":0,"kernels":"exact","stat":"mean","first_step":2,"last_step":3,"steps":2,"micro_steps":2,"phase_ms":{"forward":1.5},"zinc_step_ms":0.1,"step_ms":2.0}}' \
    >>k/zinc-M.jsonl
cp k/zinc-M.jsonl k/zinc-fast-M.jsonl
expect 0 "the same losses, with the timing line"
shift_first() {   # DELTA: zinc-fast-M.jsonl is zinc-M.jsonl with step 1's loss DELTA higher
    python3 - k/zinc-M.jsonl k/zinc-fast-M.jsonl "$1" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r.get("step") == 1:
        r["loss"] += float(sys.argv[3])
open(sys.argv[2], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PYEOF
}
shift_first 0.009
expect 0 "the first step 0.009 nats off (the bound is model_cuda's 1e-2, absolute)"
shift_first 0.011
expect 1 "the first step 0.011 nats off"
sed 's/"loss":[0-9.]*/"loss":NaN/' k/zinc-M.jsonl >k/zinc-fast-M.jsonl
expect 1 "a NaN loss"
rm k/zinc-M.jsonl
cp k/zinc-fast-M.jsonl k/zinc-fast-N.jsonl
expect 1 "no exact run"
echo "gpu_compare: $pass passed, $fail failed"
[ "$fail" = 0 ]
