#!/usr/bin/python3
"""convert verifies its output before it replaces the target (issue 12,
item 7): it never writes a file its own reader rejects; and it verifies
its input as it reads it (issue 17): a torch archive whose member does not
match its CRC-32, or a ckpt-written file whose tensor does not match its
digest, is refused.

The input: a torch file holding an empty tensor of shape [0, 2^62, 2^62]
with strides (1, 1, 1), which torch and ckpt read. Written as safetensors
its implicit row-major strides overflow 64 bits, which the reader refuses:
convert must fail, naming the tensor, and leave no output (nor replace an
existing one). Environment: CKPT_BIN. Prints "N passed, N failed".
"""
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import suite  # noqa: E402

BIN = os.environ.get("CKPT_BIN", "ckpt")
TALLY = suite.Tally()


def check(name, cond, detail=""):
    TALLY.report(cond, name, [detail] if detail else ())


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



def corrupt(path, member_suffix, at):
    """Flips the byte `at` bytes into the data of the member whose name
    ends with member_suffix (the central directory's CRC stays)."""
    with zipfile.ZipFile(path) as z:
        info = [i for i in z.infolist() if i.filename.endswith(member_suffix)][0]
    with open(path, "r+b") as fh:
        fh.seek(info.header_offset + 26)
        nlen, xlen = struct.unpack("<HH", fh.read(4))
        pos = info.header_offset + 30 + nlen + xlen + at
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ 0xFF]))


# A corrupt input is refused, not converted (issue 17): the input's CRC-32
# is checked as its bytes are read, whether the tensor is its storage's
# bytes (checked in the same pass) or a view of part of one (read whole).
with tempfile.TemporaryDirectory() as d:
    base = torch.arange(100.0)
    cases = {"whole": {"w": torch.arange(4096.0), "b": torch.ones(3)},
             "views": {"lo": base[:50], "hi": base[50:]}}  # one storage
    for name, sd in cases.items():
        src = os.path.join(d, name + ".pt")
        torch.save(sd, src)
        corrupt(src, "data/0", 12)
        r = run("verify", src)
        check(name + ": the input does not verify", r.returncode == 1, r.stdout + r.stderr)
        for ext in (".safetensors", ".pt", ".dcp"):
            out = os.path.join(d, name + "-out" + ext)
            r = run("convert", src, out)
            check("%s -> %s: refused" % (name, ext), r.returncode == 1, r.stdout + r.stderr)
            check("%s -> %s: says why" % (name, ext),
                  "CRC-32" in r.stderr and "data/0" in r.stderr, r.stderr)
            check("%s -> %s: nothing written" % (name, ext),
                  sorted(os.listdir(d)) == sorted(n for n in os.listdir(d) if "-out" not in n),
                  str(os.listdir(d)))
    # an existing target stays as it was
    out = os.path.join(d, "kept.safetensors")
    with open(out, "wb") as fh:
        fh.write(b"previous")
    r = run("convert", os.path.join(d, "whole.pt"), out)
    with open(out, "rb") as fh:
        check("corrupt input: the old target is untouched",
              r.returncode == 1 and fh.read() == b"previous", r.stderr)

# A ckpt-written safetensors file is checked against its "ckpt.xxh3"
# digests as it is read, views of one storage included ("all" is the
# storage the others view in ckpt.structure: the bytes read for both).
with tempfile.TemporaryDirectory() as d:
    base = torch.arange(64.0)
    for name, sd in {"plain": {"w": torch.arange(64.0)},
                     "views": {"all": base, "lo": base[:32]}}.items():
        src = os.path.join(d, name + ".pt")
        st = os.path.join(d, name + ".safetensors")
        torch.save(sd, src)
        r = run("convert", src, st)
        check(name + ": written", r.returncode == 0, r.stderr)
        with open(st, "r+b") as fh:  # a byte of the first tensor ("all", "w")
            at = 8 + struct.unpack("<Q", fh.read(8))[0] + 8
            fh.seek(at)
            b = fh.read(1)
            fh.seek(at)
            fh.write(bytes([b[0] ^ 1]))
        for ext in (".pt", ".safetensors"):
            out = os.path.join(d, name + "-out" + ext)
            r = run("convert", st, out)
            check("%s safetensors -> %s: refused" % (name, ext), r.returncode == 1,
                  r.stdout + r.stderr)
            check("%s safetensors -> %s: says why" % (name, ext),
                  "XXH3-64" in r.stderr and "ckpt.xxh3" in r.stderr, r.stderr)
            check("%s safetensors -> %s: nothing written" % (name, ext),
                  not os.path.exists(out) and not any(".tmp-" in n for n in os.listdir(d)),
                  str(os.listdir(d)))

# an OUT that is a symbolic link (a Hugging Face cache snapshot's file,
# pointing into blobs/ that other revisions share): the link is replaced by
# a regular file, and the blob it pointed to keeps its bytes
with tempfile.TemporaryDirectory() as d:
    blobs, snap = os.path.join(d, "blobs"), os.path.join(d, "snapshots", "rev")
    os.makedirs(blobs)
    os.makedirs(snap)
    blob = os.path.join(blobs, "0123abcd")
    with open(blob, "wb") as fh:
        fh.write(b"shared by revisions")
    link = os.path.join(snap, "model.safetensors")
    os.symlink(os.path.join("..", "..", "blobs", "0123abcd"), link)
    src = os.path.join(d, "w.pt")
    torch.save({"w": torch.arange(6.0)}, src)
    r = run("convert", src, link)
    check("symlink OUT: written", r.returncode == 0, r.stdout + r.stderr)
    check("symlink OUT: the link is now a regular file",
          not os.path.islink(link) and os.path.isfile(link))
    check("symlink OUT: it verifies", run("verify", link).returncode == 0)
    with open(blob, "rb") as fh:
        check("symlink OUT: the blob it pointed to is untouched", fh.read() == b"shared by revisions")
    check("symlink OUT: no temporary file", os.listdir(snap) == ["model.safetensors"],
          str(os.listdir(snap)))

sys.exit(TALLY.end())
