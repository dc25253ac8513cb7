"""ctypes bindings of include/ckpt.h: finding libckpt, prototypes, and the
conversion of a failed call into a Python exception.

Only this module touches ctypes prototypes; the rest of the package calls
`lib.ckpt_*` and `check(rc)`.
"""
import ctypes
import ctypes.util
import os
import re
from typing import Any, List, Optional, Sequence, Tuple

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
VERDICT_SAFE, VERDICT_UNSAFE, VERDICT_UNSCANNABLE, VERDICT_NOT_A_CHECKPOINT, \
    VERDICT_REVIEW = range(5)
FORMAT_SAFETENSORS, FORMAT_SAFETENSORS_SHARDED = 1, 2
FORMAT_TORCH_SHARDED = 6

# ckpt_file_value_table's layout (CKPT_VALUE_TABLE_VERSION): words per node
# and per tensor record, the fields of a tensor record, its flags.
VALUE_TABLE_VERSION = 1
NODE_WORDS, TENSOR_WORDS = 5, 16
T_DTYPE, T_NDIM, T_DIMS, T_STORAGE_ID, T_STORAGE_OFFSET, T_NUMEL, T_NBYTES, \
    T_STORAGE_NBYTES, T_FLAGS, T_DATA, T_DEVICE, T_DEVICE_LEN, T_FILE_OFFSET, T_MEMBER, \
    T_MEMBER_LEN, T_PTR = range(TENSOR_WORDS)
TABLE_RAW, TABLE_CONTIGUOUS, TABLE_PARAMETER, TABLE_WHOLE, TABLE_REQUIRES_GRAD, \
    TABLE_NUMPY = 1, 2, 4, 8, 16, 32


class Error_(ctypes.Structure):
    _fields_ = [("code", c_int), ("message", c_char_p), ("file", c_char_p),
                ("member", c_char_p), ("offset", c_u64), ("os_errno", c_int)]


class Limits(ctypes.Structure):
    _fields_ = [("max_header_bytes", c_u64), ("max_tensors", c_u64),
                ("max_name_bytes", c_u64), ("max_ndim", ctypes.c_uint32),
                ("max_depth", ctypes.c_uint32), ("max_pickle_stack", c_u64),
                ("max_pickle_memo", c_u64), ("max_pickle_ops", c_u64),
                ("max_zip_entries", c_u64), ("max_inflate_bytes", c_u64),
                ("max_index_bytes", c_u64), ("max_inflate_ratio", c_u64)]


# Option structs: `version` first, filled in by the library's own
# ckpt_*_options_init (never by copying its defaults here).
OPTIONS_VERSION = 1


class OpenOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("limits", Limits)]


class VerifyReport_(ctypes.Structure):
    _fields_ = [("ok", c_int), ("tensors", c_u64), ("bytes", c_u64),
                ("members", c_u64), ("shards", c_u64)]


class Finding_(ctypes.Structure):
    _fields_ = [("severity", c_int), ("kind", c_char_p), ("global_", c_char_p),
                ("member", c_char_p), ("offset", c_u64), ("message", c_char_p)]


class WeightsOnly_(ctypes.Structure):
    _fields_ = [("refused", c_int), ("global_", c_char_p), ("opcode", c_char_p),
                ("member", c_char_p), ("offset", c_u64), ("message", c_char_p)]


class ScanOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("limits", Limits),
                ("allow", ctypes.POINTER(c_char_p)),
                ("nallow", c_size_t), ("max_nesting", ctypes.c_uint32)]


class StoreOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("keep", ctypes.c_uint32),
                ("stale_minutes", ctypes.c_uint32), ("open", OpenOptions_),
                ("replace", ctypes.c_int), ("progress", c_void_p), ("progress_ctx", c_void_p),
                ("on_event", c_void_p), ("event_ctx", c_void_p)]
    VERSION = 4


class MatchOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("normalize", ctypes.c_int),
                ("allow_missing", ctypes.POINTER(c_char_p)), ("nallow_missing", c_size_t),
                ("allow_unexpected", ctypes.POINTER(c_char_p)), ("nallow_unexpected", c_size_t)]


class WriteOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("meta_keys", ctypes.POINTER(c_char_p)),
                ("meta_values", ctypes.POINTER(c_char_p)), ("nmeta", c_size_t),
                ("backup", ctypes.c_int), ("progress", c_void_p), ("progress_ctx", c_void_p)]
    VERSION = 2


class ConvertOptions_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("open", OpenOptions_), ("format", c_int),
                ("select", ctypes.POINTER(c_char_p)), ("nselect", c_size_t),
                ("config_json", c_char_p), ("write", WriteOptions_),
                ("exclude", ctypes.POINTER(c_char_p)), ("nexclude", c_size_t),
                ("max_shard_size", c_u64)]
    VERSION = 3


class ConvertReport_(ctypes.Structure):
    _fields_ = [("format", c_int), ("tensors", c_u64), ("bytes", c_u64), ("keys", c_u64),
                ("shards", c_u64), ("retired", c_u64)]


class ManifestEntry_(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_char_p), ("ndim", ctypes.c_uint),
                ("shape", c_u64_p), ("tensor", c_void_p)]


class MatchItem_(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("checkpoint", ctypes.POINTER(ManifestEntry_)),
                ("expected", ctypes.POINTER(ManifestEntry_)), ("tied_to", c_char_p)]


class Rewrite_(ctypes.Structure):
    _fields_ = [("description", c_char_p), ("matches", c_u64), ("applied", ctypes.c_int)]


class ValueTable_(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("words", c_void_p), ("nwords", c_size_t),
                ("nnodes", c_size_t), ("ntensors", c_size_t), ("tensors_at", c_size_t),
                ("refs_at", c_size_t), ("dims_at", c_size_t), ("text", c_void_p),
                ("ntext", c_size_t)]


class DirEntry_(ctypes.Structure):
    _fields_ = [("path", c_char_p), ("name", c_char_p), ("base", c_size_t), ("error", Error_)]


class StoreGeneration_(ctypes.Structure):
    _fields_ = [("file", c_char_p), ("path", c_char_p), ("name", c_char_p),
                ("step", c_u64), ("bytes", c_u64), ("ok", ctypes.c_int),
                ("code", ctypes.c_int), ("reason", c_char_p), ("member", c_char_p),
                ("offset", c_u64), ("latest", ctypes.c_int)]


_P = ctypes.POINTER(c_void_p)


_HERE = os.path.dirname(os.path.abspath(__file__))
# python/ckpt in a source tree: the repository root, whose build/ holds the
# library and CLI built by the README's cmake commands.
_SOURCE_ROOT = os.path.dirname(os.path.dirname(_HERE))
_SOURCE_BUILD = os.path.join(_SOURCE_ROOT, "build")


def in_source_tree() -> bool:
    """Whether this package is python/ckpt of a ckpt source tree (used from
    it with PYTHONPATH=python) rather than an installed copy."""
    return os.path.isfile(os.path.join(_SOURCE_ROOT, "include", "ckpt.h"))


def _places() -> List[str]:
    """Where libckpt is looked for, in order: $CKPT_LIB (never second-
    guessed), the copy inside the package (pip install / wheel), build/ of
    the source tree this package sits in, then the system loader (what
    find_library names, else libckpt.so.1)."""
    env = os.environ.get("CKPT_LIB")
    if env:
        return [env]
    out = [os.path.join(_HERE, "libckpt.so")]
    if in_source_tree():
        out.append(os.path.join(_SOURCE_BUILD, "libckpt.so"))
    found = ctypes.util.find_library("ckpt")
    return out + ([found] if found else []) + ["libckpt.so.1"]


def cli_path() -> Optional[str]:
    """The `ckpt` executable of this package: the one built into it (pip
    install), else build/ckpt of the source tree; None when neither."""
    cands = [os.path.join(_HERE, "bin", "ckpt")]
    if in_source_tree():
        cands.append(os.path.join(_SOURCE_BUILD, "ckpt"))
    return next((p for p in cands if os.access(p, os.X_OK)), None)


def _package_version() -> str:
    """The version of ckpt.h this package mirrors: ckpt/_version.py, which
    the build writes into the wheel, else CKPT_VERSION_MAJOR/MINOR/PATCH of
    the source tree's include/ckpt/common.h (the version's one place)."""
    try:
        from ._version import __version__
        return str(__version__)
    except ImportError:
        pass
    try:
        with open(os.path.join(_SOURCE_ROOT, "include", "ckpt", "common.h"),
                  encoding="utf-8") as fh:
            text_ = fh.read()
    except OSError:
        return "0+unknown"
    parts = [re.search(r"^#define CKPT_VERSION_%s (\d+)$" % p, text_, re.M)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else "0+unknown"


VERSION = _package_version()


def _how_to_build() -> str:
    """The command that puts libckpt where _places() looks next time."""
    if in_source_tree():
        return ("build it: `cd %s && cmake -S . -B build && cmake --build build "
                "--target ckpt_shared` (then PYTHONPATH=python finds it), or "
                "install the package: `pip install %s`" % (_SOURCE_ROOT, _SOURCE_ROOT))
    return ("reinstall the package (`pip install ckpt` from a source tree: "
            "`pip install .`), or build libckpt with `cmake --build build "
            "--target ckpt_shared` and set CKPT_LIB to build/libckpt.so")


def _load() -> ctypes.CDLL:
    tried = []
    for place in _places():
        # a path that is not there is said so, not handed to dlopen (whose
        # message would not say which path was meant)
        if os.sep in place and not os.path.exists(place):
            tried.append("%s (no such file)" % place)
            continue
        try:
            return ctypes.CDLL(place)
        except OSError as exc:
            tried.append("%s (%s)" % (place, exc))
    raise ImportError("ckpt: cannot load libckpt.so; looked in: %s. To get it, %s; "
                      "or set CKPT_LIB to the path of a libckpt.so."
                      % ("; ".join(tried), _how_to_build()))


lib = _load()

# The library and this package must speak the same ckpt.h: same major and
# minor version (the option structs and enums above mirror it).
lib.ckpt_version_number.restype = ctypes.c_uint
lib.ckpt_version_number.argtypes = []
_v = lib.ckpt_version_number()
_want = VERSION.split(".")[:2]
if _want != [str(_v // 10000), str(_v // 100 % 100)] and VERSION != "0+unknown":
    raise ImportError("ckpt: libckpt %d.%d.%d does not match this package (needs %s.x)"
                      % (_v // 10000, _v // 100 % 100, _v % 100, ".".join(_want)))

# (name, restype, argtypes) for every function the package calls.
_PROTOS = [
    ("ckpt_error_last", ctypes.POINTER(Error_), []),
    ("ckpt_error_name", c_char_p, [c_int]),
    ("ckpt_dtype_name", c_char_p, [c_int]),
    ("ckpt_dtype_bits", ctypes.c_uint, [c_int]),
    ("ckpt_format_name", c_char_p, [c_int]),
    ("ckpt_xxh3_64", c_u64, [c_void_p, c_size_t]),
    ("ckpt_open", c_int, [ctypes.POINTER(c_void_p), c_char_p, c_void_p]),
    ("ckpt_open_memory", c_int, [ctypes.POINTER(c_void_p), c_void_p, c_size_t,
                                 c_char_p, c_void_p]),
    ("ckpt_close", None, [c_void_p]),
    ("ckpt_file_format", c_int, [c_void_p]),
    ("ckpt_file_checksums", c_int, [c_void_p]),
    ("ckpt_checksums_name", c_char_p, [c_int]),
    ("ckpt_file_path", c_char_p, [c_void_p]),
    ("ckpt_file_variant", c_char_p, [c_void_p]),
    ("ckpt_file_snapshot", c_char_p, [c_void_p]),
    ("ckpt_open_target", c_int, [ctypes.POINTER(c_void_p), c_char_p]),
    ("ckpt_file_root", c_void_p, [c_void_p]),
    ("ckpt_file_logical_root", c_int, [ctypes.POINTER(c_void_p), c_void_p]),
    ("ckpt_file_tensor_count", c_size_t, [c_void_p]),
    ("ckpt_file_tensor", c_void_p, [c_void_p, c_size_t]),
    ("ckpt_file_find_tensor", c_void_p, [c_void_p, c_char_p]),
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
    ("ckpt_tensor_device", c_char_p, [c_void_p]),
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
    ("ckpt_file_value_table", c_int, [ctypes.POINTER(ctypes.POINTER(ValueTable_)), c_void_p]),
    ("ckpt_value_table_free", None, [ctypes.POINTER(ValueTable_)]),
    ("ckpt_value_kind", c_int, [c_void_p]),
    ("ckpt_value_bool", c_int, [c_void_p, ctypes.POINTER(c_int)]),
    ("ckpt_value_int", c_int, [c_void_p, ctypes.POINTER(ctypes.c_int64)]),
    ("ckpt_value_int_decimal", c_char_p, [c_void_p]),
    ("ckpt_value_float", c_int, [c_void_p, ctypes.POINTER(ctypes.c_double)]),
    ("ckpt_value_str", c_void_p, [c_void_p, ctypes.POINTER(c_size_t)]),
    ("ckpt_value_len", c_size_t, [c_void_p]),
    ("ckpt_value_item", c_void_p, [c_void_p, c_size_t]),
    ("ckpt_value_key", c_void_p, [c_void_p, c_size_t]),
    ("ckpt_value_tensor", c_void_p, [c_void_p]),
    ("ckpt_value_object_name", c_char_p, [c_void_p]),
    ("ckpt_value_object_args", c_void_p, [c_void_p]),
    ("ckpt_value_object_state", c_void_p, [c_void_p]),
    ("ckpt_value_dict_class", c_char_p, [c_void_p]),
    ("ckpt_value_dict_state", c_void_p, [c_void_p]),
    ("ckpt_value_is_frozenset", c_int, [c_void_p]),
    ("ckpt_value_numpy_dtype", c_int, [c_void_p]),
    ("ckpt_tensor_is_numpy", c_int, [c_void_p]),
    ("ckpt_tensor_is_parameter", c_int, [c_void_p]),
    ("ckpt_tensor_requires_grad", c_int, [c_void_p]),
    ("ckpt_verify", c_int, [ctypes.POINTER(VerifyReport_), c_void_p]),
    ("ckpt_file_check_mmap", c_int, [c_void_p]),
    ("ckpt_scan", c_int, [ctypes.POINTER(c_void_p), c_char_p,
                          ctypes.POINTER(ScanOptions_)]),
    ("ckpt_scan_memory", c_int, [ctypes.POINTER(c_void_p), c_void_p, c_size_t,
                                 c_char_p, ctypes.POINTER(ScanOptions_)]),
    ("ckpt_scan_file", c_int, [ctypes.POINTER(c_void_p), c_void_p,
                               ctypes.POINTER(ScanOptions_)]),
    ("ckpt_scan_report_free", None, [c_void_p]),
    ("ckpt_scan_dir_list", c_int, [ctypes.POINTER(c_void_p), c_char_p, c_char_p]),
    ("ckpt_scan_dir_count", c_size_t, [c_void_p]),
    ("ckpt_scan_dir_entry", ctypes.POINTER(DirEntry_), [c_void_p, c_size_t]),
    ("ckpt_scan_dir_scan", c_int, [c_void_p, ctypes.POINTER(ScanOptions_)]),
    ("ckpt_scan_dir_report", c_void_p, [c_void_p, c_size_t,
                                        ctypes.POINTER(ctypes.POINTER(Error_))]),
    ("ckpt_scan_dir_free", None, [c_void_p]),
    ("ckpt_is_dcp_dir", c_int, [c_char_p]),
    ("ckpt_scan_verdict", c_int, [c_void_p]),
    ("ckpt_verdict_name", c_char_p, [c_int]),
    ("ckpt_severity_name", c_char_p, [c_int]),
    ("ckpt_scan_finding_count", c_size_t, [c_void_p]),
    ("ckpt_scan_finding", ctypes.POINTER(Finding_), [c_void_p, c_size_t]),
    ("ckpt_scan_weights_only", c_int, [c_void_p, ctypes.POINTER(WeightsOnly_)]),
    ("ckpt_scan_global_count", c_size_t, [c_void_p]),
    ("ckpt_scan_global", c_char_p, [c_void_p, c_size_t]),
    ("ckpt_version_string", c_char_p, []),
    ("ckpt_open_options_init", c_int, [ctypes.POINTER(OpenOptions_), ctypes.c_uint]),
    ("ckpt_scan_options_init", c_int, [ctypes.POINTER(ScanOptions_), ctypes.c_uint]),
    ("ckpt_store_options_init", c_int, [ctypes.POINTER(StoreOptions_), ctypes.c_uint]),
    ("ckpt_match_options_init", c_int, [ctypes.POINTER(MatchOptions_), ctypes.c_uint]),
    ("ckpt_write_options_init", c_int, [ctypes.POINTER(WriteOptions_), ctypes.c_uint]),
    ("ckpt_convert_options_init", c_int, [ctypes.POINTER(ConvertOptions_), ctypes.c_uint]),
    ("ckpt_convert", c_int, [ctypes.POINTER(ConvertReport_), c_char_p, c_char_p,
                             ctypes.POINTER(ConvertOptions_)]),
    ("ckpt_manifest_new", c_int, [ctypes.POINTER(c_void_p), c_char_p]),
    ("ckpt_manifest_add", c_int, [c_void_p, c_char_p, c_char_p, ctypes.c_uint, c_u64_p]),
    ("ckpt_manifest_tie", c_int, [c_void_p, c_char_p, c_char_p]),
    ("ckpt_manifest_add_leaf", c_int, [c_void_p, c_char_p]),
    ("ckpt_manifest_add_root_entry", c_int, [c_void_p, c_char_p, c_int]),
    ("ckpt_manifest_set_version", c_int, [c_void_p, c_char_p, ctypes.c_int64]),
    ("ckpt_manifest_set_metadata", c_int, [c_void_p, c_void_p]),
    ("ckpt_atomic_file_begin", c_int, [ctypes.POINTER(c_void_p), c_char_p]),
    ("ckpt_atomic_file_write", c_int, [c_void_p, c_void_p, c_size_t]),
    ("ckpt_atomic_file_commit", c_int, [c_void_p]),
    ("ckpt_atomic_file_abort", None, [c_void_p]),
    ("ckpt_manifest_add_batchnorm_counter", c_int, [c_void_p, c_char_p]),
    ("ckpt_manifest_free", None, [c_void_p]),
    ("ckpt_manifest_count", c_size_t, [c_void_p]),
    ("ckpt_manifest_entry_at", ctypes.POINTER(ManifestEntry_), [c_void_p, c_size_t]),
    ("ckpt_match", c_int, [ctypes.POINTER(c_void_p), c_void_p, c_void_p,
                                  ctypes.POINTER(MatchOptions_)]),
    ("ckpt_match_result_free", None, [c_void_p]),
    ("ckpt_match_complete", c_int, [c_void_p]),
    ("ckpt_match_matched", c_u64, [c_void_p]),
    ("ckpt_match_count", c_size_t, [c_void_p, c_int]),
    ("ckpt_match_item_at", ctypes.POINTER(MatchItem_), [c_void_p, c_int, c_size_t]),
    ("ckpt_match_rewrite", ctypes.POINTER(Rewrite_), [c_void_p]),
    ("ckpt_match_candidate_count", c_size_t, [c_void_p]),
    ("ckpt_match_candidate", ctypes.POINTER(Rewrite_), [c_void_p, c_size_t]),
    ("ckpt_match_warning", c_char_p, [c_void_p]),
    ("ckpt_match_tie_note", c_char_p, [c_void_p]),
    ("ckpt_match_rewrite_note", c_char_p, [c_void_p]),
    ("ckpt_match_rewritten", c_char_p, [c_void_p, c_size_t]),
    ("ckpt_match_ignored_count", c_size_t, [c_void_p]),
    ("ckpt_match_ignored", c_char_p, [c_void_p, c_size_t]),
    ("ckpt_store_commit", c_int, [c_char_p, c_size_t, c_char_p, c_char_p, c_u64,
                                         c_char_p, ctypes.POINTER(StoreOptions_)]),
    ("ckpt_store_commit_tree", c_int, [c_char_p, c_size_t, c_char_p, c_char_p, c_u64,
                                       c_void_p, c_int, ctypes.POINTER(WriteOptions_),
                                       ctypes.POINTER(StoreOptions_)]),
    ("ckpt_store_stage_dir", c_int, [_P, c_char_p, c_char_p, c_u64,
                                     ctypes.POINTER(StoreOptions_)]),
    ("ckpt_store_stage_path", c_char_p, [c_void_p]),
    ("ckpt_store_commit_dir", c_int, [c_char_p, c_size_t, c_void_p,
                                      ctypes.POINTER(StoreOptions_)]),
    ("ckpt_store_stage_free", None, [c_void_p]),
    ("ckpt_store_latest", c_int, [c_char_p, c_size_t, c_char_p, ctypes.POINTER(StoreOptions_)]),
    ("ckpt_store_list", c_int, [_P, c_char_p, ctypes.POINTER(StoreOptions_)]),
    ("ckpt_store_list_newest", c_int, [_P, c_char_p, ctypes.POINTER(StoreOptions_)]),
    ("ckpt_store_listing_free", None, [c_void_p]),
    ("ckpt_store_list_count", c_size_t, [c_void_p]),
    ("ckpt_store_list_generation", ctypes.POINTER(StoreGeneration_), [c_void_p, c_size_t]),
    ("ckpt_store_gc", c_int, [ctypes.POINTER(c_size_t), c_char_p, ctypes.POINTER(StoreOptions_)]),
    ("ckpt_store_prune", c_int, [ctypes.POINTER(c_size_t), c_char_p,
                                 ctypes.POINTER(StoreOptions_)]),
    ("ckpt_training_analyze", c_int, [_P, c_void_p]),
    ("ckpt_training_free", None, [c_void_p]),
    ("ckpt_training_resume", c_int, [c_void_p]),
    ("ckpt_resume_name", c_char_p, [c_int]),
    ("ckpt_training_reason_count", c_size_t, [c_void_p]),
    ("ckpt_training_reason", c_char_p, [c_void_p, c_size_t]),
    ("ckpt_tree_new", c_int, [_P]),
    ("ckpt_tree_free", None, [c_void_p]),
    ("ckpt_tree_none", c_int, [_P, c_void_p]),
    ("ckpt_tree_bool", c_int, [_P, c_void_p, c_int]),
    ("ckpt_tree_int", c_int, [_P, c_void_p, ctypes.c_int64]),
    ("ckpt_tree_float", c_int, [_P, c_void_p, ctypes.c_double]),
    ("ckpt_tree_str", c_int, [_P, c_void_p, c_char_p, c_size_t]),
    ("ckpt_tree_bytes", c_int, [_P, c_void_p, c_char_p, c_size_t]),
    ("ckpt_tree_list", c_int, [_P, c_void_p]),
    ("ckpt_tree_tuple", c_int, [_P, c_void_p]),
    ("ckpt_tree_empty_set", c_int, [_P, c_void_p]),
    ("ckpt_tree_dict", c_int, [_P, c_void_p]),
    ("ckpt_tree_append", c_int, [c_void_p, c_void_p, c_void_p]),
    ("ckpt_tree_set", c_int, [c_void_p, c_void_p, c_void_p, c_void_p]),
    ("ckpt_tree_set_class", c_int, [c_void_p, c_void_p, c_char_p]),
    ("ckpt_tree_set_dict_class", c_int, [c_void_p, c_void_p, c_char_p]),
    ("ckpt_tree_set_dict_state", c_int, [c_void_p, c_void_p, c_void_p]),
    ("ckpt_tree_set_parameter", c_int, [c_void_p, c_void_p, c_int]),
    ("ckpt_tree_set_requires_grad", c_int, [c_void_p, c_void_p, c_int]),
    ("ckpt_tree_tensor_alias", c_int, [_P, c_void_p, c_void_p]),
    ("ckpt_tree_tensor_view", c_int, [_P, c_void_p, c_void_p, ctypes.c_uint, c_u64_p,
                                      c_u64_p, c_u64]),
    ("ckpt_tree_set_numpy", c_int, [c_void_p, c_void_p, c_int]),
    ("ckpt_tree_tensor", c_int, [_P, c_void_p, c_int, ctypes.c_uint,
                                        c_u64_p, c_void_p, c_size_t]),
    ("ckpt_tree_write", c_int, [c_void_p, c_char_p, c_int,
                                       ctypes.POINTER(WriteOptions_)]),
    ("ckpt_dtype_from_name", c_int, [c_char_p]),
    ("ckpt_doctor", c_int, [ctypes.POINTER(c_void_p), c_char_p, c_void_p]),
    ("ckpt_doctor_pipeline", c_int, [ctypes.POINTER(c_void_p), c_void_p, c_size_t, c_void_p]),
    ("ckpt_doctor_report_free", None, [c_void_p]),
    ("ckpt_pipeline_open", c_int, [ctypes.POINTER(c_void_p), c_char_p]),
    ("ckpt_pipeline_count", c_size_t, [c_void_p]),
    ("ckpt_pipeline_component", c_char_p, [c_void_p, c_size_t]),
    ("ckpt_pipeline_path", c_char_p, [c_void_p, c_size_t]),
    ("ckpt_pipeline_check", c_int, [c_void_p, c_size_t]),
    ("ckpt_pipeline_free", None, [c_void_p]),
    ("ckpt_doctor_json", c_int, [ctypes.POINTER(c_void_p), ctypes.POINTER(c_size_t),
                                 c_void_p]),
    ("ckpt_string_free", None, [c_void_p]),
]


def _declare(protos: Sequence[Tuple[str, Any, List[Any]]]) -> None:
    for name, restype, argtypes in protos:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


_declare(_PROTOS)


def text(b: Optional[bytes]) -> str:
    """Decodes a borrowed C string (never fails: undecodable bytes are kept
    as surrogate escapes, like os.fsdecode)."""
    return "" if b is None else b.decode("utf-8", "surrogateescape")


def last_error(rc: int, default_file: str = "") -> "errors.Error":
    """The exception for a call that returned rc < 0, from ckpt_error_last()."""
    e = lib.ckpt_error_last()
    if not e or e.contents.code != rc:
        # the record belongs to another call: report what we know
        return errors.from_code(rc, "call failed", default_file, "", None)
    return record_error(e.contents, default_file)


def record_error(e: "Error_", default_file: str = "") -> "errors.Error":
    """The exception for an error record the library kept (a ckpt_error)."""
    off = None if e.offset == NO_OFFSET else int(e.offset)
    return errors.from_code(e.code, text(e.message), text(e.file) or default_file,
                            text(e.member), off, e.os_errno)


def check(rc: int, default_file: str = "") -> int:
    if rc < 0:
        raise last_error(rc, default_file)
    return rc


def fspath(path: "os.PathLike[str] | str | bytes") -> bytes:
    return os.fsencode(os.fspath(path))


def options(cls):
    """A ckpt_*_options struct holding the library's defaults."""
    o = cls()
    init = {OpenOptions_: lib.ckpt_open_options_init, ScanOptions_: lib.ckpt_scan_options_init,
            StoreOptions_: lib.ckpt_store_options_init, MatchOptions_: lib.ckpt_match_options_init,
            WriteOptions_: lib.ckpt_write_options_init,
            ConvertOptions_: lib.ckpt_convert_options_init}[cls]
    check(init(ctypes.byref(o), getattr(cls, "VERSION", OPTIONS_VERSION)))
    return o
