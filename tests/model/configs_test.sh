#!/bin/sh
# Every shipped config (configs/*.json) passes `zinc config check` with no warning (zero0_fp16:
# only the documented stage-0 hysteresis one), and the
# offload configs train bit for bit like their counterparts without offload (`zinc train`, 2
# local ranks, 8 steps: the same final loss to the printed digit, and the same grad norm at every
# step), with the optimizer state on the host (the "host/rank" line).
# usage: configs_test.sh ZINC CONFIG_DIR
zinc=$1
dir=$2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for c in "$dir"/*.json; do
    out=$("$zinc" config check "$c" 2>&1) || fail "$c rejected: $out"
    case "$c:$out" in
    *"(0 warnings)"*) ;;
    # Dynamic fp16 at stage 0 always gets this one (docs/config.md, fp16.hysteresis).
    */zero0_fp16.json:"warning: fp16.hysteresis: has no effect at ZeRO stage 0"*"(1 warning)"*) ;;
    *) fail "$c: $out" ;;
    esac
done
for st in 2 3; do
    ref=$("$zinc" train --config "$dir/zero${st}_bf16.json" --ranks 2 --steps 8 2>&1) ||
        fail "zero${st}_bf16 did not train: $ref"
    off=$("$zinc" train --config "$dir/zero${st}_offload_bf16.json" --ranks 2 --steps 8 2>&1) ||
        fail "zero${st}_offload_bf16 did not train: $off"
    a=$(printf '%s\n' "$ref" | grep -o 'grad norm [0-9.]*\|final loss [0-9.]*')
    b=$(printf '%s\n' "$off" | grep -o 'grad norm [0-9.]*\|final loss [0-9.]*')
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "stage $st: with offload '$b', without '$a'"
    printf '%s\n' "$off" | grep -q "host/rank .*master" || fail "stage $st: no host state line: $off"
done
# NVMe offload of the optimizer state: the same bits again, the state in a scratch file that is
# gone after the run. csv_monitor with DeepSpeed's defaults (output_path "", job_name
# "DeepSpeedJobName") writes ./DeepSpeedJobName/, as DeepSpeed's os.path.join("", job_name) does.
tmp=$(mktemp -d)
python3 - "$dir/zero2_bf16.json" "$tmp" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": sys.argv[2],
                                               "pipeline_read": True, "pipeline_write": True}
c["zero_optimization"]["sub_group_size"] = 4096
c["csv_monitor"] = {"enabled": True}
json.dump(c, open(sys.argv[2] + "/nvme.json", "w"))
PY
ref=$("$zinc" train --config "$dir/zero2_bf16.json" --ranks 2 --steps 8 2>&1)
nv=$(cd "$tmp" && "$zinc" train --config nvme.json --ranks 2 --steps 8 2>&1) ||
    fail "nvme offload did not train: $nv"
a=$(printf '%s\n' "$ref" | grep -o 'grad norm [0-9.]*\|final loss [0-9.]*')
b=$(printf '%s\n' "$nv" | grep -o 'grad norm [0-9.]*\|final loss [0-9.]*')
[ -n "$a" ] && [ "$a" = "$b" ] || fail "nvme: with NVMe offload '$b', without '$a'"
[ -z "$(ls "$tmp" | grep zinc-nvme)" ] || fail "nvme: scratch files left: $(ls "$tmp")"
csv="$tmp/DeepSpeedJobName/Train_Samples_train_loss.csv"
# DeepSpeed's csvMonitor: the header is the event's last part, a row every step (8 steps, not
# only the printed ones), and no loss_scale file outside fp16
[ "$(head -n 1 "$csv" 2>/dev/null)" = "step,train_loss" ] && [ "$(wc -l <"$csv")" -eq 9 ] ||
    fail "csv_monitor: no $csv with DeepSpeed's header and 8 rows: $(head -n 2 "$csv")," \
        "$(wc -l <"$csv" 2>/dev/null) lines; $(ls -R "$tmp" | tr '\n' ' ')"
[ ! -e "$tmp/DeepSpeedJobName/Train_Samples_loss_scale.csv" ] ||
    fail "csv_monitor: a loss_scale file in a bf16 run (DeepSpeed writes it with fp16 only)"
[ ! -e "$tmp/csv_monitor" ] || fail "csv_monitor: wrote under csv_monitor/ (DeepSpeed writes ./<job_name>)"
rm -rf "$tmp"
[ "$fails" = 0 ] && echo "configs: ok"
[ "$fails" = 0 ]
