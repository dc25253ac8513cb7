"""ckpt.scan and ckpt.verify: the C library's verdicts as Python objects."""
import ctypes
import os
from dataclasses import dataclass, field
from typing import Optional, Tuple

from . import errors
from ._lib import (NO_OFFSET, Error_, ScanOptions_, VerifyReport_, WeightsOnly_, check,
                   options, fspath, last_error, lib, record_error, text)
from ._pipeline import components, pipeline, unloadable


@dataclass(frozen=True)
class Finding:
    """One scan finding. severity: "info", "suspicious" or "dangerous";
    kind: "global", "call", "build", "zip-flags", "trailing-bytes", ...;
    global_: "module.qualname" or None; member: zip member or pickle name
    ("" for the file); offset: absolute byte offset in the file or None
    (for a member of an archive inside a zip member, "OUTER:INNER", the
    offset inside OUTER as extracted)."""
    severity: str
    kind: str
    global_: Optional[str]
    member: str
    offset: Optional[int]
    message: str


@dataclass(frozen=True)
class ScanReport:
    """verdict: "safe", "unsafe", "unscannable", "review" (data-only
    classes such as argparse.Namespace, safe once allowed) or
    "not-a-checkpoint";
    findings in file order; globals: every distinct global named, sorted;
    weights_only: None when torch.load(f) of torch >= 2.6 (weights_only=True,
    its default) loads the file as far as ckpt can tell, else why it raises
    ("... refuses this: global numpy.core.multiarray.scalar at byte 120 ...").
    Not a safety verdict: a safe file may be refused."""
    file: str
    verdict: str
    findings: Tuple[Finding, ...] = ()
    globals: Tuple[str, ...] = ()
    weights_only: Optional[str] = None

    @property
    def safe(self):
        return self.verdict == "safe"

    def dangerous(self):
        return [f for f in self.findings if f.severity == "dangerous"]


def _options(allow):
    allow = [os.fsencode(a) if isinstance(a, str) else bytes(a) for a in allow]
    opts = options(ScanOptions_)
    keep = (ctypes.c_char_p * max(1, len(allow)))(*allow)
    opts.allow, opts.nallow = keep, len(allow)
    return opts, keep


def _report(r, path):
    """The ScanReport of r, which it frees."""
    try:
        return _describe(r, path)
    finally:
        lib.ckpt_scan_report_free(r)


def _describe(r, path):
    findings = []
    for i in range(lib.ckpt_scan_finding_count(r)):
        f = lib.ckpt_scan_finding(r, i).contents
        findings.append(Finding(
            text(lib.ckpt_severity_name(f.severity)), text(f.kind),
            text(f.global_) if f.global_ else None, text(f.member),
            None if f.offset == NO_OFFSET else int(f.offset), text(f.message)))
    names = tuple(text(lib.ckpt_scan_global(r, i))
                  for i in range(lib.ckpt_scan_global_count(r)))
    wo = WeightsOnly_()
    refused = lib.ckpt_scan_weights_only(r, ctypes.byref(wo))
    return ScanReport(path, text(lib.ckpt_verdict_name(lib.ckpt_scan_verdict(r))),
                      tuple(findings), names, text(wo.message) if refused else None)


@dataclass(frozen=True)
class DirScanReport:
    """ckpt.scan of a directory, as `ckpt scan DIR` makes it (the library's
    one walk and scan of it): reports, a ScanReport per file in the walk's
    order (a directory's own files in name order, then its subdirectories',
    16 levels down; hidden entries and links to directories not followed;
    a shard of a sharded index reported through the index, not again on
    its own); errors, a ckpt.Error for each entry that could not be scanned
    (a subdirectory too deep or unreadable, a file that cannot be read),
    its .file naming it. Iterating gives the reports.
    verdict: "unsafe" when a file is; else "unscannable" when a file is or
    an entry has an error; else "review" when a file is; else "safe" (a
    file that is no checkpoint, config.json, is no finding in a directory).
    """
    dir: str
    verdict: str
    reports: Tuple[ScanReport, ...] = ()
    errors: Tuple["errors.Error", ...] = field(default=(), compare=False)

    @property
    def safe(self):
        return self.verdict == "safe"

    def __iter__(self):
        return iter(self.reports)

    def __len__(self):
        return len(self.reports)


def _dir_verdict(reports, errs):
    seen = {r.verdict for r in reports}
    for v in ("unsafe", "unscannable", "review"):
        if v in seen or (v == "unscannable" and errs):
            return v
    return "safe"


def _scan_dir(path, opts):
    w = ctypes.c_void_p()
    check(lib.ckpt_scan_dir_list(ctypes.byref(w), fspath(path), None), path)
    try:
        check(lib.ckpt_scan_dir_scan(w, ctypes.byref(opts)), path)
        reports, errs = [], []
        for i in range(lib.ckpt_scan_dir_count(w)):
            file = os.fsdecode(lib.ckpt_scan_dir_entry(w, i).contents.path)
            why = ctypes.POINTER(Error_)()
            r = lib.ckpt_scan_dir_report(w, i, ctypes.byref(why))
            if r:
                reports.append(_describe(r, file))
            elif why:
                errs.append(record_error(why.contents, file))
    finally:
        lib.ckpt_scan_dir_free(w)
    if not reports and not errs:
        raise errors.FileError("no file in the directory", path)
    return DirScanReport(path, _dir_verdict(reports, errs), tuple(reports), tuple(errs))


def scan(path, allow=()):
    """Whether loading `path` with torch.load / pickle would run code,
    decided without running anything (ckpt_scan). `allow`: extra
    "module.qualname" names to accept. Returns a ScanReport; for a
    directory (a model folder, a diffusers pipeline, a Trainer output; a
    DCP directory is one checkpoint) a DirScanReport of its files, those
    `ckpt scan DIR` reports. Raises ckpt.FileError when the file cannot be
    read, or the directory holds no file."""
    path = os.fspath(errors.path_arg(path, "ckpt.scan"))
    opts, _keep = _options(allow)
    if os.path.isdir(path) and not lib.ckpt_is_dcp_dir(fspath(path)):
        return _scan_dir(path, opts)
    r = ctypes.c_void_p()
    check(lib.ckpt_scan(ctypes.byref(r), fspath(path), ctypes.byref(opts)), path)
    return _report(r, path)


def scan_memory(addr, size, name, allow=()):
    opts, _keep = _options(allow)
    r = ctypes.c_void_p()
    check(lib.ckpt_scan_memory(ctypes.byref(r), addr, size, fspath(name),
                               ctypes.byref(opts)), name)
    return _report(r, name)


def scan_file(handle, path, allow=()):
    """The report scan(path) gives, of a file libckpt has open (`handle`):
    a safetensors header or torch zip directory is not parsed again
    (ckpt_scan_file)."""
    opts, _keep = _options(allow)
    r = ctypes.c_void_p()
    check(lib.ckpt_scan_file(ctypes.byref(r), handle, ctypes.byref(opts)), path)
    return _report(r, path)


def unsafe_error(rep, path):
    """The UnsafeError for a report whose verdict is not safe, naming the
    first dangerous (else suspicious, else any) finding."""
    order = {"dangerous": 0, "suspicious": 1, "info": 2}
    first = min(rep.findings, key=lambda f: order.get(f.severity, 3), default=None)
    if rep.verdict == "unsafe":
        what = "loading it with torch.load would run code"
    elif rep.verdict == "review":
        what = "it names data-only classes to review (allow them to accept it)"
    else:
        what = "its content cannot be fully examined"
    msg = "refused: %s" % what
    if first is not None:
        msg += " (%s %s: %s)" % (first.severity, first.kind, first.message)
    err = errors.UnsafeError(msg + "; pass unsafe_ok=True to get the data with "
                             "placeholders", path, first.member if first else "",
                             first.offset if first else None)
    err.report = rep
    return err


@dataclass(frozen=True)
class VerifyReport:
    """ok: every byte of every tensor read and every checksum matched.
    format: "safetensors", "torch-zip", ...; tensors/bytes/members/shards:
    what was checked (shards: a sharded set's shard files, 0 otherwise);
    checksums: what the bytes were checked against beyond structure and
    sizes, as `ckpt verify --json` names it ("crc32": a torch zip's
    CRC-32s, "digests": ckpt's per-tensor digests, "none": structure
    only, as for safetensors that other writers made); error: the
    ckpt.Error describing the first problem when not ok (its member and
    offset locate it); pipeline: of a diffusers pipeline's component,
    {"component": its name, "error": the ckpt.Error of a component with
    weights but no config.json (DiffusionPipeline.from_pretrained cannot
    load it: then ok is False and error that finding), else None}.
    variant: the variant a model folder's weights are saved under when it
    holds none under the plain names (model.fp16.safetensors: from_pretrained
    needs variant="fp16"), else None; snapshot: of a Hugging Face cache
    repository (models--ORG--NAME), the revision its refs/main names, whose
    snapshot was checked, else None."""
    file: str
    ok: bool
    format: Optional[str] = None
    tensors: int = 0
    bytes: int = 0
    members: int = 0
    shards: int = 0
    checksums: str = "none"
    error: Optional[errors.Error] = field(default=None, compare=False)
    pipeline: Optional[dict] = field(default=None, compare=False)
    variant: Optional[str] = None
    snapshot: Optional[str] = None


# Failures of the machine or the call, not findings about the file (the
# CLI's exit 2): raised rather than reported.
_RAISE = (errors.FileError.code, errors.OutOfMemoryError.code,
          errors.InvalidArgumentError.code)


def verify(path):
    """Full integrity check (ckpt_open + ckpt_verify): every tensor byte read,
    zip CRC-32s, legacy storage sizes. Returns a VerifyReport; a corrupt or
    malformed file gives ok=False with `error` set. Raises ckpt.FileError
    (cannot read), ckpt.OutOfMemoryError. A diffusers pipeline directory
    (model_index.json): a list of VerifyReport, one per model component in
    name order as `ckpt verify --json` writes them, each with `pipeline`
    (a component that cannot be read is reported, not raised)."""
    path = os.fspath(errors.path_arg(path, "ckpt.verify"))
    with pipeline(path) as p:
        if p is None:
            return _verify(path, _RAISE)
        return [_verify(cpath, (errors.OutOfMemoryError.code,), name, unloadable(p, i, cpath))
                for i, name, cpath in components(p)]


def _verify(path, raised, component=None, finding=None):
    """One file's VerifyReport; codes in raised are raised, not reported;
    component and finding: a pipeline's (VerifyReport.pipeline)."""
    h = ctypes.c_void_p()
    rc = lib.ckpt_open(ctypes.byref(h), fspath(path), None)
    where = None if component is None else {"component": component, "error": finding}
    try:
        fmt = text(lib.ckpt_format_name(lib.ckpt_file_format(h))) if rc == 0 else None
        sums = text(lib.ckpt_checksums_name(lib.ckpt_file_checksums(h) if rc == 0 else 0))
        rep = VerifyReport_()
        if rc == 0:
            rc = lib.ckpt_verify(ctypes.byref(rep), h)
        if rc < 0:
            err = last_error(rc, path)
            if rc in raised:
                raise err
            return VerifyReport(path, False, fmt, int(rep.tensors), int(rep.bytes),
                                int(rep.members), int(rep.shards), sums, error=err,
                                pipeline=where)
        return VerifyReport(path, bool(rep.ok) and finding is None, fmt, int(rep.tensors),
                            int(rep.bytes), int(rep.members), int(rep.shards), sums,
                            error=finding, pipeline=where,
                            variant=_maybe(lib.ckpt_file_variant(h)),
                            snapshot=_maybe(lib.ckpt_file_snapshot(h)))
    finally:
        lib.ckpt_close(h)


def _maybe(b):
    """A borrowed C string that may be NULL: its text, or None."""
    return None if b is None else text(b)
