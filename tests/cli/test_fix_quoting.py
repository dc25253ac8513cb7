#!/usr/bin/python3
"""The commands doctor prints as fixes paste into a POSIX shell as they
read: a path holding anything outside [A-Za-z0-9_./-] (a space, a quote,
a $) is one single-quoted word (ckpt_shell_quote). Before, `ckpt doctor
"my model"` printed `fix: ckpt convert my model/model.safetensors ...`,
which fails when pasted. Each printed command is run here through sh -c
and must do its fix. The inputs are written here (safetensors by hand):
the CLI alone runs. Environment: CKPT_BIN. Ends with "N passed, N
failed"."""
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

CKPT = os.path.abspath(os.environ.get("CKPT_BIN") or shutil.which("ckpt") or "ckpt")
ROOT = None
ODD = "it's my $HOME model"


def safetensors(tensors, meta=None):
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, values in tensors.items():
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": [len(values)],
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def folder(name, tensors, meta=None):
    d = os.path.join(ROOT, name)
    os.makedirs(d)
    with open(os.path.join(d, "model.safetensors"), "wb") as fh:
        fh.write(safetensors(tensors, meta))
    with open(os.path.join(d, "config.json"), "w") as fh:
        fh.write('{"model_type": "bert"}')
    return d


def doctor(d):
    p = subprocess.run([CKPT, "doctor", d], capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode()


def fix_line(out):
    lines = [ln for ln in out.splitlines() if "fix: ckpt " in ln]
    assert len(lines) == 1, out
    return lines[0][lines[0].index("fix: ") + 5:]


def sh(cmd):
    """cmd run by sh -c with ckpt on PATH, from ROOT."""
    env = dict(os.environ, PATH=os.path.dirname(CKPT) + os.pathsep + os.environ["PATH"],
               HOME="/nonexistent")
    p = subprocess.run(["sh", "-c", cmd], capture_output=True, timeout=120, cwd=ROOT, env=env)
    return p.returncode, p.stderr.decode()


def test_the_metadata_fix_pastes_with_an_odd_path():
    d = folder(ODD, {"w": [1.0, 2.0]}, {"format": "np"})
    _, out = doctor(d)
    cmd = fix_line(out)
    q = "'" + d.replace("'", "'\\''") + "/model.safetensors'"
    assert cmd == "ckpt convert %s %s --meta format=pt" % (q, q), cmd
    rc, err = sh(cmd)
    assert rc == 0, (rc, err)
    rc, out = doctor(d)
    assert rc == 0 and "fix: " not in out and "REFUSED" not in out, out


def test_the_key_prefix_fix_pastes_with_an_odd_path():
    d = folder(ODD + " 2", {"module.w": [1.0, 2.0]})
    _, out = doctor(d)
    cmd = fix_line(out)
    q = "'" + d.replace("'", "'\\''") + "/model.safetensors'"
    assert cmd == "ckpt rename %s OUT --strip-prefix module." % q, cmd
    rc, err = sh(cmd.replace(" OUT ", " 'renamed model.safetensors' "))
    assert rc == 0, (rc, err)
    p = subprocess.run([CKPT, "inspect", "--json", os.path.join(ROOT, "renamed model.safetensors")],
                       capture_output=True, timeout=120)
    assert p.returncode == 0 and '"module.w"' not in p.stdout.decode() \
        and '"w"' in p.stdout.decode(), (p.returncode, p.stdout[:300])


def test_a_plain_path_stays_unquoted():
    d = folder("plain_model-1.0", {"w": [1.0]}, {"format": "np"})
    _, out = doctor(d)
    p = d + "/model.safetensors"
    assert fix_line(out) == "ckpt convert %s %s --meta format=pt" % (p, p), out


def main():
    return suite.run_cases_in_tmp(globals(), os.path.abspath(__file__), "ckpt-fix-quoting-")


if __name__ == "__main__":
    sys.exit(main())
