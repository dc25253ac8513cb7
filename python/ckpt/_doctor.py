"""ckpt.doctor: the library's health report (ckpt_doctor) as a dict."""
import ctypes
import json
import os

from . import errors
from ._lib import check, fspath, last_error, lib
from ._pipeline import components, error_dict, pipeline, unloadable


def doctor(path):
    """A health report of a checkpoint file, a sharded index, a training
    directory (Hugging Face Trainer layout) or a ckpt.Store directory (the
    generation LATEST names, alone; "store" lists every generation,
    verified): the dict `ckpt doctor --json`
    prints, with "verdict" ("healthy" or "attention"), "summary" (the
    verdict line) and "sections" (format, integrity, safety, contents,
    not_vouched_for, resume, keys, memory, metadata, other_files,
    from_pretrained, store). A
    corrupt or unsafe file gives a report that says so; raises
    ckpt.FileError (and the like) only when nothing can be examined.
    A diffusers pipeline directory (model_index.json): the list `ckpt
    doctor --json` prints, one report per model component in name order,
    each with "pipeline": {"component", "error"} (ckpt_doctor_pipeline: a
    component with weights but no config.json needs attention); a
    component that cannot be examined gives {"file", "pipeline",
    "verdict": None, "error"} in its place."""
    path = os.fspath(path)
    with pipeline(path) as p:
        if p is None:
            r = ctypes.c_void_p()
            check(lib.ckpt_doctor(ctypes.byref(r), fspath(path), None), path)
            return _json(r, path)
        return [_component(p, i, name, cpath) for i, name, cpath in components(p)]


def _component(p, i, name, path):
    r = ctypes.c_void_p()
    rc = lib.ckpt_doctor_pipeline(ctypes.byref(r), p, i, None)
    if rc == 0:
        return _json(r, path)
    err = last_error(rc, path)  # as the CLI writes a component it cannot examine
    if rc == errors.OutOfMemoryError.code:
        raise err
    finding = unloadable(p, i, path)
    return {"file": path,
            "pipeline": {"component": name,
                         "error": finding and error_dict(finding, path)},
            "verdict": None, "error": error_dict(err, path)}


def _json(r, path):
    """The report r as a dict (freeing r)."""
    try:
        out, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.ckpt_doctor_json(ctypes.byref(out), ctypes.byref(n), r), path)
        try:
            data = ctypes.string_at(out, n.value)
        finally:
            lib.ckpt_string_free(out)
    finally:
        lib.ckpt_doctor_report_free(r)
    return json.loads(data)
