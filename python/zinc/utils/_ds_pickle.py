"""_ds_pickle.py — torch.load of DeepSpeed's checkpoint files without importing deepspeed.

DeepSpeed pickles objects of its own into its checkpoints: the loss scaler
(deepspeed.runtime.fp16.loss_scaler.LossScaler / DynamicLossScaler), ZeroStageEnum, the
fragment_address namedtuple of param_slice_mappings. Unpickling them normally imports
deepspeed, which zinc never depends on. Here every global under `deepspeed.` becomes a plain
stand-in that keeps what the pickle gives it (constructor arguments, __dict__ state), so the
values can be read as attributes: scaler.cur_scale, stage.args[0]. Everything else resolves as
pickle normally does (torch's tensors, collections.OrderedDict, ...).

torch.load takes a pickle_module (torch 1.13 and 2.x): ours is this module, whose Unpickler
maps the names; load_file(path) is the call.
"""
import errno
import pickle
import sys
import zipfile

import torch

__all__ = ["load_file", "DSObject"]


class DSObject:
    """A DeepSpeed object as its pickle described it: `args` (what it was built from: an enum's
    value, a namedtuple's fields) and its __dict__ state as attributes. `ds_class` names the
    class DeepSpeed pickled."""

    ds_class = "deepspeed.?"

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.args, obj.kwargs = args, kwargs
        return obj

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:     # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.state = state

    @property
    def value(self):
        """An enum's value (ZeroStageEnum(2).value == 2)."""
        return self.args[0] if self.args else None

    def __repr__(self):
        return f"<{self.ds_class} {self.args or ''} {sorted(k for k in vars(self))}>"


_stand_ins = {}


def _stand_in(module, name):
    key = f"{module}.{name}"
    if key not in _stand_ins:
        _stand_ins[key] = type(name, (DSObject,), {"ds_class": key})
    return _stand_ins[key]


class Unpickler(pickle.Unpickler):
    """pickle.Unpickler with DeepSpeed's classes replaced by stand-ins (DSObject)."""

    def find_class(self, module, name):
        if module == "deepspeed" or module.startswith("deepspeed."):
            return _stand_in(module, name)
        return super().find_class(module, name)


def load(f, **kwargs):
    """pickle.load with the stand-ins: torch.load's pickle_module.load, which it calls for the
    parts of a file outside its zip reader (the legacy, pre-1.6 format)."""
    return Unpickler(f, **kwargs).load()




def load_file(path):
    """torch.load(path) on the CPU with DeepSpeed's classes as stand-ins. Not weights_only: a
    DeepSpeed checkpoint holds the client's own objects too (client_state), as its loader
    trusts them; the file is trusted as the code that wrote it. A file torch cannot read raises
    DamagedFileError naming it (torch's own errors name no file: "PytorchStreamReader failed
    reading zip archive", "invalid load key", "Ran out of input", an OSError "[Errno 22] Invalid
    argument" without a file name from its zip reader on some truncations)."""
    try:
        out = _load_file(path)
        bad = _failed_crc(path)
        if bad is None:
            return out
        damage = ValueError(f"its entry {bad!r} fails its CRC-32 check")
    # FileNotFoundError and the like name the file; an ImportError or AttributeError is a
    # client_state class this process cannot import, not damage
    except OSError as ex:
        # torch's zip reader on some truncated files: "[Errno 22] Invalid argument", no file
        # name; any other OSError (a missing file, a failing disk's EIO) is itself
        if ex.filename is not None or ex.errno != errno.EINVAL:
            raise
        damage = ex
    except (MemoryError, ImportError, AttributeError):
        raise
    except Exception as ex:
        damage = ex
    from .ds_checkpoint import DamagedFileError    # (ds_checkpoint imports this module)
    raise DamagedFileError(f"zinc: {path}: not a readable torch file, truncated or damaged "
                           f"({type(damage).__name__}: {damage})") from damage


def _failed_crc(path):
    """The first entry of the zip file at path whose bytes fail their CRC-32 (torch's reader
    does not check them, so bytes flipped inside a tensor loaded as other values, in silence),
    or None. A file that is not a zip (the legacy format torch also reads) has none to check.
    Costs one more read of the file (the page cache holds it after torch's)."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.testzip()
    except zipfile.BadZipFile:
        return None


def _load_file(path):
    try:
        return torch.load(path, map_location="cpu", pickle_module=sys.modules[__name__],
                          weights_only=False)
    except ModuleNotFoundError as ex:
        if ex.name != "deepspeed" and not str(ex.name).startswith("deepspeed."):
            raise
    # torch 1.13's torch.load replaces the pickle_module it is given by pickle unless
    # weights_only is set (fixed in torch 2.0), so it would import deepspeed: its zip reader
    # is called here with ours. DeepSpeed writes the zip format (torch.save's default since
    # torch 1.6), the only one this path reads.
    from torch import serialization as ser
    with ser._open_file_like(path, "rb") as f, ser._open_zipfile_reader(f) as z:
        return ser._load(z, "cpu", sys.modules[__name__])
