#!/usr/bin/python3
"""`ckpt convert IN OUT --backup` keeps each replaced file as NAME.bak;
loaders (transformers, diffusers, the Trainer) open exact names and never
a .bak, so doctor of the folder reports the new weights, with the .bak
files scanned but never taken for the weights or a stray shard (before:
"model weights in both model.safetensors and model.safetensors.bak" and
"shard file ... .bak is not listed by the index", no report, exit 1).
The inputs are written here (safetensors by hand): the CLI alone runs.
Environment: CKPT_BIN. Ends with "N passed, N failed"."""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", "ckpt")
ROOT = None




def ckpt(*argv):
    p = subprocess.run([CKPT] + list(argv), capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def model(name):
    d = os.path.join(ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "model.safetensors"), "wb") as fh:
        fh.write(suite.safetensors({"b": [3.0] * 64, "w": [1.0, 2.0]}))
    with open(os.path.join(d, "config.json"), "w") as fh:
        fh.write('{"model_type": "bert"}')
    return d


def doctor(d):
    rc, out, err = ckpt("doctor", d, "--json")
    assert rc == 0, (rc, err)
    return json.loads(out)


def test_a_backup_beside_the_weights_is_not_a_second_checkpoint():
    src = model("hf")
    out = os.path.join(ROOT, "out1")
    for _ in range(2):
        rc, _, err = ckpt("convert", src, out + "/", "--backup")
        assert rc == 0, (rc, err)
    assert sorted(os.listdir(out)) == ["config.json", "config.json.bak", "model.safetensors",
                                       "model.safetensors.bak"], os.listdir(out)
    rep = doctor(out)
    assert rep["verdict"] == "healthy", rep["verdict"]
    assert rep["file"] == os.path.join(out, "model.safetensors"), rep["file"]
    scanned = [s["file"] for s in rep["sections"]["safety"]["files"]]
    assert "model.safetensors.bak" in scanned, scanned  # still scanned
    rc, text, err = ckpt("doctor", out)
    assert rc == 0 and "model weights in both" not in err, (rc, err)
    assert "not analysed (no checkpoint, a subfolder, or a .bak backup): config.json.bak, " \
        "model.safetensors.bak" in text, text


def test_a_sharded_set_converted_in_place_with_backup():
    d = model("sharded-src")
    sh = os.path.join(ROOT, "sharded")
    rc, _, err = ckpt("convert", d, sh + "/", "--max-shard-size", "200")
    assert rc == 0, (rc, err)
    rc, _, err = ckpt("convert", sh, sh + "/", "--max-shard-size", "200", "--backup")
    assert rc == 0, (rc, err)
    names = sorted(os.listdir(sh))
    assert "model-00001-of-00002.safetensors.bak" in names, names
    assert "model.safetensors.index.json.bak" in names, names
    rep = doctor(sh)
    assert rep["verdict"] == "healthy", rep["verdict"]
    assert rep["file"] == os.path.join(sh, "model.safetensors.index.json"), rep["file"]
    rc, _, err = ckpt("doctor", sh)
    assert rc == 0 and "not listed by the index" not in err, (rc, err)


def test_a_sharded_folder_into_one_file_in_place_says_what_went():
    """convert DIR DIR of a sharded set writes DIR/model.safetensors and
    retires the index and shards (a loader of the index would find the old
    layout): said on stderr as the one-file case says "replacing", and with
    --backup they stay as .bak, which doctor does not take for weights."""
    d = model("in-place-src")
    for backup in ([], ["--backup"]):
        sh = os.path.join(ROOT, "in-place" + "".join(backup))
        rc, _, err = ckpt("convert", d, sh + "/", "--max-shard-size", "200")
        assert rc == 0, (rc, err)
        rc, _, err = ckpt("convert", sh, sh, *backup)
        assert rc == 0, (rc, err)
        if backup:
            assert "kept 3 files of the previous layout of %s as NAME.bak" % sh in err, err
            assert sorted(n for n in os.listdir(sh) if n.endswith(".bak")) == [
                "model-00001-of-00002.safetensors.bak", "model-00002-of-00002.safetensors.bak",
                "model.safetensors.index.json.bak"], os.listdir(sh)
        else:
            assert "removed 3 files of the previous layout of %s (use --backup" % sh in err, err
            assert sorted(os.listdir(sh)) == ["config.json", "model.safetensors"], os.listdir(sh)
        # the weights are the new file; the index .bak, whose shards are
        # gone, holds no code: safe, its missing shards named (it was
        # unscannable: ATTENTION, exit 1)
        rc, out, err = ckpt("doctor", sh, "--json")
        rep = json.loads(out)
        assert rc == 0 and rep["verdict"] == "healthy" and rep["file"] == os.path.join(
            sh, "model.safetensors"), (rc, err, rep["verdict"], rep["file"])
        if backup:
            rc, out, err = ckpt("doctor", sh)
            assert rc == 0 and "model.safetensors.index.json.bak: safe" in out, (rc, out)
            bak = os.path.join(sh, "model.safetensors.index.json.bak")
            rc, out, err = ckpt("scan", bak)
            assert rc == 0 and out.count("shard-missing") == 2, (rc, out, err)
            # the stale index itself, opened as the set it names: the
            # missing shard is reported where it matters
            rc, out, err = ckpt("verify", bak)
            assert rc == 1 and "model-00001-of-00002.safetensors" in out + err and \
                "No such file" in out + err, (rc, out, err)
    # a one-file folder converted into a set in place: the one file goes too
    rc, _, err = ckpt("convert", sh, sh + "/", "--max-shard-size", "200")
    assert rc == 0 and "removed 1 file of the previous layout of %s/ " % sh in err, (rc, err)


def main():
    return suite.run_cases_in_tmp(globals(), os.path.abspath(__file__), "ckpt-convert-backup-")


if __name__ == "__main__":
    sys.exit(main())
