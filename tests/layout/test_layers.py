#!/usr/bin/env python3
"""The layering of src/ (src/README.md), checked on every #include:

    base <- model, container <- format <- open <- {jobs, keys, training} <- report

A file may include headers of its own folder and of the folders its layer
may use; jobs, keys and training never include each other; tools/ckpt
includes only <ckpt.h> (and its own headers); public headers include only
public headers. Also checks that src/ holds no file outside a layer folder, and that no two
modules (a .c and its .h) include each other, directly or in a ring.
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


def include_cycles():
    """Rings of modules that include each other (Tarjan's SCCs)."""
    graph = {}
    for dirpath, _, names in os.walk(os.path.join(ROOT, "src")):
        for f in names:
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            mod = os.path.splitext(os.path.relpath(path, os.path.join(ROOT, "src")))[0]
            for kind, inc in INCLUDE.findall(open(path, encoding="utf-8").read()):
                dep = os.path.splitext(inc)[0]
                if kind == '"' and "/" in inc and not inc.startswith("ckpt") and dep != mod:
                    graph.setdefault(mod, set()).add(dep)
    index, low, stack, on, rings = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            ring = []
            while True:
                w = stack.pop()
                on.discard(w)
                ring.append(w)
                if w == v:
                    break
            if len(ring) > 1:
                rings.append(sorted(ring))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return rings


def main():
    problems, files = [], 0
    for ring in include_cycles():
        problems.append("include cycle: " + " <-> ".join(ring))
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
