#!/bin/sh
# values_test.sh ZINC — the values the commands take, end to end (tools/args.c's helpers; their
# own cases are test_args.c):
#   an option's value that is missing, empty or another option is a usage error naming the
#   option (exit 2), in every command that reads values: `zinc plot -o --log` wrote a file named
#   --log, `zinc ckpt bench --dir --json` wrote into a directory named --json;
#   numbers are plain decimal: `zinc train --steps 0x10` trained 16 steps, `--steps ' 3'` 3.
# Runs in a directory of its own: on the old code those cases wrote files into the working one.
zinc=$1
name=cli_values
case "$zinc" in /*) ;; *) zinc=$(pwd)/$zinc ;; esac
. "$(dirname "$0")/../cli_lib.sh"
work=$tmp.work
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
small="--model L1-D32-H2-T32"   # should a case train after all (the old code), it takes 0.1 s

cmd=train
expect 2 "^zinc train: --steps: expected a whole number" $small --steps 0x10
expect 2 "^zinc train: --steps: expected a whole number" $small --steps ' 3'
expect 2 "^zinc train: --steps: expected a whole number" $small --steps '3 '
expect 2 "^zinc train: --steps: expected a whole number" $small --steps 1e
expect 2 "^zinc train: --steps: expected a whole number" $small --steps infinity
expect 2 "^zinc train: --lr: expected a number" $small --steps 1 --lr 0x1p-3
expect 2 "^zinc train: --lr: expected a number" $small --steps 1 --lr nan
expect 0 - $small --steps 2e0 --lr .01

cmd=plan
base="--params 7e9 --layers 32 --hidden 4096 --seq 4096 --gpus 64 --gpu h100 --stage 3"
expect 0 - $base --efficiency .5 --params +7E9
expect 2 "^zinc plan: --params must be a whole number" $base --params 0x10
expect 2 "^zinc plan: --gpus must be a whole number" $base --gpus ' 8'
expect 2 "^zinc plan: --efficiency must be a number" $base --efficiency 0x.8p0
expect 2 "^zinc plan: --gpu needs a value \(got the option '--json'\)" $base --gpu --json
expect 2 "^zinc plan: --config needs a value$|^zinc plan: --config needs a value " $base --config ""
expect 2 "^zinc plan: --hf-config needs a value \(got the option '--gpus'\)" --hf-config --gpus 8
# a config's warnings are printed, as train and config check print them (plan said nothing)
printf '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "round_robin_gradients": true}}\n' >rr.json
expect 0 "^zinc plan: config warning: zero_optimization.round_robin_gradients" --params 7e9 \
    --layers 32 --hidden 4096 --seq 4096 --gpus 64 --gpu h100 --config rr.json

cmd=estimate
expect 0 - --params 7e9 --world-size 8 --stage 3
expect 2 "^zinc estimate: --params: ' 7e9' is not a whole number" --params ' 7e9' --world-size 8 \
    --stage 3
expect 2 "^zinc estimate: --params needs a value \(got the option '--json'\)" --params --json \
    --world-size 8 --stage 3
expect 2 "^zinc estimate: --dtype needs a value" --dtype "" --params 7e9 --world-size 8 --stage 3

cmd=config
printf '{"train_micro_batch_size_per_gpu": 2}\n' >ds.json
expect 2 "^zinc config: --world-size needs a value \(got the option '--json'\)" check ds.json \
    --world-size --json
expect 2 "^zinc config: --lr needs a value" check ds.json --lr ""
expect 2 "^zinc config: --lr needs a number" check ds.json --lr 0x1

cmd=bench
expect 2 "^zinc bench adam: --device needs a value \(got the option '--json'\)" adam --device --json
expect 2 "^zinc bench adam: --params wants a count" adam --params 0x10
# 2^62 wrapped every buffer's bytes to 0 (SIGSEGV); 1e30 was "wants a count >= 1"
expect 2 "^zinc bench adam: --params wants a count 1\.\.2\^40, not '4611686018427387904'" adam --params 4611686018427387904 --no-torch
expect 2 "^zinc bench adam: --params wants a count 1\.\.2\^40, not '1e30'" adam --params 1e30 --no-torch
expect 2 "^zinc bench memory: --dtype needs a value \(got the option '--json'\)" memory --dtype \
    --json
expect 2 "^zinc bench offload: --nvme needs a value \(got the option '--json'\)" offload \
    --params 1000 --repeat 1 --nvme --json
# an unknown option is one, not an option that "needs a value"; a list's empty element or a
# list too long to read whole is refused (",5," ran [5]; a long one was cut and ran another)
expect 2 "^zinc bench adam: unknown option '--bogus'" adam --bogus
expect 2 "^zinc bench memory: unknown option '--bogus'" memory --bogus --json
expect 2 "^zinc bench offload: unknown option 'positional'" offload positional
expect 2 "^zinc bench memory: --params wants" memory --params ,5,
expect 2 "^zinc bench memory: --worlds wants" memory --worlds "$(printf '0%.0s' $(seq 254))1,2"

cmd=config
expect 2 "^zinc config: --world-size needs a whole number in 1..16777216, got '16777217'" \
    check ds.json --world-size 16777217

cmd=ckpt
expect 2 "^zinc ckpt verify: DIR is required" verify ''
expect 2 "^zinc ckpt export: --dtype must be fp32, fp16 or bf16, not 'fp8'" export x --out y \
    --dtype fp8
expect 2 "^zinc ckpt export: --out needs a value \(got the option '--dtype'\)" export no-such-ckpt \
    --out --dtype fp16
expect 2 "^zinc ckpt export: --out needs a value" export no-such-ckpt --out ""
expect 2 "^zinc ckpt bench: --dir needs a value \(got the option '--json'\)" bench --mib 1 \
    --steps 1 --dir --json
expect 2 "^zinc ckpt bench: --mib needs a number" bench --mib 0x1
expect 2 "^zinc ckpt bench: --steps: expected 1..1000000, got 4294967297" bench --mib 1 \
    --steps 4294967297 --dir .
[ -n "$(ls -d ./zinc-ckpt-bench-* 2>/dev/null)" ] && { echo "FAIL: a refused ckpt bench left its directory"; fails=$((fails + 1)); }

cmd=estimate
expect 2 "^zinc estimate: --group-size: expected 1..1000000000 \(--params\), got -5" \
    --params 1e9 --world-size 8 --stage 3 --group-size -5
expect 2 "^zinc estimate: --params: expected 1..1e15, got -1" --params -1 --world-size 8 --stage 3
# a whole number past the range is out of range, not "not a whole number" (for every command's
# whole numbers: zarg_int64 tells the two apart); a given value is checked before a missing one
expect 2 "^zinc estimate: --params: expected 1..1e15, got 1e30 \(out of range\)" --params 1e30
expect 2 "^zinc estimate: --params: expected 1..1e15, got 99999999999999999999 \(out of range\)" \
    --params 99999999999999999999 --world-size 8 --stage 3
expect 2 "^zinc estimate: --stage: expected 0..3, got 4 \(out of range\)" --params 7.5e9 --stage 4
expect 2 "^zinc estimate: --params: '1.5' is not a whole number" --params 1.5
cmd=ckpt
expect 2 "^zinc ckpt bench: --mib: expected 1..65536, got 1e30 \(out of range\)" bench --mib 1e30
expect 2 "^zinc ckpt bench: --mib: expected 1..65536, got 1e400 \(out of range\)" bench --mib 1e400
# a --dir that is a file: refused before the work (it failed with exit 1 after it)
expect 2 "^zinc ckpt bench: --dir ds.json: not a directory" bench --mib 1 --dir ds.json
cmd=estimate
[ -e ./--json ] && { echo "FAIL: ckpt bench wrote into a directory named --json"; fails=$((fails + 1)); }

cmd=plot
printf '{"step": 1, "loss": 3.5}\n{"step": 2, "loss": 3.1}\n' >m.jsonl
expect 0 - m.jsonl -o m.svg --log
expect 2 "^zinc plot: -o needs a value \(got the option '--log'\)" m.jsonl -o --log
expect 2 "^zinc plot: --output needs a value \(got the option '--title'\)" m.jsonl --output --title x
expect 2 "^zinc plot: -o needs a value" m.jsonl -o ""
expect 2 "^zinc plot: --title needs a value \(got the option '--log'\)" m.jsonl --title --log
[ -e ./--log ] && { echo "FAIL: zinc plot wrote a file named --log"; fails=$((fails + 1)); }
# a metrics path too long to name its SVG is refused: cut short, the name was another file's
long=$(pwd)/$(printf './%.0s' $(seq 2100))m.jsonl
printf 'keep\n' >m.js
expect 2 "^zinc plot: a metrics path of [0-9]* bytes; give -o FILE.svg" "$long"
[ "$(cat m.js)" = keep ] || { echo "FAIL: zinc plot wrote over m.js"; fails=$((fails + 1)); }

cmd=train
# a --model spelled long (leading zeros) is the model it names (it was cut at 47 characters:
# T000...0160 trained T=1)
expect 0 - --model L1-D16-H2-T0000000000000000000000000000000000000000000000032 --ranks 1 \
    --steps 1
grep -q "model L1-D16-H2-T32:" "$tmp.out" || { echo "FAIL: --model with leading zeros: $(head -1 "$tmp.out")"; fails=$((fails + 1)); }
expect 2 "^zinc train: --config: a path of [0-9]* bytes" --config "$(printf './%.0s' $(seq 600))ds.json" \
    --steps 1

# --opt=value in every command, as zinc train takes it (the others called it unknown)
cmd=estimate
expect 0 - --params=1e9 --world-size=8 --stage=3
expect 2 "^zinc estimate: --params: expected 1..1e15, got -1" --params=-1 --world-size 8 --stage 3
cmd=plot
expect 0 - m.jsonl --output=m2.svg
[ -s m2.svg ] || { echo "FAIL: plot --output=m2.svg wrote no m2.svg"; fails=$((fails + 1)); }
expect 2 "^zinc plot: --output needs a value" m.jsonl --output=
cmd=config
expect 0 - check ds.json --lr=0.5
# zinc help CMD is CMD --help; --version takes nothing after it
cmd=help
expect 0 - plot
grep -q "^usage: zinc plot" "$tmp.out" || { echo "FAIL: zinc help plot: $(head -1 "$tmp.out")"; fails=$((fails + 1)); }
expect 2 "^zinc: unknown command 'nope'" nope
cmd=--version
expect 2 "^zinc: --version takes nothing after it, got 'extra'" extra

cd / && rm -rf "$work"
cli_finish
