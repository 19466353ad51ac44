"""zinc.checkpoint.utils — DeepSpeed's clone_tensors_for_torch_save, which accelerate applies to
a model's state_dict before torch.save."""
import torch


def clone_tensors_for_torch_save(item, device=torch.device("cpu")):
    """`item` with every tensor in it (in dicts, lists and tuples, at any depth) replaced by a
    detached copy on `device`, so that torch.save writes each tensor's own elements rather than
    the whole storage a view shares (zinc's parameters view one buffer per group). As
    DeepSpeed's: a list or tuple (a namedtuple, torch.Size) comes back a plain list or tuple, a
    dict keeps its type (an OrderedDict state_dict stays one), other values are returned as
    they are. (DeepSpeed's returns a CUDA tensor itself where `device` is "cuda" and the tensor
    is on cuda:0; this one always copies.)"""
    if torch.is_tensor(item):
        device = torch.device(device)
        if item.device == device:
            return item.detach().clone()
        return item.detach().to(device)       # (a copy: another device)
    if isinstance(item, list):
        return [clone_tensors_for_torch_save(v, device) for v in item]
    if isinstance(item, tuple):
        return tuple(clone_tensors_for_torch_save(v, device) for v in item)
    if isinstance(item, dict):
        return type(item)({k: clone_tensors_for_torch_save(v, device) for k, v in item.items()})
    return item
