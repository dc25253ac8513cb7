#!/usr/bin/env python3
"""The layering of src/ (src/README.md), checked on every #include:

    base <- model, container <- format <- open <- {jobs, keys, training} <- report

A file may include headers of its own folder and of the folders its layer
may use; jobs, keys and training never include each other; tools/ckpt
includes only <ckpt.h> (and its own headers); public headers include only
public headers. Also checks that src/ holds no file outside a layer folder.
Prints one line per violation and ends with "N passed, N failed".
"""
import os
import re
import sys

ROOT = os.environ.get("CKPT_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MAY_USE = {
    "base": set(),
    "model": {"base"},
    "container": {"base"},
    "format": {"base", "model", "container"},
    "open": {"base", "model", "container", "format"},
    "jobs": {"base", "model", "container", "format", "open"},
    "keys": {"base", "model", "container", "format", "open"},
    "training": {"base", "model", "container", "format", "open"},
    "report": {"base", "model", "container", "format", "open", "jobs", "keys", "training"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', re.M)


def check_file(path, layer, problems):
    text = open(path, encoding="utf-8").read()
    for kind, inc in INCLUDE.findall(text):
        rel = os.path.relpath(path, ROOT)
        if kind == "<":
            if inc.startswith("ckpt") and inc != "ckpt.h":
                problems.append("%s: includes <%s>; use <ckpt.h>" % (rel, inc))
            continue
        if inc == "ckpt.h" or inc.startswith("ckpt/"):
            continue
        if layer == "tools":
            if "/" in inc:
                problems.append("%s: includes \"%s\"; tools/ckpt uses only ckpt.h" % (rel, inc))
            continue
        if layer == "include":
            problems.append("%s: public header includes \"%s\"" % (rel, inc))
            continue
        top = inc.split("/")[0]
        if "/" not in inc:
            problems.append("%s: includes \"%s\" without its layer folder" % (rel, inc))
        elif top != layer and top not in MAY_USE[layer]:
            problems.append("%s: layer %s may not include \"%s\"" % (rel, layer, inc))


def main():
    problems, files = [], 0
    for name in sorted(os.listdir(os.path.join(ROOT, "src"))):
        p = os.path.join(ROOT, "src", name)
        if os.path.isfile(p):
            if name.endswith((".c", ".h")):
                problems.append("src/%s: outside every layer folder" % name)
            continue
        if name not in MAY_USE:
            problems.append("src/%s/: not a layer (src/README.md lists them)" % name)
            continue
        for f in sorted(os.listdir(p)):
            if f.endswith((".c", ".h")):
                files += 1
                check_file(os.path.join(p, f), name, problems)
    for d, layer in (("tools/ckpt", "tools"), ("include", "include"), ("include/ckpt", "include")):
        for f in sorted(os.listdir(os.path.join(ROOT, d))):
            if f.endswith((".c", ".h")):
                files += 1
                check_file(os.path.join(ROOT, d, f), layer, problems)
    for p in problems:
        print("FAIL", p)
    print("%d passed, %d failed" % (files, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
