#!/usr/bin/python3
"""Crash test: SIGKILL the writer at random moments, then check that
nothing committed was lost and nothing half-written is visible.

Runs (RUNS in total, default 200): `ckpt store commit` of ~4 MB checkpoints
(torch zip and safetensors, alternating) into one store, and, when the
binary has a `convert` command, `ckpt convert` over one target file; half
each. Each run starts the writer, sleeps a random time between 0 and the
measured duration of an uninterrupted run, and kills it with SIGKILL.
After every kill, using the ckpt binary itself:
  store commit
  - `ckpt store list DIR --json`: every generation verifies ("ok"), and
    its bytes are exactly those of the source it was committed from (a
    name is absent or complete, never partial);
  - LATEST (list's "latest") is "ok" and names the previous LATEST or the
    new generation;
  - `ckpt store latest DIR` exits 0 with a generation list calls "ok";
  - every generation that verified before the run still exists, unless the
    run committed the new one and --keep pruned the old one;
  - `ckpt store gc DIR` removes the killed writer's temporary file.
  convert
  - the target is byte for byte the complete old file or the complete new
    file (the output of an uninterrupted convert), and `ckpt verify` says
    OK; with --backup, TARGET.bak is a complete earlier output;
  - `ckpt store gc` removes any temporary file left.
Prints one line per run, a summary of where the kills landed, and ends with
"N passed, N failed". Environment: CKPT_BIN; needs Debian's python3 (torch)
to make the sources.
"""
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("CKPT_BIN", "ckpt")
RUNS = int(os.environ.get("CKPT_CRASH_RUNS", "200"))
KEEP = 3
TMP = tempfile.mkdtemp(prefix="ckpt-crash-")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import suite  # noqa: E402  (before the chdir below: __file__ may be relative)
os.chdir(TMP)  # never a cwd with a folder named torch (import torch breaks)

import torch  # noqa: E402  (after the chdir above)

TALLY = suite.Tally(echo=True)
report = TALLY.report
outcomes = {}


def sha(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def run(*args):
    p = subprocess.run([BIN] + list(args), capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def temp_files(d):
    return [n for n in os.listdir(d) if ".tmp-" in n]


def make_sources():
    """Two torch zip files and one safetensors file of about 4 MB."""
    gen = torch.Generator().manual_seed(1234)
    paths = []
    for i in range(2):
        sd = {"layer%d.weight" % k: torch.randn(256, 1024, generator=gen) for k in range(4)}
        sd["step"] = torch.tensor(i)
        p = os.path.join(TMP, "src%d.pt" % i)
        torch.save(sd, p)
        paths.append(p)
    # safetensors by hand: header JSON padded to 8 bytes, then the data
    data = torch.randn(1024 * 1024, generator=gen).numpy().tobytes()
    header = json.dumps({"w": {"dtype": "F32", "shape": [1024, 1024],
                               "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    p = os.path.join(TMP, "src2.safetensors")
    with open(p, "wb") as fh:
        fh.write(len(header).to_bytes(8, "little") + header + data)
    paths.append(p)
    return paths


def timed(argv):
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError("%s failed: %s" % (argv, p.stderr.decode()))
    return time.perf_counter() - t


def kill_after(argv, delay):
    """Starts argv, SIGKILLs it after `delay` seconds. Returns its exit
    status (negative when killed)."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    try:
        p.send_signal(signal.SIGKILL)
    except ProcessLookupError:
        pass
    return p.wait()


# ---------------------------------------------------------------- store

def listing(d):
    rc, out, err = run("store", "list", d, "--json")
    return rc, (json.loads(out) if out.startswith("{") else None), err


def store_runs(n, sources, src_sha):
    d = os.path.join(TMP, "store")
    os.mkdir(d)
    scratch = os.path.join(TMP, "scratch")
    os.mkdir(scratch)
    durations = [timed([BIN, "store", "commit", scratch, "--name", "m", "--step", str(i),
                        "--keep", str(KEEP), sources[i % len(sources)]]) for i in range(3)]
    dur = max(durations)
    shutil.rmtree(scratch)
    print("store commit of %.1f MB takes %.1f ms (max of 3)"
          % (os.path.getsize(sources[0]) / 1e6, dur * 1e3))

    # one committed generation to begin with, so `store latest` always has
    # an answer
    timed([BIN, "store", "commit", d, "--name", "run", "--step", "0", sources[0]])
    expected = {"run-0.pt": src_sha[sources[0]]}  # generation -> sha256 of its source
    verified = {"run-0.pt"}  # generations that verified after the previous run
    pointer = "run-0.pt"     # LATEST's file after the previous run
    for step in range(1, n + 1):
        src = sources[step % len(sources)]
        new = "run-%d%s" % (step, ".safetensors" if src.endswith(".safetensors") else ".pt")
        expected[new] = src_sha[src]
        delay = random.uniform(0, dur)
        status = kill_after([BIN, "store", "commit", d, "--name", "run", "--step", str(step),
                             "--keep", str(KEEP), src], delay)
        problems = []
        left = temp_files(d)
        rc, lst, err = listing(d)
        gens = {g["file"]: g for g in (lst or {}).get("generations", [])}
        if lst is None:
            problems.append("store list failed: rc %d %s" % (rc, err.strip()))
            lst = {"latest": {}}
        for f, g in gens.items():
            if g["status"] != "ok":
                problems.append("%s does not verify: %s" % (f, g.get("reason")))
            elif sha(os.path.join(d, f)) != expected.get(f):
                problems.append("%s is not the complete file committed" % f)
        latest = lst["latest"]
        if latest.get("status") != "ok":
            problems.append("LATEST is %s" % latest.get("status"))
        elif latest["file"] not in (pointer, new):
            problems.append("LATEST names %s, neither %s nor %s" % (latest["file"], pointer, new))
        rc, out, err = run("store", "latest", d)
        if rc != 0 or os.path.basename(out.strip()) not in gens or \
                gens[os.path.basename(out.strip())]["status"] != "ok":
            problems.append("store latest: rc %d out %r err %r" % (rc, out, err))
        # Verified generations may only go because the new one was committed
        # and pruning (keep newest KEEP) dropped them.
        committed = new in gens and gens[new]["status"] == "ok"
        by_step = sorted(verified, key=lambda f: int(f.split("-")[1].split(".")[0]))
        may_go = set(by_step[:max(0, len(by_step) - (KEEP - 1))]) if committed else set()
        lost = [f for f in verified if f not in gens and f not in may_go]
        if lost:
            problems.append("verified generations lost: %s" % lost)
        if left:
            rc, out, err = run("store", "gc", d)
            if rc != 0 or temp_files(d):
                problems.append("gc left %s (rc %d %s)" % (temp_files(d), rc, err.strip()))
        if status == 0:
            where = "finished"
        elif latest.get("file") == new:
            where = "killed after LATEST moved"
        elif committed:
            where = "killed between rename and LATEST"
        elif left:
            where = "killed while writing"
        else:
            where = "killed before the temporary file existed"
        outcomes[where] = outcomes.get(where, 0) + 1
        report(not problems, "store commit run %d (kill at %.1f ms: %s)"
               % (step, delay * 1e3, where), problems)
        verified = {f for f, g in gens.items() if g["status"] == "ok"}
        pointer = latest.get("file")


# ---------------------------------------------------------------- convert

def convert_usage():
    """The convert command's argv builder, or None when the binary has no
    convert command."""
    rc, out, _ = run("help", "convert")
    if rc != 0:
        return None
    return out


def convert_runs(n, sources):
    d = os.path.join(TMP, "convert")
    os.mkdir(d)
    target = os.path.join(d, "out.safetensors")
    backup = "--backup" in convert_usage()
    pts = [s for s in sources if s.endswith(".pt")]
    refs = {}
    for s in pts:
        ref = os.path.join(TMP, os.path.basename(s) + ".ref.safetensors")
        dur = timed([BIN, "convert", s, ref])
        again = os.path.join(TMP, "again.safetensors")
        timed([BIN, "convert", s, again])
        if sha(ref) != sha(again):
            report(False, "convert is deterministic", ["%s converts to different bytes" % s])
        os.unlink(again)
        refs[s] = sha(ref)
    print("convert of %.1f MB takes %.1f ms" % (os.path.getsize(pts[0]) / 1e6, dur * 1e3))
    complete = set(refs.values())
    shutil.copyfile(os.path.join(TMP, os.path.basename(pts[0]) + ".ref.safetensors"), target)
    for i in range(1, n + 1):
        src = pts[i % len(pts)]
        old = sha(target)
        old_bak = sha(target + ".bak") if os.path.exists(target + ".bak") else None
        argv = [BIN, "convert", src, target] + (["--backup"] if backup and i % 2 else [])
        delay = random.uniform(0, dur)
        status = kill_after(argv, delay)
        problems = []
        now = sha(target) if os.path.exists(target) else None
        if now not in (old, refs[src]):
            problems.append("target is neither the old nor the new complete file")
        rc, out, err = run("verify", target)
        if rc != 0:
            problems.append("verify: rc %d %s" % (rc, out.strip() + err.strip()))
        if os.path.exists(target + ".bak"):
            bak = sha(target + ".bak")
            if bak not in (old_bak, old) or bak not in complete:
                problems.append("%s.bak is not a complete earlier output" % target)
        left = temp_files(d)
        if left:
            rc, out, err = run("store", "gc", d)
            if rc != 0 or temp_files(d):
                problems.append("gc left %s" % temp_files(d))
        where = "finished" if status == 0 else ("killed, target replaced" if now != old
                                                 else "killed, target kept")
        outcomes["convert: " + where] = outcomes.get("convert: " + where, 0) + 1
        report(not problems, "convert run %d (kill at %.1f ms: %s)" % (i, delay * 1e3, where),
               problems)


def main():
    random.seed(int(os.environ.get("CKPT_CRASH_SEED", "20240601")))
    start = time.time()
    try:
        sources = make_sources()
        src_sha = {s: sha(s) for s in sources}
        has_convert = convert_usage() is not None
        n_convert = RUNS // 2 if has_convert else 0
        if not has_convert:
            print("NOTE: this ckpt has no convert command: all %d runs on store commit" % RUNS)
        store_runs(RUNS - n_convert, sources, src_sha)
        if n_convert:
            convert_runs(n_convert, sources)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print("where the kills landed: " +
          ", ".join("%s %d" % (k, v) for k, v in sorted(outcomes.items())))
    print("%.1f s" % (time.time() - start))
    return TALLY.end()


if __name__ == "__main__":
    sys.exit(main())
