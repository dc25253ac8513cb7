"""`ckpt match` on a BatchNorm's num_batches_tracked against torch's own
load_state_dict, under torch 2.13 (.venv/bin/python) and 1.13 (Debian's
python3): a checkpoint lacking the counter loads where its _metadata gives
the BatchNorm no version 2 (torch fills it), and not with version 2.
gen_batchnorm.py writes the cases and torch's verdicts; each is matched
from the .pt file and from its `ckpt inspect --json` manifest (its
"module_versions") against ckpt.manifest(model) (its
"batchnorm_counters"): exit 0 exactly where torch's strict load succeeds,
the counter listed as defaulted there and as missing where torch says
missing (with --normalize: torch's verdict is on the state dict the user
takes out of {"model": ...} and strips of "module."). A manifest written before "batchnorm_counters" reads as before.

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
COUNTER = "bn.num_batches_tracked"
TALLY = suite.Tally(echo=False)


def check(ok, what, detail=""):
    TALLY.report(ok, what, [detail] if detail else ())


def match(ckpt_path, spec, *opts):
    p = subprocess.run([BIN, "match", ckpt_path, "--expect", spec, "--normalize"] + list(opts),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    out = p.stdout.decode()
    return p.returncode, json.loads(out) if "--json" in opts else out


def one_oracle(python, tmp):
    ok, said = suite.generate(python, os.path.join(HERE, "gen_batchnorm.py"), tmp)
    check(ok, "generate with %s" % python, said)
    if not ok:
        return
    with open(os.path.join(tmp, "cases.json")) as f:
        gen = json.load(f)
    spec = os.path.join(tmp, "model.json")
    with open(spec) as f:
        model = json.load(f)
    check(model.get("batchnorm_counters") == [COUNTER], "manifest records the counter",
          model.get("batchnorm_counters"))
    old = dict(model)
    del old["batchnorm_counters"]
    old_spec = os.path.join(tmp, "old.json")
    with open(old_spec, "w") as f:
        json.dump(old, f)
    defaulted = 0
    for case in gen["cases"]:
        what = "torch %s %s" % (gen["torch"], case["file"])
        path = os.path.join(tmp, case["file"])
        loads = not case["missing"] and not case["unexpected"]
        inspected = os.path.join(tmp, case["file"] + ".json")
        with open(inspected, "w") as f:
            p = subprocess.run([BIN, "inspect", path, "--json"], stdout=f, timeout=120)
        check(p.returncode == 0, what + ": inspect")
        for source in (path, inspected):
            rc, rep = match(source, spec, "--json")
            check(rc == (0 if loads else 1), what + ": exit status",
                  "%s (torch missing %s)" % (rc, case["missing"]))
            filled = case["file"] != "full.pt" and loads
            check(rep["defaulted"] == ([COUNTER] if filled else []), what + ": defaulted",
                  rep["defaulted"])
            if not loads:
                check(set(case["missing"]) <= set(rep["missing_keys"]), what + ": missing",
                      "%s vs torch %s" % (rep["missing_keys"], case["missing"]))
            defaulted += filled
        if case["file"] == "vNone_plain_flat.pt":
            rc, text = match(path, spec)
            check(rc == 0 and "defaulted by the module" in text and COUNTER in text,
                  what + ": text", text)
            rc, rep = match(path, old_spec, "--json")
            check(rc == 1 and rep["missing_keys"] == [COUNTER], what + ": an old manifest",
                  rep)
    # versions None and 1, two prefixes, three layouts; two sources each
    check(defaulted == 24, "torch %s: defaulted cases" % gen["torch"], defaulted)


def shared_metadata(path, entries=50000, dicts=500):
    """A pickle of `dicts` OrderedDicts that share one BUILD state whose
    _metadata has `entries` modules: each dict names them anew (25M
    versions), unless the reading is bounded."""
    import pickle

    def text(t):
        b = t.encode()
        return pickle.SHORT_BINUNICODE + bytes([len(b)]) + b
    od = b"ccollections\nOrderedDict\n" + pickle.EMPTY_TUPLE + pickle.REDUCE
    md = pickle.EMPTY_DICT + pickle.MARK + b"".join(
        text("m%d" % i) + (pickle.BINGET + b"\x02" if i else
                           pickle.EMPTY_DICT + text("version") + pickle.BININT1 + b"\x01" +
                           pickle.SETITEM + pickle.BINPUT + b"\x02")
        for i in range(entries)) + pickle.SETITEMS
    state = pickle.EMPTY_DICT + text("_metadata") + md + pickle.SETITEM + pickle.BINPUT + b"\x01"
    body = b"".join(text("d%d" % i) + od + (state if i == 0 else pickle.BINGET + b"\x01") +
                    pickle.BUILD for i in range(dicts))
    with open(path, "wb") as f:
        f.write(pickle.PROTO + b"\x02" + pickle.EMPTY_DICT + pickle.MARK + body +
                pickle.SETITEMS + pickle.STOP)


def hostile(tmp):
    path = os.path.join(tmp, "shared_metadata.pkl")
    shared_metadata(path)
    p = subprocess.run([BIN, "match", path, "--expect", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    err = p.stderr.decode()
    check(p.returncode == 2 and "_metadata" in err and "limit" in err,
          "shared _metadata: bounded", "%s %s" % (p.returncode, err))
    # the error says which bound it is and that no ckpt_limits field raises it
    check("module-version budget (16 per tensor and value" in err and
          "no ckpt_limits field raises it" in err and "field named" not in err,
          "shared _metadata: the bound named", err)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        hostile(tmp)
    for _, python in suite.oracles():
        with tempfile.TemporaryDirectory() as tmp:
            one_oracle(python, tmp)
    sys.exit(TALLY.end())


if __name__ == "__main__":
    main()
