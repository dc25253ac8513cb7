#!/usr/bin/env python3
"""One pass/fail counter for the test scripts: suite.Tally (report(ok,
case, details), end()), not a copy of report() in each script (six
scripts kept one, their globals passed/failed read by the scripts that
import them). Ends with "N passed, N failed"."""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path.insert(0, TESTS)
import suite  # noqa: E402

OWN_REPORT = re.compile(r"^def report\(ok, case", re.M)
# a count of its own: `passed = failed = 0`, `global passed, failed`,
# `passed, failed = 0, []`, `results = {"passed": 0, ...}`, a dict keyed
# True/False (fourteen scripts kept one)
OWN_COUNT = re.compile(r"^\s*(passed = failed = 0|global passed|passed, failed = 0|"
                       r"\w+ = \{\"passed\": 0|\w+ = \{True: 0, False: 0\})", re.M)


def test_no_script_keeps_its_own_report():
    own = []
    for d, _, names in os.walk(TESTS):
        for n in sorted(names):
            path = os.path.join(d, n)
            if n.endswith(".py") and os.path.abspath(path) != os.path.abspath(suite.__file__):
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                if OWN_REPORT.search(text) or OWN_COUNT.search(text):
                    own.append(os.path.relpath(path, TESTS))
    assert not own, "a report() or pass/fail count of their own, not suite.Tally: %s" % own


def test_tally_counts_and_prints():
    import contextlib
    import io
    t = suite.Tally(echo=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        t.report(True, "one")
        t.report(False, "two", ["why", 3])
        rc = t.end()
    assert (t.passed, t.failed, rc) == (1, 1, 1), (t.passed, t.failed, rc)
    assert out.getvalue() == "FAIL two\n    why\n    3\n1 passed, 1 failed\n", out.getvalue()


if __name__ == "__main__":
    sys.exit(suite.run_cases(globals(), os.path.abspath(__file__)))
