#!/bin/sh
# zinc bench offload: bad arguments exit 2 with a message; a small run prints one JSON row per
# state, the offloaded one with copies and less device memory, both with every step applied.
# usage: bench_offload.sh ZINC
zinc=$1
fails=0
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

for bad in "--stage 0" "--stage 4" "--params 2 --groups 4" "--repeat 0" "--dtype fp8" "--bogus 1" "--params"; do
    # shellcheck disable=SC2086
    "$zinc" bench offload $bad >/dev/null 2>"$err"
    rc=$?
    [ "$rc" = 2 ] || fail "'$bad' exited $rc, want 2"
    grep -q "^zinc bench offload: " "$err" || fail "'$bad' printed no message: $(cat "$err")"
done
"$zinc" bench offload --help | grep -q "^usage: zinc bench offload" || fail "--help prints no usage"

out=$("$zinc" bench offload --params 200000 --groups 4 --repeat 2 --stage 3 --json 2>/dev/null) \
    || fail "the run failed"
rows=$(printf '%s\n' "$out" | grep -c '"bench": "offload"')
[ "$rows" = 2 ] || fail "$rows rows, want 2: $out"
dev=$(printf '%s\n' "$out" | grep '"offload": false')
off=$(printf '%s\n' "$out" | grep '"offload": true')
num() { printf '%s\n' "$1" | sed -n "s/.*\"$2\": \([0-9.e+-]*\).*/\1/p"; }
[ "$(num "$dev" copy_ms_median)" = "0.0000" ] || fail "copies without offload: $dev"
awk "BEGIN { exit !($(num "$off" copy_ms_median) > 0) }" || fail "no copy time with offload: $off"
awk "BEGIN { exit !($(num "$off" device_bytes) < $(num "$dev" device_bytes)) }" ||
    fail "offload does not shrink device memory: $(num "$off" device_bytes) vs $(num "$dev" device_bytes)"
[ "$(num "$dev" host_bytes)" = 0 ] || fail "host bytes without offload: $dev"
# Host bytes with offload: master, m, v (4 bytes each) and the two bf16 staging copies per
# element of the shard, which for one rank is the padded model (4 groups of 50000 -> 50016).
[ "$(num "$off" host_bytes)" = $((4 * 50016 * 16)) ] || fail "host bytes $(num "$off" host_bytes), want $((4 * 50016 * 16))"
[ "$fails" = 0 ] && echo "bench_offload: ok"
[ "$fails" = 0 ]
