#!/usr/bin/env bash
# run.sh — zinc's benchmarks side by side with PyTorch and DeepSpeed; each section rewrites its
# own part of bench/RESULTS.md.   usage: bench/run.sh adam|memory|comm|ckpt|train|gpu|offload|offload_time|torch|torch_init|gpu_torch|all ...
#
# zinc:   $ZINC_BIN, else build-bench/zinc (configured here with -DZINC_CUDA=OFF, Release, when
#         missing, and brought up to date on every run; set ZINC_BIN to measure another build).
#         The torch section uses the libzinc.so beside it (brought up to date here too).
# Python: adam, ckpt and torch also measure torch and DeepSpeed (torch: zinc's python/zinc,
#         PyTorch FSDP2 and DeepSpeed ZeRO-3 on one torch model under mpirun; it runs zinc on
#         that Python's torch too): the interpreter bench/venv.sh gives ($ZINC_BENCH_PYTHON,
#         else a throwaway venv in bench/.venv with CPU torch, deepspeed and transformers).
#         When they cannot be had, the rows say so and zinc's own figures are still written.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"

if [ $# -eq 0 ]; then
    echo "usage: bench/run.sh adam|memory|comm|ckpt|train|gpu|offload|offload_time|torch|torch_init|gpu_torch|all ..." >&2
    exit 2
fi

if [ -z "${ZINC_BIN:-}" ]; then
    # Always brought up to date (incremental), so that the figures are those of this checkout.
    ZINC_BIN="$root/build-bench/zinc"
    echo "bench: building zinc into build-bench (Release, no CUDA) ..." >&2
    [ -f build-bench/CMakeCache.txt ] ||
        cmake -S . -B build-bench -DZINC_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build-bench -j"$(nproc)" --target zinc_cli >/dev/null
fi
export ZINC_BIN

need_py=0 need_lib=0
for s in "$@"; do
    case "$s" in adam|ckpt|gpu|all) need_py=1 ;; torch|torch_init|gpu_torch) need_py=1 need_lib=1 ;; esac
    [ "$s" = all ] && need_lib=1
done
zbuild="$(dirname "$ZINC_BIN")"
if [ "$need_lib" = 1 ] && [ -f "$zbuild/CMakeCache.txt" ]; then
    echo "bench: building libzinc.so into $zbuild for the torch section ..." >&2
    cmake --build "$zbuild" -j"$(nproc)" --target zinc >/dev/null
fi

py="" why=""
if [ "$need_py" = 1 ]; then
    . "$here/venv.sh"
    if ! bench_python; then
        echo "bench: WARNING: no torch: $why; torch and DeepSpeed rows will be marked not measured" >&2
    fi
fi
export ZINC_BENCH_VENV_PY="$py" ZINC_BENCH_VENV_WHY="${why:-}"

exec python3 "$here/bench.py" "$@"
