#!/usr/bin/python3
"""torch 2.x content (issue 14) against both oracles: torch 2.13 (the
project virtualenv, .venv/bin/python) and torch 1.13 (Debian's python3).

For each torch: gen_torch2.py writes the cases it can express (the others
print "SKIP ..."); then for every FILE
  - `ckpt inspect FILE --json --hash sha256` equals torch's view
    (FILE.expected.json: names, dtypes, shapes, sha256, values);
  - `ckpt verify FILE` says OK;
  - `ckpt convert FILE OUT.pt` and `OUT.safetensors` succeed, and the
    written files load in BOTH torches (weights_only=True, mmap=True where
    torch has it) with the same view as the source; a written file the
    other torch cannot express (uint16-64, float8, complex32 before 2.x)
    is reported as such, never hidden; safetensors output is loaded with
    the safetensors package (virtualenv only) where it knows the dtype;
  - `ckpt scan` still calls whole-model pickles and TorchScript unsafe.
Finally, a case both torches wrote must give the same ckpt view: any
difference between them is printed.

Environment: CKPT_BIN, CKPT_SRC. Without .venv/bin/python the torch 2.13
half is skipped with one printed line. Ends with "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_interop as ti  # noqa: E402  (check_inspect, check_verify, report)
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

NEW_DTYPES = {"U16", "U32", "U64", "C32", "F8_E4M3", "F8_E5M2", "F8_E8M0",
              "F8_E4M3FNUZ", "F8_E5M2FNUZ"}
# dtypes the safetensors package has no name for
NO_SAFETENSORS_NAME = {"C32", "F8_E4M3FNUZ", "F8_E5M2FNUZ"}


def generate(python, outdir, tmp):
    g = subprocess.run([python, os.path.join(HERE, "gen_torch2.py"), outdir], cwd=tmp,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    lines = g.stdout.decode("utf-8", "replace").splitlines()
    for line in lines:
        if line.startswith("SKIP") or line.startswith("torch "):
            print("    " + line)
    ti.report(g.returncode == 0, "generate with %s" % python, lines[-20:])
    return g.returncode == 0


def compare_loaded(case, expected, got, tensors_only):
    details = []
    if "error" in got:
        ti.report(False, case, [got["error"]])
        return
    if "note" in got:
        print("NOTE %s: %s" % (case, got["note"]))
    ti.diff_entries("tensor", expected["tensors"], got["tensors"],
                    ("dtype", "shape", "nbytes", "sha256"), details)
    if not tensors_only:
        ti.diff_entries("value", expected["values"], got["values"], ("type", "value"),
                        details)
    ti.report(not details, case, details)


def check_written(tag, path, expected, written, pythons, tmp):
    """Every written file loads in each torch that can express it."""
    dtypes = {t["dtype"] for t in expected["tensors"]}
    for otag, python in pythons:
        todo = []
        for out in written:
            st = out.endswith(".safetensors")
            name = "%s: %s -> %s loads in %s" % (tag, os.path.basename(path),
                                                 os.path.basename(out), otag)
            if otag == "torch1" and dtypes & NEW_DTYPES:
                print("NOTE %s: skipped, torch 1.13 has no %s" % (
                    name, ", ".join(sorted(dtypes & NEW_DTYPES))))
                continue
            if st and otag == "torch1":
                continue  # the safetensors package lives in the virtualenv
            if st and dtypes & NO_SAFETENSORS_NAME:
                print("NOTE %s: skipped, safetensors has no name for %s" % (
                    name, ", ".join(sorted(dtypes & NO_SAFETENSORS_NAME))))
                continue
            todo.append((name, out, st))
        views = suite.oracle_docs(python, [os.path.join(HERE, "load_written.py")],
                                  [o for _, o, _ in todo], cwd=tmp)
        for name, out, st in todo:
            compare_loaded(name, expected, views[out], st)


STRICT_LOAD = """
import sys, torch
sys.path.insert(0, sys.argv[1])
import gen_torch2
kw = {"weights_only": True} if "weights_only" in torch.load.__code__.co_varnames else {}
sd = torch.load(sys.argv[2], **kw)
if "model" in sd and isinstance(sd["model"], dict):
    sd = sd["model"]  # YOLO-style {"model": model}
print(gen_torch2.Net().load_state_dict(sd, strict=True))
"""


def check_model_reload(tag, path, written, pythons, tmp):
    """convert of a whole-model pickle extracts a state dict that loads,
    strict, into a fresh model, in every torch."""
    if not os.path.basename(path).startswith("model"):
        return
    for out in (o for o in written if o.endswith(".pt")):
        for otag, python in pythons:
            p = subprocess.run([python, "-c", STRICT_LOAD, HERE, out], cwd=tmp,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
            text = (p.stdout + p.stderr).decode("utf-8", "replace")
            ok = p.returncode == 0 and "All keys matched" in text
            ti.report(ok, "%s: %s's state dict loads strict into a fresh model in %s" % (
                tag, os.path.basename(path), otag), [] if ok else [text[-500:]])


def check_device(tag, path):
    """doctor says where torch saved the storages and that a CPU-only
    machine needs map_location."""
    if os.path.basename(path) != "cuda_saved.pt":
        return
    p = ti.run(["doctor", path])
    out = p.stdout.decode("utf-8", "replace")
    ok = "2 tensors saved on cuda:0" in out and 'map_location="cpu"' in out
    ti.report(ok, "%s: doctor names the device of cuda_saved.pt" % tag,
              [] if ok else [out[-800:]])


def check_scan(tag, path):
    base = os.path.basename(path)
    if not base.startswith(("model", "script")):
        return
    p = ti.run(["scan", path])
    out = p.stdout.decode("utf-8", "replace")
    ok = p.returncode == 1 and "UNSAFE" in out
    if base.startswith("script"):
        ok = ok and "torch.jit.load" in out
    ti.report(ok, "%s: scan %s still says unsafe" % (tag, base),
              [] if ok else ["exit %d: %s" % (p.returncode, out[-500:])])


def inspect_json(path):
    p = ti.run(["inspect", path, "--json", "--hash", "sha256"])
    ok = p.returncode == 0 or (p.returncode == 1 and b": unsafe: " in p.stderr)
    return json.loads(p.stdout.decode("utf-8")) if ok else None


def main():
    pythons = suite.oracles()
    with tempfile.TemporaryDirectory(prefix="ckpt-torch2-") as tmp:
        seen = {}
        for tag, python in pythons:
            outdir = os.path.join(tmp, tag)
            if not generate(python, outdir, tmp):
                continue
            for fname in sorted(os.listdir(outdir)):
                if fname.endswith(".expected.json"):
                    continue
                path = os.path.join(outdir, fname)
                with open(path + ".expected.json", encoding="utf-8") as f:
                    expected = json.load(f)
                ti.check_inspect(path, expected)
                ti.check_verify(path)
                check_scan(tag, path)
                check_device(tag, path)
                written = []
                for ext in (".pt", ".safetensors"):
                    out = os.path.join(tmp, "%s-%s%s" % (tag, fname.rsplit(".", 1)[0], ext))
                    p = ti.run(["convert", path, out])
                    ok = p.returncode == 0
                    ti.report(ok, "%s: convert %s -> %s" % (tag, fname, ext), [] if ok else [
                        p.stderr.decode("utf-8", "replace").strip()])
                    if ok:
                        written.append(out)
                check_written(tag, path, expected, written, pythons, tmp)
                check_model_reload(tag, path, written, pythons, tmp)
                view = inspect_json(path)
                if view is not None:
                    seen.setdefault(fname, {})[tag] = view
        for fname, views in sorted(seen.items()):
            if len(views) < 2:
                continue
            a, b = views["torch2"], views["torch1"]
            same = [(t["name"], t["dtype"], t["shape"], t.get("sha256"))
                    for t in a["tensors"]] == [(t["name"], t["dtype"], t["shape"],
                                                t.get("sha256")) for t in b["tensors"]]
            names = [v["name"] for v in a["values"]] == [v["name"] for v in b["values"]]
            if not (same and names):
                # a difference between the torches is reported, not hidden
                print("NOTE %s: torch 2.13 and 1.13 files differ in ckpt's view "
                      "(tensors %s, value names %s)" % (
                          fname, "same" if same else "differ", "same" if names else "differ"))
    return ti.TALLY.end()


if __name__ == "__main__":
    sys.exit(main())
