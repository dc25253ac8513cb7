"""torch's reading of zip archives, for test_zip_torch.py.

Usage: PYTHON torch_view.py LISTFILE. LISTFILE names one archive a line;
prints one JSON line per archive: {"ok": 1, "records": [...], "reads":
[hex or null, ...]} (reads[i] is torch._C.PyTorchFileReader.get_record of
records[i], null where it raises) or {"ok": 0, "error": "..."}. Runs under
any interpreter with torch (Debian's torch 1.13, the project's 2.x).
"""
import json
import sys

import torch


def view(path):
    try:
        reader = torch._C.PyTorchFileReader(path)
        records = list(reader.get_all_records())
    except Exception as e:  # torch raises RuntimeError; anything is a refusal
        return {"ok": 0, "error": (str(e).splitlines() or [type(e).__name__])[0][:200]}
    reads = []
    for name in records:
        try:
            reads.append(bytes(reader.get_record(name)).hex())
        except Exception:
            reads.append(None)
    return {"ok": 1, "records": records, "reads": reads}


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            print(json.dumps(view(line.rstrip("\n"))), flush=True)


if __name__ == "__main__":
    main()
