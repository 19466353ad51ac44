"""zinc.utils.set_z3_leaf_modules — DeepSpeed's ZeRO-3 leaf modules (deepspeed/utils/
z3_leaf_module.py, 0.19.8): a module flagged as a leaf (`module._z3_leaf = True`, DeepSpeed's
attribute, so a model flagged by either package is flagged for both) has the parameters of all
its submodules gathered when its forward starts and released when it ends, instead of each
submodule gathering its own. DeepSpeed made it for mixture-of-experts blocks, whose experts run
in a data-dependent order (or not at all), and for deeply nested small modules.

zinc's stage 3 honours it (_stage3.py): at initialize a leaf's forward hooks gather the groups
of the whole subtree, and its submodules get no hooks of their own; a leaf inside a leaf counts
as part of the outer one. Flags set after zinc.initialize have no effect on that engine (as in
DeepSpeed, whose hooks are also placed at initialize). Stages 0-2 hold every parameter anyway:
the flag changes nothing there."""
import torch


def z3_leaf_module(model):
    """Whether `model` is flagged as a leaf."""
    return bool(getattr(model, "_z3_leaf", False))


def get_z3_leaf_modules(model):
    """The modules of `model` flagged as leaves, in module order."""
    return [m for m in model.modules() if z3_leaf_module(m)]


def set_z3_leaf_module(model, flag):
    model._z3_leaf = flag


def _matches(mod, classes):
    for c in classes:
        if isinstance(c, type) and isinstance(mod, c):
            return True
        if isinstance(c, str):
            cls = type(mod)
            if c in (cls.__name__, f"{cls.__module__}.{cls.__qualname__}"):
                return True
    return False


def _set(model, classes, flag, raise_if_not_found, fn):
    classes = list(classes)
    bad = [c for c in classes if not isinstance(c, (type, str))]
    if bad:
        raise TypeError(f"zinc.utils.{fn}: leaf_module_classes must be classes or class names, "
                        f"got {bad}")
    found = [m for m in model.modules() if _matches(m, classes)]
    for m in found:
        m._z3_leaf = flag
    if not found and raise_if_not_found:
        raise ValueError(f"zinc.utils.{fn}: no module of the classes {classes} in the model")
    return found


def set_z3_leaf_modules(model: torch.nn.Module, leaf_module_classes, raise_if_not_found=True):
    """Flags every module of `model` that is an instance of one of `leaf_module_classes`
    (classes, or class names: the plain or the module-qualified name) as a ZeRO-3 leaf; returns
    them. None found: ValueError unless raise_if_not_found is False."""
    return _set(model, leaf_module_classes, True, raise_if_not_found, "set_z3_leaf_modules")


def unset_z3_leaf_modules(model: torch.nn.Module, leaf_module_classes, raise_if_not_found=True):
    """Clears the flag on those modules; returns them."""
    return _set(model, leaf_module_classes, False, raise_if_not_found, "unset_z3_leaf_modules")


def _set_by(model, keys, flag, raise_if_not_found, fn, match):
    """Flags the modules whose name in model.named_modules() matches a key (`match(name,
    key)`); returns (the modules, each once, in module order of the keys; the keys nothing
    matched). Keys nothing matched: ValueError naming them unless raise_if_not_found is
    False."""
    named = list(model.named_modules())
    found, missing, seen = [], [], set()
    for key in keys:
        hits = [m for name, m in named if match(name, key)]
        if not hits:
            missing.append(key)
        for m in hits:
            m._z3_leaf = flag
            if id(m) not in seen:
                seen.add(id(m))
                found.append(m)
    if missing and raise_if_not_found:
        raise ValueError(f"zinc.utils.{fn}: no module named {missing} in the model")
    return found, missing


def set_z3_leaf_modules_by_name(model, module_names, flag=True, raise_if_not_found=True):
    """DeepSpeed's: flags (or with flag=False clears) the modules with these names in
    model.named_modules(); returns (modules, names not found)."""
    return _set_by(model, module_names, flag, raise_if_not_found,
                   "set_z3_leaf_modules_by_name", lambda name, key: name == key)


def set_z3_leaf_modules_by_suffix(model, module_name_suffixes, flag=True,
                                  raise_if_not_found=True):
    """DeepSpeed's: the same for the modules whose name ends with one of the suffixes."""
    return _set_by(model, module_name_suffixes, flag, raise_if_not_found,
                   "set_z3_leaf_modules_by_suffix", lambda name, key: name.endswith(key))
