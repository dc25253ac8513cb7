#!/usr/bin/python3
"""transformers' from_pretrained refuses a safetensors weights file whose
__metadata__ is present without "format" "pt", "tf", "flax" or "mlx"
(load_state_dict: OSError "does not contain the valid metadata"); one
without __metadata__ loads. safetensors.torch.save_file(sd, p,
metadata={"step": "1"}) writes such a file, which safetensors, verify and
doctor said was fine. `ckpt doctor` now names it (exit 1, text and --json
"from_pretrained"), with the fix (`ckpt convert F F --meta format=pt`), for
the names transformers reads: model.safetensors (a folder, a Trainer
checkpoint folder, the file by path) and each shard of
model.safetensors.index.json; never diffusers' diffusion_pytorch_model.*
nor PEFT's adapter_model.*, whose loaders do not check. Each file's verdict
is compared with the quoted condition evaluated on the metadata the real
safetensors reader returns (transformers itself when the venv has it).
Files written with safetensors from the project virtualenv. Environment:
CKPT_BIN, CKPT_SRC; skipped with one printed line without .venv/bin/python.
Ends with "N passed, N failed"."""
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", "ckpt")
SHARDS = ["model-%05d-of-00002.safetensors" % (i + 1) for i in range(2)]

# One folder per case: its name, then the metadata of model.safetensors
# (None: save_file without metadata).
SINGLE = {"nofmt": {"step": "1"}, "pt": {"format": "pt", "step": "1"}, "tf": {"format": "tf"},
          "np": {"format": "np"}, "nometa": None, "empty": {}}

GEN = r'''
import json, os, sys, torch
from safetensors.torch import save_file
root, cases, shards = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
sd = {"w": torch.arange(4, dtype=torch.float32).reshape(2, 2)}
for name, meta in cases.items():
    os.makedirs(os.path.join(root, name))
    save_file(sd, os.path.join(root, name, "model.safetensors"), metadata=meta)
    json.dump({"model_type": "x"}, open(os.path.join(root, name, "config.json"), "w"))
d = os.path.join(root, "sharded")
os.makedirs(d)
save_file({"w": torch.ones(2)}, os.path.join(d, shards[0]), metadata={"format": "pt"})
save_file({"b": torch.ones(2)}, os.path.join(d, shards[1]), metadata={"step": "3"})
json.dump({"metadata": {"total_size": 16}, "weight_map": {"w": shards[0], "b": shards[1]}},
          open(os.path.join(d, "model.safetensors.index.json"), "w"))
d = os.path.join(root, "trainer", "checkpoint-5")
os.makedirs(d)
save_file(sd, os.path.join(d, "model.safetensors"), metadata={"epoch": "1"})
json.dump({"global_step": 5}, open(os.path.join(d, "trainer_state.json"), "w"))
d = os.path.join(root, "unet")
os.makedirs(d)
save_file(sd, os.path.join(d, "diffusion_pytorch_model.safetensors"), metadata={"step": "1"})
json.dump({"_class_name": "UNet2DModel"}, open(os.path.join(d, "config.json"), "w"))
d = os.path.join(root, "adapter")
os.makedirs(d)
save_file({"base_model.model.q.lora_A.weight": torch.ones(2, 2),
           "base_model.model.q.lora_B.weight": torch.ones(2, 2)},
          os.path.join(d, "adapter_model.safetensors"), metadata={"step": "1"})
json.dump({"peft_type": "LORA"}, open(os.path.join(d, "adapter_config.json"), "w"))
'''

# What transformers says of each file: its own load_state_dict when the venv
# has transformers, else the condition quoted from
# src/transformers/modeling_utils.py (load_state_dict) on the metadata
# safetensors' reader returns. One JSON line per file: {"file", "refused"}.
ORACLE = r'''
import json, sys
from safetensors import safe_open
try:
    from transformers.modeling_utils import load_state_dict
except ImportError:
    load_state_dict = None
for path in sys.argv[1:]:
    if load_state_dict is not None:
        try:
            load_state_dict(path)
            refused = False
        except OSError as e:
            refused = "does not contain the valid metadata" in str(e)
    else:
        with safe_open(path, framework="pt") as f:
            metadata = f.metadata()
        refused = metadata is not None and metadata.get("format") not in ["pt", "tf", "flax", "mlx"]
    print(json.dumps({"file": path, "refused": refused}))
'''

ROOT = None


def ckpt(*argv):
    p = subprocess.run([CKPT] + list(argv), capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def doctor_json(path):
    rc, out, err = ckpt("doctor", "--json", path)
    return rc, json.loads(out)


def fresh():
    """A copy of the cases (written once, under ROOT/cases) in ROOT/w."""
    master, d = os.path.join(ROOT, "cases"), os.path.join(ROOT, "w")
    if not os.path.exists(master):
        os.makedirs(master)
        subprocess.run([suite.VENV, "-c", GEN, master, json.dumps(SINGLE), json.dumps(SHARDS)],
                       check=True, timeout=300)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(master, d)
    return d


def raw_safetensors(path, header):
    """A file whose header is `header` (JSON text) and one F32 tensor w."""
    text = header.encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + b"\0" * 8)


def test_single_files():
    d = fresh()
    want = {"nofmt": None, "np": "np", "empty": None}  # refused: the format found
    for name in SINGLE:
        rc, doc = doctor_json(os.path.join(d, name))
        sec = doc["sections"]["from_pretrained"]
        if name in want:
            assert rc == 1 and sec["ok"] is False, (name, rc, sec)
            [x] = sec["refused"]
            path = os.path.join(d, name, "model.safetensors")
            assert (x["file"], x["format"]) == ("model.safetensors", want[name]), (name, x)
            assert ("fix: ckpt convert %s %s --meta format=pt" % (path, path)) in x["error"], x
            found = 'has "format" "np"' if want[name] else 'has no "format"'
            assert found in x["error"] and "does not contain the valid metadata" in x["error"], x
            assert doc["summary"] == "ATTENTION: from_pretrained refuses model.safetensors " \
                "(__metadata__ %s)" % ('"format" "np"' if want[name] else 'without "format"'), doc
        else:
            assert rc == 0 and sec == {"ok": True, "refused": []}, (name, rc, sec)
            assert doc["summary"].startswith("HEALTHY: "), doc["summary"]
    # the text report: the verdict, and the section naming the file and the fix
    rc, out, _ = ckpt("doctor", os.path.join(d, "nofmt", "model.safetensors"))
    lines = out.splitlines()
    at = lines.index("from_pretrained (transformers)")
    assert rc == 1 and lines[0].startswith("ATTENTION: from_pretrained refuses"), out
    assert lines[at + 1].startswith("  model.safetensors: REFUSED: transformers' from_pretrained "
                                    "refuses model.safetensors: its __metadata__ has no"), lines
    rc, out, _ = ckpt("doctor", os.path.join(d, "pt"))
    at = out.splitlines().index("from_pretrained (transformers)")
    assert rc == 0 and out.splitlines()[at + 1].startswith("  OK: "), out


def test_metadata_null_is_none():
    """"__metadata__": null reads as None (serde's Option), which loads;
    an empty object is metadata without "format", which does not."""
    d = os.path.join(ROOT, "raw")
    for name, meta in (("null", "null"), ("obj", "{}")):
        os.makedirs(os.path.join(d, name), exist_ok=True)
        raw_safetensors(os.path.join(d, name, "model.safetensors"),
                        '{"__metadata__":%s,"w":{"dtype":"F32","shape":[2],'
                        '"data_offsets":[0,8]}}' % meta)
    rc, doc = doctor_json(os.path.join(d, "null"))
    assert rc == 0 and doc["sections"]["from_pretrained"]["ok"] is True, (rc, doc["summary"])
    rc, doc = doctor_json(os.path.join(d, "obj"))
    assert rc == 1 and doc["sections"]["from_pretrained"]["refused"][0]["format"] is None, doc
    oracle = suite.oracle_docs(suite.VENV, ["-c", ORACLE],
                               [os.path.join(d, n, "model.safetensors") for n in ("null", "obj")])
    assert [o["refused"] for o in oracle.values()] == [False, True], oracle


def test_a_sharded_set_names_its_bad_shard():
    d = fresh()
    for path in (os.path.join(d, "sharded"),
                 os.path.join(d, "sharded", "model.safetensors.index.json")):
        rc, doc = doctor_json(path)
        sec = doc["sections"]["from_pretrained"]
        assert rc == 1 and [(x["file"], x["format"]) for x in sec["refused"]] == [
            (SHARDS[1], None)], (path, rc, sec)
        assert doc["summary"] == 'ATTENTION: from_pretrained refuses %s (__metadata__ without ' \
            '"format")' % SHARDS[1], doc["summary"]
    # the fix as given: the shard converted in place; the set then loads
    shard = os.path.join(d, "sharded", SHARDS[1])
    rc, _, err = ckpt("convert", shard, shard, "--meta", "format=pt")
    assert rc == 0, err
    rc, doc = doctor_json(os.path.join(d, "sharded"))
    assert rc == 0 and doc["sections"]["from_pretrained"] == {"ok": True, "refused": []}, doc


def test_a_trainer_checkpoint_folder():
    d = fresh()
    rc, doc = doctor_json(os.path.join(d, "trainer", "checkpoint-5"))
    refused = doc["sections"]["from_pretrained"]["refused"]
    assert rc == 1 and [x["file"] for x in refused] == ["model.safetensors"], (rc, doc)


def test_diffusers_and_peft_names_are_not_checked():
    """diffusers' load_state_dict and PEFT's load_peft_weights read
    safetensors without transformers' check: the same metadata is no
    finding there, and the section is null (text: not shown)."""
    d = fresh()
    for name in ("unet", "adapter"):
        rc, doc = doctor_json(os.path.join(d, name))
        assert rc == 0 and doc["sections"]["from_pretrained"] is None, (name, rc, doc)
        rc, out, _ = ckpt("doctor", os.path.join(d, name))
        assert rc == 0 and "from_pretrained" not in out, (name, out)
    # the same bytes under transformers' name are refused
    shutil.copy(os.path.join(d, "unet", "diffusion_pytorch_model.safetensors"),
                os.path.join(d, "unet", "model.safetensors"))
    rc, _ = doctor_json(os.path.join(d, "unet", "model.safetensors"))
    assert rc == 1, rc


def test_the_fix_keeps_the_other_metadata():
    d = fresh()
    for name in ("nofmt", "np"):
        path = os.path.join(d, name, "model.safetensors")
        rc, _, err = ckpt("convert", path, path, "--meta", "format=pt")
        assert rc == 0 and "in place" in err, (name, rc, err)
        rc, doc = doctor_json(os.path.join(d, name))
        assert rc == 0, (name, doc["summary"])
    got = subprocess.run([suite.VENV, "-c", "import sys; from safetensors import safe_open\n"
                          "with safe_open(sys.argv[1], 'np') as f: print(f.metadata()['format'],"
                          " f.metadata()['step'], list(f.keys()))",
                          os.path.join(d, "nofmt", "model.safetensors")],
                         capture_output=True, check=True, timeout=120).stdout.decode()
    assert got == "pt 1 ['w']\n", got


def test_agrees_with_transformers_condition():
    """doctor refuses exactly the files the quoted condition refuses."""
    d = fresh()
    files = [os.path.join(d, n, "model.safetensors") for n in SINGLE] + [
        os.path.join(d, "sharded", s) for s in SHARDS]
    oracle = suite.oracle_docs(suite.VENV, ["-c", ORACLE], files)
    for path in files:
        if os.path.basename(path).startswith("model-"):
            rc, doc = doctor_json(os.path.join(d, "sharded"))
            ours = os.path.basename(path) in [
                x["file"] for x in doc["sections"]["from_pretrained"]["refused"]]
        else:
            rc, doc = doctor_json(path)
            ours = not doc["sections"]["from_pretrained"]["ok"]
        assert ours == oracle[path]["refused"], (path, ours, oracle[path])


def main():
    if not os.path.exists(suite.VENV):
        print("SKIP from_pretrained metadata: no %s (run scripts/deps --test)" % suite.VENV)
        return suite.finish(0, 0)
    return suite.run_cases_in_tmp(globals(), os.path.abspath(__file__), "ckpt-hfmeta-")


if __name__ == "__main__":
    sys.exit(main())
