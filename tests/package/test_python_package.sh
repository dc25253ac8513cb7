#!/bin/sh
# test_python_package.sh SRC BUILD - python/ckpt of the source tree on
# PYTHONPATH finds BUILD's libckpt.so when BUILD is SRC/build (the README's
# build), with no CKPT_LIB. Then the package as pip builds it (scikit-build-core,
# pyproject.toml): a wheel tagged for the platform, holding libckpt.so and the
# CLI; installed into a fresh virtualenv of Debian's python (torch 1.13,
# --system-site-packages) and into a target directory used by the project
# venv's python (torch 2.13): `import ckpt` works with no CKPT_LIB, loads a
# checkpoint as torch.load does, and `python -m ckpt` / `ckpt` run the CLI.
# Needs a python with scikit-build-core for the build (scripts/deps --test
# puts it in .venv); none: exit 77, a skip, except in CI where it fails.
set -eu
src=$1 build=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-wheel-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL $*"; echo "$passed passed, 1 failed"; exit 1; }
passed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }

builder=""
for py in python3 "$src/.venv/bin/python" /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c "import scikit_build_core" 2>/dev/null; then
        builder=$py; break
    fi
done
if [ -z "$builder" ]; then
    [ "${CI:-}" = true ] && fail "no python with scikit-build-core to build the wheel"
    echo "skipped: no python with scikit-build-core to build the wheel"
    exit 77
fi

unset CKPT_LIB CKPT_BIN PYTHONPATH
if [ "$(cd "$build" && pwd -P)" = "$(cd "$src" && pwd -P)/build" ]; then
    PYTHONPATH=$src/python /usr/bin/python3 -c "
import ckpt, os, subprocess, sys
assert os.path.realpath(ckpt._lib.lib._name) == os.path.realpath('$build/libckpt.so'), ckpt._lib.lib._name
out = subprocess.run([sys.executable, '-m', 'ckpt', '--version'], capture_output=True, text=True).stdout
assert out.split()[:2] == ['ckpt', ckpt.__version__], (out, ckpt.__version__)
" || fail "PYTHONPATH=python with build/"
    ok "PYTHONPATH=python finds build/libckpt.so and build/ckpt"
fi
"$builder" -m pip wheel -q --no-deps --no-build-isolation -w "$tmp/dist" "$src" \
    >"$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; fail "pip wheel"; }
whl=$(ls "$tmp"/dist/ckpt-*.whl)
case "$whl" in
    *-py3-none-linux_*.whl|*-py3-none-manylinux*.whl) ok "wheel tag: ${whl##*/}" ;;
    *) fail "wheel tag: ${whl##*/}" ;;
esac
"$builder" -m zipfile -l "$whl" >"$tmp/list"
for f in ckpt/libckpt.so ckpt/bin/ckpt ckpt/py.typed ckpt/_version.py ckpt/__main__.py; do
    grep -q " *$f " "$tmp/list" || grep -q "^$f " "$tmp/list" || fail "wheel lacks $f"
done
ok "wheel holds libckpt.so, the CLI, py.typed, _version.py"

# What each interpreter must do with the installed package, run from $tmp
# (never the source tree).
cat >"$tmp/check.py" <<'PY'
import os, sys, subprocess
import ckpt, torch
pkg = os.path.dirname(ckpt.__file__)
assert not pkg.startswith(os.environ["CKPT_SRC"]), pkg
assert ckpt._lib.lib._name == os.path.join(pkg, "libckpt.so"), ckpt._lib.lib._name
src = os.path.join(os.environ["CKPT_SRC"], "examples", "train.pt")
got, want = ckpt.load(src), torch.load(src)
for k in want["model"]:
    assert torch.equal(got["model"][k], want["model"][k]), k
out = subprocess.run([sys.executable, "-m", "ckpt", "verify", src], capture_output=True, text=True)
assert out.returncode == 0 and out.stdout.startswith("OK "), out
v = subprocess.run([sys.executable, "-m", "ckpt", "--version"], capture_output=True, text=True)
assert v.stdout.split()[:2] == ["ckpt", ckpt.__version__], (v.stdout, ckpt.__version__)
print("torch", torch.__version__, "ckpt", ckpt.__version__)
PY
export CKPT_SRC=$src
cd "$tmp"

/usr/bin/python3 -m venv --system-site-packages "$tmp/v1" >/dev/null || fail "venv of /usr/bin/python3"
"$tmp/v1/bin/pip" install -q --no-deps --no-index "$whl" >"$tmp/i1.log" 2>&1 \
    || { cat "$tmp/i1.log"; fail "pip install into a fresh venv"; }
"$tmp/v1/bin/python" "$tmp/check.py" || fail "Debian python (torch 1.13)"
ok "fresh venv, Debian python: import ckpt, load, python -m ckpt"
"$tmp/v1/bin/ckpt" verify "$src/examples/train.safetensors" | grep -q "^OK " || fail "ckpt console script"
ok "ckpt console script runs the CLI"

venv_py=$src/.venv/bin/python
if [ -x "$venv_py" ] && "$venv_py" -c "import torch" 2>/dev/null; then
    "$venv_py" -m pip install -q --no-deps --no-index --target "$tmp/t2" "$whl" >"$tmp/i2.log" 2>&1 \
        || { cat "$tmp/i2.log"; fail "pip install --target"; }
    PYTHONPATH=$tmp/t2 "$venv_py" "$tmp/check.py" || fail "project venv (torch 2.x)"
    ok "project venv python: import ckpt, load, python -m ckpt"
else
    echo "note: no .venv with torch beside the source: torch 2.x not checked"
fi
echo "$passed passed, 0 failed"
