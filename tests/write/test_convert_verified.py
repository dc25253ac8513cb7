#!/usr/bin/python3
"""convert verifies its output before it replaces the target (issue 12,
item 7): it never writes a file its own reader rejects.

The input: a torch file holding an empty tensor of shape [0, 2^62, 2^62]
with strides (1, 1, 1), which torch and ckpt read. Written as safetensors
its implicit row-major strides overflow 64 bits, which the reader refuses:
convert must fail, naming the tensor, and leave no output (nor replace an
existing one). Environment: CKPT_BIN. Prints "N passed, N failed".
"""
import os
import subprocess
import sys
import tempfile

import torch

BIN = os.environ.get("CKPT_BIN", "ckpt")
passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   " + name)
    else:
        failed += 1
        print("FAIL %s %s" % (name, detail))


def run(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "huge.pt")
    out = os.path.join(d, "huge.safetensors")
    torch.save({"t": torch.empty_strided((0, 2 ** 62, 2 ** 62), (1, 1, 1)),
                "x": torch.ones(3)}, src)
    r = run("verify", src)
    check("the input verifies", r.returncode == 0, r.stdout + r.stderr)
    r = run("convert", src, out)
    check("convert refuses", r.returncode != 0, r.stdout + r.stderr)
    check("the error says why", "does not read back" in r.stderr and '"t"' in r.stderr,
          r.stderr)
    check("nothing written", not os.path.exists(out) and os.listdir(d) == ["huge.pt"],
          str(os.listdir(d)))
    # an existing target stays as it was
    with open(out, "wb") as fh:
        fh.write(b"previous")
    r = run("convert", src, out)
    with open(out, "rb") as fh:
        check("the old target is untouched", r.returncode != 0 and fh.read() == b"previous")
    # and a good conversion still works and verifies
    good = os.path.join(d, "good.safetensors")
    torch.save({"x": torch.arange(6.0).reshape(2, 3)}, src)
    r = run("convert", src, good)
    check("a good file converts", r.returncode == 0, r.stdout + r.stderr)
    check("and verifies", run("verify", good).returncode == 0)

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
