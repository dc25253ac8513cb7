"""What a torch.nn.Module expects from a checkpoint (manifest) and what a
save of it would lose or surprise (audit)."""
from dataclasses import dataclass
from typing import Tuple

from ._load import _TORCH_DTYPES


def dtype_name(dt):
    """The ckpt (safetensors) name of a torch dtype: torch.float32 -> "F32"."""
    import torch
    for name, attr in _TORCH_DTYPES.items():
        if getattr(torch, attr, None) == dt:
            return name
    return str(dt).replace("torch.", "")


def _entry(name, t):
    return {"name": name, "dtype": dtype_name(t.dtype), "shape": list(t.shape),
            "nbytes": t.numel() * t.element_size()}


def manifest(module):
    """The expected-keys spec of `module` for `ckpt match --expect` (the
    layout of `ckpt inspect --json`): "tensors" lists every state_dict()
    entry (name, dtype, shape, nbytes) in state_dict order; "ties" the
    groups of names that are one parameter or buffer (tied weights, e.g.
    an LM head sharing the embedding: a file that stores it once still
    loads, and `ckpt match` says so); buffers registered with
    persistent=False are not saved, so they are not expected: they are
    listed apart under "non_persistent" (ckpt ignores that key);
    "batchnorm_counters" the num_batches_tracked of its BatchNorms, which
    torch fills itself from a checkpoint that lacks them and gives the
    module no version 2 (`ckpt match` says "defaulted by the module").
    Write it with json.dump."""
    import torch
    sd = {k: v for k, v in module.state_dict(keep_vars=True).items()
          if isinstance(v, torch.Tensor)}
    return {"file": type(module).__name__, "format": "module",
            "tensors": [_entry(k, v) for k, v in sd.items()], "ties": ties(sd),
            "values": [], "metadata": None,
            "batchnorm_counters": list(batchnorm_counters(module, sd)),
            "non_persistent": [_entry(n, b) for n, b in _non_persistent(module)]}


def batchnorm_counters(module, expected):
    """The num_batches_tracked buffers that torch's BatchNorm (_NormBase,
    tracking running stats) puts back itself when a state dict lacks them
    and its _metadata gives the module no version 2 (state dicts saved
    before torch 0.4.1, plain dicts, safetensors)."""
    from torch.nn.modules.batchnorm import _NormBase
    out = []
    for name, mod in module.named_modules():
        key = (name + "." if name else "") + "num_batches_tracked"
        if isinstance(mod, _NormBase) and mod.track_running_stats and key in expected:
            out.append(key)
    return tuple(out)


def ties(state, key=None):
    """Groups (lists, in state order, groups by first name) of the names of
    `state` ({name: tensor}, e.g. state_dict(keep_vars=True)) that are one
    tensor: the same object, or the same memory with the same dtype, shape
    and strides (a state_dict() detaches each name separately). The "ties"
    of a manifest; ckpt_manifest_tie for the key audit. key(tensor) may
    replace that rule (placeholders of a file: their storage)."""
    groups = {}
    for name, t in state.items():
        groups.setdefault((key or _tie_key)(t), []).append(name)
    return [g for g in groups.values() if len(g) > 1]


def _non_persistent(module):
    for prefix, m in module.named_modules():
        names = getattr(m, "_non_persistent_buffers_set", ())
        for n in sorted(names):
            b = m._buffers.get(n)
            if b is not None:
                yield (prefix + "." if prefix else "") + n, b


@dataclass(frozen=True)
class AuditFinding:
    """kind: "plain-attribute" (a tensor a submodule holds in an ordinary
    attribute: not in state_dict, so never saved), "non-persistent-buffer"
    (registered with persistent=False: not saved), "tied-parameters"
    (one parameter under several names, as a tied embedding and head: saved
    once, restored under each name; the normal case, never warned about),
    "shared-storage" (different parameters sharing memory: a reload
    leaves them apart),
    "mixed-dtypes" (floating tensors of several dtypes) or "wrapper-prefix"
    (a torch.compile, DataParallel or DistributedDataParallel wrapper whose
    segment, "_orig_mod." or "module.", every saved key under it carries);
    names: the qualified names involved; message: one sentence."""
    kind: str
    names: Tuple[str, ...]
    message: str

    def __str__(self):
        return self.message


def _tie_key(t):
    """Same memory, same dtype and layout: tied (views of one flat buffer
    are not)."""
    import torch
    if not isinstance(t, torch.Tensor):  # a RawTensor: a value of its own
        return ("id", id(t))
    ptr = t.data_ptr() if t.device.type != "meta" else 0
    return (ptr, t.dtype, tuple(t.shape), t.stride()) if ptr else ("id", id(t))


def _desc(t):
    return "%s %s" % (dtype_name(t.dtype), list(t.shape))


def _plain_tensors(value, name):
    """(name, tensor) for a tensor held directly or one level inside a list,
    tuple or dict attribute."""
    import torch
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if isinstance(v, torch.Tensor):
                yield "%s[%d]" % (name, i), v
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, torch.Tensor):
                yield "%s[%r]" % (name, k), v


def audit(module):
    """What saving `module` (its state_dict) would lose or surprise with:
    a list of AuditFinding, empty when nothing. The classic trap is a cached
    table (RoPE cos/sin, attention masks) assigned as `self.cos = ...`: it
    is not in state_dict, so a checkpoint silently lacks it."""
    out = []
    saved = {}  # id -> name of every parameter and buffer object
    for prefix, m in module.named_modules(remove_duplicate=False):
        for n, t in list(m._parameters.items()) + list(m._buffers.items()):
            if t is not None:
                saved.setdefault(id(t), (prefix + "." if prefix else "") + n)
    for prefix, m in module.named_modules():
        for attr, value in vars(m).items():
            for name, t in _plain_tensors(value, attr):
                if id(t) in saved:
                    continue  # an alias of a saved tensor
                full = (prefix + "." if prefix else "") + name
                out.append(AuditFinding(
                    "plain-attribute", (full,),
                    "%s (%s, in %s) is a plain tensor attribute, not a parameter or "
                    "buffer: state_dict() leaves it out, so a checkpoint does not hold it "
                    "(register_buffer(name, t) saves it; persistent=False marks a table "
                    "the constructor recomputes)" % (full, _desc(t), type(m).__name__)))
    for full, b in _non_persistent(module):
        out.append(AuditFinding(
            "non-persistent-buffer", (full,),
            "%s (%s) is a buffer registered with persistent=False: it is not saved "
            "and must be rebuilt by the module's constructor" % (full, _desc(b))))
    groups = {}  # memory -> (names, ids of the Parameter objects)
    for prefix, m in module.named_modules(remove_duplicate=False):
        for n, p in m._parameters.items():
            if p is None:
                continue
            key = _tie_key(p)
            name = (prefix + "." if prefix else "") + n
            names, objs = groups.setdefault(key, ([], set()))
            objs.add(id(p))
            if name not in names:
                names.append(name)
    for names, objs in groups.values():
        if len(names) < 2:
            continue
        if len(objs) == 1:  # one Parameter under several names: a tie
            out.append(AuditFinding(
                "tied-parameters", tuple(names),
                "%s are one parameter (tied): the checkpoint stores it once and "
                "load_state_dict restores every name" % ", ".join(names)))
        else:
            out.append(AuditFinding(
                "shared-storage", tuple(names),
                "%s are %d different parameters sharing one tensor's memory: the "
                "checkpoint stores it once and a reload fills each, but a model built anew "
                "holds them apart (its constructor does not tie them), so they stop sharing "
                "after a reload; make them one parameter (b.weight = a.weight) to tie them"
                % (", ".join(names), len(objs))))
    by_dtype = {}
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if t.is_floating_point():
            by_dtype.setdefault(dtype_name(t.dtype), []).append(name)
    if len(by_dtype) > 1:
        parts = sorted(by_dtype.items(), key=lambda kv: -len(kv[1]))
        names = tuple(n for _, ns in parts[1:] for n in ns)
        out.append(AuditFinding(
            "mixed-dtypes", names,
            "floating tensors of %d dtypes: %s" % (len(parts), "; ".join(
                "%s x%d (%s%s)" % (dt, len(ns), ", ".join(ns[:4]), ", ..." if len(ns) > 4 else "")
                for dt, ns in parts))))
    out.extend(_wrappers(module))
    return out


def _wrappers(module):
    """A "wrapper-prefix" finding per torch.compile (OptimizedModule: its
    keys gain "_orig_mod.") or DataParallel / DistributedDataParallel
    ("module.") wrapper in module, outermost first."""
    import torch
    parallel = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
    out, keys = [], None
    for prefix, m in module.named_modules():
        if isinstance(m, parallel):
            seg, what = "module.", type(m).__name__
        elif type(m).__name__ == "OptimizedModule" and isinstance(
                getattr(m, "_orig_mod", None), torch.nn.Module):
            seg, what = "_orig_mod.", "torch.compile"
        else:
            continue
        at = prefix + "." if prefix else ""
        keys = list(module.state_dict()) if keys is None else keys
        first = next((k for k in keys if k.startswith(at + seg)), None)
        if first is None:
            continue  # nothing saved under it
        out.append(AuditFinding(
            "wrapper-prefix", (at + seg[:-1],),
            "%s is a %s wrapper: every key under it carries '%s' (%s), which a plain "
            "model's load_state_dict(strict=True) refuses; save the wrapped module (its "
            "%s attribute) instead; ckpt.load_state_dict strips the segment when that "
            "completes the match" % (prefix or "the model", what, seg, first, seg[:-1])))
    return out
