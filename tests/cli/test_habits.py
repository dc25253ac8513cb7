"""CLI expectation tests for the habits every command shares (issue 16):
--json, -q/--quiet and -v/--verbose (store's subcommands too), --version,
--exclude for diff and convert, natural key order in human listings,
progress on stderr only when it is a terminal.

Environment (set by ctest): CKPT_BIN (the built ckpt binary), CKPT_SRC
(repository root). Standard library only; reads only examples/ and files it
writes. Prints one line per case and ends with "N passed, N failed"; exits 1
on failure."""
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from suite import run_cases  # noqa: E402

BIN = os.environ.get("CKPT_BIN", "ckpt")
SRC = os.environ.get("CKPT_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
TRAIN_PT = os.path.join(SRC, "examples", "train.pt")
TRAIN_ST = os.path.join(SRC, "examples", "train.safetensors")
TMP = tempfile.mkdtemp(prefix="ckpt-habits-test-")


def run(*args):
    """Runs ckpt with stdout and stderr on pipes; (exit code, out, err)."""
    p = subprocess.run([BIN] + list(args), capture_output=True, timeout=120)
    return (p.returncode, p.stdout.decode("utf-8", "replace"),
            p.stderr.decode("utf-8", "replace"))


def run_stderr_tty(*args):
    """Runs ckpt with stderr on a terminal (stdout on a pipe); (exit code,
    what the terminal received)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([BIN] + list(args), stdout=subprocess.PIPE,
                         stderr=slave)
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        got += chunk
    p.communicate(timeout=120)
    os.close(master)
    return p.returncode, got.decode("utf-8", "replace")


def tmp_file(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def assert_eq(got, want, what):
    assert got == want, "%s: got %r, want %r" % (what, got, want)


# ------------------------------------------------------------------ verify

def test_verify_json_one_file():
    rc, out, err = run("verify", "--json", TRAIN_PT)
    assert_eq((rc, err), (0, ""), "exit code and stderr")
    assert out.endswith("}\n"), out
    assert_eq(json.loads(out), {
        "file": TRAIN_PT, "format": "torch-zip", "ok": True, "tensors": 16,
        "bytes": 9815, "members": 18, "shards": 0, "checksums": "crc32", "snapshot": None,
        "variant": None}, "object")


def test_verify_json_several_files_and_errors():
    cut = open(TRAIN_ST, "rb").read()
    cut = tmp_file("cut.safetensors", cut[:-4])
    missing = os.path.join(TMP, "nope.pt")
    rc, out, _ = run("verify", "--json", TRAIN_ST, cut, missing)
    assert_eq(rc, 2, "exit code: I/O error wins")
    got = json.loads(out)
    assert_eq([o["file"] for o in got], [TRAIN_ST, cut, missing], "files")
    assert_eq(got[0]["ok"], True, "first ok")
    assert_eq(got[0]["checksums"], "none", "plain safetensors checksums")
    assert_eq(got[0]["tensors"], 4, "tensors")
    assert "error" not in got[0], got[0]
    assert_eq(got[1]["ok"], False, "cut ok")
    assert_eq(got[1]["format"], None, "cut format: it could not be opened")
    assert_eq(got[1]["error"]["code"], "CKPT_E_TRUNCATED", "cut code")
    assert got[1]["error"]["message"].startswith("truncated: tensor"), got[1]
    # a failed check says what failed, not what it had checked so far
    for o in got[1:]:
        assert not {"tensors", "bytes", "members"} & set(o), o
    assert_eq(got[1]["error"]["file"], cut, "cut: the file blamed")
    assert_eq(got[2]["format"], None, "missing format")
    assert_eq(got[2]["error"]["code"], "CKPT_E_IO", "missing code")
    assert_eq((got[2]["error"]["member"], got[2]["error"]["offset"]),
              (None, None), "missing location")


def test_doctor_json_error():
    """doctor --json on a path it cannot examine writes the error object
    scan --json writes (stdout was empty: a pipeline's JSON parse failed)."""
    missing = os.path.join(TMP, "nope.pt")
    rc, out, err = run("doctor", "--json", missing)
    assert_eq(rc, 2, "exit code")
    assert_eq(json.loads(out), {"file": missing, "verdict": None, "error": {
        "code": "CKPT_E_IO", "message": "cannot open: No such file or directory",
        "file": missing, "member": None, "offset": None}}, "doctor --json")
    assert missing in err, err
    rc, scan_out, _ = run("scan", "--json", missing)
    assert_eq(json.loads(scan_out), json.loads(out), "same as scan --json")


def test_verify_quiet_and_verbose():
    cut = tmp_file("cut2.safetensors", open(TRAIN_ST, "rb").read()[:-4])
    rc, out, _ = run("verify", "-q", TRAIN_PT, TRAIN_ST)
    assert_eq((rc, out), (0, ""), "quiet, all OK: nothing")
    rc, out, _ = run("verify", "--quiet", TRAIN_PT, cut)
    assert_eq(rc, 1, "quiet exit code")
    assert_eq(len(out.splitlines()), 1, "quiet prints only the failure")
    assert out.startswith("CORRUPT %s: " % cut), out
    rc, out, _ = run("verify", "-v", TRAIN_PT)
    assert_eq(out.splitlines()[1],
              "  checksums: crc32; 9.6 KiB read; 18 zip member CRC-32s checked",
              "verbose line")
    rc, _, err = run("verify", "-q", "-v", TRAIN_PT)
    assert_eq(rc, 2, "-q with -v is a usage error")
    assert "exclude each other" in err, err


# ------------------------------------------------------------------ inspect

def test_inspect_several_files():
    rc, one, _ = run("inspect", "--json", TRAIN_ST)
    assert_eq(rc, 0, "one file")
    assert isinstance(json.loads(one), dict), "one file: one object"
    rc, out, err = run("inspect", "--json", TRAIN_ST, TRAIN_PT)
    assert_eq((rc, err), (0, ""), "two files")
    got = json.loads(out)
    assert_eq([o["file"] for o in got], [TRAIN_ST, TRAIN_PT], "an array, in order")
    assert_eq(got[0], json.loads(one), "same object as alone")
    assert_eq(len(got[1]["tensors"]), 16, "second file's tensors")
    rc, text, _ = run("inspect", TRAIN_ST, TRAIN_PT)
    assert_eq(rc, 0, "text exit code")
    assert text.startswith(run("inspect", TRAIN_ST)[1] + "\n" + TRAIN_PT + ": torch-zip"), text
    missing = os.path.join(TMP, "nope.pt")
    rc, out, err = run("inspect", "--json", missing, TRAIN_ST)
    assert_eq(rc, 2, "a missing file: exit 2, the others still listed")
    # one entry per file, in order, as verify --json gives them (the
    # missing file was left out, so entries no longer lined up with FILEs)
    got = json.loads(out)
    assert_eq([o["file"] for o in got], [missing, TRAIN_ST], "listed")
    assert_eq(got[0], {"file": missing, "format": None, "error": {
        "code": "CKPT_E_IO", "message": "cannot open: No such file or directory",
        "file": missing, "member": None, "offset": None}}, "the missing file's entry")
    assert_eq(got[0]["error"], json.loads(run("verify", "--json", missing)[1])["error"],
              "verify's error object")
    assert err.startswith("ckpt: %s: cannot open" % missing), err
    # alone: nothing on stdout, the error on stderr (the corpus contract:
    # tests/test_corpus.py, a file that is not a checkpoint)
    rc, out, err = run("inspect", "--json", missing)
    assert_eq((rc, out), (2, ""), "alone: exit 2, stdout empty")
    assert err.startswith("ckpt: %s: cannot open" % missing), err


def safetensors_bytes(names):
    """A safetensors file with one 1-element F32 tensor per name."""
    header = {n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
              for i, n in enumerate(names)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"\0" * (4 * len(names))


def test_inspect_natural_key_order():
    names = ["layers.10.w", "layers.2.w", "layers.1.w", "layers.02.w", "a9", "a10b", "a10a"]
    path = tmp_file("order.safetensors", safetensors_bytes(names))
    rc, out, _ = run("inspect", path)
    assert_eq(rc, 0, "exit code")
    listed = [l.split()[0] for l in out.splitlines()[3:3 + len(names)]]
    assert_eq(listed, ["a9", "a10a", "a10b", "layers.1.w", "layers.02.w", "layers.2.w",
                       "layers.10.w"], "human order")
    # JSON keeps the specified order (the file's, sorted by bytes)
    rc, out, _ = run("inspect", "--json", path)
    assert_eq([t["name"] for t in json.loads(out)["tensors"]], sorted(names), "JSON order")


# ------------------------------------------------------------------ scan

def test_scan_quiet_and_verbose():
    rc, out, _ = run("scan", "-q", TRAIN_PT, TRAIN_ST)
    assert_eq((rc, out), (0, ""), "quiet, all safe: nothing")
    rc, out, _ = run("scan", "-v", TRAIN_PT)
    assert_eq(out, "SAFE %s (0 dangerous, 0 suspicious, 0 info)\n" % TRAIN_PT +
              "  global     collections.OrderedDict\n"
              "  global     torch.FloatStorage\n"
              "  global     torch._utils._rebuild_tensor_v2\n",
              "verbose lists globals after the verdict line")
    bad = tmp_file("bad.pkl", b"\x80\x02cos\nsystem\nq\x00.")
    rc, out, _ = run("scan", "-q", TRAIN_PT, bad)
    assert_eq(rc, 1, "exit code")
    assert out.splitlines()[0].startswith("UNSAFE %s" % bad), out
    assert TRAIN_PT not in out, out
    # a model folder: config.json is no finding there, so -q prints nothing
    # for it either (it printed "NOT-A-CHECKPOINT DIR/config.json")
    folder = os.path.join(TMP, "quiet-folder")
    os.mkdir(folder)
    shutil.copy(TRAIN_ST, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as fh:
        fh.write('{"model_type": "llama"}\n')
    rc, out, _ = run("scan", "-q", folder)
    assert_eq((rc, out), (0, ""), "quiet, a safe model folder: nothing")
    # without -q: the files a model folder holds beside its weights are one
    # line, no report each (config.json was NOT-A-CHECKPOINT and two info
    # lines in every folder); a file of another name is still reported
    for name, text in (("tokenizer_config.json", "{}\n"), ("README.md", "# model\n"),
                       ("notes.bin", "hello\n")):
        with open(os.path.join(folder, name), "w") as fh:
            fh.write(text)
    rc, out, _ = run("scan", folder)
    assert_eq((rc, out.splitlines()), (0, [
        "SAFE %s (0 dangerous, 0 suspicious, 0 info)" % os.path.join(folder, "model.safetensors"),
        "NOT-A-CHECKPOINT %s (0 dangerous, 0 suspicious, 1 info)"
        % os.path.join(folder, "notes.bin"),
        "  info       no-content (offset 0): no pickle, zip archive or safetensors header found",
        "also 3 files a model folder holds, not checkpoints: README.md config.json "
        "tokenizer_config.json"]), "a model folder")
    # a known name is no pass: a config.json that is a pickle is reported
    with open(os.path.join(folder, "config.json"), "wb") as fh:
        fh.write(b"\x80\x02cos\nsystem\nq\x00.")
    rc, out, _ = run("scan", folder)
    assert_eq(rc, 1, "a pickled config.json")
    assert "UNSAFE %s" % os.path.join(folder, "config.json") in out, out
    assert "also 2 files a model folder holds, not checkpoints: README.md " \
        "tokenizer_config.json" in out, out
    with open(os.path.join(folder, "config.json"), "w") as fh:
        fh.write('{"model_type": "llama"}\n')
    # named on its own, a file that is no checkpoint is still said, exit 1
    rc, out, _ = run("scan", "-q", os.path.join(folder, "config.json"))
    assert_eq(rc, 1, "a lone config.json")
    assert out.startswith("NOT-A-CHECKPOINT"), out
    # a ckpt store: its LATEST is on that line too (it was NOT-A-CHECKPOINT
    # and an info line in every `ckpt scan` of a store)
    store = os.path.join(TMP, "scan-store")
    rc, _, _ = run("store", "commit", store, "--name", "run", "--step", "1", TRAIN_PT)
    assert_eq(rc, 0, "store commit")
    rc, out, _ = run("scan", store)
    assert_eq((rc, out.splitlines()), (0, [
        "SAFE %s (0 dangerous, 0 suspicious, 0 info)" % os.path.join(store, "run-1.pt"),
        "also 1 file a model folder holds, not checkpoints: LATEST"]), "a ckpt store")


# ------------------------------------------------------------------ convert

def test_convert_quiet():
    out = os.path.join(TMP, "quiet.safetensors")
    rc, text, err = run("convert", "-q", TRAIN_PT, out)
    assert_eq((rc, text, err), (0, "", ""), "quiet success prints nothing")
    assert_eq(run("verify", "--json", out)[1].count('"ok":true'), 1, "written")
    rc, text, err = run("convert", "--quiet", os.path.join(TMP, "nope.pt"), out)
    assert_eq((rc, text), (2, ""), "failure exit code")
    assert "nope.pt" in err, "failures are still reported: %r" % err


def test_convert_exclude():
    out = os.path.join(TMP, "model_only.safetensors")
    rc, text, _ = run("convert", TRAIN_PT, out, "--exclude", "optimizer*", "--exclude", "epoch")
    assert_eq(rc, 0, "exit code")
    assert_eq(text, "wrote %s (safetensors, 4 keys, 4 tensors, %d bytes)\n"
              % (out, os.path.getsize(out)), "report")
    got = json.loads(run("inspect", "--json", out)[1])
    assert_eq([t["name"] for t in got["tensors"]],
              ["model.fc1.bias", "model.fc1.weight", "model.fc2.bias", "model.fc2.weight"],
              "tensors left")
    assert_eq(got["values"], [], "values left")
    # with --select: what is selected less what is excluded
    out2 = os.path.join(TMP, "fc1.pt")
    rc, text, _ = run("convert", TRAIN_PT, out2, "--select", "model", "--exclude", "*.fc2.*")
    assert_eq(rc, 0, "select and exclude")
    assert_eq([t["name"] for t in json.loads(run("inspect", "--json", out2)[1])["tensors"]],
              ["fc1.bias", "fc1.weight"], "selected less excluded")
    rc, _, err = run("convert", TRAIN_PT, os.path.join(TMP, "none.pt"), "--exclude", "*")
    assert_eq(rc, 2, "excluding everything is a usage error")
    assert "leave nothing" in err, err
    assert_eq(run("convert", TRAIN_PT, out2, "--exclude", "")[0], 2, "empty glob")
    # a glob that leaves nothing out is refused: globs match the input's
    # names, so "fc2.bias" under --select model matched nothing and the
    # file was written with it
    rc, _, err = run("convert", TRAIN_PT, os.path.join(TMP, "fc2.pt"), "--select", "model",
                     "--exclude", "*.fc1.*", "--exclude", "fc2.bias")
    assert_eq(rc, 2, "an exclusion that matches nothing")
    assert '"fc2.bias" matches nothing --select keeps' in err and "model.fc2.bias" in err, err
    assert not os.path.exists(os.path.join(TMP, "fc2.pt"))


def test_convert_select_writes_the_entry_with_its_own_keys():
    """--select model of a training checkpoint writes the state dict as
    torch.load(IN)["model"] holds it (keys fc1.weight...: load_state_dict
    and from_pretrained take them); it kept the "model." prefix. Several
    prefixes, one ending in '.', or one naming a tensor keep full names."""
    def names(*select):
        out = os.path.join(TMP, "selected.pt")
        args = [a for s in select for a in ("--select", s)]
        rc, _, err = run("convert", TRAIN_PT, out, *args)
        assert_eq(rc, 0, "convert %s (stderr %r)" % (select, err))
        doc = json.loads(run("inspect", "--json", out)[1])
        return [t["name"] for t in doc["tensors"]], [v["name"] for v in doc["values"]]
    sd = ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert_eq(names("model"), (sd, []), "--select model")
    assert_eq(names("model", "epoch"), (["model." + k for k in sd], ["epoch"]), "two prefixes")
    assert_eq(names("model."), (["model." + k for k in sd], []), "a prefix ending in '.'")
    assert_eq(names("model.fc1.weight"), (["model.fc1.weight"], []), "a tensor")
    got = names("optimizer.state")[0]
    assert_eq(got[:3], ["0.exp_avg", "0.exp_avg_sq", "0.step"], "a nested dict, int keys")


def test_convert_progress_only_on_a_terminal():
    out = os.path.join(TMP, "progress.safetensors")
    rc, _, err = run("convert", TRAIN_PT, out)
    assert_eq((rc, err), (0, ""), "nothing on stderr in a pipe")
    rc, tty = run_stderr_tty("convert", TRAIN_PT, out)
    assert_eq(rc, 0, "exit code")
    assert "[1/16] " + out in tty and "[16/16] " + out in tty, tty
    assert tty.endswith("\r\033[K"), "progress is cleared: %r" % tty
    rc, tty = run_stderr_tty("convert", "-q", TRAIN_PT, out)
    assert_eq((rc, tty), (0, ""), "quiet: no progress either")


# ------------------------------------------------------------------ diff

def test_diff_exclude():
    a = tmp_file("da.safetensors", safetensors_bytes(["w", "opt.m", "opt.v"]))
    b = tmp_file("db.safetensors", safetensors_bytes(["w", "opt.m", "extra"]))
    rc, out, _ = run("diff", a, b)
    assert_eq(rc, 1, "different")
    rc, out, _ = run("diff", a, b, "--exclude", "opt.*", "--exclude", "extra")
    assert_eq(rc, 0, "identical once excluded")
    assert out.startswith("IDENTICAL: 0 only in A, 0 only in B"), out
    rc, out, _ = run("diff", "--json", a, b, "--exclude", "opt.v")
    got = json.loads(out)
    assert_eq((rc, got["only_in_a"], got["only_in_b"], got["equal"]),
              (1, [], ["extra"], 2), "JSON")
    assert_eq(run("diff", a, b, "--exclude", "")[0], 2, "empty glob")


# ------------------------------------------------------------------ natural key order

def test_natural_order_in_match_diff_rename():
    names = ["layers.10.w", "layers.2.w", "layers.1.w"]
    want = ["layers.1.w", "layers.2.w", "layers.10.w"]
    a = tmp_file("na.safetensors", safetensors_bytes(names))
    b = tmp_file("nb.safetensors", safetensors_bytes(["x"]))
    _, out, _ = run("match", b, "--expect", a)
    lines = out.splitlines()
    i = lines.index("missing keys (3):")
    assert_eq([l.strip() for l in lines[i + 1:i + 4]], want, "match")
    _, out, _ = run("diff", a, b)
    lines = out.splitlines()
    i = lines.index("only in A (3):")
    assert_eq([l.strip() for l in lines[i + 1:i + 4]], want, "diff")
    _, out, _ = run("rename", a, os.path.join(TMP, "nr.safetensors"), "--add-prefix", "m.",
                    "--dry-run")
    assert_eq([l.split(" -> ")[0] for l in out.splitlines()[:3]], want, "rename --dry-run")
    # JSON keeps its specified order (by bytes)
    got = json.loads(run("match", b, "--expect", a, "--json")[1])
    assert_eq(got["missing_keys"], sorted(names), "match JSON")
    # doctor's tensor groups (first segments) of a safetensors file
    g = tmp_file("ng.safetensors", safetensors_bytes(["10.w", "2.w", "1.w"]))
    lines = run("doctor", g)[1].splitlines()
    i = lines.index("  tensor groups:")
    assert_eq([l.split(":")[0].strip() for l in lines[i + 1:i + 4]], ["1", "2", "10"],
              "doctor groups")


# ------------------------------------------------------------------ store

def test_store_quiet_and_verbose():
    d = os.path.join(TMP, "store")
    rc, out, err = run("store", "commit", d, "--name", "run", "--step", "1", "-q", TRAIN_PT)
    assert_eq((rc, out, err), (0, "", ""), "commit -q: nothing")
    rc, out, _ = run("store", "commit", d, "--name", "run", "--step", "2", "-v", TRAIN_ST)
    lines = out.splitlines()
    assert_eq((rc, lines[0]), (0, os.path.join(d, "run-2.safetensors")), "commit -v: the path")
    assert re.fullmatch(r"2 +[\d.]+ \S+ +ok +weights-only +%s  <- LATEST" % re.escape(lines[0]),
                        lines[-2]), lines
    assert_eq(lines[-1], "2 generations; LATEST: ok (run-2.safetensors)", "then the listing")
    assert_eq(run("store", "latest", "-q", d)[:2], (0, ""), "latest -q")
    rc, out, _ = run("store", "list", "--quiet", d)
    assert_eq((rc, out), (0, ""), "list -q, all ok: nothing")
    rc, out, _ = run("store", "list", "-v", d)
    assert os.path.join(d, "run-1.pt") in out, "list -v: paths: %r" % out
    assert_eq(run("store", "prune", "-q", d)[:2], (0, ""), "prune -q")
    assert_eq(run("store", "gc", "-q", d)[:2], (0, ""), "gc -q")
    rc, out, _ = run("store", "gc", "-v", d)
    assert_eq(out.splitlines()[0], "removed 0 stale temporary files", "gc -v")
    assert out.splitlines()[-1].startswith("2 generations; LATEST: ok"), out
    rc, _, err = run("store", "list", "-q", "-v", d)
    assert_eq(rc, 2, "-q with -v is a usage error")
    assert "exclude each other" in err, err


def test_store_commit_progress_only_on_a_terminal():
    d = os.path.join(TMP, "store_progress")
    rc, _, err = run("store", "commit", d, "--name", "run", "--step", "1", TRAIN_PT)
    assert_eq((rc, err), (0, ""), "nothing on stderr in a pipe")
    rc, tty = run_stderr_tty("store", "commit", d, "--name", "run", "--step", "2", TRAIN_PT)
    assert_eq(rc, 0, "exit code")
    assert "[0%] " + TRAIN_PT in tty, tty
    assert tty.endswith("\r\033[K"), "progress is cleared: %r" % tty


def flat_help(cmd):
    """`ckpt CMD --help` with its line breaks and indentation folded to one
    space, so that a sentence is found whatever its wrapping."""
    rc, out, _ = run(cmd, "--help")
    assert_eq(rc, 0, "%s --help" % cmd)
    return " ".join(out.split())


def test_store_commit_refusal_latest_note_and_pruned():
    d = os.path.join(TMP, "store_notes")
    path = lambda step: os.path.join(d, "run-%d.pt" % step)  # noqa: E731
    commit = lambda step, *extra: run(  # noqa: E731
        "store", "commit", d, "--name", "run", "--step", str(step), *extra, TRAIN_PT)
    assert_eq(commit(500), (0, path(500) + "\n", ""), "first commit")
    # the same step again: a refusal (exit 1), not a usage or I/O error
    rc, out, err = commit(500)
    assert_eq((rc, out), (1, ""), "step already committed")
    assert "step 500 of run is already committed as run-500.pt" in err, err
    assert_eq(commit(500, "--replace")[0], 0, "--replace")
    # a lower step is committed, but LATEST stays on the higher one: said so
    assert_eq(commit(450), (0, path(450) + "\n",
                            "note: LATEST stays at run-500.pt, a higher step; run-450.pt "
                            "is committed beside it\n"), "lower step")
    with open(os.path.join(d, "LATEST")) as fh:
        assert_eq(fh.read(), "run-500.pt\n", "LATEST")
    # pruning says what it removed, on stderr (stdout stays the path)
    assert_eq(commit(600, "--keep", "2"), (0, path(600) + "\n", "pruned run-450.pt\n"),
              "commit that prunes")
    assert_eq(commit(700, "--keep", "2", "-q"), (0, "", ""), "-q prunes silently")
    assert_eq(sorted(n for n in os.listdir(d) if not n.startswith(".")),
              ["LATEST", "run-600.pt", "run-700.pt"], "what is left")
    # a bad name stays a usage error
    rc, _, err = run("store", "commit", d, "--name", ".hidden", "--step", "1", TRAIN_PT)
    assert_eq(rc, 2, "bad name")
    text = flat_help("store")
    for phrase in ("`pruned FILE` for each generation its pruning removed",
                   "refused, exit 1, unless --replace", "1 refused or corrupt data"):
        assert phrase in text, phrase


def test_store_gc_names_its_temporaries():
    d = os.path.join(TMP, "store_gc_names")
    assert_eq(run("store", "commit", d, "--name", "run", "--step", "1", "-q", TRAIN_PT)[0], 0,
              "commit")
    child = subprocess.Popen(["true"])
    child.wait()
    ours = ".run-2.pt.tmp-%d-0123456789abcdef" % child.pid  # its writer is gone
    others = [".run-700.pt.tmp.123", ".run-3.pt.tmp-%d-0123" % child.pid, "run.tmp"]
    for n in [ours] + others:
        tmp_file(os.path.join("store_gc_names", n), b"partial")
    rc, out, _ = run("store", "gc", "-v", "--older-than", "0", d)
    lines = out.splitlines()
    assert_eq((rc, lines[:2]), (0, ["removed 1 stale temporary file", "  " + ours]),
              "gc -v names what it removed")
    assert_eq(lines[-1], "1 generation; LATEST: ok (run-1.pt)", "then the listing")
    for n in others:
        assert os.path.exists(os.path.join(d, n)), "not ckpt's temporary, kept: " + n
    assert not os.path.exists(os.path.join(d, ours)), ours
    text = flat_help("store")
    assert ".FILE.tmp-PID-HEX (PID in decimal, HEX exactly 16 lowercase hex digits" in text, text
    assert "any other name (.run-700.pt.tmp.123, run.tmp) stays" in text, text


def test_counts_agree_across_commands():
    """keys: tensor names; tensors: what is stored; bytes: inspect's tensor
    bytes, verify's bytes read, convert's bytes written."""
    out = os.path.join(TMP, "counts.dcp")
    rc, text, _ = run("convert", TRAIN_PT, out)
    size = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
    # train.pt: 16 tensors; its 22 other leaves are DCP's bytes items
    assert_eq((rc, text), (0, "wrote %s (dcp, 16 keys, 16 tensors, 22 values, %d bytes)\n"
                           % (out, size)), "convert to DCP")
    for path in (TRAIN_PT, out):
        rc, text, _ = run("verify", path)
        assert re.fullmatch(r"OK %s \([-\w]+, 16 keys, \d+ bytes checked\)\n" % re.escape(path),
                            text), text
        rc, text, _ = run("inspect", path)
        assert "\n16 keys, 2032 elements, 8128 bytes (7.9 KiB)\n" in text, text
    # the help says what each number counts, and shows the line as printed
    assert "OK FILE (FORMAT, K keys, B bytes checked)" in flat_help("verify")
    assert "K keys: the tensor names" in flat_help("verify")
    assert "B bytes: the size of what was written" in flat_help("convert")
    assert "V values: its non-tensor items" in flat_help("convert")
    assert "counts the tensor names" in flat_help("inspect")
    rc, man, _ = run("help", "--man")
    assert "OK FILE (FORMAT, K keys, B bytes checked)" in man, "man page: verify's line"
    assert "N tensors, B bytes checked" not in man, "the old line is gone"


def test_convert_existing_out():
    src = os.path.join(TMP, "existing_src.safetensors")
    assert_eq(run("convert", "-q", TRAIN_PT, src)[0], 0, "source")
    out = tmp_file("existing.pt", b"old bytes")
    rc, text, err = run("convert", src, out)
    assert_eq((rc, err), (0, ""), "a file OUT is replaced")
    assert_eq(run("verify", "-q", out)[:2], (0, ""), "the new file")
    rc, _, _ = run("convert", "--backup", src, out)
    assert_eq(rc, 0, "--backup")
    assert os.path.getsize(out + ".bak") == os.path.getsize(out), "the old one kept"
    dcp = os.path.join(TMP, "existing.dcp")
    assert_eq(run("convert", "-q", src, dcp)[0], 0, "a DCP directory")
    rc, _, err = run("convert", src, dcp)
    assert_eq(rc, 2, "a DCP OUT is never replaced")
    assert "exists and is not empty" in err, err
    text = flat_help("convert")
    assert "a file OUT (each shard and the index of a sharded set) is replaced atomically" in text
    assert "A DCP directory OUT is never replaced: it must not exist or must be empty" in text
    assert "OUT must not exist (or be an empty directory)" not in text


# ------------------------------------------------------------------ version

def test_version_names_the_library():
    rc, out, _ = run("--version")
    assert_eq(rc, 0, "exit code")
    assert re.fullmatch(r"ckpt \d+\.\d+\.\d+ \(libckpt \d+\.\d+\.\d+\)\n", out), out


# ------------------------------------------------------------------ progress

def test_progress_only_on_a_terminal():
    files = [TRAIN_PT, TRAIN_ST]
    for cmd in (["verify"], ["scan"]):
        rc, _, err = run(*(cmd + files))
        assert_eq((rc, err), (0, ""), "%s: nothing on stderr in a pipe" % cmd)
        rc, tty = run_stderr_tty(*(cmd + files))
        assert_eq(rc, 0, "%s exit code" % cmd)
        assert "[1/2] " + TRAIN_PT in tty, "%s progress: %r" % (cmd, tty)
        assert "[2/2] " + TRAIN_ST in tty, "%s progress: %r" % (cmd, tty)
        assert tty.endswith("\r\033[K"), "%s progress is cleared: %r" % (cmd, tty)


# ------------------------------------------------------------------ man page, completion

COMMANDS = ["inspect", "verify", "doctor", "scan", "store", "match", "diff",
            "rename", "convert"]


def help_options(cmd):
    """Every --option `ckpt help CMD` lists."""
    return set(re.findall(r"^  (?:-[a-z], )?(--[a-z-]+)", run("help", cmd)[1], re.M))


def test_man_page_from_the_option_tables():
    rc, man, err = run("help", "--man")
    assert_eq((rc, err), (0, ""), "exit code and stderr")
    assert man.startswith('.TH CKPT 1 "" "ckpt '), man[:80]
    for cmd in COMMANDS:
        section = man.split(".SS %s\n" % cmd)[1].split(".SS ")[0]
        for opt in help_options(cmd):
            assert opt.replace("-", "\\-") in section, (cmd, opt)
    build = os.environ.get("CKPT_BUILD")
    if build:  # the build generates the file cmake --install installs
        with open(os.path.join(build, "ckpt.1"), encoding="utf-8") as fh:
            assert fh.read() == man, "build/ckpt.1 is not `ckpt help --man`"
    if shutil.which("groff"):
        p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=man.encode(),
                           capture_output=True)
        assert_eq((p.returncode, p.stderr), (0, b""), "groff warnings")


def complete(script, words):
    """What the bash completion offers for the command line `words` (the
    last one being completed)."""
    prog = (script + "\nCOMP_WORDS=(%s); COMP_CWORD=%d; _ckpt; "
            "printf '%%s\\n' \"${COMPREPLY[@]}\"\n" % (
                " ".join("'%s'" % w for w in words), len(words) - 1))
    p = subprocess.run(["bash", "-c", prog], capture_output=True, cwd=TMP)
    assert_eq(p.stderr, b"", "bash stderr")
    return set(p.stdout.decode().split())


def test_completion_from_the_option_tables():
    rc, bash, _ = run("help", "--completion", "bash")
    assert_eq(rc, 0, "bash")
    assert_eq(complete(bash, ["ckpt", "ve"]), {"verify"}, "command names")
    assert_eq(complete(bash, ["ckpt", "verify", "--"]),
              {o for o in help_options("verify") | {"--help"}}, "verify options")
    assert_eq(complete(bash, ["ckpt", "store", "co"]), {"commit"}, "subcommands")
    assert_eq(complete(bash, ["ckpt", "help", "--c"]), {"--completion"}, "help")
    rc, zsh, _ = run("help", "--completion", "zsh")
    assert_eq(rc, 0, "zsh")
    assert zsh.startswith("#compdef ckpt\n") and bash in zsh, zsh[:80]
    assert_eq(run("help", "--completion", "fish")[0], 2, "unknown shell")


def main():
    try:
        return run_cases(globals(), __file__)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
