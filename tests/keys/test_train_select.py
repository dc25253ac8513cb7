"""`ckpt match --normalize` on training checkpoints ({"model": sd,
"optimizer": ..., "epoch": 3}) against torch's strict load_state_dict of
the "model" entry, under torch 2.13 (.venv/bin/python) and 1.13 (Debian's
python3): the "model" subtree is selected whatever its share of the
tensors (SGD momentum and a model of many buffers: the model keys are
most of them; Adam: a minority), so the check passes exactly where torch
loads (ckpt.load_state_dict too); a model key missing or an extra one
stays a mismatch.
gen_train_select.py writes the cases and torch's verdicts.

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
TALLY = suite.Tally(echo=False)


def check(ok, what, detail=""):
    TALLY.report(ok, what, [detail] if detail else ())


def one_oracle(python, tmp):
    ok, said = suite.generate(python, os.path.join(HERE, "gen_train_select.py"), tmp)
    check(ok, "generate with %s" % python, said)
    if not ok:
        return
    with open(os.path.join(tmp, "cases.json")) as f:
        gen = json.load(f)
    majority = 0
    for case in gen["cases"]:
        what = "torch %s %s" % (gen["torch"], case["file"])
        path = os.path.join(tmp, case["file"])
        loads = not case["missing"] and not case["unexpected"]
        majority += loads and case["model_keys"] * 2 > case["tensors"]
        check(case["ckpt_loads"] == loads, what + ": ckpt.load_state_dict", case["ckpt_loads"])
        p = subprocess.run([BIN, "match", path, "--expect", path + ".expect.json", "--normalize",
                            "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=120)
        check(p.returncode == (0 if loads else 1), what + ": exit status",
              "%s %s (torch: missing %s, unexpected %s)" %
              (p.returncode, p.stderr.decode(), case["missing"], case["unexpected"]))
        if p.returncode not in (0, 1):
            continue
        rep = json.loads(p.stdout.decode())
        if loads:
            check(rep["complete"] and rep["matched"] == case["model_keys"] and
                  rep["ignored_top_level"] == ["epoch", "optimizer"] and
                  not rep["unexpected_keys"], what + ": model selected", rep)
        else:
            check(not rep["complete"] and
                  bool(rep["missing_keys"] if case["missing"] else rep["unexpected_keys"]),
                  what + ": mismatch", rep)
    # SGD momentum and many buffers: the model keys are most of the tensors
    check(majority == 2, "torch %s: cases where the model keys are most" % gen["torch"],
          majority)


def main():
    for _, python in suite.oracles():
        with tempfile.TemporaryDirectory() as tmp:
            one_oracle(python, tmp)
    sys.exit(TALLY.end())


if __name__ == "__main__":
    main()
