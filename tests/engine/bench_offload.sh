#!/bin/sh
# zinc bench offload: bad arguments exit 2 with a message; a small run prints one JSON row per
# state, the offloaded one with copies and less device memory, both with every step applied.
# usage: bench_offload.sh ZINC
zinc=$1
fails=0
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

for bad in "--stage 0" "--stage 4" "--params 2 --groups 4" "--repeat 0" "--dtype fp8" "--bogus 1" "--params" \
           "--nvme-checksum maybe" "--nvme-checksum off"; do
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
# --nvme: a third row whose step reads and writes the whole state file (12 bytes per element of
# the padded shard, 4 * 50016, in whole 4096-byte blocks: 200704) and holds less host memory
# than cpu offload.
dir=$(mktemp -d)
out=$("$zinc" bench offload --params 200000 --groups 4 --repeat 2 --stage 2 --nvme "$dir" \
      --disk-mb 16 --json 2>"$err") || fail "the --nvme run failed: $(cat "$err")"
nv=$(printf '%s\n' "$out" | grep '"state": "nvme"')
off=$(printf '%s\n' "$out" | grep '"state": "offload"')
[ -n "$nv" ] || fail "no nvme row: $out"
[ "$(num "$nv" nvme_read_bytes_per_step)" = $((12 * 200704)) ] || fail "nvme read per step: $nv"
[ "$(num "$nv" nvme_written_bytes_per_step)" = $((12 * 200704)) ] || fail "nvme written per step: $nv"
awk "BEGIN { exit !($(num "$nv" host_bytes) < $(num "$off" host_bytes)) }" ||
    fail "nvme holds no less host memory than cpu offload: $nv"
awk "BEGIN { exit !($(num "$nv" disk_read_GBps) > 0 && $(num "$nv" io_bound_ms) > 0) }" ||
    fail "no disk bandwidth or bound: $nv"
# --nvme-checksum both: the NVMe row twice, the second with zinc.nvme_checksum false as the engine
# resolved it, moving the same bytes; off: only that second row.
out=$("$zinc" bench offload --params 200000 --groups 4 --repeat 1 --stage 2 --nvme "$dir" \
      --disk-mb 16 --nvme-checksum both --json 2>"$err") || fail "--nvme-checksum both failed: $(cat "$err")"
on=$(printf '%s\n' "$out" | grep '"state": "nvme"')
nosum=$(printf '%s\n' "$out" | grep '"state": "nvme-nosum"')
printf '%s\n' "$on" | grep -q '"nvme_checksum": true' || fail "the nvme row is not checksummed: $on"
printf '%s\n' "$nosum" | grep -q '"nvme_checksum": false' || fail "the nvme-nosum row is checksummed: $nosum"
[ "$(num "$nosum" nvme_read_bytes_per_step)" = "$(num "$on" nvme_read_bytes_per_step)" ] ||
    fail "the two nvme rows read different bytes: $out"
out=$("$zinc" bench offload --params 200000 --groups 4 --repeat 1 --stage 2 --nvme "$dir" \
      --disk-mb 16 --nvme-checksum off --json 2>"$err") || fail "--nvme-checksum off failed: $(cat "$err")"
[ "$(printf '%s\n' "$out" | grep -c '"state": "nvme')" = 1 ] &&
    printf '%s\n' "$out" | grep -q '"state": "nvme-nosum"' || fail "--nvme-checksum off rows: $out"
[ -z "$(ls "$dir")" ] || fail "files left in the nvme directory: $(ls "$dir")"
rm -rf "$dir"
# a missing directory, or a file, is a usage error found before anything is measured (exit 1
# after the disk measurement before)
"$zinc" bench offload --nvme /no/such/zinc/dir --params 200000 --groups 4 >/dev/null 2>"$err"
rc=$?
[ "$rc" = 2 ] || fail "--nvme with a missing directory exited $rc, want 2"
grep -q "/no/such/zinc/dir" "$err" || fail "a missing --nvme directory is not named: $(cat "$err")"
grep -q "measuring" "$err" && fail "a missing --nvme directory was found after measuring: $(cat "$err")"
"$zinc" bench offload --nvme "$err" --params 200000 --groups 4 >/dev/null 2>"$err.2"
rc=$?
[ "$rc" = 2 ] && grep -q "not a directory" "$err.2" ||
    fail "--nvme naming a file: exit $rc, want 2 and 'not a directory': $(cat "$err.2")"
rm -f "$err.2"
[ "$fails" = 0 ] && echo "bench_offload: ok"
[ "$fails" = 0 ]
