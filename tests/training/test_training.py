"""Training checkpoints from real PyTorch training loops, judged by `ckpt
doctor` and `ckpt inspect --summary`.

gen_training.py (next to this file) trains small models with Adam, AdamW
(amsgrad), SGD with and without momentum, Adagrad and RMSprop and saves
complete checkpoints, one without optimizer, one missing a parameter's state,
one with a mismatched shape, weights only, a Lightning layout and Hugging
Face Trainer directories. Every verdict is asserted, and every byte count
and ratio is compared with what torch.load says the same file holds.

Environment (set by ctest): CKPT_BIN, CKPT_CORPUS, CKPT_SRC. Runs under
Debian's /usr/bin/python3 (torch 1.13). Prints one line per case and ends
with "N passed, N failed"; exits 1 on failure.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from suite import corpus, run_cases  # noqa: E402

BIN = os.environ.get("CKPT_BIN", "ckpt")
CORPUS = os.environ.get("CKPT_CORPUS", "/work/shared/corpus")
SRC = os.environ.get("CKPT_SRC",
                     os.path.dirname(os.path.dirname(os.path.dirname(
                         os.path.abspath(__file__)))))
HERE = os.path.dirname(os.path.abspath(__file__))
TMP = tempfile.mkdtemp(prefix="ckpt-training-test-")
GEN = os.path.join(TMP, "gen")

# torch is imported from a directory without a "torch" folder in it.
os.chdir(TMP)
import torch  # noqa: E402

BN_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def run(*args, env=None):
    p = subprocess.run([BIN] + list(args), capture_output=True, timeout=300,
                       env=env)
    return (p.returncode, p.stdout.decode("utf-8", "replace"),
            p.stderr.decode("utf-8", "replace"))


def run_json(*args):
    rc, out, err = run(*args)
    assert out.endswith("}\n"), "one JSON object: %r %r" % (out[:200], err)
    return rc, json.loads(out)


def assert_eq(got, want, what):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def close(got, want, what, tol=1e-9):
    if got is None or abs(got - want) > tol:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def gen(name):
    return os.path.join(GEN, name)


class Array:
    """A numpy array seen as a tensor (ckpt counts them as tensors)."""

    def __init__(self, a):
        self.a = a

    def numel(self):
        return self.a.size

    def element_size(self):
        return self.a.itemsize

    def dim(self):
        return self.a.ndim


def nbytes(t):
    return t.numel() * t.element_size()


def tensors(obj):
    """Every tensor (and numpy array) in a loaded object, in order."""
    import numpy as np
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, np.ndarray):
        yield Array(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors(v)


def expected(sd_model, sd_opt):
    """What torch says: model and parameter bytes, optimizer bytes, state
    bytes (tensors of at least one dimension) and their ratio."""
    model = sum(nbytes(t) for t in sd_model.values())
    params = sum(nbytes(t) for k, t in sd_model.items()
                 if t.is_floating_point() and not k.endswith(BN_BUFFERS))
    opt = sum(nbytes(t) for t in tensors(sd_opt)) if sd_opt else 0
    state = sum(nbytes(t) for t in tensors(sd_opt["state"]) if t.dim() > 0) \
        if sd_opt else 0
    return model, params, opt, state, (state / params if sd_opt else None)


def components(doc, kind):
    return [c for c in doc["sections"]["memory"]["components"]
            if c["kind"] == kind]


def one(doc, kind):
    cs = components(doc, kind)
    assert_eq(len(cs), 1, "number of %s components" % kind)
    return cs[0]


def counter(doc, name):
    for c in doc["resume"]["counters"]:
        if c["name"] == name:
            return c
    raise AssertionError("no counter %r in %r" % (name, doc["resume"]))


def check_file(name, verdict, model_key, opt_key, opt_type, rc_want):
    """Doctor JSON of a generated file against torch.load of it. opt_key is
    a top-level key, or "a.0" for the first item of list a."""
    path = gen(name)
    rc, doc = run_json("doctor", "--json", path)
    assert_eq(rc, rc_want, name + " exit code")
    assert_eq(doc["resume"]["verdict"], verdict, name + " verdict")
    assert_eq(doc["sections"]["resume"], doc["resume"],
              name + " resume also under sections")
    ck = torch.load(path)
    sd_opt = None
    if opt_key:
        sd_opt = ck[opt_key.split(".")[0]]
        if "." in opt_key:
            sd_opt = sd_opt[int(opt_key.split(".")[1])]
    model_b, param_b, opt_b, state_b, ratio = expected(ck[model_key], sd_opt)
    model = one(doc, "model")
    assert_eq(model["name"], model_key, name + " model at")
    assert_eq(model["bytes"], model_b, name + " model bytes")
    assert_eq(model["parameter_bytes"], param_b, name + " parameter bytes")
    assert_eq(model["elements"], sum(t.numel() for t in ck[model_key].values()),
              name + " model elements")
    mem = doc["sections"]["memory"]
    if sd_opt is None:
        assert_eq(components(doc, "optimizer"), [], name + " no optimizer")
        assert_eq(mem["optimizer_to_model_ratio"], None, name + " ratio")
        return doc
    opt = one(doc, "optimizer")
    assert_eq(opt["name"], opt_key, name + " optimizer at")
    assert_eq(opt["type"], opt_type, name + " optimizer type")
    assert_eq(opt["bytes"], opt_b, name + " optimizer bytes")
    assert_eq(opt["state_bytes"], state_b, name + " state bytes")
    assert_eq(opt["elements"], sum(t.numel() for t in tensors(sd_opt)),
              name + " optimizer elements")
    close(mem["optimizer_to_model_ratio"], ratio, name + " ratio")
    groups = sd_opt["param_groups"]
    assert_eq(len(opt["param_groups"]), len(groups), name + " groups")
    for got, want in zip(opt["param_groups"], groups):
        assert_eq(got["parameters"], len(want["params"]), name + " group size")
        hyper = got["hyperparameters"]
        assert_eq(set(hyper), set(want) - {"params"}, name + " hyper keys")
        for k, v in want.items():
            if k == "params":
                continue
            want_v = list(v) if isinstance(v, tuple) else v
            assert_eq(hyper[k], want_v, "%s hyperparameter %s" % (name, k))
    return doc


# ------------------------------------------------------------------ cases

def test_adam_full():
    doc = check_file("adam_full.pt", "full-resume", "model", "optimizer",
                     "Adam/AdamW", 0)
    close(doc["sections"]["memory"]["optimizer_to_model_ratio"], 2.0,
          "Adam fp32 ratio")
    assert doc["summary"].startswith("HEALTHY: "), doc["summary"]
    assert doc["summary"].endswith("; resume: full-resume"), doc["summary"]
    assert_eq(doc["resume"]["warnings"], [], "warnings")
    assert_eq(counter(doc, "epoch")["type"], "int", "epoch type")
    assert_eq(counter(doc, "epoch")["value"], 3, "epoch value")
    assert_eq(counter(doc, "global_step")["type"], "0-dim I64 tensor",
              "global_step type")
    assert_eq(counter(doc, "global_step")["value"], 3, "global_step value")
    step = counter(doc, "optimizer.state.0.step")
    assert_eq(step["type"], "0-dim F32 tensor", "optimizer step type")
    assert_eq(step["value"], 3.0, "optimizer step value")
    kinds = sorted((c["kind"], c["type"]) for c in
                   doc["sections"]["memory"]["components"]
                   if c["kind"] in ("rng", "scaler", "scheduler"))
    assert_eq(kinds, [("rng", "numpy"), ("rng", "python"),
                      ("rng", "torch-cpu"), ("scaler", ""),
                      ("scheduler", "StepLR")], "training state")
    by_kind = doc["sections"]["memory"]["by_kind"]
    ck = torch.load(gen("adam_full.pt"))
    assert_eq(by_kind["rng"]["bytes"],
              sum(nbytes(t) for t in tensors(ck["rng"])), "rng bytes")


def test_adam_or_adamw_as_param_groups_say():
    """torch >= 2.6 writes decoupled_weight_decay in every param group
    (torch.optim.AdamW is Adam with it True): the optimizer is named by it,
    not "Adam/AdamW" (what a torch 1.13 file, without the key, still
    gets); amsgrad is kept."""
    ck = torch.load(gen("adam_full.pt"))
    tmp = tempfile.mkdtemp(prefix="ckpt-adamw-")
    for flag, ams, want in ((True, False, "AdamW"), (False, False, "Adam"),
                            (True, True, "AdamW (amsgrad)"), (None, False, "Adam/AdamW")):
        opt = {"state": {k: dict(v) for k, v in ck["optimizer"]["state"].items()},
               "param_groups": [dict(g) for g in ck["optimizer"]["param_groups"]]}
        for g in opt["param_groups"]:
            if flag is not None:
                g["decoupled_weight_decay"] = flag
        if ams:
            for st in opt["state"].values():
                st["max_exp_avg_sq"] = st["exp_avg_sq"].clone()
        path = os.path.join(tmp, "opt.pt")
        torch.save({"model": ck["model"], "optimizer": opt}, path)
        rc, doc = run_json("doctor", "--json", path)
        assert_eq(one(doc, "optimizer")["type"], want, "decoupled_weight_decay=%s" % flag)
    shutil.rmtree(tmp)


def test_adamw_amsgrad():
    doc = check_file("adamw_amsgrad.pt", "full-resume", "model", "optimizer",
                     "Adam/AdamW (amsgrad)", 0)
    # exp_avg, exp_avg_sq, max_exp_avg_sq per parameter; BatchNorm's
    # running statistics are not parameters
    close(doc["sections"]["memory"]["optimizer_to_model_ratio"], 3.0,
          "amsgrad ratio")
    # fp32 tensors only: no AMP, so no grad scaler to miss
    warnings = " ".join(doc["resume"]["warnings"])
    assert "RNG" in warnings and "grad scaler" not in warnings, warnings


def test_half_without_scaler():
    doc = check_file("half_adam.pt", "full-resume", "model", "optimizer",
                     "Adam/AdamW", 0)
    assert_eq(doc["resume"]["warnings"],
              ["no AMP grad scaler state (fp16 mixed-precision training needs "
               "one to resume its loss scale)"], "warnings")


def test_sgd_momentum():
    doc = check_file("sgd_momentum.pt", "full-resume", "model_state_dict",
                     "optimizer_state_dict", "SGD (momentum)", 0)
    close(doc["sections"]["memory"]["optimizer_to_model_ratio"], 1.0,
          "momentum ratio")


def test_sgd_plain():
    doc = check_file("sgd_plain.pt", "full-resume", "model", "optimizer",
                     "SGD", 0)
    close(doc["sections"]["memory"]["optimizer_to_model_ratio"], 0.0,
          "stateless ratio")
    said = ("optimizer SGD at 'optimizer': without momentum it keeps no "
            "per-parameter state; param_groups (hyperparameters, 4 parameters) "
            "is all a resume needs")
    assert_eq(doc["resume"]["reasons"][1], said, "stateless reason")
    # torch 2.x writes no entries at all ("state": {}), 1.13 entries of None
    ck = torch.load(gen("sgd_plain.pt"))
    ck["optimizer"]["state"] = {}
    path = os.path.join(TMP, "sgd_plain_2x.pt")
    torch.save(ck, path)
    rc, doc = run_json("doctor", "--json", path)
    assert_eq((rc, doc["resume"]["verdict"]), (0, "full-resume"), "2.x stateless")
    assert_eq(doc["resume"]["reasons"][1], said, "2.x stateless reason")


def test_adagrad():
    check_file("adagrad.pt", "full-resume", "model", "optimizer", "Adagrad", 0)


def test_ratio_pairs_what_param_groups_list():
    """The optimizer-to-model ratio is per byte of the parameters the
    optimizer updates, as param_groups pair them with the model: a real
    BatchNorm model trained with Adam, with a frozen layer, a float buffer
    that is no BatchNorm statistic, and an EMA copy of the model beside it,
    is 2.00 like Adam always is (it was 1.03 with the frozen layer, 0.52
    with the EMA copy too: it looked partial)."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Linear(3, 8)
            self.bn = torch.nn.BatchNorm1d(8)
            self.head = torch.nn.Linear(8, 2)
            self.register_buffer("scale", torch.ones(8))

        def forward(self, x):
            return self.head(self.bn(self.stem(x)) * self.scale)

    torch.manual_seed(0)
    net, ema = Net(), Net()
    net.stem.requires_grad_(False)
    trained = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trained)
    for _ in range(2):
        opt.zero_grad()
        net(torch.randn(4, 3)).sum().backward()
        opt.step()
    path = os.path.join(TMP, "frozen_ema_adam.pt")
    torch.save({"model": net.state_dict(), "model_ema": ema.state_dict(),
                "optimizer": opt.state_dict(), "epoch": 2}, path)
    rc, doc = run_json("doctor", "--json", path)
    mem = doc["sections"]["memory"]
    assert_eq((rc, doc["resume"]["verdict"]), (0, "full-resume"), "verdict")
    assert_eq(mem["optimized_parameter_bytes"], sum(nbytes(p) for p in trained),
              "bytes of the parameters Adam updates")
    assert_eq(mem["model_parameter_bytes"],
              2 * sum(nbytes(t) for k, t in net.state_dict().items()
                      if t.is_floating_point() and not k.endswith(BN_BUFFERS)),
              "model parameter bytes (every float tensor but BatchNorm statistics)")
    close(mem["optimizer_to_model_ratio"], 2.0, "Adam ratio")
    rc, out, _ = run("doctor", path)
    assert "optimizer-to-model ratio: 2.00 (optimizer state tensors of at least one " \
           "dimension, %d bytes, per byte of the model parameters the optimizer updates, " \
           "%d bytes)" % (2 * mem["optimized_parameter_bytes"],
                          mem["optimized_parameter_bytes"]) in out, out


def test_rmsprop():
    check_file("rmsprop.pt", "full-resume", "model", "optimizer", "RMSprop", 0)


def test_no_optimizer():
    doc = check_file("no_optimizer.pt", "warm-start-only", "model", None,
                     None, 1)
    assert_eq(doc["verdict"], "attention", "doctor verdict")
    assert "warm-start-only" in doc["summary"], doc["summary"]
    assert "no optimizer state" in doc["resume"]["reasons"][0], doc["resume"]
    rc, out, _ = run("doctor", gen("no_optimizer.pt"))
    assert_eq(rc, 1, "text exit code")
    assert out.startswith("ATTENTION: "), out


def test_missing_state():
    doc = check_file("missing_state.pt", "partial", "model", "optimizer",
                     "Adam/AdamW", 1)
    opt = one(doc, "optimizer")
    assert_eq((opt["parameters"], opt["parameters_with_state"]), (4, 3),
              "parameters with state")
    assert any("has no optimizer state: 2 (model.fc2.weight)" in r
               for r in doc["resume"]["reasons"]), doc["resume"]


def test_mismatch():
    doc = check_file("mismatch.pt", "partial", "model", "optimizer",
                     "Adam/AdamW", 1)
    assert any("parameter 1 (model.fc1.bias): state shape [9], the model's "
               "parameter has [8]" in r for r in doc["resume"]["reasons"]), \
        doc["resume"]


def test_weights_only():
    path = gen("weights_only.pt")
    rc, doc = run_json("doctor", "--json", path)
    assert_eq(rc, 0, "exit code")
    assert_eq(doc["resume"]["verdict"], "weights-only", "verdict")
    assert "weights only" in doc["summary"], doc["summary"]
    model = one(doc, "model")
    sd = torch.load(path)
    assert_eq(model["name"], "", "the root is the state dict")
    assert_eq(model["bytes"], sum(nbytes(t) for t in sd.values()), "bytes")
    # a deployment file: missing training state is no news
    assert_eq(doc["resume"]["warnings"], [], "no warnings for weights only")
    rc, out, _ = run("doctor", path)
    assert "warning:" not in out, out
    rc, doc = run_json("doctor", "--json", gen("weights_epoch.pt"))
    assert_eq((rc, doc["resume"]["verdict"]), (0, "weights-only"),
              "with an epoch counter")
    assert_eq(counter(doc, "epoch")["value"], 3, "epoch")
    # the counter is listed once, with its value (it was also a reason,
    # "counters: counter (int) at 'epoch'", printed just above it)
    assert not any("counter" in r for r in doc["resume"]["reasons"]), doc["resume"]
    rc, out, _ = run("doctor", gen("weights_epoch.pt"))
    assert_eq([l.strip() for l in out.splitlines() if "counter" in l],
              ["counters: epoch = 3 (int)"], "one counters line")


def test_lightning():
    doc = check_file("lightning.ckpt", "full-resume", "state_dict",
                     "optimizer_states.0", "Adam/AdamW", 0)
    close(doc["sections"]["memory"]["optimizer_to_model_ratio"], 2.0, "ratio")
    assert_eq(one(doc, "scheduler")["name"], "lr_schedulers.0", "scheduler")
    assert_eq(one(doc, "scaler")["name"], "native_amp_scaling_state",
              "scaler")
    assert_eq(one(doc, "data")["name"], "loops", "loop position")
    meta = doc["sections"]["metadata"]
    assert_eq([(e["key"], e["value"]) for e in meta["library_versions"]],
              [("pytorch-lightning_version", "1.9.0")], "versions")
    assert_eq([e["key"] for e in meta["architecture_config"]],
              ["hyper_parameters"], "hyper_parameters")
    assert_eq(meta["architecture_config"][0]["value"],
              {"hidden": 8, "lr": 0.01, "precision": "16-mixed"},
              "hyper_parameters value")
    assert_eq([(e["key"], e["value"]) for e in meta["dtype_intent"]],
              [("hyper_parameters.precision", "16-mixed")], "precision")
    assert_eq(meta["not_carried"], ["parallel_layout"], "not carried")
    assert_eq(counter(doc, "global_step")["value"], 12, "global_step")


def test_hf_trainer_dir():
    d = gen("hf_trainer")
    rc, doc = run_json("doctor", "--json", d)
    # Trainer pickles its TrainingArguments object into training_args.bin:
    # loading that file runs code, so the safety section needs attention,
    # exit 1 as `ckpt scan` of the folder; the verdict line names the file,
    # what it is, and that the rest is safe (it said only "ATTENTION:
    # unsafe (transformers.training_args.TrainingArguments)")
    assert_eq(rc, 1, "exit code")
    assert_eq(run("scan", "-q", d)[0], 1, "scan's exit code")
    assert_eq(doc["summary"],
              "ATTENTION: unsafe: training_args.bin (the Trainer's pickled TrainingArguments, "
              "which no resume loads; the other 5 files, the weights among them, are safe)",
              "verdict line")
    files = {f["file"]: f for f in doc["sections"]["safety"]["files"]}
    safety = {k: f["verdict"] for k, f in files.items()}
    assert_eq(safety["training_args.bin"], "unsafe", "training_args.bin")
    assert_eq(safety["model.safetensors"], "safe", "weights")
    assert_eq(safety["optimizer.pt"], "safe", "optimizer")
    about = files["training_args.bin"]["about"]
    assert about.startswith("the Trainer's TrainingArguments, pickled: ") and \
        "the Trainer never loads it" in about, about
    assert "about" not in files["optimizer.pt"], files["optimizer.pt"]
    rc, out, _ = run("doctor", d)
    assert "    what it is: the Trainer's TrainingArguments, pickled" in out, out
    # the name is no pass: a training_args.bin that calls os.system is
    # named with its global, and the other files are not called safe
    bad = os.path.join(tempfile.mkdtemp(prefix="ckpt-trainer-"), "checkpoint-4")
    shutil.copytree(d, bad)
    with open(os.path.join(bad, "training_args.bin"), "wb") as fh:
        fh.write(b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03.")
    rc, bad_doc = run_json("doctor", "--json", bad)
    assert_eq((rc, bad_doc["summary"]), (1, "ATTENTION: unsafe: training_args.bin (os.system)"),
              "a dangerous training_args.bin")
    assert "about" not in {f["file"]: f for f in bad_doc["sections"]["safety"]["files"]}[
        "training_args.bin"], "no about"
    shutil.rmtree(os.path.dirname(bad))
    assert_eq(doc["directory"], d, "directory")
    assert_eq(doc["file"], os.path.join(d, "model.safetensors"),
              "main weights file")
    assert_eq(doc["format"], "safetensors", "format of the weights")
    assert_eq(doc["resume"]["verdict"], "full-resume", "verdict")
    assert_eq(doc["resume"]["warnings"], [], "warnings")
    opt_sd = torch.load(os.path.join(d, "optimizer.pt"))
    state = sum(nbytes(t) for t in tensors(opt_sd["state"]) if t.dim() > 0)
    opt = one(doc, "optimizer")
    assert_eq((opt["file"], opt["name"]), ("optimizer.pt", ""), "optimizer")
    assert_eq(opt["state_bytes"], state, "state bytes")
    assert_eq(len(opt["param_groups"]), 2, "decay / no-decay groups")
    assert_eq([g["hyperparameters"]["weight_decay"]
               for g in opt["param_groups"]], [0.01, 0.0], "weight decay")
    close(doc["sections"]["memory"]["optimizer_to_model_ratio"], 2.0, "ratio")
    assert_eq(one(doc, "scheduler")["type"], "LambdaLR", "scheduler")
    assert_eq(one(doc, "scaler")["file"], "scaler.pt", "scaler")
    assert_eq(sorted(c["type"] for c in components(doc, "rng")),
              ["numpy", "python", "torch-cpu"], "rng states")
    step = counter(doc, "global_step")
    assert_eq((step["file"], step["type"], step["value"]),
              ("trainer_state.json", "int", 4), "global_step")
    mem = doc["sections"]["memory"]
    assert_eq([f["name"] for f in mem["files"]],
              ["model.safetensors", "optimizer.pt", "rng_state.pth",
               "scaler.pt", "scheduler.pt", "training_args.bin"], "files")
    assert_eq(mem["ignored"], ["vocab.txt"], "ignored")
    others = doc["sections"]["other_files"]
    assert_eq([(f["name"], f["ok"]) for f in others],
              [("optimizer.pt", True), ("rng_state.pth", True),
               ("scaler.pt", True), ("scheduler.pt", True),
               ("training_args.bin", True)], "other files verified")
    meta = doc["sections"]["metadata"]
    assert_eq([(e["file"], e["key"], e["value"])
               for e in meta["architecture_config"]],
              [("config.json", "architectures", '["MLP"]'),
               ("config.json", "model_type", "mlp")], "architecture")
    assert ("config.json", "torch_dtype", "float32") in [
        (e["file"], e["key"], e["value"]) for e in meta["dtype_intent"]], meta
    assert_eq([(e["key"], e["value"]) for e in meta["library_versions"]],
              [("transformers_version", "4.30.0")], "versions")
    # inspect --summary on the directory says the same
    rc, summ = run_json("inspect", "--summary", "--json", d)
    assert_eq(rc, 0, "inspect exit code")
    assert_eq(summ["format"], "directory", "inspect format")
    assert_eq(summ["resume"], doc["resume"], "same resume verdict")


def test_hf_tokenizer_files():
    """A Hub model folder's tokenizer files are no metadata of the weights:
    tokenizer.json's "version" is its file format ("1.0" in every tokenizers
    file), which doctor listed as a library version of the checkpoint."""
    d = tempfile.mkdtemp(prefix="ckpt-hub-")
    torch.save({"fc.weight": torch.ones(2, 2)}, os.path.join(d, "pytorch_model.bin"))
    files = {"config.json": {"model_type": "mlp", "transformers_version": "4.30.0"},
             "tokenizer.json": {"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}},
             "tokenizer_config.json": {"tokenizer_class": "GPT2Tokenizer",
                                       "model_max_length": 1024},
             "special_tokens_map.json": {"eos_token": "</s>"}}
    for name, doc in files.items():
        with open(os.path.join(d, name), "w") as fh:
            json.dump(doc, fh)
    rc, doc = run_json("doctor", "--json", d)
    assert_eq(rc, 0, "exit code")
    meta = doc["sections"]["metadata"]
    assert_eq([(e["file"], e["key"], e["value"]) for e in meta["library_versions"]],
              [("config.json", "transformers_version", "4.30.0")], "versions")
    assert_eq([(e["file"], e["key"]) for e in meta["architecture_config"]],
              [("config.json", "model_type")], "architecture")
    assert_eq(doc["sections"]["memory"]["ignored"],
              ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"],
              "tokenizer files listed, not read")
    shutil.rmtree(d)


def test_hf_without_optimizer():
    rc, doc = run_json("doctor", "--json", gen("hf_no_optimizer"))
    assert_eq(rc, 1, "exit code")
    assert_eq(doc["resume"]["verdict"], "warm-start-only", "verdict")


def test_hf_corrupt_optimizer():
    d = os.path.join(TMP, "hf_corrupt")
    shutil.copytree(gen("hf_trainer"), d)
    path = os.path.join(d, "optimizer.pt")
    with zipfile.ZipFile(path) as z:
        info = [i for i in z.infolist() if i.filename.endswith("/data/0")][0]
    with open(path, "r+b") as fh:
        fh.seek(info.header_offset + 26)
        name_len = int.from_bytes(fh.read(2), "little")
        extra_len = int.from_bytes(fh.read(2), "little")
        off = info.header_offset + 30 + name_len + extra_len
        fh.seek(off)
        b = fh.read(1)
        fh.seek(off)
        fh.write(bytes([b[0] ^ 0xFF]))
    rc, doc = run_json("doctor", "--json", d)
    assert_eq(rc, 1, "exit code")
    bad = [f for f in doc["sections"]["other_files"] if not f["ok"]]
    assert_eq([f["name"] for f in bad], ["optimizer.pt"], "corrupt file")
    assert "optimizer.pt corrupt" in doc["summary"], doc["summary"]


def test_converted_to_safetensors():
    """ckpt convert keeps the tree in __metadata__ (ckpt.structure): the
    safetensors copy is still a full training checkpoint, and --config and
    --meta are shown as metadata."""
    cfg = os.path.join(TMP, "config.json")
    with open(cfg, "w") as fh:
        json.dump({"model_type": "mlp", "torch_dtype": "bfloat16"}, fh)
    out = os.path.join(TMP, "adam_full.safetensors")
    rc, _, err = run("convert", gen("adam_full.pt"), out, "--config", cfg,
                     "--meta", "torch_version=1.13.0")
    assert_eq(rc, 0, "convert exit code (%s)" % err)
    rc, doc = run_json("doctor", "--json", out)
    assert_eq(rc, 0, "exit code")
    assert_eq(doc["resume"]["verdict"], "full-resume", "verdict")
    close(doc["sections"]["memory"]["optimizer_to_model_ratio"], 2.0, "ratio")
    assert_eq(counter(doc, "global_step")["type"], "0-dim I64 tensor",
              "counter type survives")
    meta = doc["sections"]["metadata"]
    assert_eq([(e["key"], e["value"]) for e in meta["dtype_intent"]],
              [("config.torch_dtype", "bfloat16")], "dtype intent")
    assert_eq([e["key"] for e in meta["architecture_config"]],
              ["config", "config.model_type"], "architecture")
    assert_eq([(e["key"], e["value"]) for e in meta["library_versions"]],
              [("torch_version", "1.13.0")], "versions")
    assert not any(e["key"].startswith("ckpt.") for e in meta["other"]), \
        meta["other"]


def test_examples_train():
    path = os.path.join(SRC, "examples", "train.pt")
    rc, doc = run_json("doctor", "--json", path)
    assert_eq(rc, 0, "exit code")
    assert_eq(doc["resume"]["verdict"], "full-resume", "verdict")
    close(doc["sections"]["memory"]["optimizer_to_model_ratio"], 2.0, "ratio")


@corpus
def test_corpus_burn_checkpoint():
    """SGD momentum state for one of four parameters, no param_groups."""
    path = os.path.join(CORPUS, "torch", "burn", "checkpoint.pt")
    rc, doc = run_json("doctor", "--json", path)
    assert_eq(rc, 1, "exit code")
    assert_eq(doc["resume"]["verdict"], "partial", "verdict")
    opt = one(doc, "optimizer")
    assert_eq((opt["type"], opt["param_groups"]), ("SGD (momentum)", None),
              "optimizer")
    ck = torch.load(path)
    model_b, param_b, _, state_b, _ = expected(
        ck["model_state_dict"], None)
    state_b = sum(nbytes(t) for t in tensors(ck["optimizer_state_dict"]))
    assert_eq(opt["state_bytes"], state_b, "momentum bytes")
    close(doc["sections"]["memory"]["optimizer_to_model_ratio"],
          state_b / param_b, "ratio")


def test_text_reports():
    rc, out, _ = run("doctor", gen("adam_full.pt"))
    assert_eq(rc, 0, "exit code")
    lines = out.splitlines()
    assert lines[0].startswith("HEALTHY: "), lines[0]
    for title in ("resume readiness", "memory", "metadata"):
        assert title in lines, "section " + title
    assert "\033" not in out, "no colour when stdout is not a terminal"
    assert "  full-resume" in lines, out
    rc, out, _ = run("inspect", "--summary", gen("adam_full.pt"))
    assert_eq(rc, 0, "inspect exit code")
    assert "optimizer-to-model ratio: 2.00" in out, out
    assert "betas=(0.9, 0.999)" in out, out
    assert "global_step = 3 (0-dim I64 tensor)" in out, out
    rc, out, err = run("inspect", "--summary", "--hash", "sha256",
                       gen("adam_full.pt"))
    assert_eq(rc, 2, "--summary with --hash is a usage error")


def test_timings():
    env = dict(os.environ, CKPT_DOCTOR_TIMINGS="1")
    rc, out, err = run("doctor", gen("adam_full.pt"), env=env)
    assert_eq(rc, 0, "exit code")
    names = [l.split()[2] for l in err.splitlines()
             if l.startswith("ckpt doctor: ")]
    for step in ("open", "verify", "training", "resume", "memory"):
        assert step in names, (step, err)


def main():
    subprocess.run(["/usr/bin/python3", os.path.join(HERE, "gen_training.py"),
                    GEN], check=True, cwd=TMP, capture_output=True)
    try:
        return run_cases(globals(), __file__)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
