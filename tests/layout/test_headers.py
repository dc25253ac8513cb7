#!/usr/bin/env python3
"""Each public header compiles on its own, as C99 and as C++11, with
-pedantic -Wall -Wextra -Werror (a header that needs another included first,
or uses C-only syntax outside a macro, fails here). Compilers: $CC (cc) and
$CXX (c++); a missing C++ compiler is reported as skipped.
Ends with "N passed, N failed"."""
import glob
import os
import shutil
import subprocess
import sys

ROOT = os.environ.get("CKPT_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
INC = os.path.join(ROOT, "include")


def main():
    headers = ["ckpt.h"] + sorted(os.path.relpath(h, INC)
                                  for h in glob.glob(os.path.join(INC, "ckpt", "*.h")))
    compilers = [(os.environ.get("CC", "cc"), "c", "-std=c99"),
                 (os.environ.get("CXX", "c++"), "c++", "-std=c++11")]
    passed = failed = 0
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
            if p.returncode == 0:
                passed += 1
            else:
                failed += 1
                print("FAIL %s as %s:\n%s" % (h, lang, p.stderr.decode(errors="replace")))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
