"""Hostile checkpoints: ckpt.scan names them, ckpt.load refuses them (and
with unsafe_ok=True returns placeholders), and nothing in them ever runs.

The payloads are written as pickle bytes by hand and never unpickled in
Python; pickletools.dis (which only decodes opcodes) proves they are
well-formed, so a payload that would run if loaded is what ckpt sees. Each
would create a marker file; the tests assert it never appears. A Python
audit hook also records every process, exec, compile, socket and pickle
event while ckpt reads the shared malicious corpus: there must be none.
"""
import io
import json
import os
import pickletools
import struct
import sys
import zipfile

import pytest

import ckpt

RISKY_EVENTS = ("os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn",
                "os.fork", "exec", "compile", "socket.", "pickle.find_class", "builtins.input",
                "webbrowser.open", "shutil.", "os.remove", "os.rename")
_events = []
_recording = [False]


def _from_source_text(event, args):
    """exec/compile of text (what a payload does), not of a module file
    that torch may import lazily."""
    if event == "exec":
        name = getattr(args[0], "co_filename", "<?>")
    else:
        name = str(args[1]) if len(args) > 1 else "<?>"
    return name.startswith("<")


def _hook(event, args):
    if _recording[0] and event.startswith(RISKY_EVENTS):
        if event in ("exec", "compile") and not _from_source_text(event, args):
            return
        _events.append((event, repr(args)[:200]))


sys.addaudithook(_hook)


def unicode_(s):  # BINUNICODE
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def short_unicode(s):  # SHORT_BINUNICODE (protocol 4)
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b


def call_global(module, name, arg_ops, proto4=False):
    """module.name(*args) as opcodes: GLOBAL (or STACK_GLOBAL), a tuple of
    the argument opcodes, REDUCE."""
    if proto4:
        g = short_unicode(module) + short_unicode(name) + b"\x93"
    else:
        g = b"c" + module.encode() + b"\n" + name.encode() + b"\n"
    return g + b"(" + arg_ops + b"tR"


def stream(body, proto=2):
    return b"\x80" + bytes([proto]) + body + b"."


def payloads(marker):
    """(name, file bytes or a builder, the global ckpt must name)."""
    touch = "touch " + marker
    os_system = call_global("posix", "system", unicode_(touch))
    inner = stream(os_system)
    sub_list = b"](" + unicode_("touch") + unicode_(marker) + b"e"
    return [
        ("posix.system", stream(os_system), "posix.system"),
        ("os.system", stream(call_global("os", "system", unicode_(touch))), "os.system"),
        ("builtins.exec", stream(call_global(
            "builtins", "exec", unicode_("open(%r, 'w').close()" % marker))), "builtins.exec"),
        ("builtins.eval", stream(call_global(
            "builtins", "eval", unicode_("__import__('os').system(%r)" % touch),
            proto4=True), proto=4), "builtins.eval"),
        ("subprocess.call", stream(call_global("subprocess", "call", sub_list)),
         "subprocess.call"),
        ("nested pickle.loads", stream(call_global(
            "_pickle", "loads", b"B" + struct.pack("<I", len(inner)) + inner)), "_pickle.loads"),
        ("INST protocol 0", b"(S'" + touch.encode() + b"'\nios\nsystem\n.", "os.system"),
        ("in a state dict", stream(b"}(" + unicode_("w") + os_system + b"u"), "posix.system"),
    ]


def torch_zip(tmp_path, data_pkl):
    """A real torch.save archive whose data.pkl is replaced by data_pkl."""
    torch = pytest.importorskip("torch")
    real = tmp_path / "real.pt"
    torch.save({"w": torch.ones(3)}, real)
    out = io.BytesIO()
    with zipfile.ZipFile(real) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("/data.pkl"):
                data = data_pkl
            zout.writestr(info.filename, data)
    return out.getvalue()


def test_payloads_never_run(tmp_path):
    marker = str(tmp_path / "pwned")
    cases = payloads(marker)
    state_dict = cases[-1][1]
    cases.append(("torch zip data.pkl", lambda: torch_zip(tmp_path, state_dict),
                  "posix.system"))
    for name, data, glob in cases:
        data = data() if callable(data) else data
        path = tmp_path / ("evil-%d.pt" % len(name))
        path.write_bytes(data)
        if not data.startswith(b"PK"):
            pickletools.dis(data, out=io.StringIO())  # well-formed (decoded, not run)
        rep = ckpt.scan(path)
        assert rep.verdict == "unsafe", name
        assert glob in rep.globals, (name, rep.globals)
        assert any(f.severity == "dangerous" for f in rep.findings), name
        with pytest.raises(ckpt.UnsafeError) as exc:
            ckpt.load(path)
        assert exc.value.code == -7 and exc.value.report.verdict == "unsafe", name
        got = ckpt.load(path, unsafe_ok=True)
        opaque = got["w"] if isinstance(got, dict) else got
        assert isinstance(opaque, ckpt.Opaque), (name, got)
        assert opaque.name in (glob, "_pickle.loads"), name
        assert not os.path.exists(marker), name


def test_corpus_verdicts_and_refusals(corpus):
    records = []
    with open(os.path.join(corpus, "expected.jsonl")) as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["file"].startswith("scan/"):
                records.append(rec)
    assert len(records) >= 40
    del _events[:]
    _recording[0] = True
    try:
        for rec in records:
            path = os.path.join(corpus, rec["file"])
            verdict = rec["verdict"]
            assert ckpt.scan(path).verdict == verdict, rec["file"]
            if verdict == "unscannable":  # refused as unsafe, or unreadable
                with pytest.raises(ckpt.Error) as exc:
                    ckpt.load(path)
                if isinstance(exc.value, ckpt.UnsafeError):
                    assert exc.value.report.verdict == verdict, rec["file"]
            elif verdict == "unsafe":
                with pytest.raises(ckpt.UnsafeError) as exc:
                    ckpt.load(path)
                assert exc.value.report.verdict == verdict, rec["file"]
            if verdict in ("unsafe", "unscannable"):
                try:  # the data, or the reader's own refusal: never a call
                    ckpt.load(path, unsafe_ok=True)
                except ckpt.Error as e:
                    assert not isinstance(e, ckpt.UnsafeError), rec["file"]
            elif verdict == "safe":
                assert ckpt.load(path) is not None, rec["file"]
            else:
                with pytest.raises(ckpt.FormatError):
                    ckpt.load(path)
    finally:
        _recording[0] = False
    assert _events == []


def test_scan_report_fields(corpus):
    rep = ckpt.scan(os.path.join(corpus, "scan/picklescan/malicious1_v3.pkl"))
    assert rep.verdict == "unsafe" and not rep.safe
    assert rep.globals == ("builtins.eval",)
    f = rep.dangerous()[0]
    assert (f.kind, f.global_, f.member, f.offset) == ("global", "builtins.eval", "", 2)
    # an allowed name turns a file safe (here a data class, not code)
    ok = ckpt.scan(os.path.join(corpus, "scan/picklescan/benign0_v3.pkl"))
    assert ok.safe and ok.findings == ()
    with pytest.raises(ckpt.FileError):
        ckpt.scan(os.path.join(corpus, "absent.pkl"))


def test_scan_directory_as_the_cli_does(tmp_path):
    """ckpt.scan(DIR) is `ckpt scan DIR`: the library's one walk (files
    before subfolders, hidden entries skipped, a shard reported through its
    index, an entry too deep listed with its error), the same files with
    the same verdicts; iterating gives the reports. It raised before
    (ckpt_scan of a directory)."""
    import subprocess
    evil = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."
    benign = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."
    st = (b"\x36\0\0\0\0\0\0\0"
          b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' + b"\0\0\x80?")
    deep = "/".join("d%d" % i for i in range(17))
    files = {"config.json": b"{}\n", "model.pkl": benign, "unet/a.safetensors": st,
             "unet/m.index.json": b'{"weight_map": {"w": "a.safetensors"}}',
             "unet/z.bin": evil, "unet/.hidden.pkl": evil, deep + "/x.pkl": evil}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    rep = ckpt.scan(tmp_path)
    assert isinstance(rep, ckpt.DirScanReport)
    got = [(os.path.relpath(r.file, tmp_path), r.verdict) for r in rep]
    assert got == [("config.json", "not-a-checkpoint"), ("model.pkl", "safe"),
                   ("unet/m.index.json", "safe"), ("unet/z.bin", "unsafe")], got
    assert len(rep) == 4 and rep.verdict == "unsafe" and not rep.safe
    assert [(e.file, e.name) for e in rep.errors] == [
        (str(tmp_path / "/".join(deep.split("/")[:17])), "CKPT_E_LIMIT")], rep.errors
    assert "deeper than 16 levels" in rep.errors[0].message
    p = subprocess.run([os.environ.get("CKPT_BIN", "ckpt"), "scan", "--json", str(tmp_path)],
                       capture_output=True, timeout=60)
    cli = [(os.path.relpath(r["file"], tmp_path), r["verdict"]) for r in json.loads(p.stdout)]
    assert p.returncode == 2 and cli == got, (p.returncode, cli, p.stderr)
    # the evil file gone: safe, as the CLI says (exit 0 but for the deep entry)
    (tmp_path / "unet/z.bin").unlink()
    import shutil
    shutil.rmtree(tmp_path / "d0")
    rep = ckpt.scan(str(tmp_path))
    assert rep.verdict == "safe" and rep.safe and rep.errors == (), rep
    with pytest.raises(ckpt.FileError):
        ckpt.scan(tmp_path / "unet" / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ckpt.FileError, match="no file in the directory"):
        ckpt.scan(tmp_path / "empty")
