"""`python -m ckpt ARGS` and the `ckpt` console script: run the ckpt CLI
that goes with this package (the executable built into the wheel, or
build/ckpt of the source tree) with ARGS."""
import os
import sys
from typing import List, Optional

from ._lib import cli_path


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    exe = cli_path()
    if exe is None:
        sys.stderr.write("ckpt: the ckpt executable is not in this package; install it "
                         "with pip, or build it (cmake --build build)\n")
        return 2
    sys.stdout.flush()
    os.execv(exe, ["ckpt"] + args)
    return 2  # not reached: execv replaces the process or raises


if __name__ == "__main__":
    sys.exit(main())
