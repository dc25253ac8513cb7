"""ctypes bindings of include/ckpt.h: finding libckpt, prototypes, and the
conversion of a failed call into a Python exception.

Only this module touches ctypes prototypes; the rest of the package calls
`lib.ckpt_*` and `check(rc)`.
"""
import ctypes
import ctypes.util
import os

from . import errors

c_u64 = ctypes.c_uint64
c_u64_p = ctypes.POINTER(c_u64)
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
c_size_t = ctypes.c_size_t
c_int = ctypes.c_int

NO_OFFSET = 2 ** 64 - 1

# Pinned enums of ckpt.h.
KIND_NONE, KIND_BOOL, KIND_INT, KIND_FLOAT, KIND_STR, KIND_BYTES, \
    KIND_LIST, KIND_TUPLE, KIND_DICT, KIND_SET, KIND_TENSOR, KIND_OBJECT = range(12)
VERDICT_SAFE, VERDICT_UNSAFE, VERDICT_UNSCANNABLE, VERDICT_NOT_A_CHECKPOINT = range(4)
FORMAT_SAFETENSORS, FORMAT_SAFETENSORS_SHARDED = 1, 2


class Error_(ctypes.Structure):
    _fields_ = [("code", c_int), ("message", c_char_p), ("file", c_char_p),
                ("member", c_char_p), ("offset", c_u64)]


class Limits(ctypes.Structure):
    _fields_ = [("max_header_bytes", c_u64), ("max_tensors", c_u64),
                ("max_name_bytes", c_u64), ("max_ndim", ctypes.c_uint32),
                ("max_depth", ctypes.c_uint32), ("max_pickle_stack", c_u64),
                ("max_pickle_memo", c_u64), ("max_pickle_ops", c_u64),
                ("max_zip_entries", c_u64), ("max_inflate_bytes", c_u64),
                ("max_index_bytes", c_u64)]


# Option structs: `version` first, filled in by the library's own
# ckpt_*_options_init (never by copying its defaults here).
OPTIONS_VERSION = 1


class OpenOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("limits", Limits)]


class VerifyReport_(ctypes.Structure):
    _fields_ = [("ok", c_int), ("tensors", c_u64), ("bytes", c_u64),
                ("members", c_u64)]


class Finding_(ctypes.Structure):
    _fields_ = [("severity", c_int), ("kind", c_char_p), ("global_", c_char_p),
                ("member", c_char_p), ("offset", c_u64), ("message", c_char_p)]


class ScanOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("limits", Limits),
                ("allow", ctypes.POINTER(c_char_p)),
                ("nallow", c_size_t), ("max_nesting", ctypes.c_uint32)]


class StoreOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("keep", ctypes.c_uint32),
                ("stale_minutes", ctypes.c_uint32), ("open", OpenOptions_),
                ("replace", ctypes.c_int)]
    VERSION = 2


class MatchOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("normalize", ctypes.c_int),
                ("allow_missing", ctypes.POINTER(c_char_p)), ("nallow_missing", c_size_t),
                ("allow_unexpected", ctypes.POINTER(c_char_p)), ("nallow_unexpected", c_size_t)]


class WriteOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("meta_keys", ctypes.POINTER(c_char_p)),
                ("meta_values", ctypes.POINTER(c_char_p)), ("nmeta", c_size_t),
                ("backup", ctypes.c_int)]


def _candidates():
    env = os.environ.get("CKPT_LIB")
    if env:
        return [env]  # an explicit choice is never second-guessed
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, n) for n in ("libckpt.so", "libckpt.so.1", "libckpt.dylib")]
    out = [p for p in out if os.path.exists(p)]
    found = ctypes.util.find_library("ckpt")
    return out + ([found] if found else []) + ["libckpt.so.1", "libckpt.so"]


def _load():
    tried = []
    for cand in _candidates():
        try:
            return ctypes.CDLL(cand)
        except OSError as exc:
            tried.append("%s (%s)" % (cand, exc))
    raise ImportError("ckpt: cannot load libckpt; set CKPT_LIB to the path of "
                      "libckpt.so. Tried: " + "; ".join(tried))


lib = _load()

# The library and this package must speak the same ckpt.h: same major and
# minor version (the option structs and enums above mirror it).
EXPECTED_VERSION = (0, 2)
lib.ckpt_version_number.restype = ctypes.c_uint
lib.ckpt_version_number.argtypes = []
_v = lib.ckpt_version_number()
if (_v // 10000, _v // 100 % 100) != EXPECTED_VERSION:
    raise ImportError("ckpt: libckpt %d.%d.%d does not match this package (needs %d.%d.x)"
                      % (_v // 10000, _v // 100 % 100, _v % 100) + EXPECTED_VERSION)

# (name, restype, argtypes) for every function the package calls.
_PROTOS = [
    ("ckpt_error_last", ctypes.POINTER(Error_), []),
    ("ckpt_error_name", c_char_p, [c_int]),
    ("ckpt_dtype_name", c_char_p, [c_int]),
    ("ckpt_dtype_bits", ctypes.c_uint, [c_int]),
    ("ckpt_format_name", c_char_p, [c_int]),
    ("ckpt_open", c_int, [ctypes.POINTER(c_void_p), c_char_p, c_void_p]),
    ("ckpt_open_memory", c_int, [ctypes.POINTER(c_void_p), c_void_p, c_size_t,
                                 c_char_p, c_void_p]),
    ("ckpt_close", None, [c_void_p]),
    ("ckpt_file_format", c_int, [c_void_p]),
    ("ckpt_file_root", c_void_p, [c_void_p]),
    ("ckpt_file_tensor_count", c_size_t, [c_void_p]),
    ("ckpt_file_tensor", c_void_p, [c_void_p, c_size_t]),
    ("ckpt_file_has_metadata", c_int, [c_void_p]),
    ("ckpt_file_metadata_count", c_size_t, [c_void_p]),
    ("ckpt_file_metadata_key", c_char_p, [c_void_p, c_size_t]),
    ("ckpt_file_metadata_value", c_char_p, [c_void_p, c_size_t]),
    ("ckpt_tensor_name", c_char_p, [c_void_p]),
    ("ckpt_tensor_dtype", c_int, [c_void_p]),
    ("ckpt_tensor_ndim", ctypes.c_uint, [c_void_p]),
    ("ckpt_tensor_shape", c_u64_p, [c_void_p]),
    ("ckpt_tensor_stride", c_u64_p, [c_void_p]),
    ("ckpt_tensor_storage_offset", c_u64, [c_void_p]),
    ("ckpt_tensor_numel", c_u64, [c_void_p]),
    ("ckpt_tensor_nbytes", c_u64, [c_void_p]),
    ("ckpt_tensor_is_contiguous", c_int, [c_void_p]),
    ("ckpt_tensor_storage_id", c_u64, [c_void_p]),
    ("ckpt_tensor_storage_nbytes", c_u64, [c_void_p]),
    ("ckpt_tensor_member", c_char_p, [c_void_p]),
    ("ckpt_tensor_file_offset", c_u64, [c_void_p]),
    ("ckpt_tensor_data", c_int, [c_void_p, ctypes.POINTER(c_void_p),
                                 ctypes.POINTER(c_size_t)]),
    ("ckpt_tensor_read", c_int, [c_void_p, c_void_p, c_size_t]),
    ("ckpt_file_storage_count", c_size_t, [c_void_p]),
    ("ckpt_file_storage_is_raw", c_int, [c_void_p, c_u64]),
    ("ckpt_file_read_storages", c_int, [c_void_p, c_size_t, c_u64_p,
                                        ctypes.POINTER(c_void_p)]),
    ("ckpt_file_read_tensors", c_int, [c_void_p, c_size_t, ctypes.POINTER(c_void_p),
                                       ctypes.POINTER(c_void_p)]),
    ("ckpt_value_kind", c_int, [c_void_p]),
    ("ckpt_value_bool", c_int, [c_void_p]),
    ("ckpt_value_int", c_int, [c_void_p, ctypes.POINTER(ctypes.c_int64)]),
    ("ckpt_value_int_decimal", c_char_p, [c_void_p]),
    ("ckpt_value_float", ctypes.c_double, [c_void_p]),
    ("ckpt_value_str", c_void_p, [c_void_p, ctypes.POINTER(c_size_t)]),
    ("ckpt_value_len", c_size_t, [c_void_p]),
    ("ckpt_value_item", c_void_p, [c_void_p, c_size_t]),
    ("ckpt_value_key", c_void_p, [c_void_p, c_size_t]),
    ("ckpt_value_tensor", c_void_p, [c_void_p]),
    ("ckpt_value_object_name", c_char_p, [c_void_p]),
    ("ckpt_value_object_args", c_void_p, [c_void_p]),
    ("ckpt_value_object_state", c_void_p, [c_void_p]),
    ("ckpt_verify", c_int, [c_void_p, ctypes.POINTER(VerifyReport_)]),
    ("ckpt_scan", c_int, [ctypes.POINTER(c_void_p), c_char_p,
                          ctypes.POINTER(ScanOptions_)]),
    ("ckpt_scan_memory", c_int, [ctypes.POINTER(c_void_p), c_void_p, c_size_t,
                                 c_char_p, ctypes.POINTER(ScanOptions_)]),
    ("ckpt_scan_report_free", None, [c_void_p]),
    ("ckpt_scan_verdict", c_int, [c_void_p]),
    ("ckpt_verdict_name", c_char_p, [c_int]),
    ("ckpt_severity_name", c_char_p, [c_int]),
    ("ckpt_scan_finding_count", c_size_t, [c_void_p]),
    ("ckpt_scan_finding", ctypes.POINTER(Finding_), [c_void_p, c_size_t]),
    ("ckpt_scan_global_count", c_size_t, [c_void_p]),
    ("ckpt_scan_global", c_char_p, [c_void_p, c_size_t]),
    ("ckpt_version_string", c_char_p, []),
    ("ckpt_open_options_init", c_int, [ctypes.POINTER(OpenOptions_), ctypes.c_uint]),
    ("ckpt_scan_options_init", c_int, [ctypes.POINTER(ScanOptions_), ctypes.c_uint]),
    ("ckpt_store_options_init", c_int, [ctypes.POINTER(StoreOptions_), ctypes.c_uint]),
    ("ckpt_match_options_init", c_int, [ctypes.POINTER(MatchOptions_), ctypes.c_uint]),
    ("ckpt_write_options_init", c_int, [ctypes.POINTER(WriteOptions_), ctypes.c_uint]),
]


def _declare(protos):
    for name, restype, argtypes in protos:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


_declare(_PROTOS)


def has(name):
    """Whether the loaded library exports `name` (sections of ckpt.h land
    at different times; callers skip what is not there yet)."""
    return hasattr(lib, name)


def declare(protos):
    """Declares prototypes of optional sections; returns False when one of
    the functions is missing from the loaded library."""
    if not all(has(p[0]) for p in protos):
        return False
    _declare(protos)
    return True


def text(b):
    """Decodes a borrowed C string (never fails: undecodable bytes are kept
    as surrogate escapes, like os.fsdecode)."""
    return "" if b is None else b.decode("utf-8", "surrogateescape")


def last_error(rc, default_file=""):
    """The exception for a call that returned rc < 0, from ckpt_error_last()."""
    e = lib.ckpt_error_last()
    if not e or e.contents.code != rc:
        # the record belongs to another call: report what we know
        return errors.from_code(rc, "call failed", default_file, "", None)
    e = e.contents
    off = None if e.offset == NO_OFFSET else int(e.offset)
    return errors.from_code(rc, text(e.message), text(e.file) or default_file,
                            text(e.member), off)


def check(rc, default_file=""):
    if rc < 0:
        raise last_error(rc, default_file)
    return rc


def fspath(path):
    return os.fsencode(os.fspath(path))


def options(cls):
    """A ckpt_*_options struct holding the library's defaults."""
    o = cls()
    init = {OpenOptions_: lib.ckpt_open_options_init, ScanOptions_: lib.ckpt_scan_options_init,
            StoreOptions_: lib.ckpt_store_options_init, MatchOptions_: lib.ckpt_match_options_init,
            WriteOptions_: lib.ckpt_write_options_init}[cls]
    check(init(ctypes.byref(o), getattr(cls, "VERSION", OPTIONS_VERSION)))
    return o
