"""ckpt.Store: numbered generations of a training checkpoint in one
directory (ckpt_store_*), and resume: model, optimizer, scheduler, scaler
and RNG state restored together, or a clear refusal."""
import ctypes
import os
import random
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from . import errors
from ._lib import (StoreOptions_, c_char_p, c_void_p, check,
                   fspath, lib, options, text)


_PATH_MAX = 8192
# ckpt_store_event_fn, and CKPT_STORE_EVENT_LATEST
_EVENT_FN = ctypes.CFUNCTYPE(None, c_void_p, ctypes.c_int, c_char_p)
_EVENT_LATEST = 2


class ResumeError(errors.MismatchError):
    """resume refused the checkpoint: `verdict` is the C library's resume
    readiness ("weights-only", "warm-start-only", ...), `reasons` its
    sentences."""

    def __init__(self, message, file="", verdict="", reasons=()):
        self.verdict, self.reasons = verdict, tuple(reasons)
        super().__init__(message, file)

    def __reduce__(self):
        return (ResumeError, (self.message, self.file, self.verdict, self.reasons))


class ResumeWarning(UserWarning):
    """resume restored what it could, but something asked for was absent,
    or it resumed from an older generation than the newest because the
    newer ones do not verify (Resumed.skipped names them)."""


class StoreWarning(UserWarning):
    """A commit that LATEST does not name: a higher step is committed
    (`ckpt store commit` prints the same note)."""


@dataclass(frozen=True)
class Generation:
    """One committed generation: file name, path, step, size in bytes, ok
    (opens and verifies), latest (LATEST names it), error (why not ok)."""
    file: str
    path: str
    step: int
    bytes: int
    ok: bool
    latest: bool
    error: Optional[errors.Error] = field(default=None, compare=False)


@dataclass(frozen=True)
class Resumed:
    """What resume restored: path, step (the step the generation was
    committed as, its NAME-STEP name: the store's record; the file's own
    "step" entry, when it has one, is state["step"]), verdict (ckpt's
    resume readiness), restored (component names), state (the whole loaded
    checkpoint), skipped (the newer generations that do not verify, each a
    Generation with its error, that resume fell back past; () normally)."""
    path: str
    step: int
    verdict: str
    restored: Tuple[str, ...]
    state: Any = field(repr=False, compare=False)
    skipped: Tuple[Generation, ...] = ()


def rng_state():
    """The random generators' states: torch CPU (and CUDA when initialised),
    numpy's global generator (when numpy is imported), python's random."""
    import sys
    import torch
    out = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = list(torch.cuda.get_rng_state_all())
    if "numpy" in sys.modules:
        import numpy as np
        name, keys, pos, has_gauss, cached = np.random.get_state()
        out["numpy"] = (name, torch.from_numpy(keys.astype(np.int64)), int(pos),
                        int(has_gauss), float(cached))
    version, internal, gauss = random.getstate()
    out["python"] = (version, tuple(internal), gauss)
    return out


def set_rng_state(state):
    """Restores what rng_state() captured (entries absent are left alone)."""
    import torch
    if "torch" in state:
        torch.set_rng_state(state["torch"].contiguous().clone())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([t.clone() for t in state["cuda"]])
    if "numpy" in state:
        import numpy as np
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.asarray(keys.numpy(), dtype=np.uint32), pos,
                             has_gauss, cached))
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))


def _pick(state, *names):
    for n in names:
        if isinstance(state, dict) and n in state:
            return n, state[n]
    return None, None


# Per-parameter state each optimizer family keeps (the C training analysis
# recognises the same ones): the family a saved state belongs to, and the
# state tensors shaped like their parameter.
_FAMILIES = (("Adamax", {"exp_avg", "exp_inf"}), ("Adam/AdamW", {"exp_avg", "exp_avg_sq"}),
             ("SGD", {"momentum_buffer"}), ("Adagrad", {"sum"}), ("RMSprop", {"square_avg"}))
_PARAM_SHAPED = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "momentum_buffer",
                 "sum", "square_avg", "grad_avg", "acc_delta", "ax", "prev", "step_size"}
# group keys a torch version may lack and its load_state_dict fills in
_OPTIONAL_GROUP_KEYS = {"foreach", "maximize", "capturable", "differentiable", "fused",
                        "decoupled_weight_decay", "initial_lr"}


def _family_of_state(state):
    keys = set()
    for v in state.values():
        if isinstance(v, dict):
            keys.update(v)
    for name, need in _FAMILIES:
        if need <= keys:
            return name
    return None


def _family_of_class(cls):
    import torch.optim as o
    for name, classes in (("Adamax", ("Adamax",)), ("Adam/AdamW", ("Adam", "AdamW")),
                          ("SGD", ("SGD",)), ("Adagrad", ("Adagrad",)),
                          ("RMSprop", ("RMSprop",))):
        if any(isinstance(cls, type) and issubclass(cls, getattr(o, c)) for c in classes):
            return name
    return None


def _optimizer_misfit(opt_sd, optimizer, recorded):
    """Why the saved optimizer state dict does not fit the live optimizer,
    or None: its class (recorded at save, else recognised by its state),
    param groups and parameters per group, state shapes, and the
    hyperparameters the live optimizer expects."""
    live_cls = type(optimizer)
    live = "%s.%s" % (live_cls.__module__, live_cls.__qualname__)
    if not isinstance(opt_sd, dict) or not isinstance(opt_sd.get("param_groups"), list) \
            or not isinstance(opt_sd.get("state", {}), dict):
        return "the saved optimizer state is not an optimizer state_dict " \
               "(no 'state' and 'param_groups')"
    state, groups = opt_sd.get("state", {}), opt_sd["param_groups"]
    if recorded and recorded != live:
        return "it was saved from %s, the live optimizer is %s" % (recorded, live)
    saved_family, live_family = _family_of_state(state), _family_of_class(live_cls)
    if not recorded and saved_family and live_family and saved_family != live_family:
        return "its state is %s state (%s), the live optimizer is %s" % (
            saved_family, ", ".join(sorted({k for v in state.values() if isinstance(v, dict)
                                            for k in v})), live)
    if len(groups) != len(optimizer.param_groups):
        return "it has %d param group%s, the live optimizer %d" % (
            len(groups), "" if len(groups) == 1 else "s", len(optimizer.param_groups))
    for i, (g, lg) in enumerate(zip(groups, optimizer.param_groups)):
        ids = g.get("params", []) if isinstance(g, dict) else []
        if len(ids) != len(lg["params"]):
            return "param group %d has %d parameters, the live optimizer's %d" % (
                i, len(ids), len(lg["params"]))
        missing = sorted(k for k in lg if k != "params" and k not in _OPTIONAL_GROUP_KEYS
                         and k not in g)
        if missing:
            return "param group %d lacks the hyperparameter%s %s that %s expects" % (
                i, "" if len(missing) == 1 else "s", ", ".join(map(repr, missing)), live)
        for pid, p in zip(ids, lg["params"]):
            st = state.get(pid, state.get(str(pid)))
            for k, v in (st.items() if isinstance(st, dict) else ()):
                if k in _PARAM_SHAPED and hasattr(v, "shape") and tuple(v.shape) != tuple(p.shape):
                    return "state %r of parameter %s is %s, the parameter is %s" % (
                        k, pid, list(v.shape), list(p.shape))
    return None


def _recorded_optimizer(path, where):
    """The optimizer class ckpt.save recorded for the tree path `where`."""
    import json
    from ._load import metadata
    try:
        rec = json.loads((metadata(path) or {}).get("ckpt.optimizers", "{}"))
    except ValueError:
        return None
    return rec.get(where) if isinstance(rec, dict) else None


def _resume_verdict(path):
    """(verdict, reasons) of ckpt_training_analyze, or ("", ()) when the
    library has no training analysis."""
    f, t = c_void_p(), c_void_p()
    check(lib.ckpt_open(ctypes.byref(f), fspath(path), None), path)
    try:
        check(lib.ckpt_training_analyze(ctypes.byref(t), f), path)
        verdict = text(lib.ckpt_resume_name(lib.ckpt_training_resume(t)))
        reasons = tuple(text(lib.ckpt_training_reason(t, i))
                        for i in range(lib.ckpt_training_reason_count(t)))
        return verdict, reasons
    finally:
        lib.ckpt_training_free(t)
        lib.ckpt_close(f)


class Store:
    """A directory of generations "NAME-STEP.pt" (or .safetensors) with a
    LATEST pointer, kept by the C store: each commit is written atomically,
    re-read from disk and verified before LATEST names it, and only then
    are generations beyond the `keep` newest pruned. A crash at any moment
    leaves the previous generation intact and findable. One writer per
    directory at a time; readers any time. Under a torch.distributed
    process group of more than one rank, commits are multi-rank DCP
    directories (see commit) unless distributed=False."""

    def __init__(self, dir, keep=3, *, name="ckpt", format="pt", distributed=None):
        if format not in ("pt", "safetensors"):
            raise errors.InvalidArgumentError("format is 'pt' or 'safetensors'", dir)
        self.dir, self.keep, self.name, self.format = os.fspath(dir), keep, name, format
        # None: commits are multi-rank under a process group of more than
        # one rank; False: one process commits files (e.g. rank 0 alone
        # under DDP, where a multi-rank commit would wait for the others)
        self.distributed = distributed
        os.makedirs(self.dir, exist_ok=True)
        self._opts = options(StoreOptions_)
        self._opts.keep = keep
        self._executor = None  # async_commit's one background thread
        self._pending = None   # its last Future, until waited for
        self._spare = {}       # its snapshot buffers, reused (_save._Builder)
        # temporary files of writers that were killed (ours included)
        check(lib.ckpt_store_gc(None, fspath(self.dir), ctypes.byref(self._opts)), self.dir)

    def commit(self, obj, step, *, replace=False, record_source=True):
        """Commits `obj` as generation `step` and returns its path. obj is
        what ckpt.save takes (modules, optimizers, schedulers and scalers are
        saved as their state_dict()); a dict gets "step" and "rng" (the
        random generators' states, see rng_state) unless it has them, so
        that resume can continue exactly. The C writer writes it straight
        into the store's temporary file (ckpt_store_commit_tree: one write,
        one fsync, one verifying read). A step already committed raises
        ckpt.InvalidArgumentError unless replace=True. Several processes may
        commit into one store: they take turns through the store's lock
        (see ckpt_store_commit), and LATEST only moves forward. Versions,
        model classes, dtype intent and device are recorded as ckpt.save
        records them (record_source=False: without the model's source
        file).

        Under an initialised torch.distributed process group of more than
        one rank, every rank calls commit with its part of the state (DTensors,
        sharded or replicated; other values as DCP saves them) and the
        generation is a DCP directory "NAME-STEP.dcp" written through
        ckpt.dcp.Writer into a staging directory: only rank 0 stages and
        commits it through the C store (ckpt_store_stage_dir takes the store
        lock; ckpt_store_commit_dir, once every rank's files verified in
        DCP's collective finish, verifies the directory, renames it into
        place, moves LATEST and prunes by the rules of a file commit); the
        other ranks never touch LATEST or the lock. "rng" is
        not added there: DCP keeps one copy of a non-tensor item, so
        per-rank generator states would collapse into one. Every rank
        returns the generation's path or raises the same error. Every rank
        must call it: where only one rank commits (DDP's "if rank == 0"),
        pass distributed=False to Store. Waits for an async_commit still
        running first, and raises its error if it failed."""
        self.wait()
        if self.distributed is not False and _process_group():
            return _commit_distributed(self, obj, step, replace)
        b, root, opts = self._prepare(obj, step, None, record_source)
        try:
            return self._write(root, opts, step, replace)
        finally:
            b.free()

    def async_commit(self, obj, step, *, replace=False, record_source=True):
        """commit() in the background, as orbax's and DCP's async saves:
        obj is snapshotted now (state_dict() called, every tensor copied to
        host memory, so training may change its tensors as soon as this
        returns); writing, fsync, verification, LATEST and pruning run in a
        thread. Returns a concurrent.futures.Future whose result() is the
        generation's path (or raises its error). The next commit,
        async_commit or wait() waits for it first and raises its error, so
        a failure is never lost. Crash guarantees are commit's: until the
        generation verifies, LATEST and the previous generations are
        untouched."""
        self.wait()
        b, root, opts = self._prepare(obj, step, self._spare, record_source)
        try:
            if self._executor is None:
                import concurrent.futures
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="ckpt-store")
            future = self._executor.submit(self._write_and_free, b, root, opts, step, replace)
        except BaseException:
            b.free()
            raise
        self._pending = future
        return future

    def wait(self):
        """Waits for the last async_commit; returns its path (None when
        there was none) or raises its error. Each error is raised once."""
        future, self._pending = self._pending, None
        return None if future is None else future.result()

    def _prepare(self, obj, step, snapshot, record_source):
        if isinstance(obj, dict):
            obj = dict(obj)
            obj.setdefault("step", step)
            if "rng" not in obj:
                obj["rng"] = rng_state()
        from ._save import _prepare
        return _prepare(obj, self.dir, None, stacklevel=4, snapshot=snapshot,
                        label="ckpt.Store(%r).commit" % self.dir, record_source=record_source)

    def _write(self, root, opts, step, replace):
        out = ctypes.create_string_buffer(_PATH_MAX)
        sopts = StoreOptions_.from_buffer_copy(self._opts)
        sopts.replace = 1 if replace else 0
        heard = _LatestHeard(sopts)
        check(lib.ckpt_store_commit_tree(out, _PATH_MAX, fspath(self.dir), self.name.encode(),
                                         step, root, 1 if self.format == "safetensors" else 3,
                                         ctypes.byref(opts), ctypes.byref(sopts)), self.dir)
        path = os.fsdecode(out.value)
        heard.note(self.dir, path)
        return path

    def _write_and_free(self, b, root, opts, step, replace):
        try:
            return self._write(root, opts, step, replace)
        finally:
            b.free()

    def latest(self):
        """Path of the generation to resume from: the newest that verifies
        (LATEST is not trusted), or None when the store holds no generation
        (nothing was ever committed). Generations none of which verifies
        raise (see resume): they are no fresh start."""
        gen, _ = self._newest()
        return None if gen is None else gen.path

    def _newest(self):
        """(the generation to resume from, the corrupt generations newer
        than it) as ckpt_store_list_newest judges them (the older ones are
        not verified); (None, ()) for a store that holds no generation. A
        store whose generations all fail raises the error of the newest,
        naming each and why; its `generations` attribute holds them."""
        gens = self._listed(lib.ckpt_store_list_newest)
        if not gens:
            return None, ()
        if gens[0].ok:
            return gens[0], tuple(gens[1:])
        newest = gens[-1].error
        e = errors.from_code(
            newest.code, "none of the %d generation%s verifies, so there is nothing to resume "
            "from and a fresh start would discard %s: %s; `ckpt store list %s` shows them" % (
                len(gens), "" if len(gens) == 1 else "s",
                "it" if len(gens) == 1 else "them",
                "; ".join("%s (step %d): %s" % (g.file, g.step, g.error) for g in reversed(gens)),
                self.dir), self.dir)
        e.generations = tuple(gens)
        raise e

    def generations(self):
        """Every generation, verified, by ascending step."""
        return self._listed(lib.ckpt_store_list)

    def _listed(self, list_fn):
        """The Generations of a listing (ckpt_store_list, ckpt_store_list_newest)."""
        h = c_void_p()
        check(list_fn(ctypes.byref(h), fspath(self.dir), ctypes.byref(self._opts)), self.dir)
        try:
            out = []
            for i in range(lib.ckpt_store_list_count(h)):
                g = lib.ckpt_store_list_generation(h, i).contents
                err = None
                if not g.ok:
                    err = errors.from_code(g.code, text(g.reason), text(g.path), text(g.member),
                                           None if g.offset == 2 ** 64 - 1 else int(g.offset))
                out.append(Generation(text(g.file), text(g.path), int(g.step), int(g.bytes),
                                      bool(g.ok), bool(g.latest), err))
            return out
        finally:
            lib.ckpt_store_listing_free(h)

    def resume(self, model, optimizer, scheduler=None, scaler=None, *,
               allow_warm_start=False, strict=True):
        """Restores the latest generation into model (ckpt.load_state_dict:
        audited keys, all or nothing), optimizer, scheduler and scaler (their
        load_state_dict) and the random generators, so that the next step is
        the one an uninterrupted run would take. Returns a Resumed, or None
        when the store holds no generation (a fresh start). Resumed.step is
        the step the generation was committed as (`start = r.step + 1`).

        The generation is the newest that verifies. Newer ones that do not
        verify are skipped with a ResumeWarning naming each and the steps
        lost, and listed in Resumed.skipped; when no generation verifies,
        resume raises (the error of the newest, naming each generation and
        why; nothing is restored), never a silent fresh start.

        A checkpoint without optimizer state (weights only, or warm-start
        state) is refused with ckpt.ResumeError naming ckpt's verdict,
        unless allow_warm_start=True: then the model (and whatever else is
        there) is restored and the optimizer starts fresh. A scheduler or
        scaler passed but absent from the checkpoint gives a ResumeWarning.

        A DCP directory generation (a multi-rank commit) resumed under a
        process group into a model whose state is DTensors: every rank calls
        resume, and torch.distributed.checkpoint loads each rank's shards
        through ckpt.dcp.Reader into the model, optimizer (its state created
        first, as get_state_dict does), scheduler and scaler; Resumed.verdict
        is "" there (no C analysis of the whole). Otherwise a directory
        generation is assembled whole in this process, and judged whole as
        `ckpt doctor` judges it."""
        gen, skipped = self._newest()
        if gen is None:
            return None
        path = gen.path
        if skipped:
            warnings.warn(ResumeWarning(
                "%s: resuming from %s (step %d), not from the newer generation%s that do%s not "
                "verify: %s; the training after step %d up to step %d is lost and will be "
                "done again" % (
                    self.dir, gen.file, gen.step, "" if len(skipped) == 1 else "s",
                    "es" if len(skipped) == 1 else "",
                    "; ".join("%s (step %d): %s" % (g.file, g.step, g.error) for g in skipped),
                    gen.step, skipped[-1].step)), stacklevel=2)
        if os.path.isdir(path) and _process_group() and _has_dtensors(model):
            return _resume_distributed(gen, model, optimizer, scheduler, scaler,
                                       allow_warm_start, skipped)
        from ._load import load
        from ._match import load_state_dict
        if os.path.isdir(path):  # a DCP generation: assembled in this process
            from .dcp import load as load_dcp
            state, (verdict, reasons) = load_dcp(path), _resume_verdict(path)
        else:
            state = load(path)
            verdict, reasons = _resume_verdict(path)
        if not isinstance(state, dict):
            state = {"model": state}
        _, model_sd = _pick(state, "model", "model_state_dict", "state_dict")
        opt_at, opt_sd = _pick(state, "optimizer", "optimizer_state_dict")
        if opt_sd is None and isinstance(state.get("optimizer_states"), list) \
                and state["optimizer_states"]:
            opt_at, opt_sd = "optimizer_states.0", state["optimizer_states"][0]
        if model_sd is None:
            model_sd = state  # a bare state dict (weights only)
        warm = "pass allow_warm_start=True to restore the model and start the optimizer fresh"
        if opt_sd is None and optimizer is not None and not allow_warm_start:
            raise ResumeError(
                "refusing to resume from %s: it holds no optimizer state (ckpt: %s%s); %s" % (
                    path, verdict or "no optimizer", ": " + "; ".join(reasons) if reasons else "",
                    warm),
                path, verdict, reasons)
        misfit = None
        if opt_sd is not None and optimizer is not None:
            misfit = _optimizer_misfit(opt_sd, optimizer, _recorded_optimizer(path, opt_at))
        if misfit and not allow_warm_start:
            raise ResumeError("refusing to resume from %s: its optimizer state (%s) does not fit "
                              "the live optimizer: %s; nothing was restored; %s" % (
                                  path, opt_at, misfit, warm),
                              path, "optimizer-mismatch", (misfit,))
        if misfit:
            warnings.warn(ResumeWarning(
                "%s: warm start as asked (allow_warm_start=True): the optimizer state does not "
                "fit (%s); the optimizer starts fresh" % (path, misfit)), stacklevel=2)
            opt_sd = None
        restored = []
        load_state_dict(model, model_sd, strict=strict)
        restored.append("model")
        if opt_sd is not None and optimizer is not None:
            optimizer.load_state_dict(opt_sd)
            restored.append("optimizer")
        for obj, names, label in ((scheduler, ("scheduler", "lr_scheduler"), "scheduler"),
                                  (scaler, ("scaler", "grad_scaler"), "scaler")):
            if obj is None:
                continue
            _, sd = _pick(state, *names)
            if sd is None:
                warnings.warn(ResumeWarning("%s: no %s state; it starts fresh" % (path, label)),
                              stacklevel=2)
            else:
                obj.load_state_dict(sd)
                restored.append(label)
        if isinstance(state.get("rng"), dict):
            set_rng_state(state["rng"])
            restored.append("rng")
        return Resumed(path, gen.step, verdict, tuple(restored), state, skipped)


class _LatestHeard:
    """The on_event of a commit's options (ckpt_store_event): the
    generation LATEST names once it moved, and a StoreWarning when that
    is not the one committed (a higher step is there), as `ckpt store
    commit` notes it."""

    def __init__(self, sopts):
        self.file = None
        self._fn = _EVENT_FN(self._heard)  # alive as long as the options' use
        sopts.on_event = ctypes.cast(self._fn, c_void_p)

    def _heard(self, ctx, what, file):
        if what == _EVENT_LATEST:
            self.file = os.fsdecode(file)

    def note(self, dir, path):
        base = os.path.basename(path)
        if self.file is not None and self.file != base:
            warnings.warn(StoreWarning(
                "%s: LATEST stays at %s, a higher step; %s is committed beside it (resume "
                "takes %s)" % (dir, self.file, base, self.file)), stacklevel=4)


# ------------------------------------------------------------ directory generations
#
# Under a process group of more than one rank, a generation is a DCP
# directory "NAME-STEP.dcp" written by ckpt.dcp.Writer into a staging
# directory that the C store creates and commits (rank 0 only).


def _process_group():
    """(rank, world size) of an initialised process group of more than one
    rank, else None (torch is not imported for it)."""
    import sys
    if "torch.distributed" not in sys.modules:
        return None
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return dist.get_rank(), dist.get_world_size()


def _has_dtensors(model):
    """1 when some parameter or buffer of model is a DTensor (FSDP2,
    tensor parallel): each rank holds its shards only."""
    from torch.distributed.tensor import DTensor
    return any(isinstance(t, DTensor) for t in model.state_dict().values())


def _resume_distributed(gen, model, optimizer, scheduler, scaler, allow_warm_start, skipped):
    """Store.resume of a DCP generation under a process group, into a model
    whose state is DTensors: every rank calls it; torch.distributed.
    checkpoint loads each rank's shards (resharding as needed) through
    ckpt.dcp.Reader (digests checked) straight into the live model,
    optimizer, scheduler and scaler (Stateful objects: their state_dict()
    is the template, load_state_dict() receives it filled in). The
    optimizer's state is created first (torch's _init_optim_state, as
    get_state_dict does) so that the template has room for it."""
    path = gen.path
    import torch.distributed.checkpoint as tdcp
    from torch.distributed.checkpoint.state_dict import _init_optim_state
    from .dcp import Reader, read_metadata
    saved = {k.split(".", 1)[0] for k in read_metadata(path).state_dict_metadata}
    if "model" not in saved:
        raise ResumeError("refusing to resume from %s: it holds no \"model\" entry (it has: %s)" % (
            path, ", ".join(sorted(saved))), path, "no-model", ())
    if optimizer is not None and "optimizer" not in saved and not allow_warm_start:
        raise ResumeError(
            "refusing to resume from %s: it holds no optimizer state; pass allow_warm_start=True "
            "to restore the model and start the optimizer fresh" % path,
            path, "warm-start-only", ())
    target, restored = {"model": model}, ["model"]
    if optimizer is not None and "optimizer" in saved:
        _init_optim_state(optimizer)
        target["optimizer"] = optimizer
        restored.append("optimizer")
    for obj, label in ((scheduler, "scheduler"), (scaler, "scaler")):
        if obj is None:
            continue
        if label in saved:
            target[label] = obj
            restored.append(label)
        else:
            warnings.warn(ResumeWarning("%s: no %s state; it starts fresh" % (path, label)),
                          stacklevel=3)
    if "step" in saved:
        target["step"] = 0
    tdcp.load(target, storage_reader=Reader(path))
    return Resumed(path, gen.step, "", tuple(restored), target, skipped)


def _commit_distributed(store, obj, step, replace):
    """Store.commit under a process group: see Store.commit. Rank 0 stages
    and commits through the C store (ckpt_store_stage_dir, which takes the
    store lock until ckpt_store_stage_free, and ckpt_store_commit_dir:
    verification, fsync, rename, LATEST, pruning); the other ranks only
    write their files into the staging directory."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as tdcp
    from .dcp import Writer, _crash_point
    rank = dist.get_rank()
    sopts = StoreOptions_.from_buffer_copy(store._opts)
    sopts.replace = 1 if replace else 0
    stage, staging, failure = c_void_p(), None, None
    try:
        if rank == 0:
            try:
                check(lib.ckpt_store_stage_dir(ctypes.byref(stage), fspath(store.dir),
                                               store.name.encode(), step, ctypes.byref(sopts)),
                      store.dir)
                staging = os.fsdecode(lib.ckpt_store_stage_path(stage))
                _crash_point("after-stage")
            except Exception as e:  # every rank raises it
                failure = e
        box = [staging, failure]
        dist.broadcast_object_list(box, src=0)
        if box[1] is not None:
            raise box[1]
        if isinstance(obj, dict):
            obj = dict(obj)
            obj.setdefault("step", step)
        # DCP's own agreement: finish() -- .metadata -- runs on the
        # coordinator only when every rank wrote and verified its files,
        # and every rank gets its outcome
        tdcp.save(obj, storage_writer=Writer(box[0], overwrite=False))
        out = [None, None]
        if rank == 0:
            try:
                _crash_point("before-commit")
                path = ctypes.create_string_buffer(_PATH_MAX)
                heard = _LatestHeard(sopts)
                check(lib.ckpt_store_commit_dir(path, _PATH_MAX, stage, ctypes.byref(sopts)),
                      store.dir)
                out[0] = os.fsdecode(path.value)
                heard.note(store.dir, out[0])
                _crash_point("after-commit")
            except Exception as e:
                out[1] = e
        dist.broadcast_object_list(out, src=0)
        if out[1] is not None:
            raise out[1]
        return out[0]
    finally:
        # an uncommitted staging directory is removed, the lock released
        lib.ckpt_store_stage_free(stage)
