#!/bin/sh
# bench_scan.sh - `ckpt scan` speed, the two numbers the scan issue asks for:
#   1. raw pickle streams (a ~100 MB list of ints and strs, protocols 2 and
#      4, and a list of ints alone): MB/s, target >= 300 MB/s;
#   2. a torch.save-style zip holding a 1 GiB storage: the scan costs
#      O(pickles), not O(tensor data), so it takes milliseconds.
# Times are the best of 3 warm runs (the page cache holds the files). The
# machine may be shared and noisy.
#
# Usage: bench/bench_scan.sh [CKPT_BIN] [WORKDIR]
#   CKPT_BIN defaults to build/ckpt, WORKDIR to a temp dir (removed after).
# Needs python3 (standard library only); the files are generated, ~1.4 GB.
set -eu
BIN="${1:-build/ckpt}"
WORK="${2:-}"
[ -x "$BIN" ] || { echo "bench_scan: no ckpt binary at $BIN" >&2; exit 2; }
if [ -z "$WORK" ]; then
    WORK="$(mktemp -d /tmp/ckpt-bench-scan.XXXXXX)"
    trap 'rm -rf "$WORK"' EXIT
fi
PY="$(command -v /usr/bin/python3 || command -v python3)"

"$PY" - "$BIN" "$WORK" <<'EOF'
import os, pickle, struct, subprocess, sys, time, zipfile

binary, work = sys.argv[1], sys.argv[2]


def best_of_3(path):
    best = None
    for _ in range(3):
        t = time.perf_counter()
        p = subprocess.run([binary, "scan", path], capture_output=True)
        dt = time.perf_counter() - t
        verdict = p.stdout.decode().splitlines()[-1].split()[0] if p.stdout else "?"
        best = dt if best is None else min(best, dt)
    return best, verdict


def raw(name, obj, proto):
    path = os.path.join(work, name)
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=proto)
    size = os.path.getsize(path)
    secs, verdict = best_of_3(path)
    print("%-26s %8.1f MB  %7.3f s  %7.1f MB/s  %s"
          % (name, size / 1e6, secs, size / 1e6 / secs, verdict))


mixed = []
for i in range(4_000_000):
    mixed.append(i * 7919)
    mixed.append("name%07d" % i)
print("raw pickle streams (target >= 300 MB/s):")
raw("ints_strs_p2.pkl", mixed, 2)
raw("ints_strs_p4.pkl", mixed, 4)
del mixed
raw("ints_p2.pkl", list(range(0, 20_000_000 * 7919, 7919)), 2)

# A torch.save layout without torch: data.pkl naming one FloatStorage of
# 2^28 elements, stored in data/0 (1 GiB of zeros, written in chunks).
numel = 1 << 28
pkl = (b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01ctorch._utils\n_rebuild_tensor_v2\n"
       b"q\x02((X\x07\x00\x00\x00storageq\x03ctorch\nFloatStorage\nq\x04"
       b"X\x01\x00\x00\x000q\x05X\x03\x00\x00\x00cpuq\x06J" + struct.pack("<i", numel) +
       b"tq\x07QK\x00J" + struct.pack("<i", numel) + b"\x85K\x01\x85\x89"
       b"ccollections\nOrderedDict\n)Rtq\x08Rq\x09s.")
path = os.path.join(work, "big_storage.pt")
with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
    z.writestr("big_storage/data.pkl", pkl)
    info = zipfile.ZipInfo("big_storage/data/0")
    with z.open(info, "w", force_zip64=True) as fh:
        chunk = bytes(1 << 24)
        for _ in range(numel * 4 // len(chunk)):
            fh.write(chunk)
    z.writestr("big_storage/version", "3\n")
secs, verdict = best_of_3(path)
print("torch zip, 1 GiB storage:  %.2f GB file, scan %.1f ms (%s)"
      % (os.path.getsize(path) / 1e9, secs * 1e3, verdict))
EOF
