"""_memory.py — torch tensors over zinc's memory (zero-copy), through DLPack.

Why DLPack and not torch.frombuffer / __cuda_array_interface__: those make the tensor's storage
hold a Python object, and freeing it needs the GIL. When an exception leaves a backward half
done (a hook raised, Ctrl-C), torch keeps the rest of the graph in thread-local state until the
process exits, after Python is gone: with such a tensor saved in it, torch 1.13 then hangs for
ever at exit and torch 2.x crashes (tests/python/test_torch_api.py checks the exit). A DLPack
capsule gives torch a C deleter instead: the 72-byte descriptor below, malloc'd, released by
libzinc's zinc_dlpack_deleter, no Python involved. Each view holds the engine's memory
(zinc_memory_hold, released by that deleter): a tensor the script keeps past the engine (an
entry of model.state_dict(), a .detach()) keeps its values, as torch's storages do, where it
read freed memory before.
Also what the engine's parts share to describe such a tensor: the torch dtype of a zinc dtype
code, a shape's element count.
"""
import ctypes
import struct

import torch
import torch.utils.dlpack

from ._lib import lib

# DLManagedTensor (dlpack.h, the unversioned "dltensor" capsule every torch release reads):
#   DLTensor {void *data; DLDevice {int32 device_type, device_id}; int32 ndim;
#             DLDataType {uint8 code, bits; uint16 lanes}; int64 *shape; int64 *strides;
#             uint64 byte_offset}                                          64-bit layout: 48 bytes
#   void *manager_ctx; void (*deleter)(DLManagedTensor *);                              +16 bytes
# followed here by the one-element shape the descriptor points at (+8): one malloc, one free.
_DESCRIPTOR = struct.Struct("=QiiiBBHQQQQQq")
_SHAPE_AT = 64
_KDL_CPU, _KDL_CUDA = 1, 2
# zinc dtype code -> DLPack (type code, bits): fp32, fp16 (kDLFloat = 2), bf16 (kDLBfloat = 4).
_DL_DTYPE = {0: (2, 32), 1: (2, 16), 2: (4, 16)}

_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_DELETER = ctypes.cast(lib.zinc_dlpack_deleter, ctypes.c_void_p).value
_capsule = ctypes.pythonapi.PyCapsule_New
_capsule.restype = ctypes.py_object
_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
assert _DESCRIPTOR.size == _SHAPE_AT + 8 and ctypes.sizeof(ctypes.c_void_p) == 8

# zinc dtype code -> the torch dtype: fp32, fp16, bf16.
_TORCH_DTYPE = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}
# DeepSpeed's CASTABLE_DTYPES: the parameters its fp16/bf16 engine casts to the working dtype
_CASTABLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def contiguous_strides(shape):
    """The strides (in elements) of a contiguous tensor of this shape."""
    strides, n = [], 1
    for d in reversed(tuple(shape)):
        strides.append(n)
        n *= max(d, 1)
    return tuple(reversed(strides))


def dtype_size(code):
    """Bytes of one element of zinc dtype code."""
    return _DL_DTYPE[code][1] // 8


def view(engine, ptr, numel, code, shape, device=None):
    """A torch tensor over the memory of zinc engine `engine` (its handle) at ptr (numel
    elements of zinc dtype code), shaped; device memory of `device` when that is a CUDA device,
    else host memory. The tensor holds that memory until torch frees it (zinc_memory_hold)."""
    cuda = device is not None and device.type == "cuda"
    dl_code, bits = _DL_DTYPE[code]
    raw = _libc.malloc(_DESCRIPTOR.size)
    if not raw:
        raise MemoryError("zinc: out of host memory for a tensor descriptor")
    hold = lib.zinc_memory_hold(engine)
    ctypes.memmove(raw, _DESCRIPTOR.pack(
        ptr or 0, _KDL_CUDA if cuda else _KDL_CPU, (device.index or 0) if cuda else 0, 1,
        dl_code, bits, 1, raw + _SHAPE_AT, 0, 0, hold or 0, _DELETER, numel), _DESCRIPTOR.size)
    # (Should torch refuse the descriptor, it and the hold are left, not freed: whether torch
    # had taken it, and would call the deleter, is not knowable here. An unused hold only keeps
    # the engine's memory to the process's end.)
    t = torch.utils.dlpack.from_dlpack(_capsule(raw, b"dltensor", None))
    if t.data_ptr() != (ptr or 0) or (cuda and t.device.index != (device.index or 0)):
        raise RuntimeError(f"zinc: a view of zinc's memory at {ptr:#x} became a copy or landed "
                           f"on {t.device}, not {device or 'cpu'}")
    return t.view(shape)
