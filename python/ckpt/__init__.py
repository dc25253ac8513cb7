"""ckpt: open machine-learning checkpoints without executing anything in
them, load them into live PyTorch models with a full key audit, and save
training state atomically. A thin ctypes layer over libckpt (include/ckpt.h);
torch is imported only by the functions that build or read tensors.

libckpt is found through $CKPT_LIB, else the copy built into this package
(pip install), else build/libckpt.so of the source tree this package sits
in (PYTHONPATH=python), else the system loader (libckpt.so.1).
"""
from .errors import (ChecksumError, DeviceError, Error, FileError, FileIsADirectoryError,
                     FileMissingError, FileNotADirectoryError, FilePermissionError, FormatError,
                     InvalidArgumentError, KeyMismatchError, LimitError, MismatchError,
                     NotFoundError, OutOfMemoryError, PathTypeError, TruncatedError, UnsafeError,
                     UnsupportedError)
from ._load import Opaque, RawTensor, load, metadata
from ._open import SafeOpen, open  # noqa: A004 (safetensors' safe_open habit)
from ._scan import DirScanReport, Finding, ScanReport, VerifyReport, scan, verify
from ._doctor import doctor
from ._convert import ConvertReport, convert
from ._module import AuditFinding, audit, manifest
from ._match import (DeclaredTieWarning, MatchReport, Mismatch, PartialRewriteWarning,
                     UnappliedRewriteWarning, load_state_dict)
from ._save import AuditWarning, save
from ._reload import ReloadReport, check_reload
from ._store import (Generation, ResumeError, Resumed, ResumeWarning, Store, StoreWarning,
                     rng_state, set_rng_state)

from ._lib import VERSION as __version__

__all__ = [
    "load", "open", "metadata", "load_state_dict", "audit", "manifest", "save", "scan", "verify",
    "doctor", "check_reload", "convert", "ConvertReport",
    "Store", "rng_state", "set_rng_state",
    "Opaque", "RawTensor", "SafeOpen", "ScanReport", "DirScanReport", "Finding", "VerifyReport", "MatchReport", "Mismatch",
    "AuditFinding", "ReloadReport", "Generation", "Resumed", "AuditWarning", "ResumeWarning", "StoreWarning", "UnappliedRewriteWarning",
    "DeclaredTieWarning", "PartialRewriteWarning",
    "Error", "FileError", "FileMissingError", "FilePermissionError", "FileIsADirectoryError",
    "FileNotADirectoryError", "PathTypeError", "OutOfMemoryError", "TruncatedError", "FormatError", "LimitError",
    "UnsupportedError", "UnsafeError", "ChecksumError", "MismatchError", "KeyMismatchError",
    "InvalidArgumentError", "DeviceError", "NotFoundError", "ResumeError", "dcp",
]


def __getattr__(name):
    """ckpt.dcp on first use: `import ckpt` then `ckpt.dcp.Writer(path)` works
    as the README writes it, and `import ckpt` alone still imports no torch
    (ckpt.dcp's classes derive from torch.distributed.checkpoint's)."""
    if name == "dcp":
        import importlib
        return importlib.import_module(".dcp", __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
