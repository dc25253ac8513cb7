#!/usr/bin/python3
"""CLI expectations for `ckpt store` (commit, latest, list, prune, gc) and
the write path on a really full file system (a 1 MiB tmpfs; skipped with
the reason when mounting is not permitted).

Environment: CKPT_BIN, CKPT_SRC. Sources: the repository's examples/ and a
1.6 MB checkpoint written by torch (Debian's python3-torch). Prints one
line per case and ends with "N passed, N failed"; exits 1 on failure.
"""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import suite  # noqa: E402

BIN = os.environ.get("CKPT_BIN", "ckpt")
SRC = os.environ.get("CKPT_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
SMALL_PT = os.path.join(SRC, "examples", "train.pt")
TRAIN_ST = os.path.join(SRC, "examples", "train.safetensors")
TMP = tempfile.mkdtemp(prefix="ckpt-store-cli-")
# larger than the 1 MiB tmpfs of case_full_filesystem
BIG_PT = os.path.join(TMP, "big.pt")
torch.save({"w": torch.arange(400000, dtype=torch.float32)}, BIG_PT)
BROKEN = os.path.join(TMP, "broken.pt")  # 3 bytes of text
with open(BROKEN, "wb") as _fh:
    _fh.write(b"abc")
UMASK = os.umask(0)
os.umask(UMASK)

TALLY = suite.Tally()


def run(*args):
    p = subprocess.run([BIN] + list(args), capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def fresh(name):
    d = os.path.join(TMP, name)
    os.mkdir(d)
    return d


def read(path):
    with open(path, "rb") as fh:
        return fh.read()


def latest_file(d):
    return read(os.path.join(d, "LATEST")).decode()


def entries(d):
    """The directory's names but the writers' lock file."""
    return [n for n in os.listdir(d) if n != ".ckpt-store.lock"]


def temps(d):
    return [n for n in os.listdir(d) if ".tmp-" in n]


def commit(d, step, src, *extra):
    return run("store", "commit", d, "--name", "run", "--step", str(step), *extra, src)


def flip_middle_byte(path):
    data = bytearray(read(path))
    data[len(data) // 2] ^= 0xFF
    os.chmod(path, 0o644)
    with open(path, "wb") as fh:
        fh.write(data)


def case_commit_latest():
    d = fresh("commit")
    rc, out, err = commit(d, 1, BIG_PT)
    assert rc == 0, err
    assert out == os.path.join(d, "run-1.pt") + "\n", out
    assert read(os.path.join(d, "run-1.pt")) == read(BIG_PT)
    assert latest_file(d) == "run-1.pt\n"
    rc, out, err = commit(d, 2, TRAIN_ST)
    assert rc == 0 and out.strip().endswith("run-2.safetensors"), (rc, out, err)
    assert latest_file(d) == "run-2.safetensors\n"
    rc, out, err = run("store", "latest", d)
    assert (rc, out) == (0, os.path.join(d, "run-2.safetensors") + "\n"), (rc, out, err)
    # the same step again is refused, whatever the format
    rc, out, err = commit(d, 2, BIG_PT)
    assert rc == 1 and "already committed" in err and out == "", (rc, out, err)
    assert not os.path.exists(os.path.join(d, "run-2.pt"))
    assert temps(d) == []


def case_commit_bad_source():
    d = fresh("bad-source")
    rc, out, err = commit(d, 1, BROKEN)
    assert rc == 1 and "broken.pt" in err and out == "", (rc, out, err)
    rc, out, err = commit(d, 1, os.path.join(TMP, "missing.pt"))
    assert rc == 2 and "missing.pt" in err, (rc, out, err)
    assert os.listdir(d) == []


def case_commit_sharded_set_is_usage():
    """A sharded set is not one checkpoint: a usage refusal (exit 2, not a
    finding), saying what to commit instead; nothing is written."""
    d = fresh("sharded-source")
    sharded = os.path.join(fresh("sharded-set"), "model.safetensors")
    rc, _, err = run("convert", TRAIN_ST, sharded, "--max-shard-size", "2000")
    assert rc == 0, (rc, err)
    for src in (os.path.dirname(sharded), sharded + ".index.json"):
        rc, out, err = commit(d, 1, src)
        assert rc == 2 and out == "", (src, rc, out, err)
        assert "%s is a sharded set" % src in err, err
        assert "commit a single checkpoint file or a DCP directory" in err, err
        assert "`ckpt convert`" in err and "nothing committed" in err, err
        assert entries(d) == [], os.listdir(d)


def copy_of(src, name):
    path = os.path.join(TMP, name)
    shutil.copyfile(src, path)
    return path


def case_commit_corrupt_source():
    d = fresh("corrupt-source")
    src = copy_of(BIG_PT, "flipped-src.pt")
    flip_middle_byte(src)
    rc, out, err = commit(d, 4, src)
    assert rc == 1 and out == "", (rc, out, err)
    assert err.startswith("ckpt: %s is corrupt: CRC-32 of the data is " % src), err
    assert "; nothing committed (member " in err, err
    assert "after writing" not in err and "run-4" not in err, err
    assert os.listdir(d) == [], os.listdir(d)


def case_prune_counts_only_verified():
    # the user's case: a corrupt run-10 must not make run-2 and run-3 go
    d = fresh("prune-verified")
    for step in (1, 2, 3):
        assert commit(d, step, SMALL_PT, "--keep", "10")[0] == 0
    bad = os.path.join(d, "run-10.pt")
    shutil.copyfile(BIG_PT, bad)
    flip_middle_byte(bad)
    rc, out, err = run("store", "prune", d, "--keep", "2")
    assert rc == 1 and out.startswith("removed 1 generation\n"), (rc, out, err)
    assert "corrupt, left in place: run-10.pt: " in out, out
    assert sorted(entries(d)) == ["LATEST", "run-10.pt", "run-2.pt", "run-3.pt"]
    # a commit prunes the same way: run-10 stays, the two newest good stay
    rc, out, err = commit(d, 4, SMALL_PT, "--keep", "2")
    assert rc == 0, (rc, out, err)
    assert sorted(entries(d)) == ["LATEST", "run-10.pt", "run-3.pt", "run-4.pt"]
    assert latest_file(d) == "run-4.pt\n"
    rc, out, err = run("store", "list", d)
    assert rc == 1 and "corrupt" in out and "run-10.pt" in out, (rc, out)


def case_commit_creates_dir():
    d = os.path.join(TMP, "created", "runs")
    rc, out, err = commit(d, 1, SMALL_PT)
    assert rc == 0 and out == os.path.join(d, "run-1.pt") + "\n", (rc, out, err)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o755 & ~UMASK, oct(os.stat(d).st_mode)
    assert latest_file(d) == "run-1.pt\n"


def case_help_documents_names():
    rc, out, err = run("help", "store")
    text = " ".join(out.split())
    assert "share LATEST and pruning" in text, out
    assert "DIR and its parents are created if missing" in text, out
    assert "Corrupt generations never count toward N" in text, out


def case_usage():
    d = fresh("usage")
    for argv in (["store"], ["store", "nope", d], ["store", "commit", d, BIG_PT],
                 ["store", "commit", d, "--name", "r", "--step", "-1", BIG_PT],
                 ["store", "commit", d, "--name", "r", "--step", "1"],
                 ["store", "latest"], ["store", "latest", d, d],
                 ["store", "list", d, "--keep", "3"], ["store", "prune", d, "--keep", "x"],
                 ["store", "gc", d, "--json"]):
        rc, out, err = run(*argv)
        assert rc == 2 and "usage: ckpt store" in err, (argv, rc, err)
    rc, out, err = run("store", "--help")
    assert rc == 0 and out.startswith("usage: ckpt store commit"), (rc, out)
    rc, out, err = run("store", "latest", d)
    assert rc == 1 and "no generation" in err, (rc, out, err)
    rc, out, err = run("store", "latest", os.path.join(TMP, "no-such-dir"))
    assert rc == 2 and "no-such-dir" in err, (rc, out, err)


def case_list_and_corruption():
    d = fresh("list")
    for step in (9, 10, 100):
        assert commit(d, step, BIG_PT, "--keep", "5")[0] == 0
    rc, out, err = run("store", "list", d, "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["dir"] == d
    assert doc["latest"] == {"status": "ok", "file": "run-100.pt"}, doc["latest"]
    assert [g["step"] for g in doc["generations"]] == [9, 10, 100]
    g = doc["generations"][2]
    assert g == {"name": "run", "step": 100, "file": "run-100.pt",
                 "path": os.path.join(d, "run-100.pt"), "bytes": os.path.getsize(BIG_PT),
                 "status": "ok", "resume": "weights-only", "latest": True}, g
    flip_middle_byte(os.path.join(d, "run-100.pt"))
    rc, out, err = run("store", "list", d, "--json")
    assert rc == 1, (rc, err)
    doc = json.loads(out)
    g = doc["generations"][2]
    assert g["status"] == "corrupt" and g["reason"] and g["latest"] is True, g
    assert g["resume"] is None, g  # withheld, as doctor withholds it
    assert "member" in g and "offset" in g
    assert doc["latest"]["status"] == "corrupt"
    rc, out, err = run("store", "list", d)
    lines = out.splitlines()
    assert rc == 1 and len(lines) == 4, (rc, out)
    assert "corrupt" in lines[2] and "run-100.pt" in lines[2] and "<- LATEST" in lines[2]
    assert lines[3] == "3 generations; LATEST: corrupt (run-100.pt)", lines[3]
    rc, out, err = run("store", "latest", d)
    assert (rc, out) == (0, os.path.join(d, "run-10.pt") + "\n"), (rc, out, err)
    # prune keeps the newest verified generation; the corrupt one (LATEST's)
    # is left in place and reported
    rc, out, err = run("store", "prune", d, "--keep", "0")
    lines = out.splitlines()
    assert rc == 1 and lines[0] == "removed 1 generation", (rc, out, err)
    assert len(lines) == 2 and lines[1].startswith(
        "corrupt, left in place: run-100.pt: CRC-32 of the data is "), lines
    assert sorted(entries(d)) == ["LATEST", "run-10.pt", "run-100.pt"]


def case_list_resume_verdicts():
    """list says which generations resume training, with doctor's verdict
    (it showed integrity only): a model with its Adam state is a full
    resume, state for half its parameters partial, weights alone
    weights-only, a corrupt one none; text and JSON."""
    d = fresh("resume")
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(net.parameters())
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    full = os.path.join(TMP, "full.pt")
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, full)
    half = opt.state_dict()
    half["state"] = {k: v for k, v in half["state"].items() if k < 2}
    partial = os.path.join(TMP, "partial.pt")
    torch.save({"model": net.state_dict(), "optimizer": half}, partial)
    for step, src in ((1, full), (2, partial), (3, BIG_PT), (4, full)):
        assert commit(d, step, src, "--keep", "9")[0] == 0
    victim = os.path.join(d, "run-4.pt")
    os.chmod(victim, 0o644)
    os.truncate(victim, os.path.getsize(victim) // 2)
    rc, out, err = run("store", "list", d, "--json")
    got = [(g["step"], g["resume"]) for g in json.loads(out)["generations"]]
    assert got == [(1, "full-resume"), (2, "partial"), (3, "weights-only"), (4, None)], got
    for step, src in ((1, full), (2, partial)):
        rc, out, err = run("doctor", "--json", os.path.join(d, "run-%d.pt" % step))
        assert json.loads(out)["resume"]["verdict"] == got[step - 1][1], out
    rc, out, err = run("store", "list", d)
    words = [line.split()[3:5] for line in out.splitlines()[:4]]
    assert rc == 1 and words == [["ok", "full-resume"], ["ok", "partial"],
                                 ["ok", "weights-only"], ["corrupt", "-"]], (rc, out)


def case_gc():
    d = fresh("gc")
    assert commit(d, 1, SMALL_PT)[0] == 0
    child = subprocess.Popen(["true"])
    child.wait()
    stale = ".run-2.pt.tmp-%d-0123456789abcdef" % child.pid
    live = ".run-3.pt.tmp-%d-0123456789abcdef" % os.getpid()
    for n in (stale, live):
        with open(os.path.join(d, n), "wb") as fh:
            fh.write(b"partial")
    rc, out, err = run("store", "gc", d)
    assert (rc, out) == (0, "removed 1 stale temporary file\n"), (rc, out, err)
    assert sorted(entries(d)) == [live, "LATEST", "run-1.pt"]
    rc, out, err = run("store", "gc", d, "--older-than", "0")
    assert (rc, out) == (0, "removed 1 stale temporary file\n"), (rc, out, err)


def case_dcp_generations():
    """A DCP directory "NAME-STEP.dcp" (a torch FileSystemWriter fixture) is
    a generation beside files: listed, latest, verified, pruned."""
    d = fresh("dcp")
    assert commit(d, 1, SMALL_PT)[0] == 0
    shutil.copytree(os.path.join(SRC, "tests", "dcp", "fixtures", "tiny.dcp"),
                    os.path.join(d, "run-2.dcp"))
    with open(os.path.join(d, "LATEST"), "w") as fh:
        fh.write("run-2.dcp\n")
    rc, out, err = run("store", "list", d, "--json")
    assert rc == 0, (rc, out, err)
    doc = json.loads(out)
    assert doc["latest"] == {"status": "ok", "file": "run-2.dcp"}, doc["latest"]
    assert doc["generations"][1] == {
        "name": "run", "step": 2, "file": "run-2.dcp", "path": os.path.join(d, "run-2.dcp"),
        "bytes": 939 + 2838, "status": "ok", "resume": "weights-only", "latest": True}, \
        doc["generations"]
    rc, out, err = run("store", "list", d)
    assert rc == 0 and out.splitlines()[-1] == "2 generations; LATEST: ok (run-2.dcp)", out
    rc, out, err = run("store", "latest", d)
    assert (rc, out) == (0, os.path.join(d, "run-2.dcp") + "\n"), (rc, out, err)
    rc, out, err = run("verify", os.path.join(d, "run-2.dcp"))
    assert rc == 0 and out.startswith("OK "), (rc, out, err)
    # a truncated shard: corrupt, named with the fqn whose slice it cuts;
    # latest falls back to the file
    shutil.copytree(os.path.join(d, "run-2.dcp"), os.path.join(d, "run-3.dcp"))
    os.truncate(os.path.join(d, "run-3.dcp", "__0_0.distcp"), 100)
    rc, out, err = run("store", "list", d, "--json")
    g = json.loads(out)["generations"][2]
    assert rc == 1 and g["status"] == "corrupt" and g["member"] == "__0_0.distcp/w", (rc, g)
    rc, out, err = run("store", "latest", d)
    assert (rc, out) == (0, os.path.join(d, "run-2.dcp") + "\n"), (rc, out, err)
    # pruning removes the file generation, keeps LATEST's directory and the
    # corrupt newer one, and leaves nothing half removed
    rc, out, err = run("store", "prune", d, "--keep", "1")
    assert rc == 1 and out.splitlines()[0] == "removed 1 generation", (rc, out, err)
    assert sorted(entries(d)) == ["LATEST", "run-2.dcp", "run-3.dcp"], entries(d)
    # a dead coordinator's staging directory goes with gc (the lock is free)
    os.mkdir(os.path.join(d, ".run-4.dcp.tmp-1-0123456789abcdef"))
    rc, out, err = run("store", "gc", d)
    assert (rc, out) == (0, "removed 1 stale temporary directory\n"), (rc, out, err)
    assert sorted(entries(d)) == ["LATEST", "run-2.dcp", "run-3.dcp"], entries(d)
    # and a temporary file beside two directories (one pruning renamed away)
    os.mkdir(os.path.join(d, ".run-4.dcp.tmp-1-0123456789abcdef"))
    os.mkdir(os.path.join(d, ".run-2.dcp.tmp-1-00000000000000ff"))
    with open(os.path.join(d, ".run-5.pt.tmp-1-0123456789abcdef"), "wb") as fh:
        fh.write(b"partial")
    rc, out, err = run("store", "gc", d, "--older-than", "0")
    assert (rc, out) == (0, "removed 1 stale temporary file and 2 stale temporary "
                            "directories\n"), (rc, out, err)
    # a file generation committed after the directories: LATEST moves to it,
    # pruning keeps LATEST's predecessor (run-2.dcp) with keep 1 and removes
    # the corrupt older one
    rc, out, err = commit(d, 4, SMALL_PT, "--keep", "1")
    assert rc == 0, (rc, out, err)
    rc, out, err = run("store", "list", d, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["latest"] == {"status": "ok", "file": "run-4.pt"}, (rc, doc)
    assert [(g["file"], g["status"]) for g in doc["generations"]] == [
        ("run-2.dcp", "ok"), ("run-4.pt", "ok")], doc
    rc, out, err = run("store", "latest", d)
    assert (rc, out) == (0, os.path.join(d, "run-4.pt") + "\n"), (rc, out, err)
    rc, out, err = run("store", "prune", d, "--keep", "1")
    assert rc == 0 and out.splitlines()[0] == "removed 1 generation", (rc, out, err)
    assert sorted(entries(d)) == ["LATEST", "run-4.pt"], entries(d)


def case_full_filesystem():
    mnt = os.path.join(TMP, "full")
    os.mkdir(mnt)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt],
                       capture_output=True)
    if p.returncode != 0:
        print("SKIP full file system: cannot mount a tmpfs (%s)"
              % p.stderr.decode().strip())
        return
    try:
        assert commit(mnt, 1, SMALL_PT)[0] == 0
        rc, out, err = commit(mnt, 2, BIG_PT)
        assert rc == 2 and "No space left on device" in err and "run-2.pt" in err, (rc, err)
        assert out == ""
        assert sorted(entries(mnt)) == ["LATEST", "run-1.pt"], os.listdir(mnt)
        assert latest_file(mnt) == "run-1.pt\n"
        rc, out, err = run("store", "latest", mnt)
        assert (rc, out) == (0, os.path.join(mnt, "run-1.pt") + "\n"), (rc, out, err)
        if run("help", "convert")[0] == 0:
            target = os.path.join(mnt, "out.safetensors")
            rc, out, err = run("convert", BIG_PT, target)
            assert rc == 2 and "No space left on device" in err, (rc, err)
            assert sorted(entries(mnt)) == ["LATEST", "run-1.pt"], os.listdir(mnt)
    finally:
        subprocess.run(["umount", mnt])


def main():
    try:
        for name, fn in sorted(globals().items()):
            if not name.startswith("case_"):
                continue
            try:
                fn()
            except Exception:
                TALLY.report(False, name[5:], [traceback.format_exc().rstrip()])
            else:
                TALLY.report(True, name[5:])
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    return TALLY.end()


if __name__ == "__main__":
    sys.exit(main())
