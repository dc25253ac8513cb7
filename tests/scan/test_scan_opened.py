#!/usr/bin/python3
"""The scan of an open file (ckpt_scan_file: inspect, doctor, ckpt.load)
walks the zip directory open read; ckpt_scan of the path reads it again.
Both must give the same report, field by field: verdict, every finding
(severity, kind, global, member, offset, message), globals and the
weights_only refusal. Compared on every file the repository holds (test
inputs, fuzz seeds, the hostile families of gen_hostile.py), on torch.save
files written here, and, in the corpus suite, on every corpus file.
Files that do not open are scanned only by path, as before.

Environment (set by ctest): CKPT_SRC, CKPT_LIB, CKPT_CORPUS. Prints one
line per case and ends with "N passed, N failed"; exits 1 on failure.
"""
import ctypes
import os
import sys
import tempfile
import zipfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
SRC = os.environ.get("CKPT_SRC", os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "python"))
import gen_hostile  # noqa: E402
from suite import corpus, run_cases  # noqa: E402
from ckpt import _scan  # noqa: E402
from ckpt._lib import lib  # noqa: E402

CORPUS = os.environ.get("CKPT_CORPUS", "/work/shared/corpus")
TMP = tempfile.mkdtemp(prefix="ckpt-scan-opened-")
SKIP_DIRS = {".git", "build", "build-asan", ".venv", "node_modules"}


def files_under(root):
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
        for n in sorted(names):
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                yield p


def compare(paths):
    """(opened, torch_zips, differing) over paths: every file that opens
    is scanned both ways."""
    opened = zips = 0
    differ = []
    for p in paths:
        h = ctypes.c_void_p()
        if lib.ckpt_open(ctypes.byref(h), p.encode("utf-8", "surrogateescape"), None) != 0:
            continue
        try:
            fmt = lib.ckpt_format_name(lib.ckpt_file_format(h)).decode()
            try:
                a = _scan.scan(p)
            except Exception as e:  # noqa: BLE001 (compared, not raised)
                a = ("error", type(e).__name__, str(e))
            try:
                b = _scan.scan_file(h, p)
            except Exception as e:  # noqa: BLE001
                b = ("error", type(e).__name__, str(e))
        finally:
            lib.ckpt_close(h)
        opened += 1
        zips += fmt == "torch-zip"
        if a != b:
            differ.append((p, a, b))
    return opened, zips, differ


def check(paths, min_zips):
    opened, zips, differ = compare(paths)
    for p, a, b in differ[:3]:
        print("  %s\n    by path: %r\n    opened:  %r" % (p, a, b))
    assert not differ, "%d of %d opened files scan differently" % (len(differ), opened)
    # the comparison must have met torch zips, or it proves nothing
    assert zips >= min_zips, "only %d torch zips opened of %d files" % (zips, opened)
    print("  %d files opened, %d torch zips, same reports" % (opened, zips))


def test_repository_files():
    paths = [p for top in ("tests", "fuzz", "examples", "bench")
             for p in files_under(os.path.join(SRC, top))]
    check(paths, 5)


def test_hostile_families():
    out = os.path.join(TMP, "hostile")
    gen_hostile.main(out)
    check(list(files_under(out)), 1)


def test_torch_saves():
    """torch zips of several shapes: many members, deflated and stored
    extra members, a prefix-free archive rewritten by zipfile, evil."""
    import torch
    out = os.path.join(TMP, "torch")
    os.makedirs(out)
    many = {"layer%d.weight" % i: torch.ones(1) for i in range(300)}
    torch.save(many, os.path.join(out, "many.pt"))
    torch.save({"x": torch.arange(4.0), "y": [1, 2.5, "s"]}, os.path.join(out, "mixed.pt"))
    torch.save({"x": gen_hostile.EVIL}, os.path.join(out, "evil.pt"))
    # the same members rewritten by zipfile, deflated or stored, plus extras
    for method in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED):
        with zipfile.ZipFile(os.path.join(out, "mixed.pt")) as src, \
                zipfile.ZipFile(os.path.join(out, "re%d.pt" % method), "w", method) as dst:
            for info in src.infolist():
                dst.writestr(info.filename, src.read(info))
            dst.writestr("mixed/extra.pkl", b"\x80\x02cos\nsystem\nq\x00.")
    check(list(files_under(out)), 5)


@corpus
def test_corpus_files():
    check(list(files_under(CORPUS)), 10)


if __name__ == "__main__":
    sys.exit(run_cases(globals(), __file__))
