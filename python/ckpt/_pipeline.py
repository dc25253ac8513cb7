"""A diffusers pipeline directory's model components (ckpt_pipeline_open),
as `ckpt verify` and `doctor` take them, for ckpt.verify and ckpt.doctor."""
import contextlib
import ctypes

from . import errors
from ._lib import check, fspath, last_error, lib, text


@contextlib.contextmanager
def pipeline(path):
    """The pipeline handle of a directory holding model_index.json, else
    None; ckpt.NotFoundError when its index names no model component, as
    the CLI refuses it (exit 2)."""
    p = ctypes.c_void_p()
    rc = lib.ckpt_pipeline_open(ctypes.byref(p), fspath(path))
    try:
        if rc == errors.NotFoundError.code:
            yield None
            return
        check(rc, path)
        if lib.ckpt_pipeline_count(p) == 0:
            raise errors.NotFoundError(
                "a diffusers pipeline whose model_index.json names no model component "
                "(a folder holding config.json)", path)
        yield p
    finally:
        lib.ckpt_pipeline_free(p)


def components(p):
    """(index, component name, path) of each model component, in name order."""
    return [(i, text(lib.ckpt_pipeline_component(p, i)), text(lib.ckpt_pipeline_path(p, i)))
            for i in range(lib.ckpt_pipeline_count(p))]


def unloadable(p, i, path):
    """ckpt_pipeline_check's finding (a ckpt.Error: weights but no
    config.json, which DiffusionPipeline.from_pretrained cannot load), or None."""
    rc = lib.ckpt_pipeline_check(p, i)
    if rc == 0:
        return None
    err = last_error(rc, path)
    if rc == errors.OutOfMemoryError.code:
        raise err
    return err


def error_dict(e, path):
    """An error as the CLI's --json writes it: {code, message, file, member, offset}."""
    return {"code": e.name, "message": e.message, "file": e.file or path,
            "member": e.member or None, "offset": e.offset}
