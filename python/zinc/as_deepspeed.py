"""python -m zinc.as_deepspeed SCRIPT [ARGS...] — runs a DeepSpeed training script on zinc with
no edit: inside it `import deepspeed` gives the zinc package, and the deepspeed submodules whose
names zinc offers give zinc's (the table below); the script sees its own sys.argv, __name__ is
"__main__" and sys.path[0] is its folder, as under `python SCRIPT ARGS...`.

How: the table's names are put into sys.modules before the script runs, so the import system
finds them there first (also when DeepSpeed itself is installed), and a finder first on
sys.meta_path answers every other `deepspeed` or `deepspeed.*` import with an ImportError that
names the module and says zinc does not offer it (the pipeline engine, MoE, inference, sparse
attention, ...). Without that finder a name under `deepspeed.` would be looked up in zinc's own
folder and could load one of zinc's private modules a second time under another name."""
import email.message
import importlib
import importlib.abc
import importlib.metadata
import os
import re
import runpy
import sys

from . import __version__ as _ZINC_VERSION

# DeepSpeed module -> zinc module offering the same names (docs/python.md, "DeepSpeed's other
# names").
MODULES = {
    "deepspeed": "zinc",
    "deepspeed.accelerator": "zinc.accelerator",
    "deepspeed.comm": "zinc.comm",
    "deepspeed.comm.comm": "zinc.comm",          # (DeepSpeed's functions live there)
    "deepspeed.ops": "zinc.ops",
    "deepspeed.ops.adam": "zinc.ops.adam",
    "deepspeed.ops.adam.fused_adam": "zinc.ops.adam",
    "deepspeed.ops.adam.cpu_adam": "zinc.ops.adam",
    "deepspeed.utils": "zinc.utils",
    "deepspeed.utils.logging": "zinc.utils.logging",
    "deepspeed.utils.z3_leaf_module": "zinc.utils.z3_leaf",
    "deepspeed.utils.tensor_fragment": "zinc.utils.tensor_fragment",
    "deepspeed.utils.zero_to_fp32": "zinc.utils.zero_to_fp32",
    "deepspeed.runtime": "zinc.runtime",
    "deepspeed.runtime.dataloader": "zinc.dataloader",
    "deepspeed.runtime.zero": "zinc.runtime.zero",
    "deepspeed.runtime.zero.partition_parameters": "zinc.runtime.zero.partition_parameters",
    "deepspeed.runtime.zero.offload_config": "zinc.runtime.zero.offload_config",
    "deepspeed.zero": "zinc.zero",
    "deepspeed.checkpointing": "zinc.checkpointing",
    "deepspeed.checkpoint": "zinc.checkpoint",
    "deepspeed.checkpoint.utils": "zinc.checkpoint.utils",
    "deepspeed.runtime.engine": "zinc.runtime.engine",
    "deepspeed.runtime.lr_schedules": "zinc.runtime.lr_schedules",
}


class _NotOffered(importlib.abc.MetaPathFinder):
    """Refuses, by name, every deepspeed module the table does not map, and answers for the
    `deepspeed` distribution's metadata (_Distribution), before any installed DeepSpeed's: the
    modules a script imports are zinc's, so the version libraries check is the one zinc
    follows."""

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        name = context.name        # (None: every distribution is asked for)
        if name is None or re.sub(r"[-_.]+", "-", name).lower() == "deepspeed":
            return iter([_Distribution()])
        return iter(())

    def find_spec(self, name, path=None, target=None):
        if name == "deepspeed" or name.startswith("deepspeed."):
            if name not in MODULES:
                raise ImportError(
                    f"zinc does not offer the DeepSpeed module '{name}' (python -m "
                    "zinc.as_deepspeed maps only: " + ", ".join(sorted(MODULES)) + ")",
                    name=name)
        return None


# The DeepSpeed release whose meaning zinc follows (README): what the `deepspeed` distribution's
# metadata says under install().
DEEPSPEED_VERSION = "0.19.8"


class _Distribution(importlib.metadata.Distribution):
    """The `deepspeed` distribution as libraries ask for it (importlib.metadata.version,
    .metadata, .distribution): transformers' Trainer requires "deepspeed>=0.9.3" by its metadata
    and accelerate and transformers take DeepSpeed as absent without it, whatever
    `import deepspeed` gives. It names zinc in its summary; it has no files."""

    def read_text(self, filename):
        if filename != "METADATA":
            return None
        meta = email.message.Message()
        meta["Metadata-Version"] = "2.1"
        meta["Name"] = "deepspeed"
        meta["Version"] = DEEPSPEED_VERSION
        meta["Summary"] = (f"zinc {_ZINC_VERSION} answering as DeepSpeed {DEEPSPEED_VERSION} "
                           "(python -m zinc.as_deepspeed)")
        return meta.as_string()

    def locate_file(self, path):
        return None


def install():
    """Makes `import deepspeed...` give zinc's modules in this process, and the `deepspeed`
    distribution's metadata zinc's answer (idempotent)."""
    for ds, mine in MODULES.items():
        sys.modules[ds] = importlib.import_module(mine)
    if not any(isinstance(f, _NotOffered) for f in sys.meta_path):
        sys.meta_path.insert(0, _NotOffered())


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m zinc.as_deepspeed SCRIPT [ARGS...]\n"
              "runs a DeepSpeed training script with `deepspeed` resolved to zinc",
              file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    script = argv[0]
    if not os.path.isfile(script):
        print(f"zinc.as_deepspeed: {script}: no such file", file=sys.stderr)
        return 2
    install()
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
