# venv.sh — sourced by bench/run.sh and bench/gpu_lease.sh: bench_python sets $py to an
# interpreter with torch, DeepSpeed 0.19.8 and transformers (and accelerate, for the Trainer
# example) for the comparison rows, or $why to
# the reason there is none. $ZINC_BENCH_PYTHON if set (an interpreter that already has them);
# else a throwaway venv in bench/.venv (gitignored), made here on first use with python3 -m venv
# and pip-installed CPU torch + deepspeed + transformers + accelerate. None is a dependency of zinc: a
# missing DeepSpeed or transformers is a warning (their rows say so), a missing torch is $why.
bench_python() {
    py="" why=""
    if [ -n "${ZINC_BENCH_PYTHON:-}" ]; then
        py="$ZINC_BENCH_PYTHON"
    else
        local venv
        venv="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/.venv"
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
        # accelerate: the Hugging Face Trainer needs it (examples/hf_trainer, docs/python.md).
        if [ -z "$why" ] && ! "$venv/bin/python" -c "import transformers, accelerate" 2>/dev/null; then
            echo "bench: pip install transformers accelerate (the torch section's Llama rows, the Trainer example) ..." >&2
            "$venv/bin/pip" install -q transformers accelerate >&2 \
                || echo "bench: WARNING: pip could not install transformers and accelerate; the Llama rows will say so" >&2
        fi
        [ -z "$why" ] && py="$venv/bin/python"
    fi
    if [ -n "$py" ] && ! "$py" -c "import torch" 2>/dev/null; then
        why="$py cannot import torch"
        py=""
    fi
    [ -n "$py" ]
}
