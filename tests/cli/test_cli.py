"""CLI expectation tests for `ckpt inspect`, `ckpt verify` and `ckpt doctor`.

Environment (set by ctest): CKPT_BIN (the built ckpt binary), CKPT_CORPUS
(shared/corpus), CKPT_SRC (repository root). Standard library only. Prints
one line per case and ends with "N passed, N failed"; exits 1 on failure.
"""
import io
import json
import math
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from suite import corpus, run_cases  # noqa: E402

BIN = os.environ.get("CKPT_BIN", "ckpt")
CORPUS = os.environ.get("CKPT_CORPUS", "/work/shared/corpus")
CHECKPOINT = os.path.join(CORPUS, "torch/burn/checkpoint.pt")
LEGACY = os.path.join(CORPUS, "torch/burn/simple_legacy.pt")
BROKEN = os.path.join(CORPUS, "torch/burn/broken.pt")
SAFETENSORS = os.path.join(CORPUS, "safetensors/fluxml/non_sharded/"
                           "model.with_metadata.safetensors")
MNIST_ST = os.path.join(CORPUS, "pairs/mnist.safetensors")
MNIST_PT = os.path.join(CORPUS, "pairs/mnist.pt")
SHARDED_DIR = os.path.join(CORPUS, "safetensors/fluxml/sharded")
SHARDED = os.path.join(SHARDED_DIR, "model.safetensors.index.json")
# Cases that need some checkpoint of a kind, not a particular one, use the
# repository's own (the corpus suite, @corpus, reads the files above).
SRC = os.environ.get("CKPT_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
TRAIN_PT = os.path.join(SRC, "examples", "train.pt")
TRAIN_ST = os.path.join(SRC, "examples", "train.safetensors")

# Bits per element, by safetensors dtype name.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "I16": 16, "U16": 16, "I32": 32, "U32": 32,
    "I64": 64, "U64": 64, "F16": 16, "BF16": 16, "F32": 32, "F64": 64,
    "C32": 32, "C64": 64, "C128": 128, "F8_E5M2": 8, "F8_E4M3": 8,
}

TMP = tempfile.mkdtemp(prefix="ckpt-cli-test-")
NOT_A_CHECKPOINT = os.path.join(TMP, "broken.pt")  # 3 bytes of text
with open(NOT_A_CHECKPOINT, "wb") as _fh:
    _fh.write(b"abc")


def expected(rel):
    with open(os.path.join(CORPUS, "expected.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["file"] == rel:
                return rec
    raise KeyError(rel)


def run(*args):
    """Runs ckpt; returns (exit code, stdout, stderr) as text."""
    p = subprocess.run([BIN] + list(args), capture_output=True, timeout=120)
    return (p.returncode, p.stdout.decode("utf-8", "replace"),
            p.stderr.decode("utf-8", "replace"))


def run_json(*args):
    rc, out, err = run(*args)
    assert out.endswith("}\n"), "JSON output must be one object and a newline"
    return rc, json.loads(out), err


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def tmp_file(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def truncated(src, name):
    with open(src, "rb") as fh:
        data = fh.read()
    return tmp_file(name, data[: len(data) // 2])


def safetensors_bytes(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def assert_eq(got, want, what):
    assert got == want, "%s: got %r, want %r" % (what, got, want)


# ------------------------------------------------------------------ inspect

@corpus
def test_inspect_json_checkpoint():
    rc, doc, err = run_json("inspect", CHECKPOINT, "--json", "--hash",
                            "sha256")
    assert_eq(rc, 0, "exit code")
    exp = expected("torch/burn/checkpoint.pt")
    assert_eq(doc["file"], CHECKPOINT, "file")
    assert_eq(doc["format"], "torch-zip", "format")
    got = [{k: t[k] for k in ("name", "dtype", "shape", "sha256")}
           for t in doc["tensors"]]
    want = [{k: t[k] for k in ("name", "dtype", "shape", "sha256")}
            for t in exp["tensors"]]
    assert_eq(got, want, "tensors")
    for t in doc["tensors"]:
        assert_eq(t["nbytes"], numel(t["shape"]) * DTYPE_BITS[t["dtype"]] // 8,
                  "nbytes of " + t["name"])
    assert_eq(doc["values"], exp["values"], "values")
    assert_eq(doc["metadata"], None, "metadata")


@corpus
def test_inspect_json_without_hash():
    rc, doc, _ = run_json("inspect", "--json", CHECKPOINT)
    assert_eq(rc, 0, "exit code")
    assert all("sha256" not in t for t in doc["tensors"]), "no sha256 keys"
    assert_eq(list(doc), ["file", "format", "tensors", "values", "metadata", "snapshot",
                          "variant", "quantization"], "top-level keys")


@corpus
def test_inspect_json_legacy():
    rc, doc, _ = run_json("inspect", LEGACY, "--json", "--hash=sha256")
    assert_eq(rc, 0, "exit code")
    exp = expected("torch/burn/simple_legacy.pt")
    assert_eq(doc["format"], "torch-legacy", "format")
    assert_eq([(t["name"], t["dtype"], t["shape"], t["sha256"])
               for t in doc["tensors"]],
              [(t["name"], t["dtype"], t["shape"], t["sha256"])
               for t in exp["tensors"]], "tensors")


@corpus
def test_inspect_json_safetensors_metadata():
    rc, doc, _ = run_json("inspect", "--json", "--hash", "sha256",
                          SAFETENSORS)
    assert_eq(rc, 0, "exit code")
    exp = expected("safetensors/fluxml/non_sharded/"
                   "model.with_metadata.safetensors")
    assert_eq(doc["format"], "safetensors", "format")
    assert_eq(doc["metadata"], exp["metadata"], "metadata")
    assert_eq([(t["name"], t["dtype"], t["shape"], t["sha256"])
               for t in doc["tensors"]],
              [(t["name"], t["dtype"], t["shape"], t["sha256"])
               for t in exp["tensors"]], "tensors")
    rc, doc, _ = run_json("inspect", "--json", MNIST_ST)
    assert_eq(doc["metadata"], None, "metadata of a file without any")


def test_inspect_json_value_types():
    """Every leaf type and the JSON writer's number and string forms."""
    big = 2 ** 100
    obj = {
        "big": big, "neg_big": -big, "small": -7, "zero_f": 0.0,
        "neg_zero": -0.0, "one": 1.0, "tenth": 0.1, "third": 1 / 3,
        "huge": 1e300, "tiny": 5e-324, "nan": math.nan, "inf": math.inf,
        "ninf": -math.inf, "text": "tab\tquote\"back\\nl\nbell\x07 é 中 \U0001F600",
        "blob": b"\x00\xffab", "yes": True, "no": False, "nothing": None,
        "nested": {"list": [1, "two"], "empty": []},
    }
    path = tmp_file("values.pkl", pickle.dumps(obj, protocol=3))
    rc, doc, err = run_json("inspect", "--json", path)
    assert_eq(rc, 0, "exit code (stderr %r)" % err)
    assert_eq(doc["format"], "pickle", "format")
    got = {v["name"]: (v["type"], v["value"]) for v in doc["values"]}
    names = [v["name"] for v in doc["values"]]
    assert_eq(names, sorted(names, key=lambda s: s.encode()), "value order")
    want = {
        "big": ("int", big), "neg_big": ("int", -big), "small": ("int", -7),
        "zero_f": ("float", 0.0), "neg_zero": ("float", -0.0),
        "one": ("float", 1.0), "tenth": ("float", 0.1),
        "third": ("float", 1 / 3), "huge": ("float", 1e300),
        "tiny": ("float", 5e-324), "nan": ("float", "nan"),
        "inf": ("float", "inf"), "ninf": ("float", "-inf"),
        "text": ("str", obj["text"]), "blob": ("bytes", "00ff6162"),
        "yes": ("bool", True), "no": ("bool", False),
        "nothing": ("none", None), "nested.list.0": ("int", 1),
        "nested.list.1": ("str", "two"),
    }
    assert_eq(got, want, "values")
    # Floats stay floats (1.0 not 1), -0.0 keeps its sign.
    out = run("inspect", "--json", path)[1]
    assert '"value":1.0' in out.replace(" ", ""), "1.0 written as a float"
    assert '"value":-0.0' in out.replace(" ", ""), "-0.0 keeps its sign"
    assert math.copysign(1, got["neg_zero"][1]) < 0, "-0.0 parses negative"


@corpus
def test_inspect_text():
    rc, out, _ = run("inspect", CHECKPOINT)
    assert_eq(rc, 0, "exit code")
    lines = out.splitlines()
    assert lines[0].startswith(CHECKPOINT + ": torch-zip, "), lines[0]
    assert re.search(r"\d+ bytes \(", lines[0]), "size in header"
    exp = expected("torch/burn/checkpoint.pt")
    for t in exp["tensors"]:
        row = [l for l in lines if l.startswith(t["name"] + " ")]
        assert row, "table row for " + t["name"]
        shape = "[" + ", ".join(str(d) for d in t["shape"]) + "]"
        assert shape in row[0] and t["dtype"] in row[0], row[0]
    # a plain sum of numel (buffers and optimizer state too): "elements"
    elements = sum(numel(t["shape"]) for t in exp["tensors"])
    total = "%d keys, %d elements, %d bytes" % (
        len(exp["tensors"]), elements, elements * 4)
    assert any(l.startswith(total) for l in lines), "totals line " + total
    assert any(l.strip() == "epoch = 42" for l in lines), "epoch value"
    assert any(l.strip() == "loss = 0.123" for l in lines), "loss value"


def test_inspect_bitsandbytes_parameters():
    """A bitsandbytes 4-bit save_pretrained layout (a U8 weight packing two
    parameters a byte, absmax, quant_map, the quant_state holding its
    shape): inspect's totals count its U8 elements, which are not its
    parameters; it now gives doctor's note under them, the same sentence
    (text and --json "quantization"). It printed the element count alone."""
    qs = b'{"quant_type": "nf4", "blocksize": 64, "shape": [2, 4]}'
    tensors = [("l.weight", "U8", [4, 1], b"\x12\x34\x56\x78"),
               ("l.weight.absmax", "F32", [1], struct.pack("<f", 1.0)),
               ("l.weight.quant_map", "F32", [2], struct.pack("<2f", -1.0, 1.0)),
               ("l.weight.quant_state.bitsandbytes__nf4", "U8", [len(qs)], qs)]
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    path = os.path.join(TMP, "bnb4.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    rc, doc, err = run_json("doctor", "--json", path)
    said = [n for n in doc["sections"]["not_vouched_for"] if "bitsandbytes" in n]
    assert_eq(len(said), 1, "doctor's note (stderr %r)" % err)
    assert said[0].endswith(": 8 parameters in all"), said
    rc, text, err = run("inspect", path)
    assert_eq(rc, 0, "inspect (stderr %r)" % err)
    assert "\nnote: %s\n" % said[0] in text, text
    rc, doc, err = run_json("inspect", "--json", path)
    assert_eq((rc, doc["quantization"]), (0, said[0]), "inspect --json")
    rc, doc, err = run_json("inspect", "--json", TRAIN_PT)
    assert_eq((rc, doc["quantization"], doc["variant"], doc["snapshot"]), (0, None, None, None),
              "inspect --json of a plain checkpoint")


@corpus
def test_inspect_text_hash_and_alignment():
    rc, out, _ = run("inspect", CHECKPOINT, "--hash", "sha256")
    assert_eq(rc, 0, "exit code")
    exp = expected("torch/burn/checkpoint.pt")
    rows = [l for l in out.splitlines()
            if any(l.startswith(t["name"] + " ") for t in exp["tensors"])]
    assert_eq(len(rows), len(exp["tensors"]), "rows")
    for t in exp["tensors"]:
        assert any(r.startswith(t["name"]) and r.endswith(t["sha256"])
                   for r in rows), "sha256 column for " + t["name"]
    # Aligned: the dtype column starts at the same place in every row.
    assert_eq(len({r.index(" F32 ") for r in rows}), 1, "aligned dtype column")


def test_inspect_text_hostile_names():
    """Control characters in names never reach the terminal raw."""
    name = "evil\x1b[31m\nname"
    path = tmp_file("hostile.safetensors", safetensors_bytes(
        [(name, "U8", [2], b"\x01\x02")], {"k\x07": "v\x1b]0;x\x07"}))
    rc, out, _ = run("inspect", path)
    assert_eq(rc, 0, "exit code")
    assert "\x1b" not in out and "\x07" not in out, "raw control bytes"
    assert "evil\\x1b[31m\\x0aname" in out, out
    rc, doc, _ = run_json("inspect", "--json", path)
    assert_eq(doc["tensors"][0]["name"], name, "JSON name round trip")
    assert_eq(doc["metadata"], {"k\x07": "v\x1b]0;x\x07"}, "JSON metadata")


def test_inspect_text_escapes_anywhere_in_a_name():
    """A control byte, DEL, a C1 control or a multibyte character at any
    place of a long name (the table reads printable ASCII 8 bytes at a
    time): escaped as \\xNN, 4 columns each, other characters 1, and the
    columns stay aligned."""
    names = ["abcdefghij\x7fklmnopq", "abcdefgh\x1fijklmnopqrst",
             "abcdefghijklmno\x85pq", "layers.\u00fcber.gewicht.x",
             "0123456789abcdef~", "a\x01", "x" * 23 + "\u20ac", 'q"uo\\te\x7f\u00e9']
    path = tmp_file("escapes.safetensors", safetensors_bytes(
        [(n, "U8", [1], b"\x00") for n in names]))
    rc, out, _ = run("inspect", path)
    assert_eq(rc, 0, "exit code")

    def shown(name):
        text, cols = "", 0
        for ch in name:
            o = ord(ch)
            if o < 0x20 or 0x7f <= o < 0xa0:
                for b in ch.encode("utf-8"):
                    text += "\\x%02x" % b
                    cols += 4
            else:
                text += ch
                cols += 1
        return text, cols

    width = max(shown(n)[1] for n in names)
    for n in names:
        text, cols = shown(n)
        row = text + " " * (width - cols) + "  U8     [1]        1"
        assert row in out.splitlines(), (row, out)
    rc, doc, _ = run_json("inspect", "--json", path)
    assert_eq(sorted(t["name"] for t in doc["tensors"]), sorted(names), "JSON names")

    # past the table's 64 KiB buffer and the 1 KiB pieces of a long path:
    # escapes and multibyte characters cut nowhere
    many = ["n%04d.\u00e9\x01\u20ac%s" % (i, "\u00fc" * 40) for i in range(1200)]
    deep = os.path.join(TMP, *(["d\u00e9\x02" + "\u00fc" * 100] * 6))
    os.makedirs(deep, exist_ok=True)
    path = os.path.join(deep, "many.safetensors")
    with open(path, "wb") as f:
        f.write(safetensors_bytes([(n, "U8", [1], b"\x00") for n in many]))
    rc, out, _ = run("inspect", path)
    assert_eq(rc, 0, "exit code")
    lines = out.splitlines()
    assert_eq(lines[0].split(": ")[0], shown(path)[0], "the path, escaped")
    width = max(shown(n)[1] for n in many)
    rows = [shown(n)[0] + " " * (width - shown(n)[1]) + "  U8     [1]        1"
            for n in sorted(many)]
    assert_eq(lines[3:3 + len(rows)], rows, "rows")


def test_inspect_errors():
    rc, out, err = run("inspect", os.path.join(TMP, "missing.pt"))
    assert_eq(rc, 2, "missing file exit code")
    assert err.startswith("ckpt: " + os.path.join(TMP, "missing.pt") + ": "),\
        err
    assert_eq(out, "", "stdout of a failed inspect")
    rc, out, err = run("inspect", NOT_A_CHECKPOINT, "--json")
    assert_eq(rc, 1, "unreadable format exit code")
    assert err.startswith("ckpt: " + NOT_A_CHECKPOINT + ": "), err
    rc, _, err = run("inspect", truncated(TRAIN_PT, "trunc_inspect.pt"))
    assert_eq(rc, 1, "truncated zip exit code")


# ------------------------------------------------------------------ verify

STRUCTURE_ONLY = "; structure only: this file carries no checksums"
SET_STRUCTURE_ONLY = "; structure only: not every shard carries checksums"


def set_checked(shards):
    """What an OK line says verify checked of a sharded set."""
    return ("; %d shards, each checked whole, and the index, whose weight_map names every "
            "tensor of every shard with its shard" % shards)


def ok_line(path, fmt, n, checksums=True, shards=0):
    tail = set_checked(shards) if shards else ""
    if not checksums:
        tail += SET_STRUCTURE_ONLY if shards else STRUCTURE_ONLY
    return re.compile(r"^OK %s \(%s, %d keys?, \d+ bytes checked\)%s$" % (
        re.escape(path), re.escape(fmt), n, re.escape(tail)))


@corpus
def test_verify_ok():
    files = [(SAFETENSORS, "safetensors",
              "safetensors/fluxml/non_sharded/model.with_metadata.safetensors"),
             (CHECKPOINT, "torch-zip", "torch/burn/checkpoint.pt"),
             (LEGACY, "torch-legacy", "torch/burn/simple_legacy.pt"),
             (MNIST_PT, "torch-zip", "pairs/mnist.pt")]
    rc, out, err = run("verify", *[f for f, _, _ in files])
    assert_eq(rc, 0, "exit code (stderr %r)" % err)
    lines = out.splitlines()
    assert_eq(len(lines), len(files), "one line per file")
    for line, (path, fmt, rel) in zip(lines, files):
        n = len(expected(rel)["tensors"])
        assert ok_line(path, fmt, n, fmt == "torch-zip").match(line), line
    # Bytes checked covers at least every tensor's bytes.
    m = re.search(r"(\d+) bytes checked", lines[1])
    want = sum(numel(t["shape"]) * 4
               for t in expected("torch/burn/checkpoint.pt")["tensors"])
    assert int(m.group(1)) >= want, lines[1]


def test_verify_says_what_it_vouched_for():
    """Without checksums in the file, OK means structure and sizes only."""
    plain = tmp_file("plain.safetensors", safetensors_bytes(
        [("w", "F32", [2], b"\0" * 8)]))
    written = os.path.join(TMP, "written.safetensors")  # ckpt's digests inside
    assert_eq(run("convert", TRAIN_PT, written)[0], 0, "convert exit code")
    legacy = os.path.join(SRC, "fuzz", "corpora", "scan", "torch_benign_legacy.pt")
    files = [(plain, "safetensors", 1, False), (written, "safetensors", 16, True),
             (TRAIN_PT, "torch-zip", 16, True), (legacy, "torch-legacy", 1, False)]
    rc, out, err = run("verify", *[f[0] for f in files])
    assert_eq(rc, 0, "exit code (stderr %r)" % err)
    lines = out.splitlines()
    assert_eq(len(lines), len(files), "one line per file")
    for line, (path, fmt, n, checksums) in zip(lines, files):
        assert ok_line(path, fmt, n, checksums).match(line), line


def flip_tensor_byte(path, tensor):
    """Flips the first byte of tensor's data in the safetensors file or the
    torch zip (written by ckpt: data/N holds the N-th tensor by name)."""
    with open(path, "rb") as fh:
        data = bytearray(fh.read())
    if path.endswith(".safetensors"):
        n = struct.unpack("<Q", data[:8])[0]
        off = 8 + n + json.loads(data[8:8 + n])[tensor]["data_offsets"][0]
    else:
        _, off = zip_member_data_offset(path, "/data/%d" % storage_index(path, tensor))
    data[off] ^= 0x20
    with open(path, "wb") as fh:
        fh.write(bytes(data))


def storage_index(path, tensor):
    with zipfile.ZipFile(path) as zf:
        keys = [n.rsplit("/", 1)[1] for n in zf.namelist() if "/data/" in n]
    return next(int(k) for k in keys if storage_tensors(path, k) == [tensor])


def test_verify_sharded_digests():
    """A set ckpt wrote (convert --max-shard-size): verify checks every
    shard as it would check the file alone, its digests and zip CRC-32s;
    a flipped byte in shard 2 is CORRUPT, naming the shard and tensor.
    A set of plain safetensors shards is structure only."""
    tensors = [("layers.%d.weight" % i, "F32", [16, 16], bytes(range(256)) * 4)
               for i in range(4)]
    src = tmp_file("shard_src.safetensors", safetensors_bytes(tensors))
    for ext, index in ((".safetensors", "model.safetensors.index.json"),
                       (".bin", "pytorch_model.bin.index.json")):
        d = os.path.join(TMP, "set" + ext.replace(".", "_"))
        os.mkdir(d)
        stem = "model" if ext == ".safetensors" else "pytorch_model"
        rc, _, err = run("convert", src, os.path.join(d, stem + ext), "--max-shard-size", "1500")
        assert_eq(rc, 0, "convert %s (stderr %r)" % (ext, err))
        shards = sorted(n for n in os.listdir(d) if n.endswith(ext))
        assert_eq(len(shards), 4, "shards")
        fmt = "safetensors-sharded" if ext == ".safetensors" else "torch-sharded"
        for target in (d, os.path.join(d, index)):
            rc, out, err = run("verify", "-v", target)
            assert_eq(rc, 0, "verify %s (stderr %r)" % (target, err))
            lines = out.splitlines()
            assert ok_line(target, fmt, 4, shards=4).match(lines[0]), lines[0]
            assert lines[1].startswith("  checksums: %s; " % (
                "digests" if ext == ".safetensors" else "crc32")), lines[1]
        rc, doc, _ = run_json("verify", "--json", d)
        assert_eq(doc["checksums"], "digests" if ext == ".safetensors" else "crc32",
                  "checksums, --json")
        assert_eq(doc["shards"], 4, "shards, --json")
        bad = d + "_flipped"
        shutil.copytree(d, bad)
        flip_tensor_byte(os.path.join(bad, shards[1]), "layers.1.weight")
        shard = os.path.join(bad, shards[1])
        for target in (bad, os.path.join(bad, index)):
            rc, out, _ = run("verify", target)
            assert_eq(rc, 1, "verify exit code, %s" % target)
            assert out.startswith("CORRUPT %s: %s: tensor \"layers.1.weight\": XXH3-64 of its "
                                  "contents is " % (target, shard)), out
        rc, out, _ = run("doctor", bad)
        assert_eq(rc, 1, "doctor exit code")
        assert "  FAILED: %s: tensor \"layers.1.weight\"" % shard in out, out
    # plain safetensors shards: no checksums in any of them
    d = os.path.join(TMP, "plain_set")
    os.mkdir(d)
    weight_map = {}
    for i, t in enumerate(tensors[:2]):
        name = "model-%05d-of-00002.safetensors" % (i + 1)
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(safetensors_bytes([t]))
        weight_map[t[0]] = name
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": weight_map}, fh)
    rc, out, err = run("verify", d)
    assert_eq(rc, 0, "verify plain set (stderr %r)" % err)
    # worded for the set: what was checked of it, and that its shards
    # carry no checksums (not "this file")
    assert ok_line(d, "safetensors-sharded", 2, False, shards=2).match(out.rstrip("\n")), out
    assert "this file" not in out, out
    rc, doc, _ = run_json("verify", "--json", d)
    assert_eq((doc["shards"], doc["checksums"]), (2, "none"), "plain set, --json")


def test_verify_truncated():
    path = truncated(TRAIN_PT, "trunc_verify.pt")
    rc, out, _ = run("verify", path)
    assert_eq(rc, 1, "exit code")
    # searched back to offset 0: a file shorter than 65535 + 22 + 4096 bytes
    # is searched whole
    assert_eq(out, "CORRUPT %s: zip archive is truncated or incomplete: expected an "
              "end-of-central-directory record (PK\\5\\6) in its last %d "
              "bytes (searched back to this offset), found none; the file was "
              "probably cut short while being written or copied (offset 0)\n"
              % (path, os.path.getsize(path)), "verify line")
    # a safetensors file whose data runs past the end
    path = tmp_file("trunc.safetensors", safetensors_bytes(
        [("w", "F32", [4], b"\0" * 16)])[:-4])
    rc, out, _ = run("verify", path)
    assert_eq(rc, 1, "exit code (safetensors)")
    assert out.startswith("CORRUPT %s: truncated: tensor \"w\": " % path), out


def test_verify_broken():
    rc, out, _ = run("verify", NOT_A_CHECKPOINT)
    assert_eq(rc, 1, "exit code")
    assert out.startswith("CORRUPT %s: " % NOT_A_CHECKPOINT), out


def test_verify_missing():
    missing = os.path.join(TMP, "nope.pt")
    rc, out, _ = run("verify", missing)
    assert_eq(rc, 2, "exit code")
    assert out.startswith("ERROR %s: " % missing), out
    # I/O failure wins over corruption, and every file still gets a line.
    rc, out, _ = run("verify", NOT_A_CHECKPOINT, missing, TRAIN_PT)
    assert_eq(rc, 2, "exit code with a missing and a corrupt file")
    lines = out.splitlines()
    assert_eq(len(lines), 3, "lines")
    assert lines[0].startswith("CORRUPT ") and lines[1].startswith("ERROR ")
    assert lines[2].startswith("OK "), lines[2]


def storage_tensors(path, key):
    """Flattened names of the tensors of a torch zip whose storage is
    data/KEY, read from data.pkl with harmless stand-ins for every global
    (nothing in the file runs)."""
    class Tensor:
        def __init__(self, storage, *args):
            self.storage = storage

    class OrderedDict(dict):
        pass

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if name in ("_rebuild_tensor_v2", "_rebuild_parameter"):
                return lambda t, *a: t if isinstance(t, Tensor) else Tensor(t)
            if module == "collections" and name == "OrderedDict":
                return OrderedDict  # BUILD sets _metadata on it
            return lambda *a, **k: None

        def persistent_load(self, pid):
            return pid[2]

    with zipfile.ZipFile(path) as zf:
        pkl = next(n for n in zf.namelist() if n.endswith("/data.pkl"))
        root = Unpickler(io.BytesIO(zf.read(pkl))).load()
    found = []

    def walk(v, prefix):
        if isinstance(v, Tensor):
            if v.storage == key:
                found.append(prefix)
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, "%s.%s" % (prefix, k) if prefix else str(k))
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(x, "%s.%d" % (prefix, i) if prefix else str(i))
    walk(root, "")
    return sorted(found)


def zip_member_data_offset(path, suffix):
    """(member name, absolute offset of its first data byte)."""
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix)
                    and i.file_size > 0)
    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        local = fh.read(30)
    assert local[:4] == b"PK\x03\x04"
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    return info.filename, info.header_offset + 30 + name_len + extra_len


def with_crcs(src, name, crc_of):
    """src (a zip) with each central-directory CRC-32 replaced by
    crc_of(member name, CRC-32): torch writes 0 for a record whose CRC it
    did not compute (compute_crc32=False; skip_data's storage records)."""
    with open(src, "rb") as fh:
        data = bytearray(fh.read())
    with zipfile.ZipFile(src) as zf:
        at = zf.start_dir
    while data[at:at + 4] == b"PK\x01\x02":
        crc, = struct.unpack_from("<I", data, at + 16)
        n, m, k = struct.unpack_from("<HHH", data, at + 28)
        struct.pack_into("<I", data, at + 16, crc_of(data[at + 46:at + 46 + n].decode(), crc))
        at += 46 + n + m + k
    return tmp_file(name, bytes(data))


def test_verify_crc_not_recorded():
    """A CRC-32 field of 0 is torch's "not computed": torch.save with
    torch.utils.serialization.config.save.compute_crc32 = False writes 0
    for every record, skip_data() for every storage record, and torch.load
    reads both. verify called them CORRUPT (and convert refused them):
    they are OK, structure only for those members. A wrong CRC-32 that is
    not 0 is still corrupt."""
    tail = ("; structure only: zip members with no CRC-32 recorded (torch.save with "
            "compute_crc32=False or skip_data)")
    nocrc = with_crcs(TRAIN_PT, "nocrc.pt", lambda name, crc: 0)
    # skip_data: the storage records have none, and their bytes are torch's
    # to fill: a changed byte there is not a finding
    member, off = zip_member_data_offset(TRAIN_PT, "/data/0")
    skip = with_crcs(TRAIN_PT, "skipdata.pt",
                     lambda name, crc: 0 if "/data/" in name else crc)
    with open(skip, "r+b") as fh:
        fh.seek(off)
        byte = fh.read(1)
        fh.seek(off)
        fh.write(bytes([byte[0] ^ 0x40]))
    for path in (nocrc, skip):
        rc, out, err = run("verify", path)
        assert_eq(rc, 0, "verify %s (stdout %r, stderr %r)" % (path, out, err))
        assert re.match(r"^OK %s \(torch-zip, 16 keys, \d+ bytes checked\)%s$" % (
            re.escape(path), re.escape(tail)), out.rstrip("\n")), out
        assert_eq(run_json("verify", "--json", path)[1]["checksums"], "none", path)
        rc, out, _ = run("scan", path)
        assert_eq(rc, 0, "scan %s" % path)
        assert "crc-mismatch" not in out, out
        out_path = os.path.join(TMP, os.path.basename(path) + ".safetensors")
        rc, out, err = run("convert", path, out_path)
        assert_eq(rc, 0, "convert %s (stderr %r)" % (path, err))
        rc, out, _ = run("doctor", path)
        assert "records no CRC-32 for some of its members" in out, out
    # the CRC-32s that are there are still checked
    rc, out, _ = run("verify", with_crcs(TRAIN_PT, "crc_off_by_one.pt", lambda name, crc:
                                         crc ^ 1 if name == member else crc))
    assert_eq(rc, 1, "a wrong CRC-32 other than 0")
    assert "CRC-32 of the data is" in out and member in out, out
    # data.pkl's CRC-32 is taken from the copy the reader parsed, a small
    # member's from the window its local header was read in (verify reads
    # neither again): a byte changed in either is still found, named as before
    with open(TRAIN_PT, "rb") as fh:
        data = bytearray(fh.read())
    pkl = data.find(b"fc1.weight")  # a key inside data.pkl: still a valid pickle
    data[pkl + 2] = ord("d")
    changed = tmp_file("pkl_byte_changed.pt", bytes(data))
    rc, out, _ = run("verify", changed)
    assert_eq(rc, 1, "a byte changed in data.pkl")
    assert re.search(r"CRC-32 of the data is 0x[0-9a-f]{8}, the central directory says "
                     r"0x[0-9a-f]{8} \(train/data\.pkl, offset \d+\)", out), out


def pt2_archive(name, sample_inputs):
    """A torch.export.save archive's layout (torch 2.13): no data.pkl;
    archive_format "pt2", the program as JSON, raw weights, and the sample
    inputs as a torch.save zip that torch.export.load unpickles (weights_only
    first, then weights_only=False when that fails)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for member, data in (("data/weights/weight_0", b"\0" * 16),
                             ("data/weights/model_weights_config.json", b'{"config": {}}'),
                             ("models/model.json", b"{}"),
                             ("data/sample_inputs/model.pt", sample_inputs),
                             ("archive_format", b"pt2"), ("archive_version", b"0"),
                             (".data/version", b"1\n"), ("byteorder", b"little")):
            z.writestr("export/" + member, data)
    return tmp_file(name, buf.getvalue())


def test_pt2_named_and_scanned():
    """torch.load cannot read a .pt2 (no data.pkl): ckpt said only "archive
    has no export/data.pkl record"; it now names the torch.export archive.
    scan examines the torch.save zip of sample inputs inside, which
    torch.export.load unpickles with weights_only=False when weights_only
    fails: a hostile one is UNSAFE, not SAFE."""
    with open(TRAIN_PT, "rb") as fh:
        benign = pt2_archive("model.pt2", fh.read())
    rc, out, _ = run("verify", benign)
    assert_eq(rc, 1, "verify .pt2")
    assert "a torch.export archive (.pt2, torch.export.save; archive_format 'pt2')" in out, out
    assert "export/archive_format" in out, out
    rc, out, _ = run("scan", benign)
    assert_eq(rc, 0, "scan benign .pt2 (%s)" % out)
    evil = io.BytesIO()
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("m/data.pkl", b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00trueq\x00\x85R.")
        z.writestr("m/version", b"3\n")
    rc, out, _ = run("scan", pt2_archive("evil.pt2", evil.getvalue()))
    assert_eq(rc, 1, "scan hostile .pt2")
    assert "posix.system (member export/data/sample_inputs/model.pt:m/data.pkl" in out, out


def test_verify_flipped_byte():
    with open(TRAIN_PT, "rb") as fh:
        data = bytearray(fh.read())
    member, off = zip_member_data_offset(TRAIN_PT, "/data/0")
    data[off] ^= 0x40
    path = tmp_file("flipped.pt", bytes(data))
    rc, out, _ = run("verify", path)
    assert_eq(rc, 1, "exit code")
    assert out.startswith("CORRUPT %s: " % path), out
    assert member in out, "member %s named in %r" % (member, out)
    assert "crc" in out.lower() or "checksum" in out.lower(), out
    # the tensors whose storage the member is, and what the offset is
    names = storage_tensors(TRAIN_PT, member.rsplit("/", 1)[1])
    assert names, "data/0 holds a tensor"
    # the offset (where the member's data starts) is said once
    assert ("the member holds tensor%s %s (%s, offset %d)\n"
            % ("s" if len(names) > 1 else "", ", ".join(names), member, off)) in out, \
        (names, out)
    assert out.count(str(off)) == 1, out
    # -v adds every tensor whose bytes the damaged member holds
    rc, out, _ = run("verify", "-v", path)
    assert_eq(rc, 1, "exit code, -v")
    assert ("\n  damaged tensor%s (%d): %s\n" % ("s" if len(names) > 1 else "", len(names),
                                                ", ".join(names))) in out, (names, out)
    # --json: what failed and where, no counts of a check that stopped
    rc, out, _ = run("verify", "--json", path)
    doc = json.loads(out)
    assert_eq((doc["ok"], doc["error"]["code"], doc["error"]["member"], doc["error"]["offset"],
               doc["error"]["file"]), (False, "CKPT_E_CHECKSUM", member, off, path), "json")
    assert not {"tensors", "bytes", "members"} & set(doc), doc
    # Open alone does not read tensor bytes: inspect still works.
    assert_eq(run("inspect", path)[0], 0, "inspect of the flipped file")


# ------------------------------------------------------------------ doctor

@corpus
def test_doctor_partial_resume():
    # burn's checkpoint.pt holds SGD momentum for one of four parameters
    # and no param_groups: resume readiness "partial" needs attention.
    rc, out, err = run("doctor", CHECKPOINT)
    assert_eq(rc, 1, "exit code (stderr %r)" % err)
    lines = out.splitlines()
    assert_eq(lines[0], "ATTENTION: resume: partial optimizer state",
              "verdict line")
    for title in ("format", "integrity", "contents", "not vouched for"):
        assert title in lines, "section " + title
    assert any(l.strip().startswith("model_state_dict: dict, 4 keys")
               for l in lines), out
    assert any(l.strip() == "epoch: int 42" for l in lines), out


@corpus
def test_doctor_json():
    rc, doc, _ = run_json("doctor", "--json", CHECKPOINT)
    assert_eq(rc, 1, "exit code")
    exp = expected("torch/burn/checkpoint.pt")
    assert_eq(doc["verdict"], "attention", "verdict")
    assert doc["summary"].startswith("ATTENTION: resume: partial"), \
        doc["summary"]
    assert_eq(doc["resume"]["verdict"], "partial", "resume verdict")
    assert_eq(doc["format"], "torch-zip", "format")
    sec = doc["sections"]
    assert_eq(list(sec), ["format", "integrity", "safety", "contents",
                          "not_vouched_for", "resume", "keys", "memory",
                          "metadata", "other_files", "from_pretrained", "store"], "sections")
    assert_eq(sec["store"], None, "not a store")
    assert_eq(sec["keys"], {"wrappers": [], "fix": None, "fix_python": None,
                             "root": "model_state_dict.", "collision": None},
              "clean keys")
    assert_eq(sec["integrity"]["ok"], True, "integrity ok")
    assert_eq(sec["safety"]["verdict"], "safe", "safety verdict")
    assert_eq([f["verdict"] for f in sec["safety"]["files"]], ["safe"],
              "safety per file")
    contents = sec["contents"]
    elements = sum(numel(t["shape"]) for t in exp["tensors"])
    assert "parameters" not in contents, "a numel sum is no parameter count"
    assert_eq(contents["elements"], elements, "elements")
    assert_eq(contents["tensors"], len(exp["tensors"]), "tensors")
    assert_eq(contents["by_dtype"], {"F32": elements * 4}, "by_dtype")
    top = {e["name"]: e for e in contents["top_level"]}
    assert_eq(top["epoch"]["kind"], "int", "epoch kind")
    assert_eq(top["epoch"]["value"], 42, "epoch value")
    assert_eq(top["model_state_dict"]["tensors"], 4, "model tensors")
    assert_eq(top["optimizer_state_dict"]["tensors"], 1, "optimizer tensors")
    assert_eq(sum(e["elements"] for e in contents["top_level"]), elements,
              "top-level elements add up")
    rc, out, _ = run("doctor", CHECKPOINT)
    lines = out.splitlines()
    contents = lines[lines.index("contents") + 1:lines.index("not vouched for")]
    assert_eq(contents[0], "  5 keys, %d elements, %d bytes (%d B)" % (
        elements, elements * 4, elements * 4), "contents totals")
    assert "    model_state_dict: dict, 4 keys, 93 elements" in contents, \
        contents
    assert "param" not in " ".join(contents), contents


@corpus
def test_doctor_unsafe():
    path = os.path.join(CORPUS, "scan/picklescan/malicious1_v0.pkl")
    rc, doc, _ = run_json("doctor", "--json", path)
    assert_eq(rc, 1, "exit code")
    safety = doc["sections"]["safety"]
    assert_eq(safety["verdict"], "unsafe", "safety verdict")
    dangerous = [f for f in safety["files"][0]["findings"]
                 if f["severity"] == "dangerous"]
    assert dangerous and all("global" in f for f in dangerous), dangerous
    assert "unsafe (" in doc["summary"], doc["summary"]
    rc, out, _ = run("doctor", path)
    assert_eq(rc, 1, "exit code (text)")
    assert "dangerous: " in out, out


@corpus
def test_doctor_safetensors():
    rc, doc, _ = run_json("doctor", "--json", MNIST_ST)
    assert_eq(rc, 0, "exit code")
    groups = {e["name"]: e["tensors"] for e in
              doc["sections"]["contents"]["top_level"]}
    assert_eq(groups["conv1"], 2, "conv1 group")
    assert any("checksum" in s for s in doc["sections"]["not_vouched_for"]), \
        "safetensors has no checksum"
    # no pickle: the safe line does not speak of allowlisted globals
    rc, out, _ = run("doctor", MNIST_ST)
    safe = [l for l in out.splitlines() if l.startswith("  safe: ")]
    assert_eq(safe, ["  safe: it names no global (no pickle, or one of plain "
                     "data); loading it runs no code"], "safety line")


@corpus
def test_doctor_truncated():
    path = truncated(CHECKPOINT, "trunc_doctor.pt")
    rc, out, _ = run("doctor", path)
    assert_eq(rc, 1, "exit code")
    assert out.startswith("ATTENTION: "), out
    lines = out.splitlines()
    fmt = lines[lines.index("format") + 1]
    assert fmt.startswith("  torch-zip (truncated), %d bytes (" %
                          os.path.getsize(path)), fmt
    rc, doc, _ = run_json("doctor", "--json", path)
    assert_eq(rc, 1, "exit code (json)")
    assert_eq(doc["verdict"], "attention", "verdict")
    assert_eq(doc["sections"]["integrity"]["ok"], False, "integrity")
    assert doc["sections"]["integrity"]["error"]["message"], "error message"
    assert_eq(doc["sections"]["format"]["detected"], "torch-zip", "detected")
    assert_eq(doc["sections"]["format"]["name"], None, "not opened")


def test_doctor_truncated_protocol0_pickle():
    # doctor names the format by ckpt_detect_format, the rule ckpt_open
    # uses: a protocol 0 pickle is a pickle (its own copy saw only PROTO)
    path = tmp_file("trunc_p0.pkl", b"cposix\nsystem\np0\n(Vtouch")
    rc, doc, _ = run_json("doctor", "--json", path)
    assert_eq(rc, 1, "exit code")
    assert_eq(doc["sections"]["format"]["detected"], "pickle", "detected")
    rc, out, _ = run("doctor", path)
    lines = out.splitlines()
    assert_eq(lines[lines.index("format") + 1][:len("  pickle (")], "  pickle (",
              "format line")


@corpus
def test_doctor_not_a_checkpoint():
    # the scan's own verdict, in the first line and in the safety section
    rc, out, _ = run("doctor", BROKEN)
    assert_eq(rc, 1, "exit code")
    lines = out.splitlines()
    assert lines[0].endswith("; not-a-checkpoint"), lines[0]
    safety = lines[lines.index("safety (would loading it run code?)") + 1]
    assert_eq(safety, "  not-a-checkpoint", "safety section")
    assert "unscannable" not in out, out
    rc, doc, _ = run_json("doctor", "--json", BROKEN)
    assert_eq(doc["sections"]["safety"]["verdict"], "not-a-checkpoint",
              "JSON safety verdict")
    assert doc["summary"].endswith("; not-a-checkpoint"), doc["summary"]


@corpus
def test_doctor_sharded_index():
    rc, out, err = run("doctor", SHARDED)
    assert_eq(rc, 0, "exit code (stderr %r)" % err)
    shards = sorted(n for n in os.listdir(SHARDED_DIR)
                    if n.endswith(".safetensors"))
    size = sum(os.path.getsize(os.path.join(SHARDED_DIR, n))
               for n in os.listdir(SHARDED_DIR))
    lines = out.splitlines()
    assert lines[0].startswith("HEALTHY: safetensors-sharded, 36 keys, "), \
        lines[0]
    fmt = lines[lines.index("format") + 1]
    assert fmt.startswith("  safetensors-sharded, %d bytes (" % size), fmt
    assert fmt.endswith(" in 7 files: the index and 6 shards"), fmt
    safety = lines[lines.index("safety (would loading it run code?)") + 1]
    assert safety.startswith("  safe: "), safety
    other = lines[lines.index("integrity of the other files") + 1:]
    other = other[:other.index("")]  # the next section: from_pretrained's
    assert_eq(lines[lines.index("from_pretrained (transformers)") + 1][:6], "  OK: ",
              "transformers reads every shard's __metadata__")
    assert_eq(other[0], "  the 6 shard files of the set (integrity covers them "
              "together):", "other files heading")
    assert_eq([l.split(":")[0].strip() for l in other[1:]], shards,
              "one line per shard")
    assert "one file: see integrity" not in out, out
    rc, doc, _ = run_json("doctor", "--json", SHARDED)
    sec = doc["sections"]
    assert_eq(sec["format"]["size"], size, "set size")
    assert_eq(sec["format"]["shards"], 6, "shards")
    assert_eq(sec["safety"]["verdict"], "safe", "safety")
    files = sec["other_files"]
    assert_eq(sec["from_pretrained"], {"ok": True, "refused": []}, "from_pretrained")
    assert_eq([f["name"] for f in files], shards, "shard names")
    assert all(f["ok"] for f in files), files
    assert_eq(sum(f["bytes_checked"] for f in files),
              sec["integrity"]["bytes_checked"], "bytes add up")
    # a set that fails verification (a wrong digest in the index): each
    # shard is then verified alone
    bad = os.path.join(TMP, "sharded")
    shutil.copytree(SHARDED_DIR, bad)
    for n in os.listdir(bad):
        os.chmod(os.path.join(bad, n), 0o644)
    index = os.path.join(bad, "model.safetensors.index.json")
    with open(index) as fh:
        doc = json.load(fh)
    doc["metadata"]["ckpt.xxh3"] = {"bool_3": "0123456789abcdef"}
    with open(index, "w") as fh:
        json.dump(doc, fh)
    rc, doc, _ = run_json("doctor", "--json", index)
    assert_eq(rc, 1, "exit code, wrong digest")
    assert_eq(doc["sections"]["integrity"]["ok"], False, "set integrity")
    assert "XXH3-64" in doc["sections"]["integrity"]["error"]["message"], doc
    files = doc["sections"]["other_files"]
    assert_eq([(f["name"], f["ok"]) for f in files], [(n, True) for n in shards],
              "each shard verified alone")
    assert all(f["bytes_checked"] > 0 for f in files), files
    # a truncated shard: the set cannot be opened; the format is detected
    victim = os.path.join(bad, shards[2])
    with open(victim, "r+b") as fh:
        fh.truncate(os.path.getsize(victim) - 1)
    rc, doc, _ = run_json("doctor", "--json", index)
    assert_eq(rc, 1, "exit code, truncated shard")
    assert_eq(doc["sections"]["format"]["detected"], "safetensors-sharded",
              "detected")


def test_doctor_model_folder_missing_shard():
    """A model folder whose sharded set lacks a shard gets the report of its
    index (cannot be opened, the shard named), text and JSON, exit 1: it
    used to get no report at all, only the error on stderr."""
    folder = os.path.join(TMP, "folder-missing-shard")
    os.mkdir(folder)
    rc, _, err = run("convert", TRAIN_PT, folder, "--select", "model",
                     "--max-shard-size", "1000")
    assert_eq(rc, 0, "convert (stderr %r)" % err)
    shards = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    assert len(shards) >= 2, shards
    os.unlink(os.path.join(folder, shards[-1]))
    rc, out, _ = run("doctor", folder)
    assert_eq(rc, 1, "exit code")
    first = out.splitlines()[0]
    assert first.startswith("ATTENTION: cannot be opened: shard \"%s\"" % shards[-1]), first
    assert "  safetensors-sharded (could not be opened), " in out, out
    # the file that fails is named (the examined path is the index)
    assert "  FAILED: %s: " % os.path.join(folder, shards[-1]) in out, out
    rc, doc, _ = run_json("doctor", "--json", folder)
    assert_eq(rc, 1, "exit code, --json")
    assert_eq(doc["file"], os.path.join(folder, "model.safetensors.index.json"), "file")
    assert_eq(doc["verdict"], "attention", "verdict")
    # .bin shards (pytorch_model.bin.index.json), one truncated: the set is
    # detected as the torch set it is (it was called safetensors-sharded)
    bins = os.path.join(TMP, "folder-truncated-bin-shard")
    os.mkdir(bins)
    rc, _, err = run("convert", TRAIN_PT, bins, "--select", "model", "--format", "torch",
                     "--max-shard-size", "1000")
    assert_eq(rc, 0, "convert .bin shards (stderr %r)" % err)
    last = sorted(n for n in os.listdir(bins) if n.endswith(".bin"))[-1]
    with open(os.path.join(bins, last), "r+b") as fh:
        fh.truncate(100)
    rc, doc, _ = run_json("doctor", "--json", bins)
    assert_eq((rc, doc["sections"]["format"]["detected"]), (1, "torch-sharded"), "detected")
    assert_eq(doc["sections"]["integrity"]["error"]["file"], os.path.join(bins, last), "file")


def test_model_folder_missing_index():
    """A model folder holding a set's shards but not its index (a partial
    copy): every command names the first shard and the index it lacks,
    exit 1 as for a missing shard. It was "a directory without model
    weights" (exit 2), and doctor called the shards "several checkpoints"."""
    for fmt, index in (("safetensors", "model.safetensors.index.json"),
                       ("torch", "pytorch_model.bin.index.json")):
        folder = os.path.join(TMP, "folder-missing-index-" + fmt)
        os.mkdir(folder)
        rc, _, err = run("convert", TRAIN_PT, folder, "--select", "model", "--format", fmt,
                         "--max-shard-size", "1000")
        assert_eq(rc, 0, "convert (stderr %r)" % err)
        shards = sorted(n for n in os.listdir(folder) if n != index)
        assert len(shards) >= 2 and "-00001-of-" in shards[0], shards
        os.unlink(os.path.join(folder, index))
        want = ('cannot read: shard files of a set ("%s" and the others) without its index "%s"'
                % (shards[0], index))
        for args in (["verify"], ["inspect"], ["doctor"], ["match", "--expect", TRAIN_PT]):
            rc, out, err = run(*(args + [folder]))
            assert_eq(rc, 1, "%s exit code (stderr %r)" % (args[0], err))
            assert want in out + err, (args, out, err)
            assert "several checkpoints" not in err, err
        # one shard alone still opens
        rc, out, err = run("inspect", os.path.join(folder, shards[0]))
        assert_eq(rc, 0, "inspect one shard (stderr %r)" % err)


def test_model_folder_of_a_variant():
    """A folder whose weights are all under a variant's names, as
    save_pretrained(variant="fp16") writes them (transformers' and diffusers'
    _add_variant: the variant before the last extension; a set's shards
    model.fp16-0000K-of-0000N.safetensors, its index
    model.safetensors.index.fp16.json, as convert now names it too): verify,
    inspect and doctor read them and say from_pretrained needs
    variant="fp16". It was "a directory without model weights" (exit 2), or
    for the set "shard files ... without its index" (exit 1); convert named
    the index model.fp16.safetensors.index.json, which no loader reads."""
    layouts = {"model.fp16.safetensors": [], "diffusion_pytorch_model.fp16.safetensors": [],
               "pytorch_model.fp16.bin": ["--format", "torch"],
               "model.safetensors.index.fp16.json": ["--max-shard-size", "1000"]}
    say = 'weights of variant "fp16" only: from_pretrained(DIR, variant="fp16") reads them'
    for name, extra in layouts.items():
        folder = os.path.join(TMP, "variant-" + name)
        os.mkdir(folder)
        out = os.path.join(folder, "model.fp16.safetensors" if extra[:1] == ["--max-shard-size"]
                           else name)
        rc, _, err = run("convert", TRAIN_PT, out, "--select", "model", *extra)
        assert_eq(rc, 0, "convert (stderr %r)" % err)
        if extra[:1] == ["--max-shard-size"]:  # named as save_pretrained(variant=) names
            assert os.path.isfile(os.path.join(folder, name)), os.listdir(folder)
            assert "model.fp16-00001-of-" in " ".join(sorted(os.listdir(folder)))
        rc, text, err = run("verify", folder)
        assert_eq(rc, 0, "verify %s (stderr %r)" % (name, err))
        assert text.rstrip("\n").endswith(say), text
        rc, doc, _ = run_json("verify", "--json", folder)
        assert_eq((rc, doc["ok"], doc["variant"]), (0, True, "fp16"), "verify --json " + name)
        rc, doc, err = run_json("inspect", "--json", folder)
        assert_eq((rc, doc["variant"], doc["snapshot"]), (0, "fp16", None),
                  "inspect --json %s (stderr %r)" % (name, err))
        rc, text, err = run("inspect", folder)  # as verify and doctor say it
        assert_eq(rc, 0, "inspect %s (stderr %r)" % (name, err))
        assert text.splitlines()[0].endswith(say), text
        rc, doc, err = run_json("doctor", "--json", folder)
        assert_eq((rc, doc["verdict"], doc["file"], doc["sections"]["format"]["variant"]),
                  (0, "healthy", os.path.join(folder, name), "fp16"), "doctor " + name)
        rc, text, _ = run("doctor", folder)
        assert '\n  variant "fp16": the folder holds weights under its names only' in text, text
    # beside weights under the plain names the variant is a copy in another
    # dtype, checked, not compared ("model weights in both", exit 1, before)
    folder = os.path.join(TMP, "variant-model.fp16.safetensors")
    rc, _, err = run("convert", TRAIN_PT, os.path.join(folder, "model.safetensors"),
                     "--select", "model")
    assert_eq(rc, 0, "convert (stderr %r)" % err)
    rc, doc, err = run_json("doctor", "--json", folder)
    assert_eq((rc, doc["file"], doc["sections"]["format"]["variant"]),
              (0, os.path.join(folder, "model.safetensors"), None), "doctor, plain and variant")
    other = doc["sections"]["other_files"][0]
    assert_eq((other["name"], other["ok"], other["differs"]),
              ("model.fp16.safetensors", True, False), "the variant, checked")
    rc, doc, _ = run_json("verify", "--json", folder)
    assert_eq((rc, doc["variant"]), (0, None), "verify, plain and variant")
    # weights of two variants and none plain: which one is not known
    two = os.path.join(TMP, "variant-two")
    os.mkdir(two)
    for v in ("fp16", "bf16"):
        rc, _, err = run("convert", TRAIN_PT, os.path.join(two, "model.%s.safetensors" % v),
                         "--select", "model")
        assert_eq(rc, 0, "convert (stderr %r)" % err)
    rc, out, err = run("verify", two)
    assert_eq(rc, 2, "verify of two variants")
    assert 'only under the names of several variants ("bf16" and "fp16" at least; ' \
        'model.bf16.safetensors...)' in out, out
    # a variant's shards without their index: the index transformers reads
    sharded = os.path.join(TMP, "variant-model.safetensors.index.fp16.json")
    os.unlink(os.path.join(sharded, "model.safetensors.index.fp16.json"))
    rc, out, err = run("verify", sharded)
    assert_eq(rc, 1, "verify of a variant's shards alone")
    assert 'without its index "model.safetensors.index.fp16.json"' in out, out
    # convert of a variant folder into a folder: the variant's index is no
    # file of the folder to take along
    src = os.path.join(TMP, "variant-set")
    os.mkdir(src)
    rc, _, err = run("convert", TRAIN_PT, os.path.join(src, "model.fp16.safetensors"),
                     "--select", "model", "--max-shard-size", "1000")
    assert_eq(rc, 0, "convert (stderr %r)" % err)
    rc, _, err = run("convert", src, os.path.join(TMP, "variant-set-out") + "/")
    assert_eq(rc, 0, "convert the variant folder (stderr %r)" % err)
    assert_eq(os.listdir(os.path.join(TMP, "variant-set-out")), ["model.safetensors"], "written")


def test_hf_cache_repository():
    """A Hugging Face cache repository as huggingface_hub lays it out
    (models--ORG--NAME: blobs/ holding the bytes, snapshots/REVISION/
    linking into them, refs/main naming a revision): verify, inspect and
    doctor read the snapshot refs/main names and say which; without
    refs/main (or naming a snapshot not there) the error lists the
    snapshots. It was "a directory without model weights" (exit 2)."""
    repo = os.path.join(TMP, "hub", "models--org--tiny")
    rev, old = "0123456789abcdef0123456789abcdef01234567", "fedcba9876543210fedcba9876543210fedcba98"
    for sub in ("blobs", "refs", "snapshots/" + rev, "snapshots/" + old):
        os.makedirs(os.path.join(repo, sub))
    rc, _, err = run("convert", TRAIN_PT, os.path.join(repo, "blobs", "a1b2c3"), "--select",
                     "model", "--format", "safetensors")
    assert_eq(rc, 0, "convert (stderr %r)" % err)
    with open(os.path.join(repo, "blobs", "c0ffee"), "w") as fh:
        fh.write('{"model_type": "bert"}')
    for name, blob in (("model.safetensors", "a1b2c3"), ("config.json", "c0ffee")):
        os.symlink(os.path.join("..", "..", "blobs", blob),
                   os.path.join(repo, "snapshots", rev, name))
    os.symlink(os.path.join("..", "..", "blobs", "c0ffee"),
               os.path.join(repo, "snapshots", old, "config.json"))
    with open(os.path.join(repo, "refs", "main"), "w") as fh:
        fh.write(rev)  # huggingface_hub writes it without a newline
    rc, text, err = run("verify", repo)
    assert_eq(rc, 0, "verify the repository (stderr %r)" % err)
    assert text.rstrip("\n").endswith(
        "; snapshot %s of the Hugging Face cache repository, which refs/main names" % rev), text
    rc, doc, _ = run_json("verify", "--json", repo)
    assert_eq((rc, doc["snapshot"], doc["variant"]), (0, rev, None), "verify --json")
    rc, doc, err = run_json("inspect", "--json", repo)
    assert_eq((rc, doc["snapshot"], doc["variant"]), (0, rev, None),
              "inspect --json (stderr %r)" % err)
    rc, text, err = run("inspect", repo)  # as verify and doctor say it
    assert_eq(rc, 0, "inspect (stderr %r)" % err)
    assert text.splitlines()[0].endswith(
        "; snapshot %s of the Hugging Face cache repository, which refs/main names" % rev), text
    rc, doc, err = run_json("doctor", "--json", repo)
    assert_eq((rc, doc["verdict"], doc["file"], doc["sections"]["format"]["snapshot"]),
              (0, "healthy", os.path.join(repo, "snapshots", rev, "model.safetensors"), rev),
              "doctor --json")
    rc, text, _ = run("doctor", repo)
    assert "\n  snapshot %s of the Hugging Face cache repository, which refs/main names\n" \
        % rev in text, text
    # refs/main naming a snapshot not there, then none: the snapshots listed
    for main in ("0" * 40, None):
        if main:
            with open(os.path.join(repo, "refs", "main"), "w") as fh:
                fh.write(main)
        else:
            os.unlink(os.path.join(repo, "refs", "main"))
        for cmd in ("verify", "doctor"):
            rc, out, err = run(cmd, repo)
            assert_eq(rc, 2, "%s without a snapshot for refs/main" % cmd)
            assert ("its snapshots: %s, %s: name one, DIR/snapshots/REVISION" % (rev, old)) \
                in out + err, (out, err)
            assert ("without refs/main" if main is None else
                    'whose refs/main names snapshot "%s", which is not there' % main) \
                in out + err, (out, err)
    # refs/main there but naming no revision: a FIFO (no hang), a folder,
    # "..", a name longer than a revision's: said so (it was "without
    # refs/main"), the snapshots listed
    ref = os.path.join(repo, "refs", "main")
    for kind, why in (("fifo", "not a regular file"), ("dir", "is a directory"),
                      ("..", "not a revision name"), ("a" * 300, "longer than a revision name")):
        if kind == "fifo":
            os.mkfifo(ref)
        elif kind == "dir":
            os.mkdir(ref)
        else:
            with open(ref, "w") as fh:
                fh.write(kind)
        rc, out, err = run("verify", repo)
        assert_eq(rc, 2, "verify with refs/main %s" % kind[:8])
        assert ("whose refs/main is unusable: %s; its snapshots: %s, %s" % (why, rev, old)) \
            in out + err, (kind[:8], out, err)
        (os.rmdir if kind == "dir" else os.unlink)(ref)


def test_convert_shards_into_new_folder():
    """convert into a folder that does not exist yet, named with a
    trailing '/' (as save_pretrained makes its folder): the folder is made
    and holds transformers' names; it was "no output format" (exit 2),
    and with --format "a sharded set needs a file name". A folder whose
    parent is missing is an I/O error that leaves nothing behind."""
    for fmt, index in ((None, "model.safetensors.index.json"),
                       ("torch", "pytorch_model.bin.index.json")):
        folder = os.path.join(TMP, "new-shard-folder-%s" % (fmt or "default"))
        argv = ["convert", TRAIN_PT, folder + "/", "--select", "model",
                "--max-shard-size", "1000"] + (["--format", fmt] if fmt else [])
        rc, _, err = run(*argv)
        assert_eq(rc, 0, "convert into a new folder (stderr %r)" % err)
        assert os.path.isfile(os.path.join(folder, index)), os.listdir(folder)
        rc, _, err = run("verify", folder)
        assert_eq(rc, 0, "verify the new folder (stderr %r)" % err)
    # without --max-shard-size: the folder's one file, as save_pretrained
    # names it (it was "no output format", exit 2)
    for fmt, name in ((None, "model.safetensors"), ("torch", "pytorch_model.bin")):
        folder = os.path.join(TMP, "new-one-file-%s" % (fmt or "default"))
        rc, _, err = run("convert", TRAIN_PT, folder + "/", "--select", "model",
                         *(["--format", fmt] if fmt else []))
        assert_eq(rc, 0, "convert into a folder (stderr %r)" % err)
        assert_eq(os.listdir(folder), [name], "the folder's file")
        assert_eq(run("verify", "-q", folder)[0], 0, "verify the folder")
    # a DCP directory (not named *.dcp) is no model folder: nothing is
    # written into it (model.safetensors beside .metadata was)
    dcp = os.path.join(TMP, "a-dcp-folder")
    rc, _, err = run("convert", TRAIN_PT, dcp, "--format", "dcp")
    assert_eq(rc, 0, "convert to a DCP directory (stderr %r)" % err)
    before = sorted(os.listdir(dcp))
    for extra in ([], ["--max-shard-size", "1000"], ["--format", "torch"]):
        rc, _, err = run("convert", TRAIN_PT, dcp, "--select", "model", *extra)
        assert_eq(rc, 2, "convert %r into a DCP directory (stderr %r)" % (extra, err))
        assert "torch.distributed.checkpoint directory" in err, err
        assert_eq(sorted(os.listdir(dcp)), before, "the DCP directory untouched")
    # a new folder named without its '/': the message says how to name it
    bare = os.path.join(TMP, "new-folder-no-slash")
    rc, _, err = run("convert", TRAIN_PT, bare, "--select", "model", "--max-shard-size", "1000")
    assert_eq(rc, 2, "a name without extension or '/'")
    assert "a model folder (OUT/, with the trailing '/')" in err, err
    assert not os.path.exists(bare)
    orphan = os.path.join(TMP, "no-such-parent", "shards")
    rc, _, err = run("convert", TRAIN_PT, orphan + "/", "--select", "model",
                     "--max-shard-size", "1000")
    assert_eq(rc, 2, "exit code, missing parent")
    assert "cannot create the directory" in err, err
    assert not os.path.exists(os.path.dirname(orphan))


def test_peft_adapter_folder():
    """A PEFT adapter folder (PeftModel.save_pretrained: adapter_config.json
    and adapter_model.safetensors, or adapter_model.bin) stands for its
    adapter in every command, as a model folder stands for its weights:
    `ckpt match ADAPTER_DIR --expect` was "a directory without model
    weights" (exit 2) while `ckpt doctor` of the same folder read it.
    Model weights beside an adapter still come first (from_pretrained's
    order); a folder with neither names both kinds of file."""
    folder = os.path.join(TMP, "peft-adapter")
    os.mkdir(folder)
    with open(os.path.join(folder, "adapter_config.json"), "w") as fh:
        json.dump({"peft_type": "LORA", "r": 2, "target_modules": ["q"]}, fh)
    z = bytes(4 * 2 * 4)
    adapter = [("base_model.model.q.lora_A.weight", "F32", [2, 4], z),
               ("base_model.model.q.lora_B.weight", "F32", [4, 2], z)]
    st = os.path.join(folder, "adapter_model.safetensors")
    with open(st, "wb") as fh:
        fh.write(safetensors_bytes(adapter))
    model = tmp_file("peft-base.safetensors",
                     safetensors_bytes([("q.weight", "F32", [4, 4], bytes(64))]))
    rc, out, err = run("match", folder, "--expect", model)
    assert_eq(rc, 1, "match the adapter folder (stderr %r)" % err)
    assert "a PEFT LoRA adapter, not weights of this model (2 lora_A/lora_B keys for " \
        "1 target modules): every target module is in the expected model" in out, out
    for cmd in (["inspect", "--json"], ["verify", "--json"]):
        rc, doc, err = run_json(*cmd, folder)
        assert_eq((rc, doc["file"] if "file" in doc else None), (0, folder), " ".join(cmd))
    rc, doc, _ = run_json("inspect", "--json", folder)
    assert_eq([t["name"] for t in doc["tensors"]], [a[0] for a in adapter], "adapter keys")
    # doctor calls it an adapter (it said "weights only: a deployment file")
    rc, out, _ = run("doctor", folder)
    assert_eq(rc, 0, "doctor of the adapter folder")
    assert out.splitlines()[0].endswith(
        "; a PEFT LoRA adapter (2 lora_A/lora_B keys for 1 target module): apply it to its "
        "base model; not a resume checkpoint"), out
    rc, out, _ = run("doctor", model)  # a plain state dict still is a deployment file
    assert out.splitlines()[0].endswith("weights only: a deployment file, not a resume "
                                        "checkpoint"), out
    # adapter_model.bin (PEFT's safe_serialization=False) when no safetensors
    os.remove(st)
    rc, _, err = run("convert", model, os.path.join(folder, "adapter_model.bin"))
    assert_eq(rc, 0, "convert (stderr %r)" % err)
    rc, doc, _ = run_json("inspect", "--json", folder)
    assert_eq((rc, [t["name"] for t in doc["tensors"]]), (0, ["q.weight"]), "the .bin")
    # model weights first
    rc, _, err = run("convert", TRAIN_PT, os.path.join(folder, "model.safetensors"),
                     "--select", "model")
    assert_eq(rc, 0, "convert (stderr %r)" % err)
    rc, doc, _ = run_json("inspect", "--json", folder)
    assert_eq((rc, "q.weight" in [t["name"] for t in doc["tensors"]]), (0, False),
              "model.safetensors before the adapter")
    empty = os.path.join(TMP, "peft-empty")
    os.mkdir(empty)
    rc, _, err = run("inspect", empty)
    assert_eq(rc, 2, "an empty folder")
    assert "model.safetensors" in err and "adapter_model.safetensors" in err, err


def test_trainer_output_directory_names_its_latest_checkpoint():
    """Trainer's output_dir holds checkpoint-N folders, not weights: every
    command said "a directory without model weights" (doctor: "no
    checkpoint file in the directory"); the message now names the latest
    folder, by transformers' get_last_checkpoint rule (the highest N, as a
    number: checkpoint-1000 after checkpoint-600; other names ignored)."""
    out = os.path.join(TMP, "trainer-output")
    for name in ("checkpoint-600", "checkpoint-1000", "checkpoint-x", "runs"):
        os.makedirs(os.path.join(out, name))
    tmp_file("trainer-output/checkpoint-99999", b"a file, not a checkpoint folder")
    latest = os.path.join(out, "checkpoint-1000")
    for cmd in (["doctor"], ["inspect"], ["verify"], ["match", "--expect", TRAIN_PT]):
        rc, text, err = run(cmd[0], out, *cmd[1:])
        assert_eq(rc, 2, " ".join(cmd))
        assert "a Trainer output directory, whose checkpoints are its checkpoint-N " \
            "folders: name one (the latest: %s)" % latest in text + err, (cmd, text, err)
    rc, _, err = run("doctor", os.path.join(TMP, "peft-empty"))
    assert_eq(rc, 2, "doctor of an empty folder")
    assert "no checkpoint file in the directory\n" in err, err


def test_weights_file_is_read_as_its_name_says():
    """A model folder's weights file is read by its loaders as its name
    says, not by its bytes: from_pretrained, diffusers, PEFT and torch.load
    >= 2.13 (a path ending .safetensors) read "*.safetensors" with
    safetensors, and a ".bin" with torch.load, which reads only torch.save
    files. A torch.save zip named model.safetensors ("header too large"), a
    safetensors file or a plain pickle named pytorch_model.bin ("invalid
    load key", "Invalid magic number") were OK for verify and HEALTHY for
    doctor, through the folder and by path, as ckpt read them by content
    (exit 0); torch 2.13 and 1.13 fail on each. Now CORRUPT naming the file
    and what its name is read as (exit 1); doctor of the folder reports
    that file (it said "no checkpoint file in the directory", exit 2, for
    any weights file that did not open). convert wrote such files when
    --format contradicted the name (exit 0); it refuses them now (exit 2)."""
    os.mkdir(os.path.join(TMP, "misnamed-out"))
    with open(TRAIN_PT, "rb") as fh:
        pt = fh.read()
    with open(TRAIN_ST, "rb") as fh:
        st = fh.read()
    plain = pickle.dumps({"w": [1.0, 2.0]}, protocol=2)
    cases = [("model.safetensors", pt, "a torch-zip file named model.safetensors: its "
              "loaders read that name as safetensors"),
             ("pytorch_model.bin", st, "a safetensors file named pytorch_model.bin: its "
              "loaders read that name as torch.save"),
             ("pytorch_model.bin", plain, "a pickle file named pytorch_model.bin: its "
              "loaders read that name as torch.save"),
             ("diffusion_pytorch_model.safetensors", pt, "a torch-zip file named "
              "diffusion_pytorch_model.safetensors"),
             ("adapter_model.bin", st, "a safetensors file named adapter_model.bin")]
    for i, (name, data, says) in enumerate(cases):
        folder = os.path.join(TMP, "misnamed-%d" % i)
        os.mkdir(folder)
        with open(os.path.join(folder, "config.json"), "w") as fh:
            fh.write("{}")
        path = tmp_file("misnamed-%d/%s" % (i, name), data)
        for target in (folder, path):
            for cmd in ("verify", "inspect", "doctor"):
                rc, out, err = run(cmd, target)
                assert_eq(rc, 1, "%s %s (stderr %r)" % (cmd, target, err))
                assert says in out + err, (cmd, target, out, err)
    # each name holding what its loader reads opens as before
    folder = os.path.join(TMP, "named-right")
    os.mkdir(folder)
    for name, data in (("model.safetensors", st), ("pytorch_model.bin", pt)):
        path = tmp_file("named-right/" + name, data)
        rc, _, err = run("verify", path)
        assert_eq(rc, 0, "verify %s (stderr %r)" % (name, err))
    rc, _, err = run("verify", folder)
    assert_eq(rc, 0, "verify the folder (stderr %r)" % err)
    # a shard, by the same rule (its index's extension)
    for ext, data, says in ((".safetensors", pt, "is torch-zip, expected a safetensors file"),
                            (".bin", st, "is safetensors, expected a torch.save file")):
        shard = "model-00001-of-00001" + ext
        os.mkdir(os.path.join(TMP, "misnamed-set" + ext))
        tmp_file("misnamed-set%s/%s" % (ext, shard), data)
        index = tmp_file("misnamed-set%s/model%s.index.json" % (ext, ext),
                         json.dumps({"weight_map": {"w": shard}}).encode())
        rc, out, err = run("verify", index)
        assert_eq(rc, 1, "verify the set of %s shards (stderr %r)" % (ext, err))
        assert 'shard "%s" %s' % (shard, says) in out + err, (out, err)
    # convert does not write such a file: --format against the name
    for name, src, fmt, says in (("model.safetensors", TRAIN_PT, "torch", "a torch-zip file"),
                                 ("pytorch_model.bin", TRAIN_ST, "safetensors",
                                  "a safetensors file")):
        out = os.path.join(TMP, "misnamed-out", name)
        rc, _, err = run("convert", src, out, "--format", fmt)
        assert_eq((rc, os.path.exists(out)), (2, False), "convert to %s (stderr %r)" % (name, err))
        assert says + " is not written under this name" in err, err
    out = os.path.join(TMP, "misnamed-out", "pytorch_model.bin")
    rc, _, err = run("convert", TRAIN_ST, out)  # the format from the name
    assert_eq(rc, 0, "convert to pytorch_model.bin (stderr %r)" % err)
    # any path ending in .safetensors: torch.load >= 2.13 hands it to
    # safetensors too (before: a lone weights.safetensors holding a torch.save
    # zip was OK / HEALTHY and convert wrote one); other names by content
    lone = tmp_file("misnamed-out/weights.safetensors", pt)
    for cmd in ("verify", "inspect", "doctor"):
        rc, out, err = run(cmd, lone)
        assert_eq(rc, 1, "%s %s (stderr %r)" % (cmd, lone, err))
        assert "a torch-zip file named weights.safetensors: its loaders read that name as " \
               "safetensors (safetensors.safe_open, torch.load >= 2.13)" in out + err, (out, err)
        assert "rename it to what it holds" in out + err, (out, err)
    out = os.path.join(TMP, "misnamed-out", "other.safetensors")
    rc, _, err = run("convert", TRAIN_PT, out, "--format", "torch")
    assert_eq((rc, os.path.exists(out)), (2, False), "convert to %s (stderr %r)" % (out, err))
    for name, data in (("weights.pt", st), ("weights.ckpt", pt), ("w.bin2", st)):
        rc, _, err = run("verify", tmp_file("misnamed-out/" + name, data))
        assert_eq(rc, 0, "verify %s (stderr %r)" % (name, err))


def test_convert_shards_replace_one_file():
    """A set of several shards written where an earlier save left the
    one-file name (model.safetensors): transformers and ckpt open that name
    before the index, so the folder loaded the old weights although convert
    said it wrote the new ones. The old file goes once the index is
    written (--backup: model.safetensors.bak)."""
    for backup in ([], ["--backup"]):
        folder = os.path.join(TMP, "shadow%s" % "".join(backup))
        os.mkdir(folder)
        single = os.path.join(folder, "model.safetensors")
        with open(single, "wb") as fh:
            fh.write(open(TRAIN_ST, "rb").read())
        rc, _, err = run("convert", TRAIN_PT, folder, "--select", "model",
                         "--max-shard-size", "1000", *backup)
        assert_eq(rc, 0, "convert (stderr %r)" % err)
        assert not os.path.exists(single), os.listdir(folder)
        assert_eq(os.path.exists(single + ".bak"), bool(backup), ".bak kept")
        rc, doc, _ = run_json("inspect", "--json", folder)
        assert_eq((rc, doc["format"]), (0, "safetensors-sharded"), "what the folder opens as")


def test_convert_reshard_retires_old_shards():
    """Resharding into fewer shards (and into one file) left the previous
    layout's shards beside the new index: a loader globbing *.safetensors,
    and a later reshard, took them for part of the set. Once the new set
    is written, the files the old index named and the new set does not
    are removed (--backup: renamed NAME.bak), and so is the old index
    when the new set is one file; a file the old index did not name stays."""
    for backup in ([], ["--backup"]):
        folder = os.path.join(TMP, "reshard%s" % "".join(backup))
        os.mkdir(folder)
        stray = os.path.join(folder, "notes.safetensors")  # named by no index
        with open(stray, "wb") as fh:
            fh.write(b"x")

        def shards():
            return sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
        rc, _, err = run("convert", TRAIN_PT, folder, "--select", "model",
                         "--max-shard-size", "500", *backup)
        assert_eq(rc, 0, "convert into many shards (stderr %r)" % err)
        many = shards()
        assert len(many) >= 4, many
        rc, _, err = run("convert", os.path.join(folder, "model.safetensors.index.json"),
                         folder, "--max-shard-size", "1500", *backup)
        assert_eq(rc, 0, "reshard into fewer (stderr %r)" % err)
        fewer = shards()
        n = len(fewer) - 1
        assert 2 <= n < len(many) - 1, (many, fewer)
        assert_eq(fewer, sorted(["model-%05d-of-%05d.safetensors" % (k + 1, n)
                                 for k in range(n)] + ["notes.safetensors"]), "shards left")
        baks = sorted(b for b in os.listdir(folder) if b.endswith(".safetensors.bak"))
        assert_eq(baks, sorted(m + ".bak" for m in many if m != "notes.safetensors")
                  if backup else [], ".bak files")
        assert_eq(run("verify", "-q", folder)[0], 0, "verify the resharded folder")
        rc, _, err = run("convert", os.path.join(folder, "model.safetensors.index.json"),
                         folder, *backup)
        assert_eq(rc, 0, "reshard into one file (stderr %r)" % err)
        assert_eq(shards(), ["model.safetensors", "notes.safetensors"], "one file left")
        assert_eq(os.path.exists(os.path.join(folder, "model.safetensors.index.json")), False,
                  "the old index removed")
        assert_eq(os.path.exists(os.path.join(folder, "model.safetensors.index.json.bak")),
                  bool(backup), "the old index kept as .bak")
        rc, doc, _ = run_json("inspect", "--json", folder)
        assert_eq((rc, doc["format"]), (0, "safetensors"), "what the folder opens as")


def test_doctor_model_folder_both_formats():
    """A Hugging Face folder shipping model.safetensors and pytorch_model.bin
    (copies of one save): doctor reports the file from_pretrained reads,
    as inspect, verify and match of the folder do; it reported the .bin
    when that held more bytes (a tied lm_head counted twice in a real one).
    The copies must hold the same weights: a .bin that differs (another
    revision left beside the safetensors) was called healthy."""
    folder = os.path.join(TMP, "folder-both-formats")
    os.mkdir(folder)
    for out in ("model.safetensors", "pytorch_model.bin"):
        rc, _, err = run("convert", TRAIN_PT, os.path.join(folder, out), "--select", "model")
        assert_eq(rc, 0, "convert (stderr %r)" % err)
    rc, doc, _ = run_json("doctor", "--json", folder)
    assert_eq((rc, doc["file"]), (0, os.path.join(folder, "model.safetensors")), "file")
    assert_eq(doc["sections"]["format"]["name"], "safetensors", "format")
    assert_eq(doc["sections"]["other_files"][0]["differs"], False, "differs")
    rc, ins, _ = run_json("inspect", "--json", folder)
    assert_eq(ins["format"], "safetensors", "inspect of the folder")
    # both copies listed under memory, one counted (2704 bytes; the sum of
    # both, 5.3 KiB, was given)
    rc, text, _ = run("doctor", folder)
    assert "\n  total: model 2.6 KiB\n" in text, text
    # a .bin of other weights: one key fewer
    rc, _, err = run("convert", TRAIN_PT, os.path.join(folder, "pytorch_model.bin"),
                     "--select", "model", "--exclude", "model.fc2.bias")
    assert_eq(rc, 0, "convert (stderr %r)" % err)
    rc, text, _ = run("doctor", folder)
    assert_eq(rc, 1, "exit code, the copies differ")
    want = ("pytorch_model.bin: holds other weights than model.safetensors, which loaders read "
            "first: 1 key only in model.safetensors (first: fc2.bias)")
    assert text.startswith("ATTENTION: " + want + "\n"), text
    assert "\n  pytorch_model.bin: DIFFERS: holds other weights" in text, text
    rc, doc, _ = run_json("doctor", "--json", folder)
    other = doc["sections"]["other_files"][0]
    assert_eq((rc, other["ok"], other["differs"]), (1, False, True), "JSON")


@corpus
def test_doctor_ckpt_written_safetensors():
    out = os.path.join(TMP, "written.safetensors")
    rc, _, err = run("convert", MNIST_PT, out)
    assert_eq(rc, 0, "convert (stderr %r)" % err)
    rc, text, _ = run("doctor", out)
    lines = text.splitlines()
    integrity = lines[lines.index("integrity") + 1]
    assert integrity.endswith(", per-tensor XXH3-64 digests checked"), integrity
    rc, doc, _ = run_json("doctor", "--json", out)
    notes = doc["sections"]["not_vouched_for"]
    assert any(n.startswith("per-tensor XXH3-64 digests checked") for n in notes), \
        notes
    assert not any("carry no checksum" in n for n in notes), notes


@corpus
def test_doctor_weights_only_no_warnings():
    # a plain state dict is a deployment file; fp32 only: no AMP either
    for path in (MNIST_ST, MNIST_PT):
        rc, out, _ = run("doctor", path)
        assert "weights-only" in out, out
        assert "warning:" not in out, out
        rc, doc, _ = run_json("doctor", "--json", path)
        assert_eq(doc["resume"]["warnings"], [], "warnings of " + path)


def test_doctor_help():
    rc, out, _ = run("help", "doctor")
    assert_eq(rc, 0, "exit code")
    assert "0 healthy, 1 needs attention (corrupt, unsafe, partial resume...), " \
        "2 usage or I/O error." in out, out
    assert "unreadable" not in out, out


@corpus
def test_doctor_flipped_byte():
    with open(CHECKPOINT, "rb") as fh:
        data = bytearray(fh.read())
    member, off = zip_member_data_offset(CHECKPOINT, "/data/0")
    data[off] ^= 0x01
    path = tmp_file("flipped_doctor.pt", bytes(data))
    rc, doc, _ = run_json("doctor", "--json", path)
    assert_eq(rc, 1, "exit code")
    assert_eq(doc["sections"]["integrity"]["error"]["member"], member,
              "member")
    assert member in doc["summary"], doc["summary"]


def test_doctor_opaque_object():
    # {"args": argparse.Namespace(lr=0.1), "epoch": 3}, written by hand
    # so that nothing is imported to build it.
    blob = (b"\x80\x02}q\x00(X\x04\x00\x00\x00argsq\x01cargparse\nNamespace\n"
            b"q\x02)\x81q\x03}q\x04X\x02\x00\x00\x00lrq\x05G?\xb9\x99\x99\x99"
            b"\x99\x99\x9asbX\x05\x00\x00\x00epochq\x06K\x03u.")
    path = tmp_file("opaque.pkl", blob)
    rc, out, _ = run("doctor", path)
    assert_eq(rc, 1, "exit code")
    assert out.startswith("ATTENTION: ") and "opaque" in out.splitlines()[0],\
        out
    rc, doc, _ = run_json("doctor", "--json", path)
    assert any("argparse.Namespace" in s and "args" in s
               for s in doc["sections"]["not_vouched_for"]), doc
    rc, doc, _ = run_json("inspect", "--json", path)
    assert_eq(doc["values"], [
        {"name": "args", "type": "object", "value": "argparse.Namespace"},
        {"name": "epoch", "type": "int", "value": 3}], "values")


def test_doctor_missing():
    rc, out, err = run("doctor", os.path.join(TMP, "missing.pt"))
    assert_eq(rc, 2, "exit code")
    assert err.startswith("ckpt: "), err


def test_limit_exceeded():
    """A limit hit is no finding about the file: every command says which
    limit and how to raise it, exits 2, and verify never says CORRUPT."""
    header = json.dumps({"t": {"dtype": "U8", "shape": [1] * 65,
                               "data_offsets": [0, 1]}}).encode()
    path = os.path.join(TMP, "deep.safetensors")
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header + b"x")
    rc, out, err = run("verify", path)
    assert_eq(rc, 2, "verify exit code")
    assert out.startswith("ERROR ") and "CORRUPT" not in out, out
    assert "limit exceeded: " in out and "ckpt_limits.max_ndim" in out, out
    for cmd in (["inspect"], ["scan"], ["convert", path + ".out.safetensors"]):
        rc, out, err = run(cmd[0], path, *cmd[1:])
        if cmd[0] == "scan":
            assert "CORRUPT" not in out + err, out + err
            continue
        assert_eq(rc, 2, cmd[0] + " exit code")
        assert "limit exceeded: " in err and "ckpt_limits.max_ndim" in err, err
    rc, out, err = run("doctor", path)
    assert_eq(rc, 2, "doctor exit code")
    assert "limit exceeded: " in out and "corrupt" not in out, out


# ------------------------------------------------------------------ usage

@corpus
def test_convert_backup():
    out = os.path.join(TMP, "backup.safetensors")
    example = os.path.join(os.environ.get("CKPT_SRC", "."), "examples/train.pt")
    rc, _, err = run("convert", example, out)
    assert_eq(rc, 0, "first convert (stderr %r)" % err)
    rc, _, err = run("convert", "--backup", MNIST_ST, out)
    assert_eq(rc, 0, "convert --backup (stderr %r)" % err)
    rc, new, _ = run_json("inspect", "--json", out)
    rc2, old, _ = run_json("inspect", "--json", out + ".bak")
    assert_eq((rc, rc2), (0, 0), "both readable")
    assert_eq(len(new["tensors"]), 20, "new file: mnist's tensors")
    assert_eq(len(old["tensors"]), 16, "backup: the example's tensors")
    assert not [n for n in os.listdir(TMP) if ".tmp-" in n], "temporary files left"


@corpus
def test_doctor_wrapper_prefix():
    # mnist.pt as nn.DataParallel would have saved it
    dp = os.path.join(TMP, "mnist_dp.pt")
    rc, _, err = run("rename", MNIST_PT, dp, "--add-prefix", "module.")
    assert_eq(rc, 0, "rename (stderr %r)" % err)
    rc, doc, _ = run_json("doctor", "--json", dp)
    assert_eq(rc, 1, "exit code")
    assert_eq(doc["summary"], "ATTENTION: keys: 'module.' on 20 keys", "verdict line")
    assert_eq(doc["sections"]["keys"],
              {"wrappers": [{"segment": "module.", "keys": 20, "leading": True}],
               "fix": "--strip-prefix module.",
               "fix_python": "sd = {k.removeprefix('module.'): v for k, v in sd.items()}",
               "root": "", "collision": None}, "keys section")
    rc, out, _ = run("doctor", dp)
    assert ("fix: ckpt rename %s OUT --strip-prefix module." % dp) in out, out


@corpus
def test_inspect_text_bookkeeping_metadata():
    out_st = os.path.join(TMP, "bookkeeping.safetensors")
    rc, _, err = run("convert", CHECKPOINT, out_st)
    assert_eq(rc, 0, "convert (stderr %r)" % err)
    rc, doc, _ = run_json("inspect", "--json", out_st)
    structure = doc["metadata"]["ckpt.structure"]
    assert len(structure) > 80, structure
    rc, out, _ = run("inspect", out_st)
    assert_eq(rc, 0, "exit code")
    line = [l for l in out.splitlines() if l.strip().startswith("ckpt.structure = ")]
    assert_eq(line, ["  ckpt.structure = (%d bytes of JSON; --json shows it)"
                     % len(structure.encode())], "structure line")
    assert structure not in out, "full structure JSON in the table"


def test_usage():
    cases = [
        (("inspect", TRAIN_PT, "--bogus"), 2),
        (("verify", "--bogus", TRAIN_PT), 2),
        (("doctor", TRAIN_PT, "-x"), 2),
        (("inspect", TRAIN_PT, "--hash", "md5"), 2),
        (("inspect",), 2),
        (("verify",), 2),
        (("doctor",), 2),
        (("inspect", "--summary", TRAIN_PT, TRAIN_PT), 2),
        (("frobnicate",), 2),
        ((), 2),
        (("help", "frobnicate"), 2),
        (("--help",), 0),
        (("help",), 0),
        (("help", "verify"), 0),
        (("inspect", "--help"), 0),
        (("--version",), 0),
    ]
    for args, want in cases:
        rc, out, err = run(*args)
        assert_eq(rc, want, "exit code of ckpt %s" % " ".join(args))
        if want == 2:
            assert "usage" in err, "usage on stderr for %r" % (args,)
    rc, out, _ = run("--help")
    for name in ("inspect", "verify", "doctor"):
        assert re.search(r"^  %s " % name, out, re.M), "%s in --help" % name
    assert re.match(r"^ckpt \d+\.\d+\.\d+ \(libckpt \d+\.\d+\.\d+\)\n$",
                    run("--version")[1])
    assert run("help", "inspect")[1].startswith("usage: ckpt inspect")
    # the unknown command is named (was "ckpt: help: unknown command")
    assert run("help", "frobnicate")[2].startswith("ckpt help: unknown command 'frobnicate'\n")
    # the formats the tool opens, directories included
    assert "torch.distributed.checkpoint" in out and "sharded sets" in out, out


COMMANDS = ("inspect", "verify", "doctor", "scan", "store", "match", "diff",
            "rename", "convert")


def test_help_from_option_table():
    # help and parser come from one table: every option the help names is
    # parsed (never "unknown option"), and the help names what the README
    # documents
    for cmd in COMMANDS:
        rc, out, _ = run("help", cmd)
        assert_eq(rc, 0, "help %s" % cmd)
        assert out.startswith("usage: ckpt %s" % cmd), out
        names = set(re.findall(r"^  (?:-[a-z], )?(--[a-z-]+)", out, re.M))
        synopsis = out.split("\n\n")[0]
        assert_eq(set(re.findall(r"--[a-z-]+", synopsis)), names,
                  "%s: options of the synopsis and of the list" % cmd)
        for opt in names:
            # a subcommand's option: after the subcommand whose line has it
            line = [l for l in synopsis.splitlines() if opt in l][0]
            args = line.split()[1:4] if cmd == "store" else [cmd]
            rc, _, err = run(*(args[:2] + [opt, "x"]))
            assert "unknown option" not in err, (cmd, opt, err)
    assert "--summary" in run("help", "inspect")[1]
    assert run("help", "doctor")[1].startswith("usage: ckpt doctor FILE|DIR [--json]\n")


def test_option_grammar():
    # GNU grammar for every command: --opt=V, --opt V, "--" ends options
    rc, doc, _ = run_json("inspect", "--hash=sha256", "--json", "--", TRAIN_ST)
    assert_eq(rc, 0, "inspect --hash=sha256 --")
    assert all(len(t["sha256"]) == 64 for t in doc["tensors"]), "digests"
    out = os.path.join(TMP, "grammar.safetensors")
    rc, _, err = run("convert", "--format=safetensors", "--meta=k=v", TRAIN_PT, out)
    assert_eq(rc, 0, "convert --format=... (stderr %r)" % err)
    rc, doc, _ = run_json("inspect", "--json", out)
    assert_eq(doc["metadata"]["k"], "v", "--meta=k=v")
    # usage errors name the offender and exit 2
    for args, msg in ((("verify", "--frob", TRAIN_ST), "unknown option '--frob'"),
                      (("doctor", TRAIN_ST, "--json=1"), "--json takes no value"),
                      (("match", TRAIN_ST, "--expect"), "--expect needs a value"),
                      (("match", TRAIN_ST, "--expect", "a", "--expect=b"),
                       "--expect given twice"),
                      (("diff", TRAIN_ST), "missing B"),
                      (("store", "commit", TMP, "--name", "g", TRAIN_ST),
                       "missing --step N"),
                      (("diff", TRAIN_ST, TRAIN_PT, TRAIN_PT), "unexpected argument")):
        rc, out, err = run(*args)
        assert_eq(rc, 2, "exit code of %r" % (args,))
        assert msg in err.splitlines()[0], (args, err)
        assert err.splitlines()[1].startswith("usage: ckpt "), (args, err)
        assert_eq(out, "", "nothing on stdout for %r" % (args,))


@corpus
def test_no_crash_on_corpus():
    """Every corpus file: no signal, exit code in {0, 1}, valid JSON."""
    bad = []
    for rel in sorted(json.loads(l)["file"] for l in
                      open(os.path.join(CORPUS, "expected.jsonl"))):
        path = os.path.join(CORPUS, rel)
        for args in (("inspect", "--json", path), ("verify", path),
                     ("doctor", "--json", path)):
            rc, out, err = run(*args)
            if rc not in (0, 1):
                bad.append("%s -> %d %s" % (" ".join(args), rc, err.strip()))
            elif rc == 0 or args[0] == "doctor":
                if args[1] == "--json":
                    json.loads(out)
    assert not bad, "\n  ".join(bad)


def test_python_import_says_how_to_build_libckpt():
    """python/ckpt of a source tree without build/libckpt.so: the
    ImportError names every place looked and the command that builds it."""
    root = tempfile.mkdtemp(prefix="ckpt-import-")
    try:
        shutil.copytree(os.path.join(SRC, "python", "ckpt"), os.path.join(root, "python", "ckpt"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.so*", "bin"))
        shutil.copytree(os.path.join(SRC, "include"), os.path.join(root, "include"))
        env = {k: v for k, v in os.environ.items() if k not in ("CKPT_LIB", "LD_LIBRARY_PATH")}
        env["PYTHONPATH"] = os.path.join(root, "python")
        p = subprocess.run([sys.executable, "-c", "import ckpt"], capture_output=True, env=env,
                           cwd=root, timeout=120)
        err = p.stderr.decode()
        if "cannot load libckpt.so" not in err and p.returncode == 0:
            return  # a libckpt.so.1 installed system-wide was loaded instead
        assert_eq(p.returncode, 1, "import fails")
        for want in ("ImportError: ckpt: cannot load libckpt.so; looked in: ",
                     os.path.join(root, "build", "libckpt.so") + " (no such file)",
                     "cd %s && cmake -S . -B build && cmake --build build --target ckpt_shared"
                     % root, "pip install %s" % root, "set CKPT_LIB"):
            assert want in err, "%r not in %r" % (want, err)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main():
    try:
        return run_cases(globals(), __file__)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
