"""ckpt.doctor and ckpt.verify of a diffusers pipeline directory
(model_index.json): one result per model component, as `ckpt doctor
--json` and `verify --json` give them; ckpt.doctor raised NotFoundError
("no checkpoint file in the directory") and ckpt.verify FileError."""
import json
import os
import shutil
import subprocess

import pytest

import ckpt

from conftest import REPO

CKPT_BIN = os.environ.get("CKPT_BIN")
WANT = 'component "vae" holds diffusion_pytorch_model.safetensors but no config.json'


def pipeline(tmp_path):
    """unet/ and text_encoder/ loadable, vae/ weights without config.json."""
    d = tmp_path / "pipe"
    d.mkdir()
    (d / "model_index.json").write_text(json.dumps(
        {"_class_name": "StableDiffusionPipeline", "unet": ["diffusers", "UNet2DConditionModel"],
         "vae": ["diffusers", "AutoencoderKL"], "text_encoder": ["transformers", "CLIPTextModel"],
         "scheduler": ["diffusers", "PNDMScheduler"]}))
    weights = os.path.join(REPO, "examples", "train.safetensors")
    for c, name in (("unet", "diffusion_pytorch_model.safetensors"),
                    ("vae", "diffusion_pytorch_model.safetensors"),
                    ("text_encoder", "model.safetensors")):
        (d / c).mkdir()
        shutil.copy(weights, d / c / name)
        if c != "vae":
            (d / c / "config.json").write_text("{}")
    (d / "scheduler").mkdir()
    (d / "scheduler" / "scheduler_config.json").write_text("{}")
    return str(d)


def cli_json(*argv):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    p = subprocess.run([CKPT_BIN] + list(argv), capture_output=True, env=env)
    assert p.returncode == 1, p.stderr
    return json.loads(p.stdout)


def test_doctor_reports_each_component(tmp_path):
    d = pipeline(tmp_path)
    docs = ckpt.doctor(d)
    assert [o["pipeline"]["component"] for o in docs] == ["text_encoder", "unet", "vae"]
    assert [o["file"] for o in docs] == [
        os.path.join(d, c, n) for c, n in (("text_encoder", "model.safetensors"),
                                           ("unet", "diffusion_pytorch_model.safetensors"),
                                           ("vae", "diffusion_pytorch_model.safetensors"))]
    vae = docs[2]
    assert vae["verdict"] == "attention" and vae["summary"].startswith("ATTENTION: " + WANT)
    assert vae["pipeline"]["error"]["code"] == "CKPT_E_MISMATCH"
    assert vae["pipeline"]["error"]["file"] == os.path.join(d, "vae")
    assert docs[1]["pipeline"]["error"] is None and WANT not in docs[1]["summary"]
    if CKPT_BIN:
        assert docs == cli_json("doctor", "--json", d)


def test_verify_reports_each_component(tmp_path):
    d = pipeline(tmp_path)
    reps = ckpt.verify(d)
    assert [(r.file, r.ok, r.pipeline["component"]) for r in reps] == [
        (os.path.join(d, "text_encoder"), True, "text_encoder"),
        (os.path.join(d, "unet"), True, "unet"), (os.path.join(d, "vae"), False, "vae")]
    vae = reps[2]
    assert isinstance(vae.error, ckpt.Error) and vae.error.name == "CKPT_E_MISMATCH"
    assert WANT in vae.error.message and vae.pipeline["error"] is vae.error
    assert vae.bytes == reps[1].bytes > 0 and reps[1].error is None
    if CKPT_BIN:
        cli = cli_json("verify", "--json", d)
        assert [(o["file"], o["ok"], o["bytes"], o["pipeline"]["component"]) for o in cli] == [
            (r.file, r.ok, r.bytes, r.pipeline["component"]) for r in reps]
        assert cli[2]["error"]["message"] == vae.error.message


def test_a_component_folder_alone_is_a_checkpoint(tmp_path):
    d = pipeline(tmp_path)
    assert ckpt.verify(os.path.join(d, "unet")).pipeline is None
    assert "pipeline" not in ckpt.doctor(os.path.join(d, "unet"))


def test_an_index_without_model_components_is_refused(tmp_path):
    d = pipeline(tmp_path)
    with open(os.path.join(d, "model_index.json"), "w") as fh:
        json.dump({"scheduler": ["diffusers", "PNDMScheduler"]}, fh)
    for fn in (ckpt.doctor, ckpt.verify):
        with pytest.raises(ckpt.NotFoundError, match="names no model component"):
            fn(d)
