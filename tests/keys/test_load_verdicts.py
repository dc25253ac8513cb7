"""`ckpt match`, `ckpt rename --auto` and `ckpt doctor` against what the
real loaders do with the same files, under torch 2.13 (.venv/bin/python)
and 1.13 (Debian's python3): the wrong answers a new user found (a rename
of some keys called incomplete, a weight at the top level ignored, ties
whose values one name overwrites, ckpt's own safetensors seen through its
aliases, messages). gen_load_verdicts.py writes the files and torch's
(and safetensors') verdicts.

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
TALLY = suite.Tally()


def check(ok, what, detail=""):
    TALLY.report(ok, what, [detail] if detail else ())


def run(*args):
    p = subprocess.run([BIN] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def match(ckpt, spec, *opts):
    rc, out, err = run("match", ckpt, "--expect", spec, "--json", *opts)
    return rc, (json.loads(out) if rc in (0, 1) else {"stderr": err})


def one_oracle(python, tmp):
    ok, said = suite.generate(python, os.path.join(HERE, "gen_load_verdicts.py"), tmp)
    check(ok, "generate with %s" % python, said)
    if not ok:
        return
    with open(os.path.join(tmp, "verdicts.json")) as f:
        v = json.load(f)
    tag = "torch %s: " % v["torch"]
    p = lambda name: os.path.join(tmp, name)  # noqa: E731

    # F1: the keys a rename leaves keep their names: complete, as torch loads
    for name, spec, n, desc in (("renamed.pt", "net.json", 8, "replace 'blocks.' with 'layers.'"),
                                ("tiny_renamed.pt", "tiny.json", 16,
                                 "replace 'blocks.' with 'layers.'")):
        key = name[:-3]
        check(v[key] == [[], []], tag + name + ": torch loads the renamed keys", v[key])
        rc, rep = match(p(name), p(spec), "--normalize")
        check(rc == 0 and rep["complete"] and rep["matched"] == n and
              rep["rewrite"] == {"description": desc, "matches": n, "applied": True},
              tag + name + ": match --normalize applies the rename", (rc, rep))
        out = p(name + ".fixed.pt")
        rc, _, err = run("rename", p(name), out, "--auto", p(spec))
        rc2, rep = match(out, p(spec))
        check(rc == 0 and rc2 == 0 and rep["matched"] == n,
              tag + name + ": rename --auto writes a file that matches", (rc, err, rep))
    check(v["tiny_under_layers"] == 12, tag + "TinyLM: 12 of 16 keys under layers.",
          v["tiny_under_layers"])

    # F2: a tensor at the top level is an unexpected key, never ignored
    check(v["causal"] == [[], ["lm_head.weight"]], tag + "causal.pt: torch's verdict", v["causal"])
    rc, rep = match(p("causal.pt"), p("base.json"), "--normalize")
    check(rc == 1 and not rep["complete"] and rep["ignored_top_level"] == [] and
          rep["rewrite"]["description"] == "strip 'model.'" and not rep["rewrite"]["applied"],
          tag + "causal.pt: lm_head.weight is not set aside", rep)
    check(v["train_rng"] == [[], []], tag + "train_rng.pt: torch loads its model entry",
          v["train_rng"])
    rc, rep = match(p("train_rng.pt"), p("net.json"), "--normalize")
    check(rc == 0 and rep["ignored_top_level"] == ["optimizer", "rng", "step"],
          tag + "train_rng.pt: the rng byte tensor is training state, set aside", rep)

    # F7: an untied checkpoint into a tied model: loads, head.weight wins
    check(v["untied"] == [[], []] and v["untied_head_wins"],
          tag + "untied.pt: torch loads it, head.weight's values win", v)
    rc, rep = match(p("untied.pt"), p("net.json"))
    check(rc == 0 and rep.get("tie_note") ==
          "embed.weight, head.weight are one parameter of the model; the checkpoint holds "
          "them as 2 tensors whose values differ: loading copies each into it, the last, "
          "head.weight, wins", tag + "untied.pt: the overwrite is named", rep)
    rc, rep = match(p("untied.pt"), p("tied.pt"))
    check(rc == 0 and rep.get("tie_note") ==
          "embed.weight, head.weight are one parameter of the model; the checkpoint holds "
          "them as 2 tensors whose values differ: loading copies each into it, the last in "
          "the model's module order wins", tag + "untied.pt into tied.pt (one storage): named",
          rep)
    rc, rep = match(p("tied.pt"), p("tied.pt"))
    check(rc == 0 and rep.get("tie_note") is None, tag + "tied.pt into itself: no tie note", rep)
    rc, rep = match(p("renamed.pt"), p("net.json"), "--normalize")
    check(rep.get("tie_note") is None, tag + "renamed.pt (one tensor per tie): no tie note", rep)

    # F10: ckpt's safetensors as safetensors' readers see it
    st = v["safetensors"]
    if st is not None:
        check(st["untied"] == ["error", 1] and st["tied"] == [[], []] and
              "head.weight" not in st["load_file_keys"],
              tag + "ck_tied.safetensors: load_model misses head.weight untied", st)
    rc, rep = match(p("ck_tied.safetensors"), p("untied.json"))
    check(rc == 1 and rep["missing_keys"] == ["head.weight"] and rep["matched"] == 7,
          tag + "ck_tied.safetensors: head.weight missing in an untied model", rep)
    rc, out, _ = run("match", p("ck_tied.safetensors"), "--expect", p("untied.json"))
    check(out.count("head.weight") == 1 and "ckpt.load restores" in out and
          "tied keys" not in out, tag + "ck_tied.safetensors: the declared tie listed once, "
          "the loader named", out)
    rc, rep = match(p("ck_tied.safetensors"), p("net.json"))
    check(rc == 0 and rep["tied"] == [{"name": "head.weight", "tied_to": "embed.weight"}],
          tag + "ck_tied.safetensors: complete in the tied model", rep)

    # dtypes alone differ: said so, and that torch casts
    check(v["bf16"] == [[], []], tag + "bf16.pt: torch loads it (casts)", v["bf16"])
    rc, out, _ = run("match", p("bf16.pt"), "--expect", p("net.json"))
    check(rc == 1 and out.splitlines()[0] ==
          "MISMATCH: names and shapes match; only dtypes differ: 0 of 8 expected keys have "
          "the model's dtype, 8 another (torch's load_state_dict casts them as it copies)",
          tag + "bf16.pt: the headline", out)

    # F9: the rewrite pairs every key; the new head's keys stay missing
    check(v["ddp"] == [["cls.bias", "cls.weight"], []], tag + "ddp.pt: torch's verdict",
          v["ddp"])
    rc, rep = match(p("ddp.pt"), p("withcls.json"), "--normalize")
    check(rc == 1 and rep.get("rewrite_note") ==
          "it pairs every checkpoint key; 2 model keys would stay missing: cls.weight, "
          "cls.bias (with them allowed missing, or with strict=False, every checkpoint key "
          "loads)", tag + "ddp.pt: the keys left missing are named", rep)
    rc, rep = match(p("ddp.pt"), p("withcls.json"), "--normalize", "--allow-missing", "cls.*")
    check(rc == 0 and rep["rewrite"]["applied"], tag + "ddp.pt: allowed, it applies", rep)

    # doctor counts a tied tensor once
    t = v["tiny_train"]
    rc, out, _ = run("doctor", p("tiny_train.pt"))
    want = "model weights at 'model': %d tensors, %d bytes (%d names: %d tied to another)" % (
        t["tensors"], t["bytes"], t["names"], t["names"] - t["tensors"])
    check(want in out and t["tensors"] == t["names"] - 1, tag + "tiny_train.pt: doctor counts",
          "%s\n%s" % (want, out))


def main():
    for _, python in suite.oracles():
        with tempfile.TemporaryDirectory() as tmp:
            one_oracle(python, tmp)
    sys.exit(TALLY.end())


if __name__ == "__main__":
    main()
