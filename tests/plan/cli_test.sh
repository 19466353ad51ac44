#!/bin/sh
# cli_test.sh ZINC — `zinc plan`: bad input is refused with exit 2 and a message naming the flag;
# the issue's "done when" command prints a step time, tokens/s, memory per rank and the scaling
# table; --config feeds stage, precision and accumulation; --help exits 0.
zinc=$1
cmd=plan
name=plan_cli
. "$(dirname "$0")/../cli_lib.sh"
base="--params 7e9 --layers 32 --hidden 4096 --seq 4096 --gpus 64 --gpu h100 --stage 3"

expect 0 - $base
expect 0 - --help
expect 2 "^zinc plan: --gpu 'v100' is not in the table" $base --gpu v100
expect 2 "^zinc plan: --params must be a whole number in" $base --params -7e9
expect 2 "^zinc plan: --gpus N is required" --params 7e9 --seq 4096 --gpu h100 --stage 3
expect 2 "^zinc plan: --gpu NAME is required" --params 7e9 --seq 4096 --gpus 8 --stage 3
expect 2 "^zinc plan: --seq S is required" --params 7e9 --gpus 8 --gpu h100 --stage 3
expect 2 "^zinc plan: --stage S \(0..3\) or --config is required" --params 7e9 --seq 4096 \
    --gpus 8 --gpu h100
expect 2 "^zinc plan: --params P is required" --seq 4096 --gpus 8 --gpu h100 --stage 3
expect 2 "^zinc plan: --stage must be a whole number in 0..3, not '4'" $base --stage 4
expect 2 "^zinc plan: --inter-bw must be a number" $base --inter-bw -1
expect 2 "^zinc plan: --efficiency must be a number" $base --efficiency 1.5
expect 2 "^zinc plan: --gpus needs a value" $base --gpus
expect 2 "^zinc plan: unknown option '--bogus' \(see" $base --bogus
expect 2 "^zinc plan: unknown option '--param'; did you mean --params\?" $base --param 7e9
expect 2 "^zinc plan: unknown option '--seed': it is an option of zinc train, not of zinc plan" $base --seed 1
expect 2 "^zinc plan: --offload-param needs stage 3" $base --stage 2 --offload-optimizer \
    --offload-param
expect 2 "no-such-config.json" --params 7e9 --seq 4096 --gpus 8 --gpu h100 \
    --config "$tmp.no-such-config.json"
# a config offloading to NVMe: refused (the plan prices cpu offload only), not planned as cpu's
mkdir -p "$tmp.nvme"
cat >"$tmp.nvme.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp.nvme"}}}
JSON
expect 2 "offloads to NVMe .*which zinc plan does not model" --params 7e9 --seq 4096 --gpus 8 \
    --gpu h100 --config "$tmp.nvme.json"

# The issue's "done when": one JSON object with the step, tokens/s, memory and the scaling.
checks=$((checks + 1))
"$zinc" plan $base --json >"$tmp.out" 2>"$tmp.err"
for want in '"step": [0-9.e+-]+' '"tokens_per_s": [0-9.e+-]+' '"mfu": 0\.[0-9]+' \
            '"total_bytes_per_rank": [0-9]+' '"gpus": 1024, "step_s": [0-9.e+-]+' \
            '"activation_bytes_per_rank": [0-9]+, "fits"' \
            '"efficiency": 1,'; do
    if ! grep -Eq -- "$want" "$tmp.out"; then
        echo "FAIL: --json output lacks /$want/"; fails=$((fails + 1))
    fi
done
if command -v python3 >/dev/null && ! python3 -m json.tool "$tmp.out" >/dev/null 2>&1; then
    echo "FAIL: --json output is not JSON"; cat "$tmp.out"; fails=$((fails + 1))
fi

# --config: stage, precision and accumulation from the file; a flag given as well wins.
checks=$((checks + 1))
cat >"$tmp.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
 "fp16": {"enabled": true}, "zero_optimization": {"stage": 2}}
JSON
"$zinc" plan --params 1e9 --seq 1024 --gpus 16 --gpu a100-80 --config "$tmp.json" --json \
    >"$tmp.out" 2>"$tmp.err"
flat=$(tr -d ' \n' <"$tmp.out")
for want in '"micro_batch":2,"accumulation":4' '"stage":2,"dtype":"fp16"'; do
    case "$flat" in
    *"$want"*) ;;
    *) echo "FAIL: --config: output lacks $want"; cat "$tmp.err"; fails=$((fails + 1)) ;;
    esac
done
"$zinc" plan --params 1e9 --seq 1024 --gpus 16 --gpu a100-80 --config "$tmp.json" --stage 3 \
    --json >"$tmp.out" 2>&1
case "$(tr -d ' \n' <"$tmp.out")" in
*'"stage":3,'*) ;;
*) echo "FAIL: --stage 3 beside --config's stage 2 did not win"; fails=$((fails + 1)) ;;
esac

# --config's data_types.grad_accum_dtype "fp32" (bf16, stage 2): the gradient shard the plan
# counts is fp32, twice the bf16 one; --stage 1 beside it counts the whole model's sums in fp32,
# twice the bf16 ones too (--stage 0, where the engine keeps no fp32 sums, would be bf16).
checks=$((checks + 1))
cat >"$tmp.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 2}, "data_types": {"grad_accum_dtype": "fp32"}}
JSON
grad_of() { tr -d ' \n' | sed -n 's/.*"bytes_per_rank":{[^}]*"grad":\([0-9]*\).*/\1/p'; }
with=$("$zinc" plan --params 1e9 --seq 1024 --gpus 16 --gpu a100-80 --config "$tmp.json" --json |
       grad_of)
without=$("$zinc" plan --params 1e9 --seq 1024 --gpus 16 --gpu a100-80 --stage 2 --dtype bf16 \
          --json | grad_of)
stage1=$("$zinc" plan --params 1e9 --seq 1024 --gpus 16 --gpu a100-80 --config "$tmp.json" \
         --stage 1 --json 2>/dev/null | grad_of)
stage1_bf16=$("$zinc" plan --params 1e9 --seq 1024 --gpus 16 --gpu a100-80 --stage 1 \
              --dtype bf16 --json | grad_of)
if [ -z "$with" ] || [ -z "$without" ] || [ "$with" -ne $((2 * without)) ] ||
   [ -z "$stage1" ] || [ -z "$stage1_bf16" ] || [ "$stage1" -ne $((2 * stage1_bf16)) ]; then
    echo "FAIL: grad_accum_dtype fp32: grad bytes '$with' with, '$without' without (want twice);" \
         "'$stage1' at --stage 1, want twice '$stage1_bf16'"
    fails=$((fails + 1))
fi

# ... and with offload_optimizer "cpu" at stage 3 the host's gradient shard doubles.
checks=$((checks + 1))
cat >"$tmp.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
 "data_types": {"grad_accum_dtype": "fp32"}}
JSON
host_grad_of() { tr -d ' \n' | sed -n 's/.*"host_bytes":{[^}]*"grad":\([0-9]*\).*/\1/p'; }
with=$("$zinc" plan --params 1e9 --seq 1024 --gpus 16 --gpu a100-80 --config "$tmp.json" --json |
       host_grad_of)
without=$("$zinc" plan --params 1e9 --seq 1024 --gpus 16 --gpu a100-80 --stage 3 --dtype bf16 \
          --offload-optimizer --json | host_grad_of)
if [ -z "$with" ] || [ -z "$without" ] || [ "$without" -eq 0 ] || [ "$with" -ne $((2 * without)) ]; then
    echo "FAIL: grad_accum_dtype fp32 with offload: host grad bytes '$with' with, '$without'" \
         "without (want twice)"
    fails=$((fails + 1))
fi

# --hf-config and --recommend (issue 41 items 1-2).
here=$(dirname "$0")
rec="--hf-config $here/llama-1b-config.json --seq 1024 --gpus 8 --gpu h100"
expect 0 - $rec --recommend --global-batch 256
if ! grep -Eq '^recommended: ZeRO stage [0-3], offload ' "$tmp.out"; then
    echo "FAIL: --recommend printed no recommendation"; cat "$tmp.out"; fails=$((fails + 1))
fi
# each candidate's host memory (offload's; checked only with --host-mem) is shown
expect 0 - $rec --recommend --global-batch 256 --json
checks=$((checks + 1))
if ! grep -Eq '"offload": "optimizer",.*"host_bytes_per_rank": [1-9][0-9]*,' "$tmp.out"; then
    echo "FAIL: --recommend --json gave no host bytes for an offload row"; cat "$tmp.out"
    fails=$((fails + 1))
fi
# --host-mem: offload past the node's host memory does not fit, in the plan and the choice
expect 0 - $base --offload-optimizer --host-mem 1
if ! grep -Eq 'GB per node of 1 GB  DOES NOT FIT' "$tmp.out"; then
    echo "FAIL: --host-mem 1 with offload: no DOES NOT FIT"; cat "$tmp.out"; fails=$((fails + 1))
fi
expect 0 - $rec --recommend --global-batch 256 --host-mem 0.001
if ! grep -Eq 'optimizer .*does not fit the host: [0-9.]+ GB per node > 0.001 GB \(--host-mem\)' \
        "$tmp.out" || grep -Eq '^recommended: .*offload optimizer' "$tmp.out"; then
    echo "FAIL: --host-mem 0.001: an offload row fits the host"; cat "$tmp.out"; fails=$((fails + 1))
fi
expect 2 "^zinc plan: --host-mem must be a number" $base --host-mem -5
expect 0 - $rec --stage 2 --micro-batch 8
if ! grep -q '+ activations' "$tmp.out"; then
    echo "FAIL: --hf-config gave no activation memory"; cat "$tmp.out"; fails=$((fails + 1))
fi
expect 2 "^zinc plan: --recommend needs --global-batch" $rec --recommend
expect 2 "^zinc plan: --global-batch 100 is not a multiple of --gpus 8" $rec --recommend \
    --global-batch 100
expect 2 "^zinc plan: --recommend chooses the stage" $rec --recommend --global-batch 64 --stage 2
expect 2 "^zinc plan: --global-batch goes with --recommend" $rec --stage 2 --global-batch 64
expect 2 "^zinc plan: --hf-config: .*no-such\.json: cannot read it \(No such file" --hf-config "$tmp.no-such.json" \
    --gpus 8 --gpu h100 --stage 1
printf '{"model_type": "bert", "hidden_size": 768}' >"$tmp.json"
expect 2 'model_type "bert" is not one zinc plan counts' --hf-config "$tmp.json" --gpus 8 \
    --gpu h100 --stage 1 --seq 512
printf '{"model_type": "gpt2", "n_embd": 768, "n_layer": -1}' >"$tmp.json"
expect 2 '"n_layer" must be a whole number in 1..2\^40' --hf-config "$tmp.json" --gpus 8 \
    --gpu h100 --stage 1 --seq 512
# a missing count is named missing (it was "must be a whole number above 0")
printf '{"model_type": "gpt2", "n_embd": 768}' >"$tmp.json"
expect 2 'no "n_layer" \(the model.s count zinc plan needs\)' --hf-config "$tmp.json" --gpus 8 \
    --gpu h100 --stage 1 --seq 512
# a hidden size past long long's range once divided (undefined behaviour, then a head_dim error)
printf '{"model_type": "llama", "hidden_size": 9223372036854775807, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 8, "num_attention_heads": 2}' >"$tmp.json"
expect 2 '"hidden_size" must be a whole number in 1..2\^40' --hf-config "$tmp.json" --gpus 8 \
    --gpu h100 --stage 1 --seq 512
# --params fewer than the shape's own weights: two models in one line (it was planned)
expect 2 "^zinc plan: --params 1000 is fewer than the shape's query and output projections" \
    --params 1000 --layers 2 --hidden 4096 --vocab 50000 --seq 128 --gpus 8 --gpu h100 --stage 2
# GPT-2's learned positions: no sequence past n_positions (it was planned as if it ran)
expect 2 "--seq 8192 is past GPT-2's \"n_positions\" 1024" --hf-config "$here/gpt2-config.json" \
    --seq 8192 --gpus 8 --gpu h100 --stage 2
printf '{"model_type": "gpt2", "n_embd": 99999999999, "n_layer": 99999999999, "vocab_size": 5, "n_positions": 5}' >"$tmp.json"
expect 2 "99999999999 layers, more than --layers takes" --hf-config "$tmp.json" --gpus 8 \
    --gpu h100 --stage 3
printf '{"model_type": "gpt2", "n_embd": 99999999999, "n_layer": 2, "vocab_size": 5, "n_positions": 5}' >"$tmp.json"
expect 2 "^zinc plan: --params 2\.4e\+23 \(from --hf-config or the shape\) is outside" \
    --hf-config "$tmp.json" --gpus 8 --gpu h100 --stage 3
expect 2 "^zinc plan: --params 1\.2e\+20 \(from the shape\) is outside" --layers 100000 \
    --hidden 10000000 --seq 8 --gpus 8 --gpu h100 --stage 3
expect 2 "^zinc plan: --global-batch 999999999 on 1 GPUs: no micro-batch" --params 1e9 --seq 8 \
    --gpus 1 --gpu h100 --recommend --global-batch 999999999
printf '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "vocab_size": 50, "n_positions": 8, "n_inner": -5}' >"$tmp.json"
expect 2 '"n_inner" must be null or a whole number above 0' --hf-config "$tmp.json" --gpus 8 \
    --gpu h100 --stage 1
# Nothing fits: exit 1 and say so (not a usage error).
expect 1 - --params 1e12 --layers 120 --hidden 25600 --seq 8192 --gpus 1 --gpu a100-40 \
    --recommend --global-batch 1
if ! grep -q '^nothing fits 40 GB per GPU' "$tmp.out"; then
    echo "FAIL: an impossible run did not say nothing fits"; cat "$tmp.out"; fails=$((fails + 1))
fi

# --calibrate measures this machine (a tiny model: seconds) and --calibration plans with it.
# --out is a symlink here: the file is written beside it and renamed over it, so the link is
# replaced and what it pointed to is left alone (a plain fopen wrote through it).
checks=$((checks + 1))
rm -f "$tmp.cal" "$tmp.cal-target"
echo keep >"$tmp.cal-target"
ln -s "$tmp.cal-target" "$tmp.cal"
if "$zinc" plan --calibrate --out "$tmp.cal" --model L1-D32-H2-T32 >"$tmp.out" 2>"$tmp.err"; then
    if [ -L "$tmp.cal" ] || [ "$(cat "$tmp.cal-target")" != keep ]; then
        echo "FAIL: --calibrate --out wrote through a symlink instead of replacing it"
        fails=$((fails + 1))
    fi
    for f in "$tmp.cal".??????; do
        [ -e "$f" ] && { echo "FAIL: --calibrate left its temporary $f"; fails=$((fails + 1)); }
    done
    for key in '"flops_per_s": [0-9]' '"optimizer_bytes_per_s": [0-9]' '"link_alpha_s": [0-9]' \
               '"link_bytes_per_s": [0-9]' '"memory_bytes": [0-9]'; do
        if ! grep -Eq -- "$key" "$tmp.cal"; then
            echo "FAIL: the calibration lacks /$key/"; cat "$tmp.cal"; fails=$((fails + 1))
        fi
    done
    expect 0 - --calibration "$tmp.cal" --params 30000 --layers 1 --hidden 32 --seq 32 --gpus 2 \
        --stage 2 --json
    if ! grep -q '"name": "calibrated"' "$tmp.out"; then
        echo "FAIL: --calibration did not price with the calibrated rank"; cat "$tmp.out"
        fails=$((fails + 1))
    fi
    # the calibration's own shape (L1-D32, T32) plans without a note; another shape is told that
    # the FLOP/s were measured on L1-D32-H2-T32 (on a CPU they differ by shape, 1.6-2.2x here)
    checks=$((checks + 1))
    if grep -q "note:" "$tmp.err"; then
        echo "FAIL: a plan of the calibration's own shape got a note"; cat "$tmp.err"
        fails=$((fails + 1))
    fi
    expect 0 "note: .* measured its FLOP/s on the built-in model L1-D32-H2-T32" \
        --calibration "$tmp.cal" --params 60000 --layers 2 --hidden 32 --seq 32 --gpus 2 --stage 2
    # a calibration path with a quote and a backslash: --json stays JSON (they were printed raw)
    odd="$tmp.we\"ird\\x.cal"
    cp "$tmp.cal" "$odd"
    expect 0 - --calibration "$odd" --params 30000 --seq 32 --gpus 2 --stage 2 --json
    checks=$((checks + 1))
    if ! python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp.out"; then
        echo "FAIL: --json with a calibration path holding '\"' is not JSON"; cat "$tmp.out"
        fails=$((fails + 1))
    fi
    rm -f "$odd"
    # a figure no machine measures is refused (1e-300 FLOP/s made the times inf, the JSON invalid)
    sed 's/"flops_per_s": [0-9.e+-]*/"flops_per_s": 1e-300/' "$tmp.cal" >"$tmp.json"
    expect 2 '"flops_per_s" is 1e-300, outside' --calibration "$tmp.json" --params 30000 --seq 32 \
        --gpus 2 --stage 2
    # text after the object, as in an HF config (only the first object was read)
    { cat "$tmp.cal"; echo '{"flops_per_s": 1}'; } >"$tmp.json"
    expect 2 "text after the JSON object" --calibration "$tmp.json" --params 30000 --seq 32 \
        --gpus 2 --stage 2
else
    echo "FAIL: zinc plan --calibrate failed"; cat "$tmp.err"; fails=$((fails + 1))
fi
# An HF config with text after it, or null: refused naming why ("success" for null; the rest
# of the file was ignored)
hf=$(dirname "$0")/gpt2-config.json
{ cat "$hf"; echo 'garbage {{{'; } >"$tmp.json"
expect 2 "hf-config: .*text after the JSON object" --hf-config "$tmp.json" --gpus 8 --gpu h100 \
    --stage 2
echo null >"$tmp.json"
expect 2 "hf-config: .*not a JSON object \(the file holds null\)" --hf-config "$tmp.json" --gpus 8 --gpu h100 \
    --stage 2
# shape flags without a shape did nothing, silently
expect 2 "^zinc plan: --vocab, --ffn and --gated describe the layers" --params 7e9 --seq 4096 \
    --gpus 8 --gpu h100 --stage 3 --vocab 32000
# more heads than channels and no head_dim: that is said (all three keys were named)
sed 's/"num_attention_heads": 32/"num_attention_heads": 4096/' \
    "$(dirname "$0")/llama-1b-config.json" >"$tmp.json"
expect 2 "hidden size 2048 \(hidden_size\) over 4096 attention heads gives no head_dim" \
    --hf-config "$tmp.json" \
    --gpus 8 --gpu h100 --stage 2
# a step past 2^64 bytes per rank is refused (the counts wrapped: fewer bytes gathered than
# reduce-scattered)
expect 2 "^zinc plan: --params 5e\+12 with up to 1e\+06 accumulation steps: a step would move" \
    --params 5e12 --seq 1 --gpus 2 --gpu h100 --stage 3 --accum 1000000
# an offload from --config is named as the config's, not as a flag the user did not give
printf '{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}' >"$tmp.json"
expect 2 "^zinc plan: --config's zero_optimization.offload_optimizer needs stage 1, 2 or 3" \
    --params 1e9 --seq 1024 --gpus 8 --gpu h100 --config "$tmp.json" --stage 0
expect 2 "^zinc plan: --calibrate takes only --out" --calibrate --gpus 8
expect 2 "^zinc plan: --out, --model, --ranks and --threads go with --calibrate" $base --ranks 2
expect 2 "^zinc plan: --calibration: .*no-such\.cal: cannot read it \(No such file" --calibration "$tmp.no-such.cal" \
    --params 7e9 --seq 4096 --gpus 8 --stage 3
printf '{"zinc_calibration": 1, "flops_per_s": 1e10}' >"$tmp.json"
expect 2 "link_alpha_s.*is missing|optimizer_bytes_per_s.*is missing" --calibration "$tmp.json" \
    --params 7e9 --seq 4096 --gpus 8 --stage 3
expect 2 "^zinc plan: --gpu and --calibration: give one" --calibration "$tmp.cal" $base
expect 2 "^zinc plan: --model 'L0-D1': " --calibrate --model L0-D1
# --out is checked before the measurements, not after them (each case would run the tiny model
# first on the old code, then fail with exit 1)
cal="--calibrate --model L1-D32-H2-T32"
expect 2 "^zinc plan: --out needs a value" $cal --out ""
expect 2 "^zinc plan: --out needs a value \(got the option '--ranks'\)" $cal --out --ranks 2
mkdir -p "$tmp.dir"
expect 2 "^zinc plan: --out '$tmp.dir' is a directory" $cal --out "$tmp.dir"
expect 2 "^zinc plan: --out '$tmp.no-dir/c.json': its directory '$tmp.no-dir' does not exist" \
    $cal --out "$tmp.no-dir/c.json"
chmod 555 "$tmp.dir"
if [ ! -w "$tmp.dir" ]; then   # root writes anywhere: the case is for everyone else
    expect 2 "^zinc plan: --out '$tmp.dir/c.json': its directory '$tmp.dir' is not writable" \
        $cal --out "$tmp.dir/c.json"
fi
chmod 755 "$tmp.dir"
rmdir "$tmp.dir"
# FIFOs named as input are refused at once instead of blocking the open (base/files.h)
rm -f "$tmp.fifo"
if mkfifo "$tmp.fifo" 2>/dev/null; then
    expect 2 "hf-config: .*not a regular file" --hf-config "$tmp.fifo" --gpus 8 --gpu h100
    expect 2 "calibration: .*not a regular file" --calibration "$tmp.fifo" \
        --params 7e9 --seq 4096 --gpus 8 --stage 3
    # ... and as --out: the calibration is renamed over its target, which replaced the FIFO (and,
    # as root, /dev/null) with a regular file
    expect 2 "^zinc plan: --out '$tmp.fifo' is not a regular file" $cal --out "$tmp.fifo"
    # /dev/stdout with stdout a file stats as a regular file: refused by where it is, under /dev
    # (the rename replaced the system's link as root); checked with a name that is nothing there,
    # so that a regression leaves a stray file rather than a replaced /dev/stdout
    expect 2 "^zinc plan: --out '/dev/zinc-plan-test-$$' is under /dev" $cal \
        --out "/dev/zinc-plan-test-$$"
    rm -f "/dev/zinc-plan-test-$$" 2>/dev/null
    checks=$((checks + 1))
    if [ ! -p "$tmp.fifo" ]; then echo "FAIL: --out replaced the FIFO"; fails=$((fails + 1)); fi
    rm -f "$tmp.fifo"
fi

rm -f "$tmp.json" "$tmp.cal" "$tmp.cal-target" "$tmp.nvme.json"
rmdir "$tmp.nvme"
cli_finish
