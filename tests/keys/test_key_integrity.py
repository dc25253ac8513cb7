"""A key never hides another, under torch 2.13 (.venv/bin/python) and 1.13
(Debian's python3): gen_key_integrity.py writes each case with torch (and
safetensors, torch.distributed.checkpoint where that Python has them).
Keys that flatten to one name: inspect lists both tensors, verify and
doctor exit 1 naming both paths, ckpt.load gives what torch.load gives.
Keys holding a NUL byte or a lone surrogate: refused by name (exit 1, the
key shown escaped), never merged; ckpt.load raises.

Environment: CKPT_BIN, CKPT_SRC, CKPT_LIB. Ends with "N passed, N failed"."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402
BIN = os.environ.get("CKPT_BIN", "ckpt")
tally = suite.Tally(echo=False)

PATHS = {"dot.pt": ("\"a.b\"", "['a.b']", "['a']['b']"),
         "int.pt": ("\"0\"", "['0']", "[0]"),
         "bytes.pt": ("\"w\"", "['w']", "[b'w']")}
REFUSED = {"nul": ("'a\\x00b'", "NUL byte"), "surrogate": ("", "lone surrogate")}


def cli(*args):
    p = subprocess.run([BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120)
    return p.returncode, p.stdout.decode() + p.stderr.decode()


def one_oracle(python, tmp):
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"), PYTHONDONTWRITEBYTECODE="1")
    g = subprocess.run([python, os.path.join(HERE, "gen_key_integrity.py"), tmp], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    tally.report(g.returncode == 0, "generate with %s" % python, [g.stderr.decode()[-2000:]])
    if g.returncode:
        return
    gen = json.loads(g.stdout.decode())
    for case in gen["cases"]:
        name, what = os.path.basename(case["file"]), "torch %s %s" % (gen["torch"], case["kind"])
        what += " " + name
        if case["kind"] == "collide":
            text, first, second = PATHS[name]
            tally.report(case["same"] is True, what + ": ckpt.load gives torch.load's", [case])
            rc, out = cli("inspect", "--json", case["file"])
            names = [t["name"] for t in json.loads(out)["tensors"]] if rc == 0 else out
            tally.report(len(names) == 2 and names[0] == names[1], what + ": inspect lists both",
                         [rc, names])
            for cmd in ("verify", "doctor"):
                rc, out = cli(cmd, case["file"])
                tally.report(rc == 1 and "%s is both %s and %s" % (text, first, second) in out,
                             what + ": %s names both paths" % cmd, [rc, out[-600:]])
            # the bytes are fine: doctor says names, in integrity and resume
            resume = out.split("resume readiness", 1)[-1].split("\n")[1]
            tally.report("corrupt" not in out and "fail verification" not in out and
                         "bytes verified, names do not" in out and
                         "two entries flatten to one name: %s is both" % text in resume,
                         what + ": doctor says names collide, not corrupt", [out[-1500:]])
            continue
        shown, why = REFUSED[case["kind"]]
        if name.endswith(".safetensors"):  # the JSON header: no \u0000 in a C string
            shown, why = "", "\\u0000"
        tally.report(case["error"] is not None and why in case["error"] and
                     shown in case["error"], what + ": ckpt.load refuses it by name", [case])
        for cmd in ("inspect", "verify"):
            rc, out = cli(cmd, case["file"])
            tally.report(rc == 1 and why in out and shown in out,
                         what + ": %s refuses it" % cmd, [rc, out[-600:]])


def main():
    for _, python in suite.oracles():
        with tempfile.TemporaryDirectory() as tmp:
            one_oracle(python, tmp)
    sys.exit(tally.end())


if __name__ == "__main__":
    main()
