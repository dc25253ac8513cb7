#!/bin/sh
# test_install.sh BUILD SRC - `cmake --install` of BUILD into a temporary
# prefix has the CLI, libckpt (shared, static), the include/ tree, ckpt.pc,
# the CMake package config, the man page and the bash and zsh completions
# (the installed CLI's `ckpt help --man` / `--completion SHELL`); a small
# C program (consumer/) builds against it with pkg-config and with
# find_package(ckpt), shared and static, and runs.
set -eu
build=$1 src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
p=$tmp/prefix
fail() { echo "FAIL $*"; echo "0 passed, 1 failed"; exit 1; }

cmake --install "$build" --prefix "$p" >/dev/null
pc=$(find "$p" -name ckpt.pc)
[ -n "$pc" ] || fail "no ckpt.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for f in "$p/bin/ckpt" "$p/include/ckpt.h" "$libdir/libckpt.a" "$libdir/libckpt.so" \
         "$libdir/cmake/ckpt/ckptConfig.cmake" "$libdir/cmake/ckpt/ckptConfigVersion.cmake"; do
    [ -e "$f" ] || fail "not installed: ${f#"$p"/}"
done
# every header of the source tree, at the same place under include/
(cd "$src/include" && find . -name '*.h') | while read -r h; do
    cmp -s "$src/include/$h" "$p/include/$h" || fail "header not installed: include/${h#./}"
done
want="ckpt $("$p/bin/ckpt" --version | sed -n 's/^ckpt \([^ ]*\).*/\1/p'): w F32"
"$p/bin/ckpt" --version | grep -q "^ckpt [0-9]" || fail "installed ckpt --version"
for doc in "share/man/man1/ckpt.1 --man" "share/bash-completion/completions/ckpt --completion bash" \
           "share/zsh/site-functions/_ckpt --completion zsh"; do
    set -- $doc
    f=$1
    shift
    [ -s "$p/$f" ] || fail "not installed: $f"
    "$p/bin/ckpt" help "$@" | cmp -s - "$p/$f" || fail "$f is not \`ckpt help $*\`"
done

check() {  # check NAME PROGRAM: runs, prints $want
    got=$(LD_LIBRARY_PATH=$libdir "$2") || fail "$1: exit $?"
    [ "$got" = "$want" ] || fail "$1: printed '$got', want '$want'"
    echo "ok   $1"
}
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --modversion ckpt)" = "$(echo "$want" | sed 's/^ckpt \([^:]*\):.*/\1/')" ] \
    || fail "pkg-config --modversion ckpt"
cc=${CC:-cc}
$cc -o "$tmp/pc_shared" "$src/tests/package/consumer/consumer.c" \
    $(pkg-config --cflags --libs ckpt) || fail "pkg-config shared build"
check "pkg-config, shared" "$tmp/pc_shared"
readelf -d "$tmp/pc_shared" | grep -q 'NEEDED.*libckpt\.so' || fail "pkg-config shared: no libckpt.so"
$cc -o "$tmp/pc_static" "$src/tests/package/consumer/consumer.c" $(pkg-config --cflags ckpt) \
    -Wl,--as-needed "$libdir/libckpt.a" $(pkg-config --libs --static ckpt) \
    || fail "pkg-config --static build"
check "pkg-config --static" "$tmp/pc_static"
if readelf -d "$tmp/pc_static" | grep -q 'NEEDED.*libckpt'; then fail "static link needs libckpt.so"; fi

cmake -S "$src/tests/package/consumer" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$p" \
    -DCMAKE_BUILD_TYPE=Release >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "find_package(ckpt)"; }
cmake --build "$tmp/cm" >"$tmp/cmb.log" 2>&1 || { cat "$tmp/cmb.log"; fail "find_package build"; }
check "find_package ckpt::ckpt" "$tmp/cm/consumer_shared"
check "find_package ckpt::ckpt_static" "$tmp/cm/consumer_static"
echo "5 passed, 0 failed"
