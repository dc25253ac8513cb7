#!/usr/bin/python3
"""torch.load(FILE, weights_only=True) for each FILE, in this fresh process
(nothing imported that registers extra safe globals, e.g.
torch.distributed.tensor): one JSON line {"file", "ok", "error"} each.

    PYTHON wo_load.py FILE...
"""
import json
import sys
import warnings

import torch


def main():
    warnings.simplefilter("ignore")
    for path in sys.argv[1:]:
        try:
            torch.load(path, weights_only=True, map_location="cpu")
            doc = {"file": path, "ok": True, "error": ""}
        except Exception as e:  # noqa: BLE001 - the verdict is the point
            doc = {"file": path, "ok": False,
                   "error": "%s: %s" % (type(e).__name__, " ".join(str(e).split())[:2000])}
        print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
