"""ckpt.check_reload: the classic practical check that a checkpoint
reloads, run as one call: the same input through the original model and
through a fresh model reloaded from the file, in eval mode, outputs
bitwise equal."""
import os

from . import errors


class ReloadReport:
    """What check_reload compared: `path`, `outputs` (how many tensors the
    model returned), `equal` (always True when returned: a difference
    raises), `match` (the ckpt.MatchReport of the reload)."""

    __slots__ = ("path", "outputs", "equal", "match")

    def __init__(self, path, outputs, equal, match):
        self.path, self.outputs, self.equal, self.match = path, outputs, equal, match

    def __repr__(self):
        return "<ckpt.ReloadReport %s: %d output tensor(s) %s>" % (
            self.path, self.outputs, "equal" if self.equal else "differ")


def _tensors(out, where="output"):
    """The tensors of a model output (a tensor, or tuples, lists and dicts
    of them; other leaves are compared as values), with their places."""
    import torch
    if isinstance(out, torch.Tensor):
        return [(where, out)]
    if isinstance(out, dict):
        return [x for k in out for x in _tensors(out[k], "%s[%r]" % (where, k))]
    if isinstance(out, (list, tuple)):
        return [x for i, v in enumerate(out) for x in _tensors(v, "%s[%d]" % (where, i))]
    return [(where, out)]


def _same(a, b):
    """Bitwise equality (NaNs included) of two outputs' leaves."""
    import torch
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a == b
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    x, y = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    return torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)) \
        if x.numel() and x.dtype != torch.bool else torch.equal(x, y)


def _difference(a, b):
    """How two leaves that are not the same differ, in words: dtype or
    shape, else the largest absolute difference and how many elements
    differ (NaN against a number counts, and makes the largest nan)."""
    import torch
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return "%r against %r" % (b, a)
    if a.dtype != b.dtype or a.shape != b.shape:
        return "%s %s against the original's %s %s" % (
            str(b.dtype).replace("torch.", ""), list(b.shape),
            str(a.dtype).replace("torch.", ""), list(a.shape))
    x, y = a.detach().cpu(), b.detach().cpu()
    if x.dtype is torch.bool:
        x, y = x.to(torch.uint8), y.to(torch.uint8)
    if not (x.is_floating_point() or x.is_complex()):
        x, y = x.to(torch.float64), y.to(torch.float64)
    wide = torch.complex128 if x.is_complex() else torch.float64
    diff = (x.to(wide) - y.to(wide)).abs()
    nan = x.isnan() ^ y.isnan()
    same_nan = x.isnan() & y.isnan()
    n = int(((diff != 0) & ~same_nan | nan).sum())
    big = float("nan") if bool(nan.any()) else float(diff[~same_nan].max()) if n else 0.0
    return "max abs difference %.6g (%d of %d elements differ)" % (big, n, x.numel())


def _suspects(model):
    """ckpt.audit's findings that explain an output that changes on
    reload: tensors the file does not carry, or carries apart."""
    from ._module import audit
    return [f for f in audit(model)
            if f.kind in ("plain-attribute", "non-persistent-buffer", "shared-storage")]


def _reference(path):
    """The checkpoint at `path` as the real loader reads it: torch.load
    (weights_only=True, onto the CPU), or safetensors.torch.load_file."""
    import torch
    from ._load import _weights_path
    file = _weights_path(os.fspath(path))
    if file.endswith(".safetensors"):
        try:
            from safetensors.torch import load_file  # the peer's own reader
        except ImportError:
            raise errors.InvalidArgumentError(
                "the original model is loaded with safetensors' own reader, which is not "
                "installed: pass model= (the model that was saved)", file) from None
        return load_file(file)
    return torch.load(file, map_location="cpu", weights_only=True)


def check_reload(make_model, path, example_input, *, model=None):
    """Runs `example_input` through the original model and through a fresh
    model from `make_model()` reloaded from `path` with
    ckpt.load_state_dict (strict), both in eval mode under no_grad, and
    compares the outputs bitwise. The original is `model` when given (the
    live model that was saved), else another model from make_model loaded
    by the real loader (torch.load with weights_only=True, or safetensors'
    load_file for safetensors). example_input is one tensor or a tuple of
    positional arguments. Returns a ReloadReport; raises
    ckpt.MismatchError naming the first output that differs and by how
    much (largest absolute difference, elements that differ), with the
    ckpt.audit findings that would explain it (tensors held as plain
    attributes, non-persistent buffers, shared storages; e.output,
    e.findings), or the error of a load that fails
    (ckpt.KeyMismatchError: missing or unexpected keys)."""
    import torch
    from ._match import load_state_dict
    path = os.fspath(path)
    if model is None:
        model = make_model()
        load_state_dict(model, _reference(path))
    fresh = make_model()
    if fresh is model:
        raise errors.InvalidArgumentError(
            "make_model returned the model it returned before: the reload needs a fresh one",
            path)
    match = load_state_dict(fresh, path)
    args = example_input if isinstance(example_input, tuple) else (example_input,)
    outs = []
    for m in (model, fresh):
        was = m.training
        m.eval()
        try:
            with torch.no_grad():
                outs.append(_tensors(m(*args)))
        finally:
            m.train(was)
    want, got = outs
    if len(want) != len(got):
        raise errors.MismatchError("the reloaded model returns %d outputs, the original %d"
                                   % (len(got), len(want)), path)
    for (where, a), (_, b) in zip(want, got):
        if not _same(a, b):
            suspects = _suspects(model)
            e = errors.MismatchError(
                "%s differs after reloading into a fresh model (eval mode, same input): %s%s"
                % (where, _difference(a, b),
                   "; ckpt.audit(model) names what the file does not hold as the model "
                   "does: " + "; ".join(f.message for f in suspects) if suspects else
                   "; ckpt.audit(model) finds nothing the file leaves out (a model that is "
                   "not the one saved, or a forward that depends on more than its state?)"),
                path)
            e.output, e.findings = where, tuple(suspects)
            raise e
    return ReloadReport(path, len(want), True, match)
