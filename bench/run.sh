#!/usr/bin/env bash
# run.sh — zinc's benchmarks side by side with PyTorch and DeepSpeed; each section rewrites its
# own part of bench/RESULTS.md.   usage: bench/run.sh adam|memory|comm|ckpt|train|gpu|offload|offload_time|torch|torch_init|gpu_torch|all ...
#
# zinc:   $ZINC_BIN, else build-bench/zinc (configured here with -DZINC_CUDA=OFF, Release, when
#         missing, and brought up to date on every run; set ZINC_BIN to measure another build).
#         The torch section uses the libzinc.so beside it (brought up to date here too).
# Python: adam, ckpt and torch also measure torch and DeepSpeed (torch: zinc's python/zinc,
#         PyTorch FSDP2 and DeepSpeed ZeRO-3 on one torch model under mpirun; it runs zinc on
#         that Python's torch too). $ZINC_BENCH_PYTHON if set (an interpreter that already has
#         torch and deepspeed); else a throwaway venv in bench/.venv (gitignored) made with
#         python3 -m venv and pip-installed CPU torch + deepspeed (+ transformers for the
#         torch section's Llama rows). None is a dependency of
#         zinc: when they cannot be had, the rows say so and zinc's own figures are still
#         written.
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
    if [ -n "${ZINC_BENCH_PYTHON:-}" ]; then
        py="$ZINC_BENCH_PYTHON"
    else
        venv="$here/.venv"
        if [ ! -x "$venv/bin/python" ]; then
            echo "bench: creating a throwaway venv in $venv for torch and deepspeed ..." >&2
            if ! python3 -m venv "$venv" >&2; then
                why="python3 -m venv failed (install python3-venv)"
            fi
        fi
        if [ -z "$why" ] && ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
            echo "bench: pip install torch (CPU wheels) ..." >&2
            "$venv/bin/pip" install -q --index-url https://download.pytorch.org/whl/cpu torch >&2 \
                || "$venv/bin/pip" install -q torch >&2 \
                || why="pip could not install torch into $venv"
        fi
        # DeepSpeed 0.19.8: the release whose meaning zinc follows (README), so its rows compare
        # like with like; another version already in the venv is replaced.
        if [ -z "$why" ] && ! "$venv/bin/python" -c \
            "import deepspeed, sys; sys.exit(deepspeed.__version__ != '0.19.8')" 2>/dev/null; then
            echo "bench: pip install deepspeed 0.19.8 ..." >&2
            # deepspeed's setup.py imports torch: build it against the torch just installed
            # rather than in an isolated build environment that would fetch another torch.
            "$venv/bin/pip" install -q setuptools wheel ninja >&2 || true
            "$venv/bin/pip" install -q --no-build-isolation deepspeed==0.19.8 >&2 \
                || "$venv/bin/pip" install -q deepspeed==0.19.8 >&2 \
                || echo "bench: WARNING: pip could not install deepspeed; its rows will say so" >&2
        fi
        if [ -z "$why" ] && ! "$venv/bin/python" -c "import transformers" 2>/dev/null; then
            echo "bench: pip install transformers (the torch section's Llama rows) ..." >&2
            "$venv/bin/pip" install -q transformers >&2 \
                || echo "bench: WARNING: pip could not install transformers; the Llama rows will say so" >&2
        fi
        [ -z "$why" ] && py="$venv/bin/python"
    fi
    if [ -n "$py" ] && ! "$py" -c "import torch" 2>/dev/null; then
        why="$py cannot import torch"
        py=""
    fi
    if [ -n "$why" ]; then
        echo "bench: WARNING: no torch: $why; torch and DeepSpeed rows will be marked not measured" >&2
    fi
fi
export ZINC_BENCH_VENV_PY="$py" ZINC_BENCH_VENV_WHY="${why:-}"

exec python3 "$here/bench.py" "$@"
