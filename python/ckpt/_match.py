"""ckpt.load_state_dict: the C key audit (ckpt_match) in front of
torch's load_state_dict, so a checkpoint either loads completely or not at
all, with the full report either way."""
import ctypes
import dataclasses
import os
import warnings
from dataclasses import dataclass, field
from typing import Optional, Tuple

from . import errors
from ._lib import (MatchOptions_, c_char_p, c_u64, c_void_p, check, fspath,
                   lib, options, text)
from ._load import _TORCH_DTYPES
from ._module import batchnorm_counters, dtype_name, ties


(MISSING, UNEXPECTED, SHAPE_MISMATCH, DTYPE_MISMATCH, ALLOWED_MISSING,
 ALLOWED_UNEXPECTED, TIED, DEFAULTED) = range(8)


@dataclass(frozen=True)
class Mismatch:
    """A key on both sides whose shape or dtype differs."""
    name: str              # the model's name
    checkpoint_name: str   # the checkpoint's (differs when a rewrite applied)
    checkpoint_dtype: str
    checkpoint_shape: Tuple[int, ...]
    expected_dtype: str
    expected_shape: Tuple[int, ...]


def _floating(name):
    """1 for a ckpt dtype name ("F32", "BF16", "F8_E4M3"...) that is a
    floating-point dtype of the installed torch: copy_ casts between them."""
    import torch
    dt = getattr(torch, _TORCH_DTYPES.get(name, ""), None)
    return isinstance(dt, torch.dtype) and dt.is_floating_point


def _loses_precision(src, dst):
    """1 when casting floating-point dtype `src` into `dst` (ckpt names)
    can change a value: fewer mantissa bits, a smaller range or a larger
    smallest normal (torch.finfo)."""
    import torch
    try:
        a, b = (torch.finfo(getattr(torch, _TORCH_DTYPES[n])) for n in (src, dst))
    except (KeyError, AttributeError, TypeError):
        return True
    return b.eps > a.eps or b.max < a.max or b.tiny > a.tiny


@dataclass(frozen=True)
class MatchReport:
    """The key audit of a checkpoint against a model (ckpt_match).
    matched: (model name, checkpoint name) pairs that load; missing: model
    keys the checkpoint lacks; unexpected: checkpoint keys the model lacks;
    shape_mismatch / dtype_mismatch: Mismatch records; allowed_missing /
    allowed_unexpected: exceptions the caller allowed; tied: (name,
    partner) for model keys tied to a matched key (one parameter: filled
    through it, so not missing), for unexpected checkpoint keys sharing
    a matched tensor (still unexpected) and for missing keys only the
    checkpoint's metadata declares equal to a matched key (safetensors
    save_model's aliases; still missing: the model does not tie them, and
    a loader that ignores the declaration leaves them at their init;
    declared_ties lists them), as ckpt_match and `ckpt match` list them; rewrite: the key rewrite applied ("strip 'module.'") or None;
    candidates: rewrites considered; unapplied_rewrite: the best rewrite
    when it was not applied (it does not make the match complete); warning: "nothing would load..." or
    None; source: where in the checkpoint the state dict was ("" = root);
    ignored: the top-level entries the applied rewrite leaves out
    (ckpt_match_ignored: what `ckpt match` lists); defaulted: model keys
    the model fills itself when the checkpoint lacks them, as torch's
    load_state_dict does (a BatchNorm's num_batches_tracked in a state
    dict saved before BatchNorm's version 2, or without _metadata); cast:
    with dtype="model", the matched keys whose floating-point dtype differs
    from their parameter's, each loaded cast into it (Mismatch records;
    lossy_casts: those the cast loses precision or range for);
    rewrite_missing: the model keys unapplied_rewrite leaves missing when
    every checkpoint key matches through it (strict=False applies such a
    rewrite; strict=True refuses, naming them); tie_note: the model's ties
    the checkpoint holds as separate tensors, whose values a copying load
    loses but the last one's (ckpt_match_tie_note: `ckpt match`'s note),
    or None; rewrite_note: what the best rewrite, not applied, would leave
    missing while every checkpoint key pairs (ckpt_match_rewrite_note), or
    None."""
    complete: bool
    matched: Tuple[Tuple[str, str], ...] = ()
    missing: Tuple[str, ...] = ()
    unexpected: Tuple[str, ...] = ()
    shape_mismatch: Tuple[Mismatch, ...] = ()
    dtype_mismatch: Tuple[Mismatch, ...] = ()
    allowed_missing: Tuple[str, ...] = ()
    allowed_unexpected: Tuple[str, ...] = ()
    tied: Tuple[Tuple[str, str], ...] = ()
    rewrite: Optional[str] = None
    candidates: Tuple[str, ...] = ()
    unapplied_rewrite: Optional[str] = None
    warning: Optional[str] = None
    source: str = ""
    file: str = field(default="", compare=False)
    ignored: Tuple[str, ...] = ()
    defaulted: Tuple[str, ...] = ()
    cast: Tuple[Mismatch, ...] = ()
    rewrite_missing: Tuple[str, ...] = ()
    tie_note: Optional[str] = None
    rewrite_note: Optional[str] = None

    @property
    def lossy_casts(self):
        """The cast keys whose cast loses precision or range (float32 into
        bfloat16, bfloat16 into float16...): torch's copy_ rounds them."""
        return tuple(m for m in self.cast if _loses_precision(m.checkpoint_dtype, m.expected_dtype))

    @property
    def declared_ties(self):
        """(name, partner) of the tied pairs whose name is still missing
        (or allowed missing): a tie the checkpoint declares and the model
        does not make; nothing fills the name."""
        missing = set(self.missing) | set(self.allowed_missing)
        return tuple(t for t in self.tied if t[0] in missing)

    def summary(self):
        unexpected = set(self.unexpected) | set(self.allowed_unexpected) | \
            set(self.missing) | set(self.allowed_missing)
        n = len(self.matched) + len(self.missing) + len(self.shape_mismatch) + \
            len(self.allowed_missing) + len(self.defaulted) + \
            len([t for t, _ in self.tied if t not in unexpected])
        n += len([m for m in self.dtype_mismatch
                  if m.name not in {s.name for s in self.shape_mismatch}])
        head = "%d of %d expected keys match" % (len(self.matched), n)
        # as `ckpt match` words it: the count alone reads as a key short; a
        # key tied to one that differs in dtype alone loads, cast, but is
        # not tied to a matched key
        cast = {m.name for m in self.dtype_mismatch}
        ties = [p for t, p in self.tied if t not in unexpected]
        tied = len([p for p in ties if p not in cast])
        if tied:
            head += ", %d tied to a matched key" % tied
        if len(ties) > tied:
            head += ", %d tied to a key that loads with a dtype cast" % (len(ties) - tied)
        if self.defaulted:
            more = ", ..." if len(self.defaulted) > 1 else ""
            head += ", %d filled by BatchNorm as in torch (%s%s)" % (
                len(self.defaulted), self.defaulted[0], more)
        parts = [head]
        if self.rewrite:
            parts.append("rewrite: %s" % self.rewrite)
        elif self.rewrite_missing:  # misnamed, and a model key or two beyond
            parts.append("rewrite %s not applied: every checkpoint key matches through it, "
                         "leaving the model's %s missing; strict=False applies it and loads "
                         "the rest, as does allow_missing=%r" % (
                             self.unapplied_rewrite, ", ".join(self.rewrite_missing[:8]) +
                             (", ..." if len(self.rewrite_missing) > 8 else ""),
                             list(self.rewrite_missing[:8])))
        elif self.unapplied_rewrite:  # the keys may only be misnamed: say how
            parts.append("rewrite %s not applied (normalize=True applies a rewrite only when "
                         "it makes the match complete)" % self.unapplied_rewrite)
            if self.rewrite_note:
                parts.append("under that rewrite " + self.rewrite_note)

        def some(names):
            names = list(names)
            return ", ".join(names[:8]) + (", ... (%d)" % len(names) if len(names) > 8 else "")
        if self.missing:
            parts.append("missing: " + some(self.missing))
        if self.declared_ties:
            parts.append("declared tied by the checkpoint, not by the model (left at their "
                         "init): " + some("%s = %s" % t for t in self.declared_ties))
        if self.unexpected:
            parts.append("unexpected: " + some(self.unexpected))
        for label, items in (("shape mismatch", self.shape_mismatch),
                             ("dtype mismatch", self.dtype_mismatch)):
            if items:
                parts.append(label + ": " + some(
                    "%s (checkpoint %s %s, model %s %s)" % (
                        m.name, m.checkpoint_dtype, list(m.checkpoint_shape),
                        m.expected_dtype, list(m.expected_shape)) for m in items))
        if self.cast:
            lossy = self.lossy_casts
            parts.append("%d cast into the model's dtype as torch's load_state_dict casts" % (
                len(self.cast)) + ("" if not lossy else ", %d losing precision: %s" % (
                    len(lossy), some("%s (%s to %s)" % (m.name, m.checkpoint_dtype,
                                                          m.expected_dtype) for m in lossy))))
        cast = self._cast_hint()
        if cast:
            parts.append(cast)
        if self.warning:  # its count is the head's: said once
            parts.append(self.warning.split(": ")[0] if self.warning.endswith(
                ": %d of %d expected keys match" % (len(self.matched), n)) else self.warning)
        if len(self.candidates) > 1 and not self.rewrite:
            parts.append("ambiguous rewrites: " + some(self.candidates))
        if self.tie_note:
            parts.append("note: " + self.tie_note)
        return "; ".join(parts)

    def _cast_hint(self):
        """What to do when the only obstacle is a floating-point dtype
        (a bf16 or half checkpoint, a float32 or mixed-precision model):
        torch's load_state_dict casts silently, ckpt.load_state_dict on
        request, each tensor into its parameter's dtype (dtype=torch.X
        would cast every tensor to X, the matched ones of a mixed-precision
        model included)."""
        if not self.dtype_mismatch or self.shape_mismatch or not all(
                _floating(m.checkpoint_dtype) and _floating(m.expected_dtype)
                for m in self.dtype_mismatch):
            return None
        return ("to cast each floating-point tensor into its parameter's dtype as torch's "
                "load_state_dict would, pass dtype=\"model\"")

    def __str__(self):
        return self.summary()

    def __repr__(self):
        """Short, for a REPL: the verdict, each list's count and its first
        names (str() is the summary, the fields hold everything)."""
        def few(names):
            names = list(names)
            return " (%s%s)" % (", ".join(names[:3]), ", ..." if len(names) > 3 else "")
        parts = ["%d matched" % len(self.matched) +
                 (few(e for e, _ in self.matched) if self.complete else "")]
        for label, names in (("missing", self.missing), ("unexpected", self.unexpected),
                             ("shape mismatch", [m.name for m in self.shape_mismatch]),
                             ("dtype mismatch", [m.name for m in self.dtype_mismatch]),
                             ("cast", [m.name for m in self.cast]),
                             ("tied", [t for t, _ in self.tied]),
                             ("allowed missing", self.allowed_missing),
                             ("allowed unexpected", self.allowed_unexpected),
                             ("defaulted", self.defaulted)):
            if names:
                parts.append("%d %s%s" % (len(names), label, few(names)))
        if self.rewrite:
            parts.append("rewrite %s" % self.rewrite)
        if self.source:
            parts.append("source %r" % self.source)
        return "<ckpt.MatchReport %s: %s>" % ("complete" if self.complete else "INCOMPLETE",
                                              ", ".join(parts))

    # torch's names: module.load_state_dict returns _IncompatibleKeys, a
    # NamedTuple (missing_keys, unexpected_keys); code written for it
    # (`missing, unexpected = ...`, r.missing_keys, r[0]) works unchanged
    _fields = ("missing_keys", "unexpected_keys")

    @property
    def missing_keys(self):
        return list(self.missing)

    @property
    def unexpected_keys(self):
        return list(self.unexpected)

    def __iter__(self):
        return iter((self.missing_keys, self.unexpected_keys))

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return (self.missing_keys, self.unexpected_keys)[i]


def _tensors(obj, prefix, out, leaves=None):
    """Flattened tensors of obj, named as ckpt names them (RawTensor too:
    a dtype the installed torch lacks is still a key of the checkpoint);
    the names of its other leaves (a step counter, a scheduler's settings)
    appended to `leaves` when given: the C audit lists their top-level
    entries among those a rewrite ignores, as it does from the file
    (ckpt_manifest_add_leaf)."""
    import torch
    from ._load import RawTensor
    if isinstance(obj, dict):
        for k, v in obj.items():
            _tensors(v, prefix + (str(k),), out, leaves)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _tensors(v, prefix + (str(i),), out, leaves)
    elif isinstance(obj, (torch.Tensor, RawTensor)):
        out[".".join(prefix)] = obj
    elif prefix and leaves is not None:
        leaves.append(".".join(prefix))
    return out


def _roots(state):
    """(key, holds a weight) of each top-level entry of a loaded object
    (a dict): the C audit sets aside only entries holding no weight tensor
    themselves, as it does from the file (ckpt_manifest_add_root_entry): a
    flat state dict's "lm_head.weight" stays a key; a uint8 or bool tensor
    (torch.get_rng_state()'s) holds no weight."""
    if not isinstance(state, dict):
        return ()
    import torch
    from ._load import RawTensor
    out = []
    for k, v in state.items():
        if isinstance(v, (torch.Tensor, RawTensor)):
            dt = v.dtype if isinstance(v.dtype, str) else dtype_name(v.dtype)
            out.append((str(k), dt not in ("U8", "BOOL")))
        else:
            out.append((str(k), False))
    return tuple(out)


def _source(state, rep):
    """Where in `state` the dict the applied rewrite strips lies ("model"
    for {"model": state_dict, ...}), or "" (the root, or a prefix of flat
    keys such as DataParallel's "module.")."""
    if not rep.rewrite or not rep.matched:
        return ""
    e, c = rep.matched[0]
    if not c.endswith(e) or len(c) == len(e):
        return ""
    prefix = c[:len(c) - len(e)].rstrip(".")
    node = state
    for seg in prefix.split("."):
        node = {str(k): v for k, v in node.items()}.get(seg) if isinstance(node, dict) else None
    return prefix if isinstance(node, dict) else ""


def _key(name):
    return name.encode("utf-8", "surrogateescape")


class _Manifest:
    """A C manifest of {name: tensor}, with the groups of names that are
    one tensor recorded as ties (ckpt_manifest_tie): the key audit fills a
    missing name through a matched partner, as the CLI does from a
    manifest's "ties" or a file's shared storages; versions {module:
    version} of the state dicts' _metadata (ckpt_manifest_set_version) and
    counters, the names a BatchNorm fills itself
    (ckpt_manifest_add_batchnorm_counter), for the audit's rule on
    num_batches_tracked."""
    def __init__(self, name, tensors, tie_key=None, leaves=(), versions=None, counters=(),
                 meta=None, floating_as_one=False, roots=()):
        self.h = c_void_p()
        check(lib.ckpt_manifest_new(ctypes.byref(self.h), os.fsencode(name)))
        try:
            if meta:  # the file's metadata: the aliases it declares
                check(lib.ckpt_manifest_set_metadata(self.h, meta), name)
            for n, t in tensors.items():
                shape = list(t.shape)
                dims = (c_u64 * max(1, len(shape)))(*shape)
                dt = t.dtype if isinstance(t.dtype, str) else dtype_name(t.dtype)  # RawTensor
                if floating_as_one and _floating(dt):
                    dt = _FLOATING
                check(lib.ckpt_manifest_add(self.h, _key(n), dt.encode(),
                                            len(shape), dims), name)
            for n in leaves:
                check(lib.ckpt_manifest_add_leaf(self.h, _key(n)), name)
            for n, weight in roots:
                check(lib.ckpt_manifest_add_root_entry(self.h, _key(n), 1 if weight else 0), name)
            for n, v in (versions or {}).items():
                check(lib.ckpt_manifest_set_version(self.h, _key(n), v), name)
            for n in counters:
                check(lib.ckpt_manifest_add_batchnorm_counter(self.h, _key(n)), name)
            for group in ties(tensors, tie_key):
                for other in group[1:]:
                    check(lib.ckpt_manifest_tie(self.h, _key(group[0]), _key(other)), name)
        except BaseException:
            self.free()
            raise

    def free(self):
        lib.ckpt_manifest_free(self.h)
        self.h = c_void_p()


# the one dtype every floating-point dtype is declared as when they are
# compared as one (dtype="model": copy_ casts between them)
_FLOATING = "F32"


def _globs(globs):
    enc = [g.encode() for g in globs]
    return (c_char_p * max(1, len(enc)))(*enc), len(enc)


def _shape(e):
    return tuple(e.shape[i] for i in range(e.ndim))


def match(tensors, expected, *, normalize=True, allow_missing=(), allow_unexpected=(),
          file="", tie_key=None, leaves=(), versions=None, counters=(), meta=None,
          floating_as_one=False, proposal=None, roots=()):
    """ckpt_match of checkpoint tensors {name: tensor} against the expected
    {name: tensor} of a model; tensors that are one tensor (tie_key: which
    of the checkpoint's are) are recorded as ties on each side; leaves:
    the names of the checkpoint's non-tensor leaves (see _tensors);
    versions: the checkpoint's module versions (see _versions); counters:
    the expected BatchNorm num_batches_tracked names; meta: the opened
    checkpoint (a ckpt_file handle) whose metadata declares aliases, or
    None; floating_as_one: floating-point dtypes compare as one (every
    one declared as F32 to the audit; the report then gives each key's own
    dtype, and `cast` the matched pairs whose dtypes differ); proposal: a
    dict that receives {checkpoint name: rewritten name} of a best rewrite
    not applied (ckpt_match_rewritten); roots: (key, holds a weight) of
    the checkpoint's top-level entries (see _roots). Returns a
    MatchReport."""
    ck = _Manifest(file or "checkpoint", tensors, tie_key, leaves, versions, meta=meta,
                   floating_as_one=floating_as_one, roots=roots)
    try:
        ex = _Manifest("model", expected, counters=counters, floating_as_one=floating_as_one)
    except BaseException:
        ck.free()
        raise
    r = c_void_p()
    try:
        opts = options(MatchOptions_)
        opts.normalize = 1 if normalize else 0
        am, opts.nallow_missing = _globs(allow_missing)
        au, opts.nallow_unexpected = _globs(allow_unexpected)
        opts.allow_missing, opts.allow_unexpected = am, au
        check(lib.ckpt_match(ctypes.byref(r), ck.h, ex.h, ctypes.byref(opts)), file)
        rep = _report(r, ck, expected, file)
        if proposal is not None and rep.unapplied_rewrite:
            for i in range(lib.ckpt_manifest_count(ck.h)):
                proposal[text(lib.ckpt_manifest_entry_at(ck.h, i).contents.name)] = \
                    text(lib.ckpt_match_rewritten(r, i))
        return _own_dtypes(rep, tensors, expected) if floating_as_one else rep
    finally:
        lib.ckpt_match_result_free(r)
        ck.free()
        ex.free()


def _report(r, ck, expected, file):
    def items(lst):
        return [lib.ckpt_match_item_at(r, lst, i).contents
                for i in range(lib.ckpt_match_count(r, lst))]

    def names(lst):
        return tuple(text(it.name) for it in items(lst))

    def mismatches(lst):
        out = []
        for it in items(lst):
            c, e = it.checkpoint.contents, it.expected.contents
            out.append(Mismatch(text(e.name), text(c.name), text(c.dtype), _shape(c),
                                text(e.dtype), _shape(e)))
        return tuple(out)

    rw = lib.ckpt_match_rewrite(r)
    applied = bool(rw) and rw.contents.applied
    # expected name -> checkpoint name for every key that loads
    excluded = set(names(MISSING)) | set(names(ALLOWED_MISSING))
    shape_mm, dtype_mm = mismatches(SHAPE_MISMATCH), mismatches(DTYPE_MISMATCH)
    excluded |= {m.name for m in shape_mm + dtype_mm}
    pairs = []
    for i in range(lib.ckpt_manifest_count(ck.h)):
        cname = text(lib.ckpt_manifest_entry_at(ck.h, i).contents.name)
        ename = text(lib.ckpt_match_rewritten(r, i)) if applied else cname
        if ename in expected and ename not in excluded:
            pairs.append((ename, cname))
    warning = lib.ckpt_match_warning(r)
    tie_note, rewrite_note = lib.ckpt_match_tie_note(r), lib.ckpt_match_rewrite_note(r)
    return MatchReport(
        complete=bool(lib.ckpt_match_complete(r)), matched=tuple(sorted(pairs)),
        missing=names(MISSING),
        unexpected=names(UNEXPECTED), shape_mismatch=shape_mm, dtype_mismatch=dtype_mm,
        allowed_missing=names(ALLOWED_MISSING), allowed_unexpected=names(ALLOWED_UNEXPECTED),
        tied=tuple(sorted((text(it.name), text(it.tied_to)) for it in items(TIED))),
        rewrite=text(rw.contents.description) if applied else None,
        ignored=tuple(text(lib.ckpt_match_ignored(r, i))
                      for i in range(lib.ckpt_match_ignored_count(r))),
        unapplied_rewrite=text(rw.contents.description) if rw and not applied else None,
        candidates=tuple(text(lib.ckpt_match_candidate(r, i).contents.description)
                         for i in range(lib.ckpt_match_candidate_count(r))),
        warning=text(warning) if warning else None, file=file, defaulted=names(DEFAULTED),
        tie_note=text(tie_note) if tie_note else None,
        rewrite_note=text(rewrite_note) if rewrite_note else None)


def _own_dtypes(rep, tensors, expected):
    """A report of an audit with floating-point dtypes compared as one:
    each Mismatch with the two sides' own dtypes, and `cast`, the matched
    pairs whose dtypes differ."""
    def own(t):
        return t.dtype if isinstance(t.dtype, str) else dtype_name(t.dtype)

    def fix(m):
        return dataclasses.replace(m, checkpoint_dtype=own(tensors[m.checkpoint_name]),
                                   expected_dtype=own(expected[m.name]))
    cast = tuple(Mismatch(e, c, own(tensors[c]), tuple(tensors[c].shape), own(expected[e]),
                          tuple(expected[e].shape))
                 for e, c in rep.matched if own(tensors[c]) != own(expected[e]))
    return dataclasses.replace(rep, shape_mismatch=tuple(map(fix, rep.shape_mismatch)),
                               dtype_mismatch=tuple(map(fix, rep.dtype_mismatch)), cast=cast)


def _cast(tensors, dtype, torch):
    """Every floating-point tensor as dtype (a deliberate cast); others
    unchanged. dtype None or "model" (each cast into its parameter's dtype
    as it loads): unchanged."""
    if dtype is None or (isinstance(dtype, str) and dtype == "model"):
        return tensors
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise errors.InvalidArgumentError("dtype must be a floating-point torch.dtype or "
                                          "\"model\", not %r" % (dtype,))
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in tensors.items()}


def _warn_unapplied_rewrite(rep):
    """strict=False left keys missing while a key rewrite was considered
    but not applied (it would not make the match complete): say so, as
    those keys may only be misnamed."""
    if not rep.missing or not rep.unapplied_rewrite:
        return
    warnings.warn("ckpt.load_state_dict: %d key%s left missing (%s); the key rewrite \"%s\" "
                  "would have matched some of them but was not applied because it does "
                  "not make the match complete" % (
                      len(rep.missing), "" if len(rep.missing) == 1 else "s",
                      ", ".join(rep.missing[:3]) + (", ..." if len(rep.missing) > 3 else ""),
                      rep.unapplied_rewrite),
                  UnappliedRewriteWarning, stacklevel=3)


def _warn_declared_ties(rep):
    """Keys left missing (strict=False, or allowed) that the checkpoint
    declares equal to a loaded key while the model does not tie them: a
    loader that ignores the declaration leaves them at their init, and so
    does this one; say so, naming them."""
    ties = rep.declared_ties
    if not ties:
        return
    warnings.warn("ckpt.load_state_dict: %d key%s left at the model's init: the checkpoint "
                  "declares %s, a tie the model does not make (tie the weights, e.g. "
                  "tie_word_embeddings=True, or copy the values)" % (
                      len(ties), "" if len(ties) == 1 else "s",
                      ", ".join("%s = %s" % t for t in ties[:3]) +
                      (", ..." if len(ties) > 3 else "")),
                  DeclaredTieWarning, stacklevel=3)


class DeclaredTieWarning(UserWarning):
    """load_state_dict left keys missing that the checkpoint's metadata
    declares equal to a loaded key (safetensors save_model's aliases)
    while the model does not tie them."""


class PartialRewriteWarning(UserWarning):
    """load_state_dict(strict=False) applied a key rewrite ("strip
    'module.'") through which every checkpoint key matches, leaving model
    keys missing (a new head on a DataParallel checkpoint)."""


class UnappliedRewriteWarning(UserWarning):
    """load_state_dict(strict=False) left keys missing that a key rewrite
    ("strip 'module.'") would have matched."""


def load_state_dict(module, path_or_state, *, strict=True, normalize=True,
                    allow_missing=(), allow_unexpected=(), unsafe_ok=False, dtype=None,
                    assign=False):
    """Loads a checkpoint (a path, read with ckpt.load, or an already loaded
    object) into `module`'s parameters and buffers after auditing the keys
    with the C library (ckpt_match): exact names, dtypes and shapes; with
    normalize=True a key rewrite ("strip 'module.'" from DataParallel,
    "drop '_orig_mod.'" from torch.compile, "add 'model.'"...) is applied
    only when it makes the match complete. Every tensor of the object is
    audited, so the verdict is `ckpt match --normalize`'s: in a training
    checkpoint the rewrite that selects the model's entry ("model",
    "state_dict"...) leaves the other top-level entries out (report.source
    names the entry). Missing keys the model ties to a loaded one are
    filled through it (report.tied); a missing BatchNorm num_batches_tracked
    is left to the module where torch's load_state_dict leaves it (the
    state dict's _metadata gives that BatchNorm no version 2: old
    torchvision weights, plain dicts, safetensors; report.defaulted).

    strict=True: any missing or unexpected key (beyond the allow_* globs,
    fnmatch where '*' crosses '.') raises ckpt.KeyMismatchError carrying
    the MatchReport, and nothing is copied. strict=False tolerates missing
    and unexpected keys, but not a load of nothing: when no expected key
    matches, KeyMismatchError all the same. Shape and dtype mismatches always raise (cast the
    checkpoint explicitly if a dtype change is meant). Missing keys the
    model ties to a loaded key (tied weights saved once) count as loaded.
    dtype (a floating-point torch.dtype) casts every floating-point tensor
    of the checkpoint to it first, deliberately (the audit then compares
    the cast dtypes). dtype="model" casts each floating-point tensor into
    the dtype of the parameter or buffer it loads into, as torch's
    load_state_dict (copy_) does: what a mixed-precision model (bfloat16
    Linears, float32 norms) needs from a float32 checkpoint, and a float32
    model from a bfloat16 one; the audit compares floating-point dtypes as
    one, report.cast lists the keys cast and report.lossy_casts those that
    lose precision (assign=True puts the cast tensors in place, where
    torch's assign would keep the checkpoint's dtype). With strict=False, keys left missing that a key
    rewrite considered but not applied would have matched are named in an
    UnappliedRewriteWarning. The copy itself is torch's
    module.load_state_dict (hooks run), given only the audited keys under
    the model's names. From a path (and no dtype), the file's bytes are
    read straight into the parameters and buffers whose dtype, shape and
    layout match (CPU, contiguous), without an intermediate copy of the
    state dict, and handed to load_state_dict as themselves. A parameter
    or buffer to load on the meta device (a model built under
    torch.device("meta")) takes no copy: InvalidArgumentError, the model
    untouched, unless assign=True, which is torch's (>= 2.1; else
    UnsupportedError): the checkpoint's tensors take the place of the
    parameters and buffers (a parameter stays a Parameter with its
    requires_grad), and the model's tied names (one parameter under several
    names, as a tied embedding and LM head) stay one parameter, whether the
    checkpoint stores the tie once or under each name: torch's assign alone
    puts a tensor of its own under each name it loads, two parameters where
    the model had one. Returns the
    MatchReport, which also answers to torch's names (missing_keys,
    unexpected_keys, and unpacks as a pair)."""
    if isinstance(path_or_state, (str, bytes, os.PathLike)):
        file = os.fspath(path_or_state)
        if dtype is None or _model_dtype(dtype):
            from ._load import StateDictReader
            with StateDictReader(path_or_state, unsafe_ok=unsafe_ok) as reader:
                return _load_audited(module, reader.obj, strict, normalize, allow_missing,
                                     allow_unexpected, file, reader, dtype, assign,
                                     reader.src.handle)
        from ._load import load
        path_or_state = load(path_or_state, unsafe_ok=unsafe_ok)
        h = c_void_p()  # the file's metadata: the ties it declares
        check(lib.ckpt_open(ctypes.byref(h), fspath(file), None), file)
        try:
            return _load_audited(module, path_or_state, strict, normalize, allow_missing,
                                 allow_unexpected, file, None, dtype, assign, h)
        finally:
            lib.ckpt_close(h)
    return _load_audited(module, path_or_state, strict, normalize, allow_missing,
                         allow_unexpected, "", None, dtype, assign)


def _model_dtype(dtype):
    return isinstance(dtype, str) and dtype == "model"


def _versions(obj, path="", out=None):
    """The module versions of the state dicts in obj: for each dict with a
    _metadata (torch.save's OrderedDict attribute), its {'version': v}
    entries under the dict's name (as _tensors names it) joined with the
    module's, as ckpt_manifest_from_file reads them from a file. An int or
    bool as it is, None as absent, anything else as 2 (the C rule keeps
    its counter missing: ckpt does not guess)."""
    out = {} if out is None else out
    if isinstance(obj, dict):
        for k, v in (getattr(obj, "_metadata", None) or {}).items():
            version = v.get("version") if isinstance(v, dict) else None
            if isinstance(k, str) and version is not None:
                out[".".join(p for p in (path, k) if p)] = \
                    int(version) if isinstance(version, int) else 2
        for k, v in obj.items():
            _versions(v, ".".join(p for p in (path, str(k)) if p), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _versions(v, ".".join(p for p in (path, str(i)) if p), out)
    return out


def _check_targets(module, expected, rep, assign, file):
    """Before anything is read: a copy into a meta tensor does nothing
    (torch only warns), so without assign such targets are refused; assign
    needs torch's (load_state_dict(assign=True), torch >= 2.1)."""
    if assign:
        import inspect
        if "assign" not in inspect.signature(module.load_state_dict).parameters:
            raise errors.UnsupportedError(
                "assign=True needs torch's load_state_dict(assign=True) (torch >= 2.1)", file)
        return
    meta = [e for e, _ in rep.matched if expected[e].is_meta]
    if meta:
        raise errors.InvalidArgumentError(
            "%d of the model's parameters and buffers to load are on the meta device "
            "(%s%s): a copy into them does nothing; pass assign=True to put the "
            "checkpoint's tensors in their place" % (
                len(meta), ", ".join(meta[:3]), ", ..." if len(meta) > 3 else ""), file)


def _retie(module, groups, loaded):
    """After an assign: each group of the model's names that were one
    parameter or buffer before the load (tied weights, ties(expected)) is
    one again. torch's assign puts a tensor of its own under every name it
    loads (torch 2.13's load_state_dict(assign=True) of a tied embedding
    and head leaves two parameters where there was one, also from a file
    that stores them as one) and none under a name it does not load. Every
    name of a group becomes the tensor now under its last loaded name (in
    state_dict order): the values a copying load leaves in the one tensor,
    which it fills name by name."""
    for group in groups:
        got = [n for n in group if n in loaded]
        if not got:
            continue
        src_owner, _, src_leaf = got[-1].rpartition(".")
        src = module.get_submodule(src_owner)
        for name in group:
            owner, _, leaf = name.rpartition(".")
            sub = module.get_submodule(owner)
            if src_leaf in src._parameters and leaf in sub._parameters:
                sub._parameters[leaf] = src._parameters[src_leaf]
            elif src_leaf in src._buffers and leaf in sub._buffers:
                sub._buffers[leaf] = src._buffers[src_leaf]


def _glob_literal(name):
    """An allow_missing glob matching `name` alone (fnmatch: '*', '?', '['
    and the escaping backslash taken literally)."""
    return "".join("[%s]" % c if c in "*?[\\" else c for c in name)


def _through_rewrite(rep, proposal, expected, counters, audit):
    """The report of the best rewrite that was not applied because it
    leaves model keys missing, when every checkpoint key matches through
    it: the audit run again (audit(extra_allow_missing)) with those keys
    allowed, so that the C audit applies it by its own rules, then the
    keys listed as missing again and the report incomplete. None when the
    rewrite merges keys or leaves anything else (an unexpected key, a
    mismatch, a BatchNorm counter) in the way."""
    names = set(proposal.values())
    if len(names) != len(proposal):
        return None
    left = [e for e in expected if e not in names and e not in counters
            and e not in rep.allowed_missing]  # what the caller allowed stays so
    if not left:
        return None
    again = audit(tuple(_glob_literal(n) for n in left))
    if not (again.complete and again.rewrite):
        return None
    forced = set(left) & set(again.allowed_missing)
    return dataclasses.replace(
        again, complete=not forced, missing=tuple(sorted(set(again.missing) | forced)),
        allowed_missing=tuple(n for n in again.allowed_missing if n not in forced))


def _warn_partial_rewrite(rep):
    if rep.rewrite and rep.missing:
        warnings.warn("ckpt.load_state_dict(strict=False): applied the key rewrite %s, "
                      "through which every checkpoint key matches; %d model key%s left "
                      "missing: %s" % (rep.rewrite, len(rep.missing),
                                       "" if len(rep.missing) == 1 else "s",
                                       ", ".join(rep.missing[:8]) +
                                       (", ..." if len(rep.missing) > 8 else "")),
                      PartialRewriteWarning, stacklevel=3)


def _load_audited(module, state, strict, normalize, allow_missing, allow_unexpected, file,
                  reader, dtype, assign, meta=None):
    import torch
    # the whole tree: the C audit finds the model's subtree in a training
    # checkpoint (the rewrite that selects it), as `ckpt match` does
    leaves = []
    tensors = _cast(_tensors(state, (), {}, leaves), dtype, torch)
    expected = {k: v for k, v in module.state_dict(keep_vars=True).items()
                if isinstance(v, torch.Tensor)}

    # a missing BatchNorm counter: the C audit's verdict (CKPT_MATCH_DEFAULTED)
    counters, proposal = batchnorm_counters(module, expected), {}

    def audit(more_missing=(), proposal=None):
        return match(tensors, expected, normalize=normalize,
                     allow_missing=tuple(allow_missing) + more_missing,
                     allow_unexpected=allow_unexpected, file=file,
                     tie_key=reader.tie_key if reader is not None else None, leaves=leaves,
                     versions=_versions(state), counters=counters, meta=meta,
                     floating_as_one=_model_dtype(dtype), proposal=proposal,
                     roots=_roots(state))
    rep = audit(proposal=proposal)
    through = _through_rewrite(rep, proposal, expected, counters, audit) \
        if normalize and proposal else None
    if through is not None and strict:  # refused, as `ckpt match` refuses, saying how
        rep = dataclasses.replace(rep, rewrite_missing=through.missing)
    elif through is not None:
        rep = through
    source = _source(state, rep)
    if source:
        rep = dataclasses.replace(rep, source=source)
    nothing = expected and not rep.matched
    blocking = rep.shape_mismatch or rep.dtype_mismatch or nothing or \
        (strict and (rep.missing or rep.unexpected))
    if blocking:
        raise errors.KeyMismatchError(rep, file)
    _check_targets(module, expected, rep, assign, file)
    _warn_unapplied_rewrite(rep)
    _warn_partial_rewrite(rep)
    _warn_declared_ties(rep)
    if reader is None:
        sub = {e: tensors[c] for e, c in rep.matched}
    else:
        sub = reader.fill({e: (tensors[c], expected[e]) for e, c in rep.matched})
    with torch.no_grad():
        if assign:
            for m in rep.cast:  # torch's assign would keep the checkpoint's dtype
                sub[m.name] = sub[m.name].to(expected[m.name].dtype)
            groups = ties(expected)  # before the assign replaces them
            module.load_state_dict(sub, strict=False, assign=True)
            _retie(module, groups, sub)
        else:
            module.load_state_dict(sub, strict=False)
    return rep
