"""CLI tests for `ckpt scan`: corpus verdicts, the hostile families of
gen_hostile.py (never loaded, only scanned), exit codes, --json shapes,
--allow and --policy.

Environment (set by ctest): CKPT_BIN (the built ckpt binary), CKPT_CORPUS
(shared/corpus). Standard library only (gen_hostile.py adds numpy/torch
files when they are installed). Prints one line per case and ends with
"N passed, N failed"; exits 1 on failure.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
import zipfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gen_hostile  # noqa: E402
from suite import CORPUS_SUITE  # noqa: E402

BIN = os.environ.get("CKPT_BIN", "ckpt")
CORPUS = os.environ.get("CKPT_CORPUS", "/work/shared/corpus")
TMP = tempfile.mkdtemp(prefix="ckpt-scan-test-")
PASSED, FAILED = [], []


def run(*args):
    """Runs `ckpt scan ARGS`; returns (exit code, stdout, stderr)."""
    p = subprocess.run([BIN, "scan"] + list(args), capture_output=True,
                       timeout=120)
    return (p.returncode, p.stdout.decode("utf-8", "replace"),
            p.stderr.decode("utf-8", "replace"))


def run_json(*args):
    rc, out, err = run("--json", *args)
    assert out.endswith("\n"), "JSON output ends with a newline"
    return rc, json.loads(out), err


def case(name, fn, *args):
    try:
        fn(*args)
    except Exception:  # a failed assert or anything unexpected
        FAILED.append(name)
        print("FAIL", name)
        traceback.print_exc(file=sys.stdout)
        return
    PASSED.append(name)
    print("ok  ", name)


def expected_verdicts():
    with open(os.path.join(CORPUS, "expected.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def dangerous_globals(report):
    return [f.get("global") or "" for f in report["findings"]
            if f["severity"] == "dangerous"]


# ------------------------------------------------------------ corpus

def check_corpus_file(rec):
    rc, rep, _ = run_json(os.path.join(CORPUS, rec["file"]))
    assert rep["verdict"] == rec["verdict"], (rep["verdict"], rep["findings"])
    assert rc == (0 if rec["verdict"] == "safe" else 1), rc
    assert rep["file"].endswith(rec["file"])
    for f in rep["findings"]:
        assert set(f) <= {"severity", "kind", "global", "member", "offset",
                          "message"}, f
        assert f["severity"] in ("info", "suspicious", "dangerous")
    if rec["verdict"] == "unsafe":
        assert any(f["severity"] != "info" for f in rep["findings"])


def check_benign_corpus():
    recs = [r for r in expected_verdicts() if not r["file"].startswith("scan/")]
    paths = [os.path.join(CORPUS, r["file"]) for r in recs]
    rc, reps, _ = run_json(*paths)
    assert isinstance(reps, list) and len(reps) == len(recs)
    for rec, rep in zip(recs, reps):
        want = "not-a-checkpoint" if rec["file"] == "torch/burn/broken.pt" else "safe"
        assert rep["verdict"] == want, (rec["file"], rep["verdict"])
    assert rc == 1  # broken.pt is not safe
    safe = [p for p in paths if not p.endswith("broken.pt")]
    rc, _, _ = run(*safe)
    assert rc == 0, rc


# ------------------------------------------------------------ hostile

def check_hostile(row, outdir):
    path = os.path.join(outdir, row["file"])
    rc, rep, _ = run_json(path)
    assert rep["verdict"] == row["verdict"], (rep["verdict"], rep["findings"])
    assert rc == (0 if row["verdict"] == "safe" else 1), rc
    g = row.get("global")
    if g:
        names = dangerous_globals(rep)
        ok = g in names or (g.startswith("?") and any(n.startswith(g)
                                                      for n in names))
        assert ok, (g, names)
        assert g == "?" or g in rep["globals"] or g.startswith("?"), rep["globals"]
    if row["verdict"] == "safe":
        assert all(f["severity"] == "info" for f in rep["findings"])


def check_allow(row, outdir):
    path = os.path.join(outdir, row["file"])
    rc, rep, _ = run_json(path)
    # a data-only class: "review" (exit 1), named by an info finding
    assert rc == 1 and rep["verdict"] == "review"
    assert all(f["severity"] == "info" for f in rep["findings"])
    assert any(f.get("global") == row["allow"] and f["kind"] == "review"
               for f in rep["findings"])
    rc, rep, _ = run_json("--allow", row["allow"], path)
    assert rc == 0 and rep["verdict"] == "safe", rep
    info = [f for f in rep["findings"] if f["kind"] == "allowed"]
    assert len(info) == 1 and info[0]["severity"] == "info"
    assert info[0]["message"] == "allowed by policy: " + row["allow"]
    # a policy file: comments, blank lines, surrounding spaces
    policy = os.path.join(TMP, "policy.txt")
    with open(policy, "w", encoding="utf-8") as fh:
        fh.write("# hyper-parameters of our trainer\n\n  %s  # argparse\n"
                 "lightning.pytorch.core.saving.AttributeDict\n" % row["allow"])
    rc, rep, _ = run_json("--policy", policy, path)
    assert rc == 0 and rep["verdict"] == "safe", rep


def check_allow_cannot_bless_code(outdir):
    path = os.path.join(outdir, "system_p2.pkl")
    rc, rep, _ = run_json("--allow", gen_hostile.SYSTEM, path)
    assert rc == 1 and rep["verdict"] == "unsafe"
    assert gen_hostile.SYSTEM in dangerous_globals(rep)


def check_refused_allow_is_said(outdir):
    # refused, but never silently: an info finding and one stderr line
    safe = os.path.join(outdir, "benign_dict.pkl")
    msg = ("--allow builtins.eval ignored: a known code-execution family "
           "cannot be allowlisted")
    rc, out, err = run("--allow", "builtins.eval", safe, safe)
    assert rc == 0, (rc, out, err)
    assert err == "ckpt scan: %s\n" % msg, err
    hits = [l for l in out.splitlines() if msg in l]
    assert len(hits) == 2 and hits[0].startswith("  info       allow-ignored "), out
    rc, rep, err = run_json("--allow", "builtins.eval", safe)
    f = [f for f in rep["findings"] if f["kind"] == "allow-ignored"]
    assert f == [{"severity": "info", "kind": "allow-ignored",
                  "global": "builtins.eval", "offset": None, "message": msg}], f
    assert "builtins.eval" not in rep["globals"], rep["globals"]
    rc, out, err = run("--allow", "argparse.Namespace", safe)
    assert rc == 0 and err == "" and "allow-ignored" not in out, (out, err)


def check_sharded_index():
    index = os.path.join(CORPUS, "safetensors/fluxml/sharded/"
                         "model.safetensors.index.json")
    rc, out, err = run(index)
    assert rc == 0, (rc, out, err)
    assert out.splitlines()[0].startswith("SAFE " + index), out
    rc, rep, _ = run_json(index)
    assert rep["verdict"] == "safe", rep
    # an index whose .bin shard runs code is unsafe, the shard named
    d = os.path.join(TMP, "sharded")
    os.mkdir(d)
    with open(os.path.join(d, "pytorch_model-00001-of-00001.bin"), "wb") as fh:
        fh.write(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.")
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": {
            "w": "pytorch_model-00001-of-00001.bin"}}, fh)
    rc, rep, _ = run_json(os.path.join(d, "pytorch_model.bin.index.json"))
    assert rc == 1 and rep["verdict"] == "unsafe", rep
    hit = [f for f in rep["findings"] if f.get("global") == "os.system"]
    assert hit and hit[0]["member"] == "pytorch_model-00001-of-00001.bin", hit


def check_folder_shards():
    """A folder of a sharded index and its shards: each file reported
    once, the shard through its index (it was listed a second time on its
    own), a file no index lists on its own."""
    d = os.path.join(TMP, "sharded-folder")
    os.mkdir(d)
    for name in ("pytorch_model-00001-of-00001.bin", "extra.bin"):
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.")
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": {
            "w": "pytorch_model-00001-of-00001.bin"}}, fh)
    rc, reps, _ = run_json(d)
    files = [os.path.basename(r["file"]) for r in reps]
    assert rc == 1 and files == ["extra.bin", "pytorch_model.bin.index.json"], (rc, files)
    assert [r["verdict"] for r in reps] == ["unsafe", "unsafe"], reps
    rc, out, _ = run(d)
    assert rc == 1 and out.count("dangerous  global os.system") == 2, out
    assert "UNSAFE %s\n" % os.path.join(d, "pytorch_model-00001-of-00001.bin") not in out, out


def check_subfolders():
    """A model folder's subfolders are scanned: a diffusers pipeline keeps
    its weights in unet/, text_encoder/...; a hostile unet/ bin was never
    read ('SAFE', exit 0: only the top level was scanned). Hidden entries
    and links to directories are not followed; a folder with files only
    below it has files."""
    d = os.path.join(TMP, "pipeline")
    os.makedirs(os.path.join(d, "unet", "deeper"))
    os.makedirs(os.path.join(d, ".cache"))
    evil = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R."
    benign = b"\x80\x02}q\x00."
    for name, data in (("model_index.pkl", benign),
                       ("unet/diffusion_pytorch_model.bin", evil),
                       ("unet/deeper/x.pkl", benign), (".cache/y.pkl", evil)):
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(data)
    os.symlink("..", os.path.join(d, "unet", "loop"))
    rc, reps, _ = run_json(d)
    got = [(os.path.relpath(r["file"], d), r["verdict"]) for r in reps]
    assert rc == 1 and got == [("model_index.pkl", "safe"),
                               ("unet/diffusion_pytorch_model.bin", "unsafe"),
                               ("unet/deeper/x.pkl", "safe")], (rc, got)
    os.remove(os.path.join(d, "model_index.pkl"))
    os.remove(os.path.join(d, "unet", "diffusion_pytorch_model.bin"))
    rc, out, err = run(d)
    assert rc == 0 and out.count("SAFE ") == 1, (rc, out, err)
    # past 16 levels of subfolders a file is not read: said (exit 2,
    # naming the folder), never SAFE exit 0 with a hostile file unread
    deep = os.path.join(d, *(["s"] * 17))
    os.makedirs(deep)
    with open(os.path.join(deep, "model.bin"), "wb") as fh:
        fh.write(evil)
    rc, out, err = run(d)
    cut = os.path.join(d, *(["s"] * 17))
    assert rc == 2 and cut + ": not scanned: deeper than 16 levels" in err, (rc, out, err)


def run_doctor_json(path):
    p = subprocess.run([BIN, "doctor", "--json", path], capture_output=True,
                       timeout=120)
    return p.returncode, json.loads(p.stdout.decode("utf-8", "replace"))


def check_scan_doctor_same_files():
    """`ckpt scan DIR` and `ckpt doctor DIR` walk a folder with one walker
    (ckpt_scan_dir_list): the same files, in the same order, with the same
    skip rules (hidden entries, links to directories), a DCP folder as one
    checkpoint and the same entry for a folder past 16 levels. Doctor once
    followed each subfolder where its name sorted (unet/deeper/ before
    unet/zz.pkl), scan after the folder's own files, and doctor left out a
    zip holding a pickle beside the weights (training analysis cannot open
    it): "safe"."""
    d = os.path.join(TMP, "walk")
    evil = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R."
    benign = b"\x80\x02}q\x00."
    deep = os.path.join("unet", *(["s"] * 16))
    for sub in ("unet/deeper", "unet/.cache", "unet/dcp", "other", deep):
        os.makedirs(os.path.join(d, sub))
    for name, data in (("model.pkl", benign), ("unet/b.pkl", benign),
                       ("unet/a.pkl", evil), ("unet/zz.pkl", benign),
                       ("unet/deeper/c.pkl", benign), ("unet/.hidden.pkl", evil),
                       ("unet/.cache/x.pkl", evil), ("unet/dcp/__0_0.distcp", benign),
                       ("other/o.pkl", benign), (os.path.join(deep, "m.pkl"), evil)):
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(data)
    os.symlink("..", os.path.join(d, "unet", "loop"))
    os.symlink("../other", os.path.join(d, "unet", "link"))
    os.symlink("b.pkl", os.path.join(d, "unet", "filelink.pkl"))
    with zipfile.ZipFile(os.path.join(d, "extra.zip"), "w") as z:
        z.writestr("x/evil.txt", evil)
    rc, reps, err = run_json(d)
    cut = os.path.join(d, deep)
    scanned = [os.path.relpath(r["file"], d) for r in reps]
    scanned += [os.path.relpath(line.split(": not scanned: ")[0][len("ckpt: "):], d)
                for line in err.splitlines() if ": not scanned: " in line]
    want = ["extra.zip", "model.pkl", "other/o.pkl", "unet/a.pkl", "unet/b.pkl", "unet/dcp",
            "unet/filelink.pkl", "unet/zz.pkl", "unet/deeper/c.pkl", deep]
    assert rc == 2 and scanned == want, (rc, scanned, err)
    assert cut + ": not scanned: deeper than 16 levels" in err, err
    rc, doc = run_doctor_json(d)
    files = doc["sections"]["safety"]["files"]
    assert [f["file"] for f in files] == want, [f["file"] for f in files]
    assert "deeper than 16 levels" in files[-1].get("error", ""), files[-1]
    assert [f["verdict"] for f in files[:-1]] == [r["verdict"] for r in reps], (files, reps)


# ------------------------------------------------------------ CLI

def check_exit_codes(outdir):
    safe = os.path.join(outdir, "benign_dict.pkl")
    evil = os.path.join(outdir, "system_p2.pkl")
    missing = os.path.join(TMP, "no-such-file.pt")
    assert run(safe, safe)[0] == 0
    assert run(safe, evil)[0] == 1
    rc, out, err = run(safe, missing)
    assert rc == 2 and "no-such-file.pt" in err, (rc, err)
    rc, reps, _ = run_json(evil, missing)
    assert rc == 2 and reps[0]["verdict"] == "unsafe" and "error" in reps[1]
    # an unreadable file's error is the object `ckpt verify --json` writes
    # (it was a bare message string, with no "verdict" key)
    assert reps[1] == {"file": missing, "verdict": None, "error": {
        "code": "CKPT_E_IO", "message": "cannot open: No such file or directory",
        "file": missing, "member": None, "offset": None}}, reps[1]
    assert run()[0] == 2                        # no FILE
    assert run("--bogus", safe)[0] == 2         # unknown option
    assert run(safe, "--allow")[0] == 2         # option without its value
    assert run("--allow", "nodot", safe)[0] == 2
    assert run("--policy", missing, safe)[0] == 2
    bad = os.path.join(TMP, "bad-policy.txt")
    with open(bad, "w", encoding="utf-8") as fh:
        fh.write("argparse.Namespace\nnot a name\n")
    rc, _, err = run("--policy", bad, safe)
    assert rc == 2 and ":2:" in err, err
    empty = os.path.join(TMP, "empty-dir")
    os.makedirs(empty, exist_ok=True)
    assert run(empty)[0] == 2                   # a directory without files
    folder = os.path.join(TMP, "model-dir")     # a directory: file by file
    os.makedirs(folder, exist_ok=True)
    shutil.copy(safe, os.path.join(folder, "a.pt"))
    rc, out, _ = run(folder)
    assert rc == 0 and out.count("SAFE ") == 1 and "a.pt" in out, out
    shutil.copy(evil, os.path.join(folder, "b.pt"))
    rc, out, _ = run(folder)
    assert rc == 1 and "UNSAFE" in out and "SAFE " in out, out
    rc, out, _ = run("--help")
    assert rc == 0 and "usage: ckpt scan" in out
    assert run("--", safe)[0] == 0


def check_json_shape(outdir):
    evil = os.path.join(outdir, "zip_txt.zip")
    rc, rep, _ = run_json(evil)
    assert isinstance(rep, dict) and set(rep) == {"file", "verdict", "findings",
                                                  "globals", "weights_only"}
    # the pickle is in data.txt, which torch.load never unpickles
    assert rep["weights_only"] is None, rep
    f = [f for f in rep["findings"] if f.get("global") == gen_hostile.SYSTEM][0]
    assert f["member"] == "archive/data.txt" and isinstance(f["offset"], int)
    assert f["kind"] == "global" and f["message"]
    assert rep["globals"] == sorted(set(rep["globals"]))
    rc, reps, _ = run_json(evil, evil)
    assert isinstance(reps, list) and len(reps) == 2


def check_human(outdir):
    evil = os.path.join(outdir, "zip_polyglot.pt")
    rc, out, _ = run(evil)
    lines = out.splitlines()
    assert rc == 1
    # the verdict line first, then its findings (as doctor's safety section)
    assert lines[0].startswith("UNSAFE ") and evil in lines[0], lines
    assert all(l.startswith("  ") for l in lines[1:]), lines
    hit = [l for l in lines if gen_hostile.SYSTEM in l and "global" in l]
    assert hit and "member archive/data.pkl" in hit[0] and "offset " in hit[0]
    assert any("polyglot" in l for l in lines)
    rc, out, _ = run(os.path.join(outdir, "benign_dict.pkl"))
    assert rc == 0 and out.startswith("SAFE "), out


def generated():
    outdir = os.path.join(TMP, "hostile")
    rows = gen_hostile.main(outdir)
    for row in rows:
        if row.get("allow"):
            case("allow " + row["file"], check_allow, row, outdir)
        else:
            case("hostile " + row["file"], check_hostile, row, outdir)
    case("--allow cannot bless code execution", check_allow_cannot_bless_code,
         outdir)
    case("a refused --allow is said", check_refused_allow_is_said, outdir)
    case("exit codes", check_exit_codes, outdir)
    case("json shape", check_json_shape, outdir)
    case("human form", check_human, outdir)
    case("a folder's shards reported once, through the index", check_folder_shards)
    case("a folder's subfolders are scanned", check_subfolders)
    case("scan and doctor walk a folder alike", check_scan_doctor_same_files)


def main():
    if CORPUS_SUITE:
        for rec in expected_verdicts():
            if rec["file"].startswith("scan/"):
                case("corpus " + rec["file"], check_corpus_file, rec)
        case("benign corpus files are safe", check_benign_corpus)
        case("sharded index: every shard scanned", check_sharded_index)
    else:
        generated()
    shutil.rmtree(TMP, ignore_errors=True)
    print("%d passed, %d failed" % (len(PASSED), len(FAILED)))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
