#!/usr/bin/python3
"""A diffusers pipeline directory (DiffusionPipeline.save_pretrained's
layout: model_index.json beside a folder per component, unet/ a sharded
safetensors set, vae/ one diffusion_pytorch_model.safetensors,
text_encoder/ a torch pytorch_model.bin, tokenizer/ and scheduler/ no
weights), written with torch 2.13 and safetensors from the project
virtualenv: `ckpt verify DIR` and `doctor DIR` check each model component
and report it by name (exit 0 all healthy, 1 with a finding), where they
said "a directory without model weights" (exit 2) before; inspect and
scan agree on the files there. Environment: CKPT_BIN, CKPT_SRC; skipped
with one printed line without .venv/bin/python. Ends with "N passed, N
failed"."""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", "ckpt")
COMPONENTS = ["text_encoder", "unet", "vae"]
SHARD2 = "unet/diffusion_pytorch_model-00002-of-00002.safetensors"

GEN = r'''
import json, os, sys, torch
from safetensors.torch import save_file
root = sys.argv[1]
torch.manual_seed(0)
index = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0",
         "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
         "text_encoder": ["transformers", "CLIPTextModel"],
         "tokenizer": ["transformers", "CLIPTokenizer"],
         "scheduler": ["diffusers", "PNDMScheduler"], "safety_checker": [None, None]}
json.dump(index, open(os.path.join(root, "model_index.json"), "w"))
for c in ("unet", "vae", "text_encoder", "tokenizer", "scheduler"):
    os.makedirs(os.path.join(root, c))
for c in ("unet", "vae", "text_encoder"):
    json.dump({"_class_name": c}, open(os.path.join(root, c, "config.json"), "w"))
shards = [{"conv.weight": torch.randn(4, 4)}, {"conv.bias": torch.randn(4)}]
names = ["diffusion_pytorch_model-%05d-of-00002.safetensors" % (i + 1) for i in range(2)]
for sd, n in zip(shards, names):
    save_file(sd, os.path.join(root, "unet", n), metadata={"format": "pt"})
json.dump({"metadata": {"total_size": 80},
           "weight_map": {"conv.weight": names[0], "conv.bias": names[1]}},
          open(os.path.join(root, "unet", "diffusion_pytorch_model.safetensors.index.json"), "w"))
save_file({"encoder.weight": torch.randn(2, 2)},
          os.path.join(root, "vae", "diffusion_pytorch_model.safetensors"), metadata={"format": "pt"})
torch.save({"embeddings.weight": torch.randn(5, 2)},
           os.path.join(root, "text_encoder", "pytorch_model.bin"))
json.dump({}, open(os.path.join(root, "tokenizer", "tokenizer_config.json"), "w"))
open(os.path.join(root, "tokenizer", "vocab.json"), "w").write("{}")
json.dump({"_class_name": "PNDMScheduler"},
          open(os.path.join(root, "scheduler", "scheduler_config.json"), "w"))
'''

ROOT = None


def ckpt(*argv):
    p = subprocess.run([CKPT] + list(argv), capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def pipeline():
    """A fresh pipeline directory."""
    d = os.path.join(ROOT, "pipe")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    subprocess.run([suite.VENV, "-c", GEN, d], check=True, timeout=300)
    return d


def test_verify_checks_each_component():
    d = pipeline()
    rc, out, err = ckpt("verify", d)
    lines = out.splitlines()
    assert rc == 0 and err == "", (rc, out, err)
    assert [l.split(" ")[:2] for l in lines] == [
        ["OK", os.path.join(d, c)] for c in COMPONENTS], lines
    assert "2 shards, each checked whole" in lines[1], lines[1]
    rc, out, _ = ckpt("verify", "--json", d)
    got = [(o["file"], o["ok"], o["format"], o["pipeline"]) for o in json.loads(out)]
    assert rc == 0 and got == [
        (os.path.join(d, "text_encoder"), True, "torch-zip",
         {"component": "text_encoder", "error": None}),
        (os.path.join(d, "unet"), True, "safetensors-sharded", {"component": "unet", "error": None}),
        (os.path.join(d, "vae"), True, "safetensors", {"component": "vae", "error": None})], got
    # a component folder alone opens as its weights (diffusers' names)
    rc, out, _ = ckpt("verify", os.path.join(d, "vae"))
    assert rc == 0 and out.startswith("OK "), out


def test_verify_names_the_damaged_component():
    d = pipeline()
    path = os.path.join(d, SHARD2)
    with open(path, "r+b") as fh:  # the header's length: the shard no longer parses
        fh.write(b"\xff\xff")
    rc, out, _ = ckpt("verify", d)
    lines = out.splitlines()
    assert rc == 1, (rc, out)
    assert lines[0].startswith("OK " + os.path.join(d, "text_encoder")), lines
    assert lines[1].startswith("CORRUPT " + os.path.join(d, "unet")), lines
    assert "00002-of-00002" in lines[1], lines[1]
    assert lines[2].startswith("OK " + os.path.join(d, "vae")), lines
    rc, out, _ = ckpt("doctor", d)
    heads = [l for l in out.splitlines() if l.startswith("== ")]
    assert rc == 1 and heads == ["== " + os.path.join(d, c) for c in COMPONENTS], (rc, heads)


def test_a_component_without_config_is_a_finding():
    """vae/ with its weights but no config.json: diffusers cannot load it
    (from_pretrained reads the config first); verify and doctor said OK,
    skipping the folder as if it were the tokenizer's."""
    d = pipeline()
    os.unlink(os.path.join(d, "vae", "config.json"))
    want = 'component "vae" holds diffusion_pytorch_model.safetensors but no config.json'
    for cmd in ("verify", "doctor"):
        rc, out, err = ckpt(cmd, d)
        assert rc == 1 and want in err and os.path.join(d, "vae") in err, (cmd, rc, out, err)
        assert "tokenizer" not in err, err
    # its own line says so, not "OK" nor "HEALTHY" (they did: the finding
    # was on stderr and in the exit status only)
    vae = os.path.join(d, "vae")
    rc, out, _ = ckpt("verify", d)
    lines = out.splitlines()
    assert [l.split(" ")[:2] for l in lines] == [
        ["OK", os.path.join(d, "text_encoder")], ["OK", os.path.join(d, "unet")],
        ["NOT-LOADABLE", vae + ":"]], lines
    assert want in lines[2] and "; its bytes (safetensors, 1 key, 16 bytes checked)" in lines[2], \
        lines[2]
    rc, out, _ = ckpt("verify", "-q", d)
    assert rc == 1 and [l.split(" ")[0] for l in out.splitlines()] == ["NOT-LOADABLE"], out
    rc, out, _ = ckpt("doctor", d)
    lines = out.splitlines()
    at = lines.index("== " + vae)
    assert lines[at + 1].startswith("ATTENTION: " + want), lines[at + 1]
    assert lines[lines.index("== " + os.path.join(d, "unet")) + 1].startswith("HEALTHY: "), out
    rc, out, _ = ckpt("verify", "--json", d)
    got = {o["pipeline"]["component"]: o for o in json.loads(out)}
    assert [got[c]["ok"] for c in COMPONENTS] == [True, True, False], got
    assert got["vae"]["error"] == got["vae"]["pipeline"]["error"] \
        and (got["vae"]["tensors"], got["vae"]["bytes"]) == (1, 16), got["vae"]
    rc, out, _ = ckpt("doctor", "--json", d)
    got = {o["pipeline"]["component"]: o for o in json.loads(out)}
    assert [got[c]["verdict"] for c in COMPONENTS] == ["healthy", "healthy", "attention"], got
    assert got["vae"]["summary"].startswith("ATTENTION: " + want), got["vae"]["summary"]
    # --json carries it too, in the element of its component (it was on
    # stderr only: the JSON said nothing of it)
    for cmd in ("verify", "doctor", "inspect"):
        rc, out, err = ckpt(cmd, "--json", d)
        got = {o["pipeline"]["component"]: o["pipeline"]["error"] for o in json.loads(out)}
        assert rc == 1 and sorted(got) == COMPONENTS, (cmd, rc, out, err)
        assert got["text_encoder"] is None and got["unet"] is None, (cmd, got)
        assert got["vae"] is not None and got["vae"]["code"] == "CKPT_E_MISMATCH" \
            and want in got["vae"]["message"] and got["vae"]["file"] == os.path.join(d, "vae") \
            and (got["vae"]["member"], got["vae"]["offset"]) == (None, None), (cmd, got)


def test_doctor_reports_each_component():
    d = pipeline()
    rc, out, err = ckpt("doctor", d)
    lines = out.splitlines()
    heads = [i for i, l in enumerate(lines) if l.startswith("== ")]
    assert rc == 0 and [lines[i] for i in heads] == [
        "== " + os.path.join(d, c) for c in COMPONENTS], (rc, out, err)
    assert all(lines[i + 1].startswith("HEALTHY: ") for i in heads), out
    rc, out, _ = ckpt("doctor", "--json", d)
    docs = json.loads(out)
    assert rc == 0 and [os.path.dirname(o["file"]) for o in docs] == [
        os.path.join(d, c) for c in COMPONENTS], docs


def test_inspect_and_scan_agree_on_the_files():
    d = pipeline()
    rc, out, _ = ckpt("inspect", "--json", d)
    inspected = [o["file"] for o in json.loads(out)]
    assert rc == 0 and inspected == [os.path.join(d, c) for c in COMPONENTS], inspected
    rc, out, _ = ckpt("scan", "--json", d)
    reps = json.loads(out)
    weights = [r["file"] for r in reps if r["verdict"] != "not-a-checkpoint"]
    assert rc == 0 and all(r["verdict"] in ("safe", "not-a-checkpoint") for r in reps), reps
    assert weights == [os.path.join(d, "text_encoder", "pytorch_model.bin"),
                       os.path.join(d, "unet", "diffusion_pytorch_model.safetensors.index.json"),
                       os.path.join(d, "vae", "diffusion_pytorch_model.safetensors")], weights
    assert [os.path.dirname(w) for w in weights] == inspected
    # human form: the pipeline's index and scheduler config are named on
    # one line as a model folder's other files, no report each
    rc, out, _ = ckpt("scan", d)
    assert rc == 0 and "NOT-A-CHECKPOINT" not in out, out
    also = [l for l in out.splitlines() if l.startswith("also ")]
    assert any(l.endswith(": model_index.json") for l in also), also
    assert any(l.endswith(": scheduler_config.json") for l in also), also


def test_a_component_outside_the_directory_is_refused():
    d = pipeline()
    with open(os.path.join(d, "model_index.json"), "w") as fh:
        json.dump({"unet": ["diffusers", "UNet2DConditionModel"],
                   "../elsewhere": ["diffusers", "AutoencoderKL"]}, fh)
    rc, out, err = ckpt("verify", d)
    assert rc == 2 and out == "" and '"../elsewhere"' in err, (rc, out, err)
    # the root alone: ckpt_open names the components rather than no weights
    rc, out, err = ckpt("convert", d, os.path.join(ROOT, "x.safetensors"))
    assert rc == 2 and "a diffusers pipeline directory (model_index.json)" in err, (rc, err)


def main():
    if not os.path.exists(suite.VENV):
        print("SKIP diffusers pipeline: no %s (run scripts/deps --test)" % suite.VENV)
        return suite.finish(0, 0)
    return suite.run_cases_in_tmp(globals(), os.path.abspath(__file__), "ckpt-pipeline-")


if __name__ == "__main__":
    sys.exit(main())
