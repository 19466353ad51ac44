#!/usr/bin/env bash
# Runs every libFuzzer target of a -DZINC_FUZZ=ON build for a set time (make fuzz).
#
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]      SECONDS per target, default 60 (FUZZ_SECONDS)
#
# Each target starts from its seed corpus (tests/fuzz/corpus/<t>/, plus the config corpora for
# the JSON targets), which it only reads: new coverage goes to a scratch folder under $TMPDIR that
# is thrown away, and a crash is written there and printed (path, size, the first bytes, the
# libFuzzer report). Nothing is added to the repository automatically; to keep a crash as a
# regression test, fix the bug and copy the input into tests/fuzz/corpus/<t>/ (make test
# replays it). Exit status 1 when any target crashed, leaked, or timed out.
set -uo pipefail
build=${1:?usage: run.sh BUILD_DIR [SECONDS]}
secs=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/zinc-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

declare -A extra=([config]="$root/tests/config/corpus $root/configs"
                  [json_strict]="$root/tests/config/corpus")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in config manifest safetensors json_strict; do
  bin=$build/tests/fuzz_$t
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (build with -DZINC_FUZZ=ON and clang: make fuzz)" >&2
    exit 2
  fi
  mkdir -p "$work/$t/new" "$work/$t/crash"
  echo "fuzz: $t for ${secs} s"
  # shellcheck disable=SC2086  # the extra corpora are a word list
  "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
         -artifact_prefix="$work/$t/crash/" "$work/$t/new" "$here/corpus/$t" ${extra[$t]:-} \
         >"$work/$t/log" 2>&1
  rc=$?
  grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::new_units_added)' "$work/$t/log" |
    sed "s/^/fuzz: $t: /"
  crashes=("$work/$t/crash"/*)
  if [ $rc -ne 0 ] || [ -e "${crashes[0]}" ]; then
    failed+=("$t")
    echo "fuzz: $t FAILED (exit $rc); libFuzzer's report:"
    grep -v '^#[0-9]' "$work/$t/log" | tail -60
    for c in "${crashes[@]}"; do
      [ -e "$c" ] || continue
      echo "fuzz: $t: input $(basename "$c") ($(stat -c %s "$c") bytes), first bytes:"
      od -A d -c "$c" | head -20
      echo "fuzz: $t: base64 (to keep it: base64 -d > tests/fuzz/corpus/$t/crash-NAME):"
      base64 -w 100 "$c" | head -50
    done
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: crashes in: ${failed[*]}"
  exit 1
fi
echo "fuzz: no crashes in ${secs} s per target"
