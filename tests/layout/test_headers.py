#!/usr/bin/env python3
"""Each public header compiles on its own, as C99 and as C++11, with
-pedantic -Wall -Wextra -Werror (a header that needs another included first,
or uses C-only syntax outside a macro, fails here). Compilers: $CC (cc) and
$CXX (c++); a missing C++ compiler is reported as skipped. Every "since X.Y"
in a header names a version no later than the one the headers describe
(CKPT_VERSION_MAJOR/MINOR in ckpt/common.h): an API cannot have shipped in a
version not yet made.
Ends with "N passed, N failed"."""
import glob
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import suite  # noqa: E402

ROOT = os.environ.get("CKPT_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
INC = os.path.join(ROOT, "include")


def since_beyond_version():
    """(header, line, "X.Y") for each "since X.Y" later than the version."""
    with open(os.path.join(INC, "ckpt", "common.h"), encoding="utf-8") as fh:
        common = fh.read()
    version = tuple(int(re.search(r"^#define CKPT_VERSION_%s (\d+)$" % part, common, re.M).group(1))
                    for part in ("MAJOR", "MINOR"))
    late = []
    for h in sorted(glob.glob(os.path.join(INC, "**", "*.h"), recursive=True)):
        with open(h, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                for m in re.finditer(r"\bsince (?:v|version )?(\d+)\.(\d+)", line):
                    if (int(m.group(1)), int(m.group(2))) > version:
                        late.append((os.path.relpath(h, INC), n, "%s.%s" % m.groups()))
    return late


def main():
    headers = ["ckpt.h"] + sorted(os.path.relpath(h, INC)
                                  for h in glob.glob(os.path.join(INC, "ckpt", "*.h")))
    compilers = [(os.environ.get("CC", "cc"), "c", "-std=c99"),
                 (os.environ.get("CXX", "c++"), "c++", "-std=c++11")]
    tally = suite.Tally(echo=False)
    for cc, lang, std in compilers:
        if not shutil.which(cc):
            print("SKIP %s: no %s compiler" % (lang, cc))
            continue
        for h in headers:
            src = '#include <%s>\nint main(void) { return (int)sizeof(ckpt_limits) == 0; }\n' % h
            if lang == "c++":
                src = src.replace("(void)", "()")
            p = subprocess.run([cc, "-x", lang, std, "-pedantic", "-Wall", "-Wextra", "-Werror",
                                "-I", INC, "-fsyntax-only", "-"], input=src.encode(),
                               capture_output=True)
            tally.report(p.returncode == 0, "%s as %s" % (h, lang),
                         p.stderr.decode(errors="replace").splitlines())
    late = since_beyond_version()
    tally.report(not late, "a \"since\" later than the version", [late])
    return tally.end()


if __name__ == "__main__":
    sys.exit(main())
