#!/bin/sh
# cli_test.sh ZINC CORPUS_DIR — `zinc config check`: exit codes, the one-line-per-problem
# stderr format ("error: <key.path>: ...", "warning: <key.path>: ..."), --json and overrides.
zinc=$1
dir=$2
cmd=config
name=config_cli
. "$(dirname "$0")/../cli_lib.sh"

expect 0 - check "$dir/accept_minimal.json" --world-size 2
expect 0 "^warning: tensorboard: " check "$dir/warn_tensorboard.json"
expect 0 "^warning: zero_optimization.offload_optimizer.device: .*stage 0" check "$dir/warn_offload.json"
expect 0 "^warning: zero_optimization.reduce_bucket_size: .*bucket sizes are not used" \
    check "$dir/warn_reduce_bucket.json"
expect 2 "^error: zero_optimization.reduce_bucket_size: " check "$dir/reject_bucket_type.json"
expect 2 "^error: zero_optimization.stage: " check "$dir/reject_stage4.json"
expect 2 "^error: zero_optimization.stage3_param_persistance_threshold: .*stage3_param_persistence_threshold" \
    check "$dir/reject_typo_persistence.json"
expect 2 "malformed_trailing_comma.json:5:3: malformed JSON" check "$dir/malformed_trailing_comma.json"
expect 2 "^error: train_batch_size: " check "$dir/accept_hf_zero2.json" --world-size 1
expect 0 - check "$dir/accept_hf_zero2.json" --world-size 2
expect 2 "^error: train_micro_batch_size_per_gpu: " check "$dir/auto_hf.json" --world-size 2
expect 0 - check "$dir/auto_hf.json" --world-size 2 --micro-batch 8 --grad-accum 2 --lr 3e-4
expect 2 "no-such-config.json" check "$dir/no-such-config.json"
expect 2 - check
expect 2 - check "$dir/accept_minimal.json" --world-size zero
expect 2 - check "$dir/accept_minimal.json" --bogus
expect 2 - frobnicate
expect 0 - --help
expect 0 - check --help

# DeepSpeed 0.19.8 parity: the resolved gradient_clipping is printed (1.0 when absent, as in
# DeepSpeed >= 0.19.3, PR #8068); fp16 at stage 0 warns that hysteresis has no effect.
expect_out() {
    pat=$1; shift
    checks=$((checks + 1))
    "$zinc" config "$@" >"$tmp.out" 2>"$tmp.err"
    if ! grep -Eq -- "$pat" "$tmp.out"; then
        echo "FAIL: zinc config $*: stdout lacks /$pat/"; cat "$tmp.out"; fails=$((fails + 1))
    fi
}
expect_out "gradient_clipping 1;" check "$dir/accept_minimal.json"
expect_out "gradient_clipping 0 \(off\);" check "$dir/accept_clipping_off.json"
expect_out '"gradient_clipping": 1' check "$dir/accept_minimal.json" --json
expect 0 "^warning: fp16.hysteresis: has no effect at ZeRO stage 0" \
    check "$dir/warn_fp16_stage0_hysteresis.json"
expect 2 "^error: fp16.min_loss_scale: expected a whole number, got 0.5" \
    check "$dir/reject_min_loss_scale_fraction.json"

# Every error is one line naming a key path: two problems, two lines.
checks=$((checks + 1))
"$zinc" config check "$dir/reject_zeropp_quantized.json" 2>"$tmp.err" >/dev/null
n=$(grep -c '^error: zero_optimization\.zero_quantized_' "$tmp.err")
if [ "$n" != 2 ]; then echo "FAIL: expected 2 error lines, got $n"; cat "$tmp.err"; fails=$((fails + 1)); fi

# --json prints the resolved config: derived batch sizes and defaults.
checks=$((checks + 1))
"$zinc" config check "$dir/accept_hf_zero2.json" --world-size 2 --json >"$tmp.out" 2>"$tmp.err"
missing=0
for want in '"train_micro_batch_size_per_gpu": 8' '"gradient_accumulation_steps": 4' \
            '"loss_scale_window": 1000' '"stage": 2' '"hash": "[0-9a-f]{16}"'; do
    if ! grep -Eq -- "$want" "$tmp.out"; then
        echo "FAIL: --json output lacks $want"; missing=1
    fi
done
fails=$((fails + missing))

# --json prints the offload device the file names ("nvme" was printed as "cpu"), so that the
# resolved JSON resolves to the same config.
checks=$((checks + 1))
"$zinc" config check "$dir/warn_offload_param_nvme.json" --json >"$tmp.out" 2>/dev/null
flat=$(tr -d ' \n' <"$tmp.out")
for want in '"offload_param":{"device":"nvme"}' '"offload_optimizer":{"device":"none","pin_memory":true}'; do
    case "$flat" in
    *"$want"*) ;;
    *) echo "FAIL: --json of warn_offload_param_nvme.json lacks $want"; fails=$((fails + 1)) ;;
    esac
done
checks=$((checks + 1))
"$zinc" config check "$dir/warn_offload.json" --json >"$tmp.out" 2>/dev/null
case "$(tr -d ' \n' <"$tmp.out")" in
*'"offload_optimizer":{"device":"cpu","pin_memory":true}'*) ;;
*) echo "FAIL: --json of warn_offload.json lacks offload_optimizer device cpu, pin_memory true"; fails=$((fails + 1)) ;;
esac

# --json's output is itself a config (with its "hash" member, which read back is only compared):
# it resolves to the same hash, and an edited copy warns that its hash no longer matches.
"$zinc" config check "$dir/accept_hf_zero2.json" --world-size 2 --json >"$tmp.json" 2>/dev/null
h=$(sed -n 's/.*"hash": "\([0-9a-f]*\)".*/\1/p' "$tmp.json")
expect 0 - check "$tmp.json" --world-size 2
checks=$((checks + 1))
"$zinc" config check "$tmp.json" --world-size 2 >"$tmp.out" 2>&1
if [ -z "$h" ] || ! grep -q "hash $h" "$tmp.out" || grep -q "^warning" "$tmp.out"; then
    echo "FAIL: --json read back: want hash '$h', no warning"; cat "$tmp.out"; fails=$((fails + 1))
fi
sed 's/"gradient_clipping": [0-9.]*/"gradient_clipping": 0.5/' "$tmp.json" >"$tmp.edit.json"
expect 0 "^warning: hash: the file says $h but its values resolve to" \
    check "$tmp.edit.json" --world-size 2
sed 's/"hash": "[0-9a-f]*"/"hash": 7/' "$tmp.json" >"$tmp.edit.json"
expect 2 "^error: hash: expected the 16 lowercase hex digits" check "$tmp.edit.json" --world-size 2
rm -f "$tmp.json" "$tmp.edit.json"

# A FIFO in the config's place is refused at once (open() of a FIFO without a writer waits
# forever: this check hangs, and CTest times it out, on code that does not open O_NONBLOCK).
rm -f "$tmp.fifo"
if mkfifo "$tmp.fifo" 2>/dev/null; then
    expect 2 "not a regular file" check "$tmp.fifo"
    rm -f "$tmp.fifo"
fi

# Output that does not reach its file fails the run (exit 1, said on stderr): `--json >
# resolved.json` on a full disk left an empty file and exited 0. /dev/full fails every write
# with ENOSPC; a closed stdout every write with EBADF.
if [ -c /dev/full ] && [ -w /dev/full ]; then
    checks=$((checks + 1))
    "$zinc" config check "$dir/accept_minimal.json" --json >/dev/full 2>"$tmp.err"
    got=$?
    if [ "$got" != 1 ] || ! grep -q "writing the output failed: No space left" "$tmp.err"; then
        echo "FAIL: zinc config check --json > /dev/full: exit $got, want 1 and the reason"
        cat "$tmp.err"; fails=$((fails + 1))
    fi
fi
checks=$((checks + 1))
"$zinc" config check "$dir/accept_minimal.json" >&- 2>"$tmp.err"
got=$?
if [ "$got" != 1 ] || ! grep -q "writing the output failed" "$tmp.err"; then
    echo "FAIL: zinc config check with stdout closed: exit $got, want 1 and the reason"
    cat "$tmp.err"; fails=$((fails + 1))
fi

cli_finish
