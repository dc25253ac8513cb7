"""ckpt.doctor: the library's health report (ckpt_doctor) as a dict."""
import ctypes
import json
import os

from ._lib import check, fspath, lib


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
    ckpt.FileError (and the like) only when nothing can be examined."""
    path = os.fspath(path)
    r = ctypes.c_void_p()
    check(lib.ckpt_doctor(ctypes.byref(r), fspath(path), None), path)
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
