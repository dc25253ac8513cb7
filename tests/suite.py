"""The two suites of a test script. tests/CMakeLists.txt registers a script
that imports this module twice: as py_<dir>_<name>, the cases that need
nothing beside the repository (they use its files or generate what they
need), and, when the corpus is there, as corpus_py_<dir>_<name> with
CKPT_TEST_SUITE=corpus: the cases marked @corpus, which read the real-world
checkpoints of CKPT_CORPUS."""
import json
import os
import struct
import subprocess
import sys

CORPUS_SUITE = os.environ.get("CKPT_TEST_SUITE") == "corpus"
SRC = os.environ.get("CKPT_SRC", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the oracles: torch 2.13 in the project's virtual environment
# (scripts/deps --test), Debian's torch 1.13
VENV = os.path.join(SRC, ".venv", "bin", "python")
DEBIAN = "/usr/bin/python3"


def oracles(what="cases"):
    """The Pythons each oracle case runs under, as (tag, python):
    ("torch2", VENV) when it is there (else a SKIP line naming `what`),
    then ("torch1", DEBIAN)."""
    out = []
    if os.path.exists(VENV):
        out.append(("torch2", VENV))
    else:
        print("SKIP torch 2.13 %s: no %s (run scripts/deps --test)" % (what, VENV))
    out.append(("torch1", DEBIAN))
    return out


def corpus(fn):
    """Marks a case that reads the corpus."""
    fn.reads_corpus = True
    return fn


def oracle_docs(python, argv, files, cwd=None):
    """What an oracle script says of each file: runs python with argv and
    then the files; the script prints one JSON object per line, each with
    its "file". Returns {file: that object}; a file it printed nothing for
    gets {"error": "loader printed nothing: " + the end of its stderr}."""
    if not files:
        return {}
    p = subprocess.run([python] + list(argv) + list(files), cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=600)
    out = {d["file"]: d for d in map(json.loads, p.stdout.decode("utf-8").splitlines())}
    for path in files:
        out.setdefault(path, {"error": "loader printed nothing: %s" %
                              p.stderr.decode("utf-8", "replace")[-300:]})
    return out


def generate(python, script, tmp):
    """Runs an oracle's generator `python script tmp` with the package on
    PYTHONPATH; returns (ok, the end of its output)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"), PYTHONDONTWRITEBYTECODE="1")
    g = subprocess.run([python, script, tmp], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=600)
    return g.returncode == 0, g.stdout.decode("utf-8", "replace")[-2000:]


def safetensors(tensors):
    """The bytes of a safetensors file of F32 vectors {name: [values]}."""
    header, data = {}, b""
    for name, values in tensors.items():
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": [len(values)],
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def selected(fn=None, reads_corpus=None):
    """Whether this run includes a case: fn marked @corpus or not, or
    reads_corpus given as such."""
    if reads_corpus is None:
        reads_corpus = getattr(fn, "reads_corpus", False)
    return bool(reads_corpus) == CORPUS_SUITE


def finish(passed, failed):
    """Ends a script's output with "N passed, N failed"; returns its exit
    status (0 or 1)."""
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


class Tally:
    """The count of a script whose cases are checks made in loops rather
    than test_* functions (run_cases): report(ok, case, details) counts one
    and prints "FAIL CASE" with each detail on an indented line ("PASS
    CASE" too when echo); end() is finish() of the counts."""

    def __init__(self, echo=True):
        self.passed = self.failed = 0
        self.echo = echo

    def report(self, ok, case, details=()):
        if ok:
            self.passed += 1
            if self.echo:
                print("PASS %s" % case)
        else:
            self.failed += 1
            print("FAIL %s" % case)
            for line in details:
                print("    " + str(line))
        sys.stdout.flush()

    def end(self):
        return finish(self.passed, self.failed)


def run_cases(namespace, script):
    """Runs every test_* function of `namespace` (a script's globals()) that
    this suite selects, in name order; prints "ok NAME" or "FAIL NAME (line
    N of `script`): ..." for each, keeps going after a failure, and ends
    with "N passed, N failed". Returns the exit status (0 or 1)."""
    import traceback
    tests = [(n, f) for n, f in sorted(namespace.items())
             if n.startswith("test_") and callable(f) and selected(f)]
    passed = failed = 0
    for name, fn in tests:
        try:
            fn()
        except Exception as e:  # report every failure, keep going
            failed += 1
            where = traceback.extract_tb(e.__traceback__)
            lines = [f.lineno for f in where if f.filename == script]
            print("FAIL %s (line %s): %s: %s" % (
                name, lines[-1] if lines else "?", type(e).__name__,
                str(e).replace("\n", "\n     ")))
        else:
            passed += 1
            print("ok   %s" % name)
    return finish(passed, failed)


def run_cases_in_tmp(namespace, script, prefix):
    """run_cases with a fresh temporary directory as the script's ROOT
    (namespace["ROOT"]), removed afterwards whatever the cases did."""
    import shutil
    import tempfile
    namespace["ROOT"] = tempfile.mkdtemp(prefix=prefix)
    try:
        return run_cases(namespace, script)
    finally:
        shutil.rmtree(namespace["ROOT"], ignore_errors=True)
