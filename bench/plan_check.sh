#!/usr/bin/env bash
# plan_check.sh — `zinc plan` calibrated on this machine beside `zinc train` measured on it
# (issue 41 item 3, "measured here"): calibrate (one rank's FLOP/s on the built-in model, the
# Adam step, the thread comm's alpha and beta), then for each ranks x stage run the built-in model
# and predict the same run; prints a markdown table with the error of each prediction.
#
#   bench/plan_check.sh [--build DIR] [--model SPEC] [--ranks "1 2"] [--steps N] [--mpirun]
#
# Ranks are threads of one process with one model thread each (--threads 1), so that N ranks use
# N cores as N GPUs would use N devices; run it with at least max(ranks) idle cores. --mpirun:
# the ranks are processes under `mpirun -np N` (the MPI comm; the link figures are still the
# thread comm's), and where N exceeds the cores the plan is given --efficiency cores/N (each rank
# gets that share of a core: the plan has no notion of ranks sharing a device). Step time: the
# median ms_per_step of the logged steps after the first third (--metrics, steps_per_print 1).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build" model=L4-D256-H4-T256 ranks="1 2" steps=15 mb=4 mpi=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --mpirun) mpi=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "plan_check.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
zinc="$build/zinc"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$zinc" plan --calibrate --out "$tmp/cal.json" --model "$model" --ranks 2 --threads 1 >&2
# The model's shape for the plan: parameters from zinc train's own report.
L=$(echo "$model" | sed -E 's/.*L([0-9]+).*/\1/') D=$(echo "$model" | sed -E 's/.*D([0-9]+).*/\1/')
T=$(echo "$model" | sed -E 's/.*T([0-9]+).*/\1/')
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "| ranks$([ $mpi = 1 ] && echo ' (mpirun)') | stage | measured ms/step | zinc plan ms/step | error |"
echo "|---|---|---|---|---|"
for n in $ranks; do
    for s in 0 1 2 3; do
        cat >"$tmp/c.json" <<JSON
{"train_micro_batch_size_per_gpu": $mb, "steps_per_print": 1, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "zero_optimization": {"stage": $s}}
JSON
        eff=1
        if [ $mpi = 1 ] && [ "$n" -gt 1 ]; then
            mpirun --allow-run-as-root --oversubscribe -np "$n" "$zinc" train --threads 1 \
                --model "$model" --steps "$steps" --config "$tmp/c.json" \
                --metrics "$tmp/m.jsonl" >"$tmp/train.log" 2>&1
            eff=$(awk -v c="$(nproc)" -v n="$n" 'BEGIN {print (c >= n) ? 1 : c / n}')
        else
            "$zinc" train --ranks "$n" --threads 1 --model "$model" --steps "$steps" \
                --config "$tmp/c.json" --metrics "$tmp/m.jsonl" >"$tmp/train.log" 2>&1
        fi
        P=$(sed -n -E 's/.*: ([0-9]+) parameters in .*/\1/p' "$tmp/train.log" | head -1)
        meas=$(sed -n -E 's/.*"step":([0-9]+),.*"ms_per_step":([0-9.e+-]+),.*/\1 \2/p' "$tmp/m.jsonl" |
               awk -v k=$((steps / 3)) '$1 > k {print $2}' | median)
        pred=$("$zinc" plan --calibration "$tmp/cal.json" --params "$P" --layers "$L" \
               --hidden "$D" --seq "$T" --gpus "$n" --stage "$s" --micro-batch "$mb" \
               --efficiency "$eff" --json |
               tr -d '\n' | sed -E 's/.*"step": ([0-9.e+-]+)\}.*/\1/' | awk '{print $1 * 1e3}')
        awk -v n="$n" -v s="$s" -v m="$meas" -v p="$pred" \
            'BEGIN {printf "| %d | %d | %.2f | %.2f | %+.0f %% |\n", n, s, m, p, 100 * (p - m) / m}'
    done
done
echo
echo "Calibration ($tmp/cal.json):"
sed -n '1,6p' "$tmp/cal.json"
