#!/bin/sh
# test_fresh_clone.sh SRC - what a new user gets: a clone of SRC's committed
# HEAD into a temporary directory with nothing beside it (no ../shared, no
# CKPT_CORPUS) configures, says in one line that the corpus suite is
# skipped, installs after building only the installed targets (no man
# page built yet: the install writes it), builds the rest (Debug: the
# cheapest) and passes the C unit tests.
set -eu
src=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-clone-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL $*"; echo "0 passed, 1 failed"; exit 1; }
unset CKPT_CORPUS CKPT_TEST_SUITE
git clone -q "$src" "$tmp/ckpt" || fail "git clone"
cd "$tmp/ckpt"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Debug >"$tmp/cfg.log" 2>&1 || { cat "$tmp/cfg.log"; fail "configure"; }
grep -q "corpus suite: [0-9]* tests skipped: no corpus at " "$tmp/cfg.log" \
    || { cat "$tmp/cfg.log"; fail "no line saying the corpus suite is skipped"; }
cmake --build build -j"${CKPT_JOBS:-2}" --target ckpt ckpt_shared ckpt_static >"$tmp/build.log" 2>&1 \
    || { tail -40 "$tmp/build.log"; fail "build of the installed targets"; }
[ ! -e build/ckpt.1 ] || fail "build/ckpt.1 made by a build of ckpt alone: the test needs it absent"
cmake --install build --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 \
    || { cat "$tmp/install.log"; fail "cmake --install after building the installed targets"; }
build/ckpt help --man | cmp -s - "$tmp/prefix/share/man/man1/ckpt.1" \
    || fail "installed ckpt.1 is not \`ckpt help --man\`"
cmake --build build -j"${CKPT_JOBS:-2}" >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log"; fail "build"; }
(cd build && ctest -L unit --output-on-failure) || fail "unit tests in a fresh clone"
echo "1 passed, 0 failed"
