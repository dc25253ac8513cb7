"""Builders of crafted files, shared by the differential tests
(tests/scan, tests/zipdiff, tests/loaders) and bench/peers.py: pickles
in the operand forms CPython's unpickler accepts, torch's legacy stacked
streams, zip archives the way torch writes them (with miniz's quirks to
hand), torch < 0.4 tar checkpoints, .npy files and sharded-index JSON.
Standard library only. NOTHING HERE IS EVER LOADED: these only build
bytes.
"""
import io
import pickle
import struct
import tarfile
import zlib


# ------------------------------------------------------------ pickles

def frame(body):
    return b"\x95" + struct.pack("<Q", len(body)) + body


LEGACY_MAGIC = "119547037146038801333356"  # torch.serialization.MAGIC_NUMBER
LEGACY_STREAMS = 5  # magic, protocol version, sys_info, main pickle, storage keys
CALL = b"(S'ls'\ntR."          # call the global above with ('ls',)
SYSTEM = b"cos\nsystem\n"


def pickle_syntax_cases():
    """Each class of issue 11 (1: operand syntax, FRAME, big ints, buffers)
    and BUILD's state forms, malicious (a dangerous call after the
    construct) and benign."""
    texts = [
        b"I010\n", b"I0x10\n", b"I0o10\n", b"I0b101\n", b"I1_000\n", b"I\x00\n",
        b"I12\x00junk\n", b"I -0x10\n", b"I 5 \n", b"I+7\n", b"I-0\n", b"I 1\n", b"I00\n",
        b"I08\n", b"I010 \n", b"I0x\n", b"I07777777777777777777777\n", b"I1__0\n",
        b"I_1\n", b"I1_\n", b"I99999999999999999999\n", b"I-9223372036854775809\n",
        b"I0x8000000000000000\n", b"I\n", b"I \x00\n",
        b"L0x10L\n", b"L 5 L\n", b"L5\x00zzL\n", b"L0x_1\n", b"L-0b11\n", b"L010\n",
        b"L12LL\n", b"LL\n", b"L0x\n", b"L0_0\n", b"L00\n", b"L0O17L\n", b"L" + b"7" * 4300 + b"\n",
        b"L" + b"7" * 4301 + b"\n", b"L0x" + b"f" * 5000 + b"\n", b"L0x1950a86a20f9469cfc6cL\n",
        b"F1.5\x00junk\n", b"F+.5e-3\n", b"F-InFiNiTy\n", b"Fnan\n", b"F1e-400\n", b"F2.\n",
        b"F 1.5\n", b"F1.5 \n", b"F1_0\n", b"F1e\n", b"F1e400\n", b"Finfinit\n", b"F.\n",
        b"F0x1p3\n", b"F1e+\n", b"F\x00\n",
        b"\x8b\x2c\x01\x00\x00" + b"\x11" * 300, b"\x8b\x2c\x01\x00\x00" + b"\x00" * 300,
        b"\x8a\x09" + b"\xff" * 9, b"\x8b\xff\xff\xff\xff",
        b"C\x02ab\x98", b"X\x02\x00\x00\x00ab\x98", b"K\x01\x98", b"\x96\x01" + b"\x00" * 7 + b"a\x98",
        b"\x97", b"N\x98",
    ]
    memo = [b"Np1_0\ng10\n0", b"Np-0\ng0\n0", b"Np-1\n0", b"Np 010\ng10\n0", b"Np0x1\n0",
            b"Np9223372036854775807\ng9223372036854775807\n0", b"Np9223372036854775808\n0",
            b"Np5\x00x\ng5\n0", b"Np\n0", b"Ng-1\n0"]
    for t in texts + memo:
        yield t + b"."                       # benign
        yield t + b"0" + SYSTEM + CALL       # the value dropped, then a call
        yield b"\x80\x02" + t + b"0" + SYSTEM + CALL
    p4 = b"\x80\x04"
    framed = [
        frame(b"C\x05ab") + b"cde.", frame(b"X\x05\x00\x00\x00ab") + b"cde.",
        frame(b"K") + b"\x01.", frame(b"N" + frame(b"N") + b"0") + b".",
        frame(b"N" + frame(b"N0.")), frame(b"I1") + b"2\n.", frame(b"I12\n") + b".",
        frame(b"\x96\x03" + b"\x00" * 7 + b"ab") + b"c.", frame(b"N") + frame(b".")[:-1] + b".",
        frame(b"N" + b"\x95\x05" + b"\x00" * 7) + b"0N.", frame(b"c") + b"os\nsystem\n" + CALL,
        frame(b"cos\nsys") + b"tem\n" + CALL, frame(b"\x8c\x02os\x8c\x06sys") + b"tem\x93" + CALL,
        frame(b"\x8c\x02os\x8c\x06system\x93") + CALL, frame(b"N.") + SYSTEM + CALL,
        b"\x95\xff" + b"\x00" * 7 + b"N.",
    ]
    for f in framed:
        yield p4 + f
        yield f  # FRAME with no PROTO before it: CPython reads it all the same
    # BUILD on a builtin value (no __setstate__, no __dict__): only a state
    # of None or (None, {}) passes
    targets = [b"]", b")", b"}", b"K\x01", b"X\x01\x00\x00\x00a", b"N", b"\x8f", b"\x88"]
    states = [b"N", b"N}\x86", b"NN\x86", b"}N\x86", b"}", b"K\x01", b"N}K\x01K\x02s\x86"]
    for t in targets:
        for st in states:
            yield b"\x80\x02" + t + st + b"b."
            yield t + st + b"b0" + SYSTEM + CALL


def legacy_stream_cases():
    """torch < 1.6 files: five stacked pickles (class 2: none is dropped)."""
    magic = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."
    version = b"\x80\x02M\xe9\x03."
    info = pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2)
    main = b"\x80\x02}q\x00."
    keys = b"\x80\x02]q\x00."
    evil = b"\x80\x02" + SYSTEM + CALL
    for m in (magic, b"L0x1950a86a20f9469cfc6cL\n.", b"I119547037146038801333356\n."):
        yield m + version + info + main + keys + b"storage bytes"
        yield m + version + evil + main + keys
        yield m + version + info + main + evil
        yield m + version + b"hello" + evil
        yield m + b"\x80\x02M\xe8\x03." + evil + main + keys  # version 1000: torch stops
        yield m + version + info + b"\x80\x04" + frame(b"}.N") + evil + keys


# ------------------------------------------------------------ zip


def zip_archive(members, zip64=False, prefix=b"", comment=b"", locator=None,
          record_in_comment=False, cd_names=None):
    """A zip the way torch writes one (stored or deflated members, local
    extra padding); offsets count from the archive's own start, so a prefix
    shifts it. locator: None (ZIP64 end record + locator when zip64) or an
    offset the locator declares."""
    out = bytearray()
    cd = bytearray()
    for i, (name, data, method) in enumerate(members):
        body = data if method == 0 else zlib.compress(data, 9)[2:-4]
        crc = zlib.crc32(data)
        nb = name.encode()
        local = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0x0808, method, 0, 0,
                           0, 0, 0, len(nb), 4) + nb + b"FB\0\0" + body
        cname = (cd_names[i] if cd_names else name).encode()
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0x0808, method,
                          0, 0, crc, len(body), len(data), len(cname), 0, 0, 0, 0, 0,
                          local) + cname
    cd_off, n = len(out), len(members)
    out += cd
    if zip64:
        z64 = len(out)
        rec = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, n, n,
                          len(cd), cd_off)
        if not record_in_comment:
            out += rec
        out += struct.pack("<IIQI", 0x07064B50, 0, z64 if locator is None else locator, 1)
        if record_in_comment:
            comment = rec + comment
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(cd), cd_off, len(comment))
    out += comment
    return bytes(prefix) + bytes(out)


def zip_two_directories(miniz_members, zipfile_members):
    """One file, two central directories: miniz (torch) takes the end
    record's directory offset as absolute and reads miniz_members; Python's
    zipfile shifts every offset by the bytes it finds before the directory
    it expects right before the end record (its "concat", for prepended
    data) and reads zipfile_members. The two lists need the same names."""
    first, second = zip_archive(miniz_members), zip_archive(zipfile_members)

    def parts(z):
        n, size, off = struct.unpack_from("<HII", z, len(z) - 22 + 10)
        return z[:off], z[off:off + size], n
    locals1, cd1, n = parts(first)
    locals2, cd2, n2 = parts(second)
    assert n == n2 and len(cd1) == len(cd2), "the same names in both"
    shift = len(locals1) - len(locals2)  # zipfile adds back len(cd1) + len(locals2)
    assert shift >= 0, "the miniz members take more bytes"
    cd2 = bytearray(cd2)
    at = 0
    while at < len(cd2):
        off, = struct.unpack_from("<I", cd2, at + 42)
        struct.pack_into("<I", cd2, at + 42, off + shift)
        nlen, elen, clen = struct.unpack_from("<HHH", cd2, at + 28)
        at += 46 + nlen + elen + clen
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(cd2), len(locals1), 0)
    return locals1 + cd1 + locals2 + bytes(cd2) + end


# ------------------------------------------------------------ legacy tar

SPOTS = ["count", "storage", "views", "tensor_count", "tensor", "main", None]


def _call(tag):
    """A protocol 2 pickle calling a distinct global: posix.<tag>()."""
    return b"\x80\x02cposix\n" + tag.encode() + b"\n)R."


def _p2(obj):
    return pickle.dumps(obj, protocol=2)


def storages_member(spot):
    out = bytearray()
    out += _call("count_g") if spot == "count" else _p2(1)
    if spot == "storage":  # the call stands where the storage class goes
        out += b"\x80\x02(K\x00X\x03\x00\x00\x00cpucposix\nstorage_g\n)R\x87."
    else:
        out += b"\x80\x02(K\x00X\x03\x00\x00\x00cpuctorch\nFloatStorage\n\x87."
    out += struct.pack("<q", 4) + struct.pack("<4f", 1, 2, 3, 4)
    out += _call("views_g") if spot == "views" else _p2([])
    return bytes(out)


def tensors_member(spot):
    out = bytearray()
    out += _call("tcount_g") if spot == "tensor_count" else _p2(1)
    if spot == "tensor":
        out += b"\x80\x02(K\x01K\x00cposix\ntensor_g\n)R\x87."
    else:
        out += b"\x80\x02(K\x01K\x00ctorch\nFloatTensor\n\x87."
    out += struct.pack("<i", 1) + b"\0" * 4 + struct.pack("<q", 4) + struct.pack("<q", 1)
    out += struct.pack("<q", 0)
    return bytes(out)


def main_member(spot):
    if spot == "main":
        return _call("main_g")
    # {'w': tensor 1}, the tensor as persistent id '1'
    return b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01X\x01\x00\x00\x001Qs."


def legacy_tar(spot, v7=False, dup=False):
    members = [("sys_info", _p2({"protocol_version": 1001, "little_endian": True})),
               ("pickle", main_member(spot)),
               ("storages", storages_member(spot)),
               ("tensors", tensors_member(spot))]
    if dup:  # a benign "pickle" first, the planted one last: tarfile takes the last
        members.insert(0, ("pickle", main_member(None)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = bytearray(buf.getvalue())
    if v7:  # blank the ustar magic and version, fix the checksum
        for off in range(0, len(data) - 512, 512):
            h = data[off:off + 512]
            if h[257:262] == b"ustar":
                h[257:265] = b"\0" * 8
                h[148:156] = b" " * 8
                h[148:156] = b"%06o\0 " % (sum(h) & 0o777777)
                data[off:off + 512] = h
    return bytes(data)


# ------------------------------------------------------------ .npy


def npy_file(header, payload, major=1, minor=0):
    """A .npy file: magic, version, the header text (a Python dict literal,
    padding and newline included) and payload (the data)."""
    size = struct.pack("<H", len(header)) if major == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([major, minor]) + size + header + payload


# ------------------------------------------------------------ index JSON


def index_traps(benign, evil):
    """(name, JSON bytes) sharded indexes whose weight_map, as Python's json
    reads it, names the shard `evil` (NaN and Infinity values, the last of
    duplicate keys winning at either level, escaped names, big numbers; the
    last one has a number json refuses); `benign` is named where a reader
    taking the first key would look."""
    esc = "".join("\\u%04x" % ord(c) for c in evil)
    yield "nan", ('{"weight_map": {"a": "%s"}, "metadata": {"total_size": NaN}}'
                  % evil).encode()
    yield "infinity", ('{"metadata": {"x": -Infinity, "y": [Infinity]}, "weight_map": '
                       '{"a": "%s"}}' % evil).encode()
    yield "duplicate_key", ('{"weight_map": {"a": "%s", "a": "%s"}}' % (benign, evil)).encode()
    yield "duplicate_map", ('{"weight_map": {"a": "%s"}, "weight_map": {"b": "%s"}}'
                            % (benign, evil)).encode()
    yield "escaped", ('{"weight_map": {"a": "%s"}, "n": 1%s}' % (esc, "0" * 4000)).encode()
    # over int's 4300 digits: json.loads raises ValueError, nothing is opened
    yield "digits", ('{"weight_map": {"a": "%s"}, "n": 1%s}' % (esc, "0" * 5000)).encode()
