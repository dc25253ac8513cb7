#!/usr/bin/python3
"""Hugging Face folders and `.bin` index sets (issue 14 item 5), written by
torch 2.13 (the project virtualenv) and torch 1.13 (Debian's python3) with
gen_hf.py:

  - a folder (and its pytorch_model.bin.index.json) reads as one
    checkpoint: `ckpt inspect --json --hash sha256` equals torch's view of
    the merged shards; verify, doctor, scan say OK/HEALTHY/SAFE (exit 0);
    convert writes .safetensors and .pt that `ckpt diff` finds identical
    to the folder, and the .pt loads in the torch that wrote the set;
  - a single-file folder and a Trainer checkpoint folder open as their
    pytorch_model.bin for every command;
  - a missing shard, a truncated shard and a shard file the index does not
    list are findings: exit 1 from inspect, verify, doctor, convert and
    diff (scan: unscannable; of the missing shard, which holds no code,
    safe with a shard-missing finding naming it), the shard's file named;
    never HEALTHY;
  - a flipped byte in a shard's tensor data: verify and doctor say
    CORRUPT (the zip CRC-32), naming the shard, member and tensor.
Environment: CKPT_BIN, CKPT_SRC. The torch 2.13 half is skipped with one
printed line without .venv/bin/python. Ends with "N passed, N failed".
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_interop as ti  # noqa: E402
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

SHARD2 = "pytorch_model-00002-of-00002.bin"


def out_text(p):
    return (p.stdout + p.stderr).decode("utf-8", "replace")


def expect(case, p, code, needle=None):
    text = out_text(p)
    ok = p.returncode == code and (needle is None or needle in text)
    ti.report(ok, case, [] if ok else ["exit %d (want %d%s): %s" % (
        p.returncode, code, ", naming %s" % needle if needle else "", text[-600:])])


def good_folder(tag, python, d, tmp):
    with open(d + ".expected.json", encoding="utf-8") as f:
        expected = json.load(f)
    name = os.path.basename(d)
    ti.check_inspect(d, expected)
    ti.check_verify(d)
    if name == "bin_set":
        ti.check_inspect(os.path.join(d, "pytorch_model.bin.index.json"), expected)
    p = ti.run(["doctor", d])
    expect("%s: doctor %s" % (tag, name), p, 0, "HEALTHY")
    p = ti.run(["scan", d])
    expect("%s: scan %s (every file)" % (tag, name), p, 0, "SAFE")
    for ext in (".safetensors", ".pt"):
        out = os.path.join(tmp, "%s-%s%s" % (tag, name, ext))
        expect("%s: convert %s -> %s" % (tag, name, ext), ti.run(["convert", d, out]), 0)
        expect("%s: diff %s %s" % (tag, name, ext), ti.run(["diff", d, out]), 0)
    out = os.path.join(tmp, "%s-%s.pt" % (tag, name))
    code = ("import torch, sys\n"
            "kw = {'weights_only': True} if 'weights_only' in "
            "torch.load.__code__.co_varnames else {}\n"
            "sd = torch.load(sys.argv[1], **kw)\n"
            "print(sorted((k, tuple(v.shape)) for k, v in sd.items()))\n")
    p = subprocess.run([python, "-c", code, out], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300, cwd=tmp)
    want = str(sorted((t["name"], tuple(t["shape"])) for t in expected["tensors"]))
    got = p.stdout.decode().strip()
    ti.report(p.returncode == 0 and got == want,
              "%s: converted %s loads in %s" % (tag, name, python),
              [got[:300], want[:300], p.stderr.decode()[-300:]])


def broken_folders(tag, outdir):
    src = os.path.join(outdir, "bin_set")
    cases = []
    d = os.path.join(outdir, "missing")
    shutil.copytree(src, d)
    os.remove(os.path.join(d, SHARD2))
    cases.append((d, SHARD2))
    d = os.path.join(outdir, "truncated")
    shutil.copytree(src, d)
    with open(os.path.join(d, SHARD2), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(d, SHARD2)) // 2)
    cases.append((d, SHARD2))
    d = os.path.join(outdir, "unlisted")
    shutil.copytree(src, d)
    shutil.copy(os.path.join(d, SHARD2), os.path.join(d, "pytorch_model-00003-of-00002.bin"))
    cases.append((d, "pytorch_model-00003-of-00002.bin"))
    for d, shard in cases:
        name = os.path.basename(d)
        expect("%s: doctor %s: a finding, not HEALTHY" % (tag, name),
               ti.run(["doctor", d]), 1, shard)
        if name == "unlisted":
            continue  # the set itself is whole: the extra file is the folder's
        for cmd in (["inspect", d], ["verify", d],
                    ["convert", d, d + ".safetensors"], ["diff", d, src]):
            expect("%s: %s %s" % (tag, cmd[0], name), ti.run(cmd), 1, shard)
        if name == "missing":  # no file holds no code: named, not unscannable
            expect("%s: scan %s" % (tag, name), ti.run(["scan", d]), 0,
                   "shard-missing (member %s" % shard)
        else:
            expect("%s: scan %s" % (tag, name), ti.run(["scan", d]), 1)
    # a flipped byte in shard 2's tensor data (torch wrote it: no digests,
    # the zip CRC-32 finds it): verify and doctor name the shard and the
    # tensor the member holds
    d = os.path.join(outdir, "flipped")
    shutil.copytree(src, d)
    member, off = data_offset(os.path.join(d, SHARD2))
    with open(os.path.join(d, SHARD2), "r+b") as f:
        f.seek(off)
        byte = f.read(1)
        f.seek(off)
        f.write(bytes([byte[0] ^ 0x10]))
    for index in (d, os.path.join(d, "pytorch_model.bin.index.json")):
        p = ti.run(["verify", index])
        text = out_text(p)
        ok = (p.returncode == 1 and text.startswith("CORRUPT ") and SHARD2 in text
              and member in text and "CRC-32" in text and "the member holds tensor" in text)
        ti.report(ok, "%s: verify %s: flipped byte in %s" % (tag, os.path.basename(index), SHARD2),
                  [text[-600:]])
    expect("%s: doctor flipped" % tag, ti.run(["doctor", d]), 1, SHARD2)


def data_offset(path):
    """(name, absolute offset of the first data byte) of path's first
    non-empty tensor data member."""
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if "/data/" in i.filename and i.file_size)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    return info.filename, info.header_offset + 30 + name_len + extra_len


def main():
    pythons = suite.oracles("folders")
    with tempfile.TemporaryDirectory(prefix="ckpt-hf-") as tmp:
        for tag, python in pythons:
            outdir = os.path.join(tmp, tag)
            g = subprocess.run([python, os.path.join(HERE, "gen_hf.py"), outdir], cwd=tmp,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
            ti.report(g.returncode == 0, "%s: generate folders" % tag,
                      g.stdout.decode("utf-8", "replace").splitlines()[-10:])
            if g.returncode != 0:
                continue
            for name in ("bin_set", "single", "trainer"):
                good_folder(tag, python, os.path.join(outdir, name), tmp)
            broken_folders(tag, outdir)
    return ti.TALLY.end()


if __name__ == "__main__":
    sys.exit(main())
