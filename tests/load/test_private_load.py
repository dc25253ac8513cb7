#!/usr/bin/python3
"""ckpt.load returns tensors that do not depend on the file (issue 12,
item 1), and load_state_dict reads straight into the parameters.

Run by ctest with Debian's python3 (torch 1.13) and again with the
project's .venv (torch 2.x). Environment: CKPT_LIB, CKPT_SRC (for the
package on sys.path). Prints one line per check and "N passed, N failed".
"""
import os
import subprocess
import sys
import tempfile
import traceback

SRC = os.environ.get("CKPT_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "python"))

import torch  # noqa: E402
import ckpt  # noqa: E402
from ckpt import _load  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import suite  # noqa: E402

TALLY = suite.Tally()


def check(name, fn):
    try:
        fn()
    except Exception:
        TALLY.report(False, name, [traceback.format_exc().rstrip()])
    else:
        TALLY.report(True, name)


def state():
    torch.manual_seed(0)
    w = torch.randn(64, 32)
    return {"w": w, "wt": w.t(), "row": w[3], "b": torch.arange(10),
            "flag": torch.tensor([True, False, True]), "h": torch.randn(5).half(),
            "nested": {"step": 7, "lr": [0.5, torch.tensor(2.0)]}}


def same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (a.keys(), b.keys())
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
        assert torch.equal(a, b), (a, b)
    else:
        assert a == b, (a, b)


def storage_ptr(t):
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") \
        else t.storage().data_ptr()


def files(d):
    """The same state dict as a torch zip, a legacy file and safetensors."""
    sd = state()
    out = []
    for name, legacy in (("z.pt", False), ("legacy.pt", True)):
        p = os.path.join(d, name)
        torch.save(sd, p, _use_new_zipfile_serialization=not legacy)
        out.append(p)
    p = os.path.join(d, "s.safetensors")
    ckpt.save(sd, p)
    out.append(p)
    return sd, out


def load_then_save_same_path():
    with tempfile.TemporaryDirectory() as d:
        sd, paths = files(d)
        for p in paths:
            got = ckpt.load(p)
            same(got, sd)
            if p.endswith(".pt"):
                torch.save(got, p)  # truncates p first: the old mapping would fault
                same(torch.load(p), sd)
            else:
                ckpt.save(got, p)
                same(ckpt.load(p), sd)
            assert os.path.getsize(p) > 0


def sharing_kept():
    with tempfile.TemporaryDirectory() as d:
        _, paths = files(d)
        for p in paths[:2]:  # torch files record the shared storage
            got = ckpt.load(p)
            assert storage_ptr(got["w"]) == storage_ptr(got["wt"]) == storage_ptr(got["row"])
            got["w"][3, 0] = 123.0
            assert got["row"][0].item() == 123.0 and got["wt"][0, 3].item() == 123.0


def independent_of_truncation_and_rewrite():
    with tempfile.TemporaryDirectory() as d:
        sd, paths = files(d)
        for p in paths:
            got = ckpt.load(p)
            size = os.path.getsize(p)
            # another process rewrites the bytes in place, then truncates
            subprocess.run([sys.executable, "-c",
                            "import os,sys; f=open(sys.argv[1],'r+b'); f.write(os.urandom(%d));"
                            " f.close(); os.truncate(sys.argv[1], 0)" % size, p], check=True)
            assert os.path.getsize(p) == 0
            same(got, sd)  # every element still readable, unchanged


def mmap_stays_zero_copy():
    with tempfile.TemporaryDirectory() as d:
        sd, paths = files(d)
        p = paths[0]
        got = ckpt.load(p, mmap=True)
        same(got, sd)
        # documented hazard: the tensors view the file's pages
        with open(p, "r+b") as f:
            data = f.read()
            off = data.find(sd["b"].numpy().tobytes())
            assert off > 0
            f.seek(off)
            f.write((99).to_bytes(8, "little"))
        assert got["b"][0].item() == 99


def load_state_dict_reads_into_parameters():
    with tempfile.TemporaryDirectory() as d:
        torch.manual_seed(1)
        src = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8))
        with torch.no_grad():
            for q in src.parameters():
                q.add_(1)
        for fmt in ("pt", "safetensors"):
            p = os.path.join(d, "m." + fmt)
            if fmt == "pt":
                torch.save(src.state_dict(), p)
            else:
                ckpt.save(src.state_dict(), p)
            dst = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8))
            before = {k: v.data_ptr() for k, v in dst.state_dict().items()}
            seen = {}
            fill = _load.StateDictReader.fill

            def spy(self, pairs):
                out = fill(self, pairs)
                seen.update(out)
                return out
            _load.StateDictReader.fill = spy
            try:
                rep = ckpt.load_state_dict(dst, p)
            finally:
                _load.StateDictReader.fill = fill
            assert rep.complete
            params = dst.state_dict(keep_vars=True)
            for k, v in src.state_dict().items():
                assert torch.equal(params[k], v), k
                assert params[k].data_ptr() == before[k], k
                if fmt == "pt":  # torch files: every key read into its parameter
                    assert seen[k] is params[k], k


check("load then torch.save to the same path keeps the data", load_then_save_same_path)
check("tensors that shared a storage share memory", sharing_kept)
check("values survive the file being rewritten and truncated", independent_of_truncation_and_rewrite)
check("mmap=True views the file (zero-copy)", mmap_stays_zero_copy)
check("load_state_dict reads straight into the parameters", load_state_dict_reads_into_parameters)
print("torch %s" % torch.__version__)
sys.exit(TALLY.end())
