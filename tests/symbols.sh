#!/bin/sh
# symbols.sh SHARED STATIC EXE - namespace hygiene of what we build:
#  - the shared library exports only ckpt_* (the public API);
#  - the static library defines no global outside ckpt_* (internal names
#    are ckpt_-prefixed too, so a program linking it keeps its own names);
#  - the ckpt executable defines only ckpt_* and cli_* (plus main and the
#    C runtime's reserved _names), so no CLI helper can capture a name of
#    a library we link (jansson's json_string, say).
# Prints each offending symbol; exit 1 if there is any.
set -u
so=$1 a=$2 exe=$3
bad=0

report() { # $1: what, stdin: offending names
    out=$(sort -u)
    if [ -n "$out" ]; then
        echo "$1:"
        echo "$out" | sed 's/^/  /'
        bad=1
    else
        echo "ok   $1"
    fi
}

nm -D --defined-only "$so" | awk '$3 !~ /^ckpt_/ {print $3}' \
    | report "$so exports only ckpt_*"
nm -g --defined-only "$a" | awk 'NF == 3 && $3 !~ /^ckpt_/ {print $3}' \
    | report "$a defines only ckpt_*"
if nm "$exe" | grep -q ' __asan_init$'; then
    echo "skip $exe: the sanitizer runtime is linked in (its interceptors are unprefixed)"
else
    nm -g --defined-only "$exe" \
        | awk 'NF == 3 && $3 !~ /^(ckpt_|cli_|_)/ && $3 !~ /@/ &&
               $3 != "main" && $3 != "data_start" {print $3}' \
        | report "$exe defines only ckpt_*, cli_* and main"
fi
exit $bad
