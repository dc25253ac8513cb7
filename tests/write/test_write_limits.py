#!/usr/bin/python3
"""Every writing command (convert, rename, store commit) under a file size limit (ulimit -f, RLIMIT_FSIZE):
the kernel answers a write past it with SIGXFSZ, whose default action kills
the process. ckpt must fail instead (exit 2, the error naming the limit),
leave the destination as it was and no temporary file or directory behind.
Before, convert and store commit died of the signal (exit -25 here) and
left their temporary file. Environment: CKPT_BIN. Prints "N passed, N failed".
"""
import os
import resource
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import suite  # noqa: E402

BIN = os.environ.get("CKPT_BIN", "ckpt")
LIMIT = 256 << 10
TALLY = suite.Tally()


def check(name, cond, detail=""):
    TALLY.report(cond, name, [detail] if detail else ())


def limited():
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def run(*args, limit=False):
    return subprocess.run([BIN, *args], capture_output=True, text=True,
                          preexec_fn=limited if limit else None)


def snapshot(d):
    """Every name under d with its bytes (hidden ones too)."""
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(root, n)
            out[os.path.relpath(p, d)] = open(p, "rb").read() if os.path.isfile(p) else None
    return out


def refused(name, r, before, d):
    check(name + ": exit 2, not a signal", r.returncode == 2, "%d %s" % (r.returncode, r.stderr))
    check(name + ": names the limit", "RLIMIT_FSIZE" in r.stderr, r.stderr)
    after = snapshot(d)
    check(name + ": nothing changed, no temporary left", after == before,
          str(sorted(set(after) ^ set(before))))


with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "src.pt")
    torch.save({"w%d" % i: torch.full((128, 128), float(i)) for i in range(16)}, src)  # 1 MiB
    old = os.path.join(d, "out", "old.safetensors")
    os.mkdir(os.path.join(d, "out"))
    out = os.path.join(d, "out")
    r = run("convert", src, old, "-q")
    check("a file converts without the limit", r.returncode == 0, r.stderr)

    target = os.path.join(out, "m.pt")
    with open(target, "wb") as fh:
        fh.write(b"previous")
    before = snapshot(out)
    refused("convert", run("convert", src, target, limit=True), before, out)

    # a sharded set saved again as as many shards (the same names), the
    # last shard over the limit: the old set stays whole, none of its
    # shards replaced by the new ones written before the failure
    def shards(path, value):
        sd = {"w%d" % i: torch.full((128, 128), value + i) for i in range(15)}
        sd["z"] = torch.full((512, 256), value)  # 512 KiB: a shard of its own, the last
        torch.save(sd, path)
    a, b = os.path.join(d, "a.pt"), os.path.join(d, "b.pt")
    shards(a, 0.0)
    shards(b, 100.0)
    r = run("convert", a, os.path.join(out, "s.safetensors"), "--max-shard-size", "200KB", "-q")
    check("a set converts without the limit", r.returncode == 0, r.stderr)
    before = snapshot(out)
    refused("convert --max-shard-size", run("convert", b, os.path.join(out, "s.safetensors"),
                                            "--max-shard-size", "200KB", limit=True), before, out)
    r = run("verify", os.path.join(out, "s.safetensors.index.json"))
    check("the old set verifies", r.returncode == 0, r.stdout + r.stderr)

    before = snapshot(out)
    refused("rename in place", run("rename", old, old, "--add-prefix", "model.", limit=True),
            before, out)

    before = snapshot(out)
    refused("convert to DCP", run("convert", src, os.path.join(out, "m.dcp"), limit=True),
            before, out)

    store = os.path.join(out, "store")
    r = run("store", "commit", store, "--name", "m", "--step", "1", old, "-q")
    check("a commit without the limit", r.returncode == 0, r.stderr)
    before = snapshot(out)
    refused("store commit", run("store", "commit", store, "--name", "m", "--step", "2", src,
                                limit=True), before, out)
    r = run("convert", src, os.path.join(d, "src.dcp"), "-q")
    check("a DCP directory converts", r.returncode == 0, r.stderr)
    before = snapshot(out)
    refused("store commit of a DCP directory",
            run("store", "commit", store, "--name", "m", "--step", "3",
                os.path.join(d, "src.dcp"), limit=True), before, out)

raise SystemExit(TALLY.end())
