"""zinc.checkpoint.utils — DeepSpeed's clone_tensors_for_torch_save, which accelerate applies to
a model's state_dict before torch.save."""
import torch


def clone_tensors_for_torch_save(item, device=torch.device("cpu")):
    """`item` with every tensor in it (in dicts, lists and tuples, at any depth) replaced by a
    detached copy on `device`, so that torch.save writes each tensor's own elements rather than
    the whole storage a view shares (zinc's parameters view one buffer per group). Other values
    are returned as they are; a dict keeps its type (an OrderedDict state_dict stays one)."""
    if torch.is_tensor(item):
        return item.detach().clone().to(device)
    if isinstance(item, (list, tuple)):
        return type(item)(clone_tensors_for_torch_save(v, device) for v in item)
    if isinstance(item, dict):
        return type(item)({k: clone_tensors_for_torch_save(v, device) for k, v in item.items()})
    return item
