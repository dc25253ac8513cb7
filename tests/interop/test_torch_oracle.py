#!/usr/bin/python3
"""ckpt against torch itself, value for value, under both oracles: torch
2.13 (the project virtualenv) and torch 1.13 (Debian's python3).
torch_oracle.py saves each case (torch 2.x tensor kinds, quantized and
composite tensors, views, parameters, optimizer and scheduler states,
wrapped and tied state dicts, whole modules) as a zip and a legacy file
and checks `ckpt verify`, ckpt.scan's weights_only verdict, ckpt.load and
`ckpt inspect --json` against torch.load; one case per file.

Regressions it holds: a legacy save of a whole nn.Module was CORRUPT
("persistent id is not a ('storage', ...) tuple": torch's legacy reader
gives the class for a ('module', class, file, source) id); the tensors
inside an object ckpt leaves opaque (a quint4x2 tensor's scales, a
class's attributes) loaded with storage 0's bytes (their storages had no
id); a per-channel tensor with float zero points was said
per_channel_affine where torch.load makes per_channel_affine_float_qparams;
ckpt.load gave Opaque placeholders for complex numbers, layouts and
qschemes, which torch.load(weights_only=True) builds.

Environment: CKPT_BIN, CKPT_SRC, CKPT_LIB. Ends with "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", "ckpt")


def main():
    tally = suite.Tally(echo=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(suite.SRC, "python"))
    for tag, python in suite.oracles("torch_oracle cases"):
        with tempfile.TemporaryDirectory(prefix="ckpt-oracle-") as tmp:
            p = subprocess.run([python, os.path.join(HERE, "torch_oracle.py"), tmp, CKPT],
                               cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=900)
        lines = p.stdout.decode("utf-8", "replace").splitlines()
        n = 0
        for line in lines:
            if line.startswith("SKIP"):
                print("    %s %s" % (tag, line))
                continue
            d = json.loads(line)
            n += 1
            tally.report(d["ok"], "%s %s" % (tag, d["case"]), d["diffs"])
        tally.report(p.returncode == 0 and n > 0, "%s torch_oracle.py ran (%d files)" % (tag, n),
                     p.stderr.decode("utf-8", "replace").splitlines()[-15:])
    return tally.end()


if __name__ == "__main__":
    sys.exit(main())
