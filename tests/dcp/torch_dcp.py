"""What the DCP tests share: running under a torch that has
torch.distributed.checkpoint's safetensors format (torch >= 2.4), which
Debian's python3 (torch 1.13) lacks."""
import os
import sys


def _has_dcp():
    try:
        from torch.distributed.checkpoint.filesystem import SerializationFormat  # noqa: F401
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: F401
        import safetensors  # noqa: F401
        return True
    except Exception:
        return False


def require(src):
    """Returns when this python has the DCP torch; else re-runs the script
    with the repository's .venv python (`src`/.venv) when there is one,
    and otherwise prints that it is skipped and exits 0."""
    if _has_dcp():
        return
    venv = os.path.join(src, ".venv", "bin", "python")
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(os.path.join(src, ".venv"))
    if os.path.exists(venv) and not in_venv:
        os.execv(venv, [venv] + sys.argv)
    print("skip: no torch with torch.distributed.checkpoint's safetensors format "
          "(torch >= 2.4; the repository's .venv has one)")
    print("0 passed, 0 failed")
    sys.exit(0)
