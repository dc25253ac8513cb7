#!/usr/bin/python3
"""`ckpt convert DIR OUT/` of a Hugging Face model folder writes the
weights and the folder's other files (config.json, generation_config.json,
the tokenizer's), so that from_pretrained(OUT) finds what it found in DIR;
before, OUT held the weights alone. Not copied: the weights and their
index, hidden files, subfolders, checkpoints by their first bytes
(optimizer.pt, training_args.bin: training state, pickles), nor
trainer_state.json (the Trainer's training state, JSON). A symbolic
link inside DIR is copied as the file it leads to; one leading out of DIR
is refused before anything is written. Each file is written atomically
(no temporary file left). A file OUT (DIR/model.safetensors) gets the
weights alone. The inputs are written here (safetensors by hand, a torch
zip's first bytes): the CLI alone runs. Environment: CKPT_BIN. Ends with
"N passed, N failed"."""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import suite  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", "ckpt")
ROOT = None
OTHERS = {"config.json": b'{"model_type": "bert", "hidden_size": 2}\n',
          "generation_config.json": b'{"max_length": 20}\n',
          "tokenizer.json": b'{"version": "1.0", "model": {"type": "WordPiece"}}\n',
          "vocab.txt": b"cat\ndog\n",  # a protocol 0 pickle opcode first: text all the same
          "special_tokens_map.json": b"{}",
          "README.md": b"---\nlicense: mit\n---\n"}




def folder(name):
    d = os.path.join(ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "runs"))
    files = dict(OTHERS)
    files["model.safetensors"] = suite.safetensors({"w": [1.0, 2.0]})
    files["optimizer.pt"] = b"PK\x03\x04" + b"\0" * 60  # a zip: training state
    files["training_args.bin"] = b"\x80\x02cbuiltins\nprint\n."  # a pickle
    # the Trainer's step and log history: training state in JSON (it was copied)
    files["trainer_state.json"] = b'{"global_step": 500, "epoch": 1.0, "log_history": []}\n'
    files[".gitattributes"] = b"*.bin filter=lfs\n"
    files["runs/events"] = b"x"
    for n, b in files.items():
        with open(os.path.join(d, n), "wb") as fh:
            fh.write(b)
    return d


def ckpt(*argv):
    p = subprocess.run([CKPT] + list(argv), capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def contents(d):
    got = {}
    for n in os.listdir(d):
        if os.path.isdir(os.path.join(d, n)):
            continue
        with open(os.path.join(d, n), "rb") as fh:
            got[n] = fh.read()
    return got


def test_the_other_files_go_with_the_weights():
    d = folder("bert")
    out = os.path.join(ROOT, "out")
    rc, _, err = ckpt("convert", d, out + "/")
    assert rc == 0, (rc, err)
    got = contents(out)
    assert sorted(got) == sorted(list(OTHERS) + ["model.safetensors"]), sorted(got)
    assert all(got[n] == b for n, b in OTHERS.items()), got
    rc, _, err = ckpt("verify", out)
    assert rc == 0, err
    # again, over the first output: replaced, still no temporary file left
    with open(os.path.join(d, "config.json"), "wb") as fh:
        fh.write(b'{"model_type": "bert", "hidden_size": 4}\n')
    rc, _, err = ckpt("convert", d, out)
    assert rc == 0 and sorted(os.listdir(out)) == sorted(got), (rc, err, os.listdir(out))
    assert contents(out)["config.json"].endswith(b'4}\n'), contents(out)["config.json"]


def test_a_link_inside_is_its_file_a_link_out_is_refused():
    d = folder("linked")
    os.rename(os.path.join(d, "tokenizer.json"), os.path.join(d, "tok.data"))
    os.symlink("tok.data", os.path.join(d, "tokenizer.json"))
    out = os.path.join(ROOT, "linked-out")
    rc, _, err = ckpt("convert", d, out + "/")
    got = contents(out)
    assert rc == 0 and got["tokenizer.json"] == OTHERS["tokenizer.json"], (rc, err)
    assert not os.path.islink(os.path.join(out, "tokenizer.json"))
    outside = os.path.join(ROOT, "blob")
    with open(outside, "wb") as fh:
        fh.write(b"{}")
    os.symlink(outside, os.path.join(d, "added_tokens.json"))
    out = os.path.join(ROOT, "refused")
    rc, _, err = ckpt("convert", d, out + "/")
    assert rc == 2 and "added_tokens.json" in err and "symbolic link out of the folder" in err, \
        (rc, err)
    assert not os.path.exists(out), os.listdir(out)


def test_a_cache_snapshot_links_to_its_blobs():
    """huggingface_hub's cache: REPO/snapshots/REV/NAME -> ../../blobs/HASH
    for every file; the snapshot is what from_pretrained resolves to, and
    converting it is the common case. A link to another repository's
    blobs, or to a blobs folder not beside snapshots/, stays refused."""
    repo = os.path.join(ROOT, "models--org--name")
    snap = os.path.join(repo, "snapshots", "0123abcd")
    blobs = os.path.join(repo, "blobs")
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(snap)
    os.makedirs(blobs)
    files = {"config.json": OTHERS["config.json"], "tokenizer.json": OTHERS["tokenizer.json"],
             "model.safetensors": suite.safetensors({"w": [1.0, 2.0]})}
    for i, (n, b) in enumerate(sorted(files.items())):
        with open(os.path.join(blobs, "%040x" % i), "wb") as fh:
            fh.write(b)
        os.symlink(os.path.join("..", "..", "blobs", "%040x" % i), os.path.join(snap, n))
    out = os.path.join(ROOT, "snap-out")
    rc, _, err = ckpt("convert", snap, out + "/")
    got = contents(out)
    assert rc == 0 and sorted(got) == sorted(files), (rc, err, sorted(got))
    assert got["config.json"] == files["config.json"], got["config.json"]
    assert not any(os.path.islink(os.path.join(out, n)) for n in got), os.listdir(out)
    other = os.path.join(ROOT, "models--org--other", "blobs")
    os.makedirs(other, exist_ok=True)
    with open(os.path.join(other, "f" * 40), "wb") as fh:
        fh.write(b"{}")
    os.symlink(os.path.join(other, "f" * 40), os.path.join(snap, "added_tokens.json"))
    out = os.path.join(ROOT, "snap-refused")
    rc, _, err = ckpt("convert", snap, out + "/")
    assert rc == 2 and "added_tokens.json" in err and "symbolic link out of the folder" in err, \
        (rc, err)
    assert not os.path.exists(out), os.listdir(out)


def test_a_file_output_is_the_weights_alone():
    d = folder("alone")
    out = os.path.join(ROOT, "alone-out")
    os.makedirs(out)
    rc, _, err = ckpt("convert", d, os.path.join(out, "model.safetensors"))
    assert rc == 0 and os.listdir(out) == ["model.safetensors"], (rc, err, os.listdir(out))
    # a folder converted into itself copies nothing onto itself
    before = contents(d)
    rc, _, err = ckpt("convert", d, d + "/")
    after = contents(d)
    assert rc == 0 and sorted(after) == sorted(before), (rc, err, sorted(after))
    assert all(after[n] == before[n] for n in OTHERS), err


def test_a_folder_output_over_an_existing_file_is_refused():
    """OUT/ naming a file: said so (before: "cannot create temporary file
    .../.model.safetensors.tmp-...: Not a directory"), exit 2, the file
    untouched."""
    d = folder("over-file")
    single = os.path.join(ROOT, "single.safetensors")
    with open(single, "wb") as fh:
        fh.write(b"old")
    for out in (single + "/", single + "/sub/"):
        rc, _, err = ckpt("convert", d, out)
        assert rc == 2 and "names a directory, but a file that is not a directory stands in " \
            "that path" in err, (rc, err)
    with open(single, "rb") as fh:
        assert fh.read() == b"old"
    assert not [n for n in os.listdir(ROOT) if ".tmp-" in n], os.listdir(ROOT)


def put(d, name, data):
    with open(os.path.join(d, name), "wb") as fh:
        fh.write(data)


def test_stale_weights_in_the_output_folder_go():
    """OUT already holding weights of another layout (an old
    pytorch_model.bin, a model.safetensors.index.json with its shards, a
    diffusers file): after convert it holds the new weights alone, so that
    no loader picks an old set (from_pretrained opens model.safetensors
    before pytorch_model.bin). Before, they stayed silently."""
    d = folder("stale")
    out = os.path.join(ROOT, "stale-out")
    os.makedirs(out)
    old = {"pytorch_model.bin": b"PK\x03\x04old",
           "model.safetensors.index.json": b'{"weight_map": {"w": "model-00001-of-00002.safetensors"}}',
           "model-00001-of-00002.safetensors": b"old shard",
           "model-00002-of-00002.safetensors": b"old shard",
           "diffusion_pytorch_model.safetensors": b"old",
           "notes-00001-of-00002.txt": b"not a weights shard: stays"}
    for n, b in old.items():
        put(out, n, b)
    rc, _, err = ckpt("convert", d, out + "/")
    assert rc == 0, (rc, err)
    assert "removed 5 files of the previous layout of" in err, err
    got = contents(out)
    assert sorted(got) == sorted(list(OTHERS) + ["model.safetensors", "notes-00001-of-00002.txt"]), \
        sorted(got)
    # as torch .bin: the old model.safetensors (loaded first) goes, with --backup as .bak
    rc, _, err = ckpt("convert", d, out + "/", "--format", "torch", "--backup")
    assert rc == 0 and "kept 1 file of the previous layout of" in err, (rc, err)
    got = contents(out)
    assert "model.safetensors" not in got and "model.safetensors.bak" in got, sorted(got)
    assert got["pytorch_model.bin"].startswith(b"PK\x03\x04"), sorted(got)
    # sharded: the new set's shards and index stay, the old one-file weights go
    put(d, "model.safetensors", suite.safetensors({"a": [1.0], "b": [2.0]}))
    rc, _, err = ckpt("convert", d, out + "/", "--max-shard-size", "4")
    assert rc == 0 and "removed 1 file of the previous layout of" in err, (rc, err)
    got = contents(out)
    weights = sorted(n for n in got if n.startswith(("model", "pytorch_model")) and
                     not n.endswith(".bak"))
    assert weights == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                       "model.safetensors.index.json"], weights
    rc, _, err = ckpt("verify", out)
    assert rc == 0, err


def test_converting_into_the_input_folder_keeps_the_input():
    """DIR/ as OUT of DIR: the input's weights are the same weights in the
    other format, not stale ones: they stay."""
    d = folder("same")
    rc, _, err = ckpt("convert", d, d + "/", "--format", "torch")
    got = contents(d)
    assert rc == 0 and "model.safetensors" in got and "pytorch_model.bin" in got, (rc, err)
    rc, _, err = ckpt("convert", os.path.join(d, "pytorch_model.bin"), d + "/")
    got = contents(d)
    assert rc == 0 and "model.safetensors" in got and "pytorch_model.bin" in got, (rc, err)


def main():
    return suite.run_cases_in_tmp(globals(), os.path.abspath(__file__), "ckpt-convert-folder-")


if __name__ == "__main__":
    sys.exit(main())
