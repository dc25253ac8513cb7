"""Differential test: ckpt reads every pickle the way CPython's unpickler
does (issue 11), or does not call it safe.

Each input is read three times:
  - CPython's C unpickler (_pickle.Unpickler, what torch.load and
    pickle.load use) over io.BytesIO, as torch.load reads a pickle: the
    "file" reader;
  - the same unpickler over a file object that hands out all its bytes at
    once, which makes it read like pickle.loads: the "memory" reader;
  - ckpt_scan_memory (through the ckpt package).
The unpicklers never import or call anything: find_class records
(module, name) and returns a stub class that accepts any call, state or
item; persistent_load returns a stub. They run in a worker process with a
memory limit and a time limit per input, so a crafted memo index or length
cannot exhaust the machine (such inputs are skipped).

Rules, for the first stream of each input:
  - the file and memory readers read it differently (one fails, or other
    globals or values), or ckpt finds a read they take from different
    bytes (a FRAME crossing, even where the values agree): ckpt must not
    say "safe";
  - CPython reads it to STOP: ckpt reads it to STOP too (no parse error,
    the same STOP offset) and names exactly the same globals;
  - CPython fails: ckpt names at least the globals CPython imported before
    failing (ckpt may read further: STACK_GLOBAL on non-str operands, EXT
    codes and undecodable Python 2 strings are deliberately read on);
  - the first stream is torch's legacy magic number: the file reader goes
    on as torch's _legacy_load does (protocol version, stopping unless it
    is 1001; sys_info; main pickle; storage keys, each from where the last
    one left the io.BytesIO), and ckpt must read every one of them to its
    STOP and name every global they import.
Names compare with or without _compat_pickle's Python 2 mapping.

Inputs: hand-made cases of each class (text operand syntax, FRAME, big
ints, READONLY_BUFFER, ...; legacy files whose streams break or hide a
call), malicious and benign; the replay corpus
tests/scan/differential/ (minimised failures); the hostile families of
gen_hostile.py; the scan corpus's pickles when present (CKPT_CORPUS); and
seeded mutations of all of them (fixed seed and count in the normal run).

Run it longer (a failure is minimised and, with --save, written to the
replay corpus):
    CKPT_LIB=build/libckpt.so python3 tests/scan/test_pickle_differential.py \\
        --iterations 200000 --seed $RANDOM --save

Environment (set by ctest): CKPT_LIB (the built libckpt), CKPT_SRC (the
source tree, for python/ckpt), CKPT_CORPUS (optional). Prints one line per
failure and ends with "N passed, N failed"; exits 1 on failure.
"""
import argparse
import ctypes
import glob
import hashlib
import io
import json
import os
import pickle
import random
import struct
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from craft import (LEGACY_MAGIC, LEGACY_STREAMS, SYSTEM,  # noqa: E402
                   legacy_stream_cases, pickle_syntax_cases)
import suite  # noqa: E402
REPLAY = os.path.join(HERE, "differential")
MAX_INPUT = 1 << 16

# ------------------------------------------------------------------ oracle


class Stub:
    """Whatever a global turns out to be: callable, buildable, a container."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return Stub()

    def __setstate__(self, state):
        pass

    def append(self, item):
        pass

    def extend(self, items):
        pass

    def add(self, item):
        pass

    def __setitem__(self, key, value):
        pass


class GreedyFile:
    """A file whose read(n) returns everything left: the C unpickler then
    keeps it all in its buffer and reads like pickle.loads."""

    def __init__(self, data):
        self.data, self.pos = data, 0

    def read(self, n=-1):
        out = self.data[self.pos:]
        self.pos = len(self.data)
        return out

    def readline(self):
        end = self.data.find(b"\n", self.pos)
        end = len(self.data) if end < 0 else end + 1
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def readinto(self, b):
        out = self.read()
        b[:len(out)] = out
        return len(out)


def shape(v, depth=0):
    """The value read, stubs and cycles aside, to compare two readings."""
    if depth > 20:
        return "..."
    if isinstance(v, Stub) or (isinstance(v, type) and issubclass(v, Stub)):
        return "stub"
    if isinstance(v, (list, tuple, set, frozenset)):
        items = [shape(x, depth + 1) for x in list(v)[:1000]]
        return [type(v).__name__, sorted(map(repr, items)) if isinstance(
            v, (set, frozenset)) else items]
    if isinstance(v, dict):
        return ["dict", [[shape(k, depth + 1), shape(x, depth + 1)]
                         for k, x in list(v.items())[:1000]]]
    if isinstance(v, (bytes, bytearray, memoryview)):
        return [type(v).__name__, bytes(v).hex()]
    if isinstance(v, float):
        return ["float", repr(v)]
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 4096:
        return ["int", v.bit_length(), v & 0xffffffff]
    return [type(v).__name__, repr(v)]


def unpickle(f):
    """One run of the C unpickler over f: ok, error, globals (in order)."""
    seen = []

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            if "\0" in module or "\0" in name:  # import refuses it
                raise ValueError("embedded null character")
            seen.append([module, name])
            return type("Stub", (Stub,), {})

        def persistent_load(self, pid):
            return Stub()

    out = {"ok": False, "globals": seen}
    try:
        out["value"] = shape(Recorder(f, encoding="latin1").load())
        out["ok"] = True
    except (MemoryError, RecursionError, TimeoutError) as e:
        out["resource"] = type(e).__name__
    except Exception as e:  # noqa: BLE001 - any failure is an outcome
        out["error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
    return out


def legacy_rest(f):
    """torch's _legacy_load after the magic number: the protocol version
    (1001, else it stops), sys_info, the main pickle and the storage keys,
    each unpickled from the same file in turn."""
    out = {"ok": True, "globals": []}
    for i in range(LEGACY_STREAMS - 1):
        r = unpickle(f)
        out["globals"] += r["globals"]
        if not r["ok"]:
            out["ok"] = False
            out["resource"] = r.get("resource")
            break
        if i == 0 and r["value"] != ["int", "1001"]:
            break
    out["end"] = f.tell()
    return out


def oracle_main():
    import _pickle
    import resource
    import signal
    assert pickle.Unpickler is _pickle.Unpickler, "the C unpickler is the oracle"
    resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))

    def alarm(signum, frame):
        raise TimeoutError("input took too long")

    signal.signal(signal.SIGALRM, alarm)
    inp, out = sys.stdin.buffer, sys.stdout
    while True:
        head = inp.read(4)
        if len(head) < 4:
            return
        data = inp.read(struct.unpack("<I", head)[0])
        signal.alarm(10)
        f = io.BytesIO(data)
        res = {"file": unpickle(f), "memory": unpickle(GreedyFile(data))}
        res["file"]["pos"] = f.tell()
        if res["file"].get("value") == ["int", LEGACY_MAGIC]:
            res["legacy"] = legacy_rest(f)
        signal.alarm(0)
        out.write(json.dumps(res) + "\n")
        out.flush()


class Oracle:
    def __init__(self):
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--oracle"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)

    def __call__(self, data):
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self.proc.stdin.write(struct.pack("<I", len(data)) + data)
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = b""
        if not line:  # the worker died (a limit): skip this input
            self.proc = None
            return None
        return json.loads(line)

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()


# ------------------------------------------------------------------ ckpt


def load_ckpt():
    sys.path.insert(0, os.path.join(os.environ.get("CKPT_SRC", os.path.dirname(
        os.path.dirname(HERE))), "python"))
    from ckpt import _scan
    return _scan


def ckpt_scan(scan_mod, data):
    """ckpt_scan_memory without nested pickles (max_nesting 0): the stub
    unpickler does not unpickle what pickle.loads receives either."""
    buf = ctypes.create_string_buffer(data, len(data) or 1)
    opts, keep = scan_mod._options(())
    opts.max_nesting = 0
    r = ctypes.c_void_p()
    scan_mod.check(scan_mod.lib.ckpt_scan_memory(ctypes.byref(r), ctypes.addressof(buf),
                                                 len(data), b"diff.pkl", ctypes.byref(opts)),
                   "diff.pkl")
    del keep
    return scan_mod._report(r, "diff.pkl")


NAME_CAP = 256  # scan.c shows module and name cut to this many bytes together, then ...


def full_name(module, name):
    m, n = module.encode("utf-8", "surrogatepass"), name.encode("utf-8", "surrogatepass")
    cut = len(m) + len(n) > NAME_CAP
    m = m[:NAME_CAP]
    n = n[:NAME_CAP - len(m)]
    return (m + b"." + n + (b"..." if cut else b"")).decode("utf-8", "replace")


def compat_names(module, name):
    """module.name as the pickle says it and as Python 3 maps it."""
    import _compat_pickle
    out = {full_name(module, name)}
    if (module, name) in _compat_pickle.NAME_MAPPING:
        out.add(full_name(*_compat_pickle.NAME_MAPPING[(module, name)]))
    elif module in _compat_pickle.IMPORT_MAPPING:
        out.add(full_name(_compat_pickle.IMPORT_MAPPING[module], name))
    return out


def check(scan_mod, oracle, data):
    """None when ckpt agrees (or the input is skipped), else why not."""
    orc = oracle(data)
    if orc is None or "resource" in orc["file"] or "resource" in orc["memory"]:
        return None
    fr, mr = orc["file"], orc["memory"]
    rep = ckpt_scan(scan_mod, data)
    if (fr["ok"], fr["globals"], fr.get("value")) != (mr["ok"], mr["globals"],
                                                         mr.get("value")):
        if rep.verdict == "safe":
            return ("file reader %s, memory reader %s, ckpt says safe"
                    % (fr.get("error", "ok"), mr.get("error", "ok")))
        return None
    if any(f.kind == "parse-error" and ("read different" in f.message or
                                        "ends inside a FRAME" in f.message)
           for f in rep.findings):
        # ckpt refuses a read that unpicklers may take from different bytes
        # (a FRAME crossing, a STOP inside a frame before the next legacy
        # pickle), even where the values happen to agree: never safe
        return None if rep.verdict != "safe" else "two readings, ckpt says safe"
    wanted = [compat_names(m, n) for m, n in fr["globals"]]
    leg = orc.get("legacy")
    if leg and leg.get("resource"):
        return None
    if leg:
        # every stream torch's legacy loader reads: ckpt reads them all, or
        # says where it cannot (never safe)
        wanted += [compat_names(m, n) for m, n in leg["globals"]]
        errors = [f for f in rep.findings if f.kind == "parse-error" and f.offset is not None
                  and f.offset < leg["end"]]
        if leg["ok"] and errors:
            return "torch's legacy loader reads every stream, ckpt breaks at %s: %s" % (
                errors[0].offset, errors[0].message)
    stop = next((f.offset for f in rep.findings if f.kind == "trailing-bytes"), None)
    end = len(data) if stop is None else stop
    if fr["ok"] and fr["value"] == ["int", LEGACY_MAGIC]:
        end = fr["pos"]  # torch's legacy magic: ckpt reads on as torch.load does
    errors = [f for f in rep.findings if f.kind == "parse-error" and f.offset is not None
              and f.offset < end and not f.message.startswith("nested")]
    if fr["ok"]:
        if errors:
            return "CPython reads it to STOP, ckpt breaks at %s: %s" % (
                errors[0].offset, errors[0].message)
        if rep.verdict == "not-a-checkpoint":
            return "CPython reads it to STOP, ckpt finds no pickle"
        if end != fr["pos"] and b"\x95" not in data and not leg:
            return "CPython's STOP ends at %d, ckpt's at %d" % (fr["pos"], end)
        # the first stream's globals alone, when it can be cut out
        first = ckpt_scan(scan_mod, data[:stop]) if stop is not None else rep
        if first.verdict in ("safe", "unsafe") and not leg:  # (torch may stop early)
            extra = [g for g in first.globals if not any(g in w for w in wanted) and not (
                g.startswith("?.") and first.verdict == "unsafe")]
            if extra:
                return "ckpt names globals CPython does not import: %s" % sorted(extra)
    have = set(rep.globals)
    missing = [sorted(w)[0] for w in wanted if not (w & have)]
    # a name ckpt cannot know (STACK_GLOBAL on what it does not take for
    # str) is reported dangerous in their place
    if missing and not (rep.verdict == "unsafe" and any(g.startswith("?.") for g in have)):
        return "CPython imports %s, ckpt does not name them (ckpt: %s)" % (
            missing, sorted(have))
    return None


def minimise(scan_mod, oracle, data, why):
    """Drops chunks while the input still fails (any failure)."""
    budget = 3000
    chunk = max(1, len(data) // 2)
    while chunk >= 1 and budget > 0:
        i, shrunk = 0, False
        while i < len(data) and budget > 0:
            cand = data[:i] + data[i + chunk:]
            budget -= 1
            w = check(scan_mod, oracle, cand) if cand else None
            if w:
                data, why, shrunk = cand, w, True
            else:
                i += chunk
        if not shrunk:
            chunk //= 2
    return data, why


# ------------------------------------------------------------------ inputs


def generated():
    """Pickles of plain data at every protocol, and gen_hostile's families."""
    import collections
    sys.path.insert(0, HERE)
    import gen_hostile
    shared = [1, 2]
    objs = [0, 1, -1, 255, 65536, 2 ** 31, -2 ** 63, 2 ** 64, 10 ** 30, -(2 ** 1000), 1.5,
            -0.0, float("inf"), "abc", "\u00e9\u1234", b"\x00\xff", bytearray(b"ab"),
            [1, [2, [3]]], {"a": 1, 2: [3]}, (1, 2, 3), (), {1, 2}, frozenset({3}), None,
            True, False, collections.OrderedDict(a=1), {"lr": 0.1, "steps": list(range(300))},
            ["x" * 300, b"y" * 300], [shared, shared], {"doc": "(Note: see below)."}]
    for proto in range(6):
        for o in objs:
            yield pickle.dumps(o, protocol=proto)
    for name, data, verdict, glob_ in gen_hostile.families():
        if not name.endswith(".zip") and not data.startswith(b"PK") and b"PK\x03\x04" not in data:
            yield data


def corpus_pickles():
    root = os.environ.get("CKPT_CORPUS", "")
    for path in sorted(glob.glob(os.path.join(root, "scan", "picklescan", "*"))):
        if path.endswith((".pkl", ".pickle")):
            with open(path, "rb") as fh:
                data = fh.read()
            if len(data) <= MAX_INPUT:
                yield data


def replay_corpus():
    for path in sorted(glob.glob(os.path.join(REPLAY, "*.pkl"))):
        with open(path, "rb") as fh:
            yield fh.read()


SNIPPETS = [b"I0x10\n", b"I010\n", b"I1_0\n", b"L0b1L\n", b"F1e5\n", b"Finf\n", b"p0\n",
            b"p 1_0\n", b"g0\n", b"g1\n", b"\x95\x02" + b"\x00" * 7, b"\x95\x00" + b"\x00" * 7,
            b"\x98", b"\x97", SYSTEM, b"\x8c\x02os\x8c\x06system\x93", b"I\x00\n",
            b"F1.5\x00x\n", b"\x8a\x01\xff", b"(", b"t", b"R", b"0", b"\x94", b"h\x00", b"N",
            b"\x8b\x2c\x01\x00\x00" + b"\x22" * 300, b"\x80\x02", b"\x80\x05", b"C\x01a", b"e",
            b"u", b"s", b"b", b"\x81", b"\x85", b"}", b"]", b")", b"."]


def mutate(rng, data, pool):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        i = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(i, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            data[i:i] = rng.choice(SNIPPETS)
        elif op == 2 and data:
            del data[i:i + rng.randint(1, 8)]
        elif op == 3 and data:
            j = rng.randrange(len(data))
            data[i:i] = data[j:j + rng.randint(1, 16)]
        elif op == 4:
            del data[i:]
        elif op == 5:
            other = rng.choice(pool)
            j = rng.randrange(len(other) + 1)
            data[i:] = other[j:]
        elif op == 6 and data:
            data[min(i, len(data) - 1)] = rng.choice(b"IFLpgSVcihjqr\x95\x8c\x93.\n0_x")
    return bytes(data[:MAX_INPUT])


# ------------------------------------------------------------------ main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--oracle", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--iterations", type=int,
                    default=int(os.environ.get("CKPT_DIFF_ITERATIONS", "10000")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CKPT_DIFF_SEED", "11")))
    ap.add_argument("--save", action="store_true",
                    help="write minimised failures to tests/scan/differential/")
    args = ap.parse_args()
    if args.oracle:
        return oracle_main()
    lib = os.environ.get("CKPT_LIB")
    if not lib:
        print("skip: CKPT_LIB is not set (the built libckpt)")
        return 0
    with open(lib, "rb") as fh:
        if b"__asan_init" in fh.read():
            # python cannot load a sanitized library without the runtime
            # preloaded, and the oracle does not run under the preload
            print("skip: %s is built with a sanitizer" % lib)
            return 0
    scan_mod = load_ckpt()
    oracle = Oracle()
    rng = random.Random(args.seed)
    fixed = list(replay_corpus()) + list(pickle_syntax_cases()) + list(legacy_stream_cases()) + list(
        generated()) + list(corpus_pickles())
    inputs = fixed + [mutate(rng, rng.choice(fixed), fixed) for _ in range(args.iterations)]
    tally = suite.Tally(echo=False)
    for data in inputs:
        why = check(scan_mod, oracle, data)
        if not why:
            tally.report(True, "input")
            continue
        small, why = minimise(scan_mod, oracle, data, why)
        details = ["input %r" % small[:300]]
        if args.save:
            name = hashlib.sha1(small).hexdigest()[:12] + ".pkl"
            with open(os.path.join(REPLAY, name), "wb") as fh:
                fh.write(small)
            details.append("saved tests/scan/differential/%s" % name)
        tally.report(False, why, details)
    oracle.close()
    print("%d inputs (seed %d, %d mutations, %d fixed)" % (len(inputs), args.seed,
                                                           args.iterations, len(fixed)))
    return tally.end()


if __name__ == "__main__":
    sys.exit(main())
