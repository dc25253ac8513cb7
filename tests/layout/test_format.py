#!/usr/bin/env python3
"""Every C file of src/, tools/, tests/, fuzz/ and include/ is formatted as
.clang-format says (libgit2's rule: new code indistinguishable from the
code around it, here checked by a machine). Needs clang-format (scripts/deps
--test installs Debian's); without it the check is reported as skipped.
Fix with: clang-format -i $(git ls-files '*.c' '*.h').
Ends with "N passed, N failed"."""
import os
import shutil
import subprocess
import sys

ROOT = os.environ.get("CKPT_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def main():
    tool = shutil.which("clang-format")
    if not tool:
        print("SKIP: no clang-format")
        print("0 passed, 0 failed")
        return 0
    files = []
    for top in ("src", "tools", "tests", "fuzz", "include"):
        for d, _, names in os.walk(os.path.join(ROOT, top)):
            files += [os.path.join(d, n) for n in sorted(names) if n.endswith((".c", ".h"))]
    bad = []
    for f in files:
        p = subprocess.run([tool, "--style=file", f], capture_output=True)
        if p.returncode != 0 or p.stdout != open(f, "rb").read():
            bad.append(os.path.relpath(f, ROOT))
    for f in bad:
        print("FAIL not formatted: %s (clang-format -i %s)" % (f, f))
    print("%d passed, %d failed" % (len(files) - len(bad), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
