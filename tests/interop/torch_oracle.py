"""Run by test_torch_oracle.py under one torch (2.13 or 1.13): saves each
case with torch.save, as a zip and as a legacy (_use_new_zipfile_
serialization=False) file, and compares ckpt's answer with torch's own,
one JSON line {"case", "ok", "diffs"} per file:
  - `ckpt verify` says OK (exit 0) when torch.load(weights_only=False)
    loads the file, CORRUPT (exit 1) when it raises (torch 2.x's legacy
    save of a uint16 or float8 tensor, which no torch reads back);
  - under torch >= 2.6, ckpt.scan(...).weights_only is None exactly when
    torch.load(weights_only=True) loads the file;
  - ckpt.load gives what torch.load gives (fidelity.Compare: types, dtype,
    shape, stride, bytes, requires_grad, shared storages), quantized
    tensors as their named parts (qparts): the weights_only load when
    torch makes one, else ckpt.load(unsafe_ok=True) against
    torch.load(weights_only=False); for the cases listed in OPAQUE, whose
    objects ckpt gives as ckpt.Opaque, the tensors inside are compared by
    the check the case names;
  - `ckpt inspect --json` names a quantized tensor's qscheme as torch's
    Tensor.qscheme() does;
  - what ckpt cannot represent (UNSUPPORTED: a tensor with torch's conj
    bit) is `ckpt verify` UNSUPPORTED (exit 1) and ckpt.UnsupportedError,
    never a value.
A case the running torch cannot build or save is one "SKIP" line.

usage: torch_oracle.py OUTDIR CKPT_BIN
"""
import collections
import json
import os
import subprocess
import sys
import warnings

import torch
import torch.nn as nn

import ckpt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fidelity import Compare  # noqa: E402

warnings.simplefilter("ignore")
OUT, CKPT_BIN = sys.argv[1], sys.argv[2]
VERSION = tuple(int(x) for x in torch.__version__.split(".")[:2])
WO_DEFAULT = VERSION >= (2, 6)  # ckpt's weights_only verdict speaks of these


class Holder:
    """A class of the test's own (torch.load(weights_only=False) imports
    it from __main__): ckpt gives it as an Opaque whose BUILD state holds
    the tensors."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def trained(make_opt):
    torch.manual_seed(0)
    m = nn.Linear(3, 2)
    o = make_opt(m.parameters())
    for _ in range(2):
        def closure():
            o.zero_grad()
            loss = m(torch.ones(1, 3)).sum()
            loss.backward()
            return loss
        o.step(closure)
    return {"model": m.state_dict(), "optimizer": o.state_dict(), "epoch": 3}


def schedulers():
    o = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    sl = torch.optim.lr_scheduler
    s = {"step": sl.StepLR(o, 2), "cosine": sl.CosineAnnealingLR(o, 10)}
    if VERSION >= (2, 0):  # 1.13's state holds a bound method: the scheduler holds itself
        s["onecycle"] = sl.OneCycleLR(o, 1.0, total_steps=10)
    o.step()
    for x in s.values():
        x.step()
    return {k: x.state_dict() for k, x in s.items()}


def tied():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 3)
            self.out = nn.Linear(3, 5, bias=False)
            self.out.weight = self.emb.weight
    return Tied().state_dict()


def quint4x2():
    x = torch.rand(3, 4)
    return {"per_channel": torch.quantize_per_channel(
                x, torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.0, 1.0, 2.0]), 0,
                torch.quint4x2),
            "per_tensor": torch.quantize_per_tensor(x, 0.1, 0, torch.quint4x2)}


def float_qparams():
    x = torch.randn(3, 4)
    return {"q": torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.3]),
                                            torch.tensor([0.0, 1.0, 2.0]), 0, torch.quint8),
            "i": torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64),
                                            torch.tensor([0, 1, 2]), 0, torch.qint8)}


def holder():
    base = torch.arange(12.0)
    return {"w": base[:6], "h": Holder(view=base[6:].view(2, 3), own=torch.ones(2, dtype=torch.int16))}


def views():
    b = torch.arange(24.0).view(2, 3, 4)
    img = torch.arange(120.0).view(2, 3, 4, 5)
    return {"b": b, "t": b.transpose(0, 2), "sl": b[:, 1:, ::2],
            "cl": img.contiguous(memory_format=torch.channels_last),
            "exp": torch.arange(3.0).expand(4, 3), "d0": torch.tensor(5),
            "e": torch.empty(3, 0, 4), "huge0": torch.empty(0, 2 ** 40),
            "diag": torch.arange(9.0).view(3, 3).diagonal()}


def values():
    return {"size": torch.Size([2, 3]), "dtype": torch.float16, "dev": torch.device("cpu"),
            "set": {1, 2}, "fs": frozenset({"a"}), "bytes": b"\x00\xff", "ba": bytearray(b"xy"),
            "big": 2 ** 100, "od": collections.OrderedDict(b=1, a=2),
            # weights_only builds these: ckpt.load gave Opaque placeholders
            "cplx": 1 - 0.0j, "layout": torch.sparse_coo, "strided": torch.strided,
            "qscheme": torch.per_channel_affine}


def dtypes():
    out = {}
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                 "float8_e8m0fnu", "uint16", "uint32", "uint64", "bits8", "bits16", "complex32",
                 "complex128", "bfloat16", "bool"):
        dt = getattr(torch, name, None)
        if dt is not None:
            size = torch.empty(0, dtype=dt).element_size()
            out[name] = torch.arange(8 * size, dtype=torch.uint8).view(2, 4 * size).view(dt)
    return out


def ao_static():
    q = torch.ao.quantization
    m = nn.Sequential(q.QuantStub(), nn.Conv2d(2, 2, 1), nn.ReLU(), nn.Linear(3, 2),
                      q.DeQuantStub()).eval()
    m.qconfig = q.get_default_qconfig("fbgemm")
    q.prepare(m, inplace=True)
    m(torch.randn(1, 2, 3, 3))
    return q.convert(m, inplace=True).state_dict()


def conj():
    def z():
        return torch.complex(torch.arange(3.0), torch.arange(3.0) + 10)
    return {"c": z().conj(), "n": z().conj().imag}


CASES = {
    "legacy_whole_module": lambda: nn.Sequential(nn.Linear(2, 2), nn.ReLU()),
    "quint4x2": quint4x2,
    "float_qparams": float_qparams,
    "holder": holder,
    "views": views,
    "values": values,
    "dtypes": dtypes,
    "params": lambda: {"p": nn.Parameter(torch.ones(2)),
                       "pn": nn.Parameter(torch.ones(2), requires_grad=False),
                       "rg": torch.ones(3).requires_grad_()},
    "state_dict_metadata": lambda: nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)).state_dict(),
    "adam": lambda: trained(lambda p: torch.optim.Adam(p, lr=0.1, amsgrad=True)),
    "adamw_foreach": lambda: trained(lambda p: torch.optim.AdamW(p, lr=0.1, foreach=True)),
    "sgd": lambda: trained(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    "lbfgs": lambda: trained(lambda p: torch.optim.LBFGS(p, lr=0.1)),
    "schedulers": schedulers,
    "dataparallel": lambda: nn.DataParallel(nn.Linear(2, 2)).state_dict(),
    "tied": tied,
    "weight_norm": lambda: nn.utils.parametrizations.weight_norm(nn.Linear(3, 2)).state_dict(),
    "ao_static": ao_static,
    "conj_neg": conj,
    "ao_dynamic": lambda: torch.ao.quantization.quantize_dynamic(
        nn.Sequential(nn.Linear(4, 4)), {nn.Linear}, dtype=torch.qint8).state_dict(),
}
if VERSION >= (2, 0):
    CASES["compiled"] = lambda: torch.compile(nn.Linear(2, 2)).state_dict()

# ckpt.Opaque stands for what torch builds by a call ckpt does not make:
# these cases check the tensors inside it
def opaque_quint4x2(want, got):
    diffs = []
    for name in ("per_channel", "per_tensor"):
        g = got[name]
        if not isinstance(g, ckpt.Opaque) or g.name != "torch._utils._rebuild_qtensor":
            return ["%s: %r, not the _rebuild_qtensor placeholder" % (name, g)]
    q, qp = want["per_channel"], got["per_channel"].args[4]
    diffs += Compare().run(q.q_per_channel_scales(), qp[1])
    diffs += Compare().run(q.q_per_channel_zero_points(), qp[2])
    return diffs


def opaque_holder(want, got):
    h = got["h"]
    if not isinstance(h, ckpt.Opaque):
        return ["h: %r, not a placeholder" % h]
    # the BUILD state holds the tensors, sharing w's storage as in torch
    return Compare().run((want["w"], want["h"].__dict__), (got["w"], h.state))


def opaque_module(want, got):
    # ckpt.load gives a module's parameters and buffers: compared as a dict
    return Compare().run(dict(want.state_dict(keep_vars=True)), dict(got))


def qparts(x):
    """x with each quantized tensor as the named parts ckpt gives for it
    (FORMATS.md, "quantized tensors"): int_repr, dtype, qscheme, scale,
    zero_point[, axis], from torch's own accessors."""
    if isinstance(x, torch.Tensor) and x.is_quantized:
        d = {"int_repr": x.int_repr(), "dtype": str(x.dtype)[6:],
             "qscheme": str(x.qscheme())[6:]}
        if x.qscheme() == torch.per_tensor_affine:
            d.update(scale=x.q_scale(), zero_point=x.q_zero_point())
        else:
            d.update(scale=x.q_per_channel_scales(), zero_point=x.q_per_channel_zero_points(),
                     axis=x.q_per_channel_axis())
        return d
    if isinstance(x, dict):
        out = type(x)((k, qparts(v)) for k, v in x.items())
        if hasattr(x, "_metadata"):
            out._metadata = x._metadata
        return out
    if type(x) in (list, tuple):
        return type(x)(qparts(v) for v in x)
    return x


# torch.load gives the conjugate (negation) of the stored values of a
# tensor saved with its conj (neg) bit; ckpt does not compute them and says
# so: UNSUPPORTED, not CORRUPT (verify called the intact file corrupt)
UNSUPPORTED = {"conj_neg": "torch's conj bit"}

OPAQUE = {"quint4x2": opaque_quint4x2, "holder": opaque_holder,
          "legacy_whole_module": opaque_module}


def ckpt_cli(*args):
    p = subprocess.run([CKPT_BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def torch_load(path, weights_only):
    kw = {"weights_only": weights_only} if VERSION >= (1, 13) else {}
    try:
        return True, torch.load(path, **kw)
    except Exception as e:  # noqa: BLE001 (a refusal is compared)
        return False, str(e).strip().splitlines()[:1]


def qschemes(path, want, diffs):
    rc, out, err = ckpt_cli("inspect", "--json", path)
    if rc:
        diffs.append("inspect exit %d: %s" % (rc, err.strip()[-300:]))
        return
    got = {v["name"]: v["value"] for v in json.loads(out)["values"]}
    for name, t in want.items():
        if t.is_quantized and got.get(name + ".qscheme") != str(t.qscheme())[6:]:
            diffs.append("%s.qscheme: %r, torch: %s" % (name, got.get(name + ".qscheme"),
                                                        t.qscheme()))


def check(case, path):
    diffs = []
    okw, wo = torch_load(path, True) if WO_DEFAULT else (False, None)
    okf, full = torch_load(path, False)
    rc, out, err = ckpt_cli("verify", path)
    if not okf:  # no torch loads it (a legacy save of a uint16 tensor): nor ckpt
        return [] if rc == 1 else ["torch.load fails (%s), ckpt verify exit %d" % (full, rc)]
    if case in UNSUPPORTED and any(t.is_conj() or t.is_neg() for t in full.values()):
        if rc != 1 or not out.startswith("UNSUPPORTED ") or UNSUPPORTED[case] not in out:
            diffs.append("verify exit %d: %s" % (rc, (out + err).strip()[-300:]))
        try:
            ckpt.load(path)
            diffs.append("ckpt.load gives values torch.load does not")
        except ckpt.UnsupportedError:
            pass
        return diffs
    if rc:
        diffs.append("verify exit %d: %s" % (rc, (out + err).strip()[-300:]))
    if WO_DEFAULT:
        verdict = ckpt.scan(path).weights_only
        if okw != (verdict is None):
            diffs.append("weights_only: torch %s, ckpt %r" % (
                "loads" if okw else "refuses (%s)" % wo, verdict))
    try:
        got = ckpt.load(path, unsafe_ok=case in OPAQUE or not okw)
    except ckpt.Error as e:
        return diffs + ["ckpt.load raises %s" % e]
    want = wo if okw else full
    diffs += OPAQUE[case](full, got) if case in OPAQUE else Compare().run(qparts(want), got)
    if case == "float_qparams":
        qschemes(path, full, diffs)
    return diffs


def main():
    for case, make in sorted(CASES.items()):
        try:
            obj = make()
        except Exception as e:  # noqa: BLE001 (this torch cannot express it)
            print("SKIP %s: %s" % (case, (str(e).splitlines() or [type(e).__name__])[0][:120]))
            continue
        for legacy in (False, True):
            if case.startswith("legacy_") and not legacy:
                continue
            name = case + ("_legacy" if legacy and not case.startswith("legacy_") else "")
            path = os.path.join(OUT, name + ".pt")
            kw = {"_use_new_zipfile_serialization": False} if legacy else {}
            try:
                torch.save(obj, path, **kw)
            except Exception as e:  # noqa: BLE001
                print("SKIP %s: %s" % (name, (str(e).splitlines() or [type(e).__name__])[0][:120]))
                continue
            diffs = check(case, path)
            print(json.dumps({"case": name, "ok": not diffs, "diffs": diffs[:6]}), flush=True)


if __name__ == "__main__":
    main()
