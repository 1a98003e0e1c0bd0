"""`ckptstat scan` of archives users extract before loading (analysis/scan/archive.py): tars (plain, gzip, bzip2, xz)
and zips no loader reads whole. The oracle is what users do: Python's tarfile / zipfile extract the archive (tarfile
without a filter, its default before Python 3.14), then torch.load(weights_only=False) of every file it made (links
followed, as a loader given the name follows them); the payload makes a marker folder when it runs. scan says unsafe
exactly where that ran the payload (or where extraction wrote outside its folder), safe elsewhere."""
from __future__ import annotations

import io
import json
import os
import pickle
import re
import shutil
import struct
import sys
import tarfile
import zipfile

import library_runner
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from remote_server import Server  # noqa: E402

from ckptstat import sources  # noqa: E402
from ckptstat.analysis.scan import scan_path  # noqa: E402
from ckptstat.core import limits  # noqa: E402
from ckptstat.errors import CkptstatError  # noqa: E402

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

MARKER = "payload-ran"


class _Payload:
    def __reduce__(self):
        return (os.mkdir, (MARKER,))


EVIL = pickle.dumps(_Payload(), protocol=2)

# extract as users do, then torch.load every file extraction made, in the case's own folder (the marker lands there)
EXTRACT_AND_LOAD = """
import os, sys, tarfile, zipfile, warnings, torch
warnings.simplefilter("ignore")
import bz2, gzip, lzma, zstandard
OPENERS = {b"\\x1f\\x8b": (gzip.open, ".gz"), b"BZh": (bz2.open, ".bz2"), b"\\xfd7zXZ": (lzma.open, ".xz")}
def extract(archive, out):   # and the archives inside it, as a user unpacking all the way does
    os.makedirs(out)
    try:
        with open(archive, "rb") as f:
            magic = f.read(4)
        if magic == b"\\x28\\xb5\\x2f\\xfd":   # unzstd first (Python 3.11's tarfile has no zstd)
            with open(archive, "rb") as f, open(out + ".raw", "wb") as raw:
                zstandard.ZstdDecompressor().copy_stream(f, raw)
            archive = out + ".raw"
        if zipfile.is_zipfile(archive) and not tarfile.is_tarfile(archive):
            zipfile.ZipFile(archive).extractall(out)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as t:
                t.extractall(out, filter="fully_trusted") if hasattr(tarfile, "fully_trusted_filter") else t.extractall(out)
        else:   # one compressed file: gunzip, bunzip2, unxz
            opener, suffix = next(v for k, v in OPENERS.items() if magic.startswith(k))
            name = os.path.basename(archive)
            name = name[:-len(suffix)] if name.endswith(suffix) else name
            with opener(archive) as src, open(os.path.join(out, name), "wb") as dst:
                dst.write(src.read())
    except BaseException:
        pass
    for folder, _, files in os.walk(out):
        for name in files:
            if name.endswith((".tar", ".tgz", ".gz", ".xz", ".bz2", ".zst", ".zip")):
                extract(os.path.join(folder, name), os.path.join(folder, name + ".out"))
archive, out = sys.argv[1], sys.argv[2]
extract(archive, out)
for folder, _, files in os.walk(out):
    for name in files:
        path = os.path.join(folder, name)
        if name.endswith(".safetensors"):
            continue   # torch.load hands such a path to safetensors
        try:
            torch.load(path, weights_only=False)
        except BaseException:
            pass
"""


def _member(t: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    t.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _model_folder(root: str) -> str:
    """A model folder as save_pretrained and a training script leave it: safetensors, a torch.save, a config, code
    (a script no server imports: SageMaker's code/inference.py is tested apart)."""
    os.makedirs(os.path.join(root, "code"))
    safetensors_torch.save_file({"w": torch.ones(4)}, os.path.join(root, "model.safetensors"))
    torch.save({"w": torch.ones(3)}, os.path.join(root, "pytorch_model.bin"))
    with open(os.path.join(root, "config.json"), "w") as f:
        json.dump({"model_type": "bert"}, f)
    with open(os.path.join(root, "code", "train.py"), "w") as f:
        f.write("print('hello')\n")
    return root


def _tar(path: str, mode: str, folder: str | None, extra: list[tuple] = ()) -> str:
    with tarfile.open(path, mode) as t:
        if folder:
            t.add(folder, arcname=".")
        for args in extra:
            _member(t, *args)
    return path


def _zip(path: str, folder: str | None, extra: list[tuple[str, bytes]] = (), method: int = zipfile.ZIP_DEFLATED) -> str:
    with zipfile.ZipFile(path, "w", method) as z:
        for root, _, files in os.walk(folder or os.devnull):
            for name in files:
                p = os.path.join(root, name)
                z.write(p, os.path.relpath(p, folder))
        for name, data in extra:
            z.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """name -> path of each archive case; a benign folder and a copy of it as the inner archive of a nested one."""
    d = str(tmp_path_factory.mktemp("archives"))
    m = _model_folder(os.path.join(d, "src"))
    folder = os.path.join(d, "cases")
    os.makedirs(folder)
    c = {}
    def at(name: str) -> str:
        return os.path.join(folder, name)
    c["clean.tar.gz"] = _tar(at("clean.tar.gz"), "w:gz", m)
    c["clean.tar"] = _tar(at("clean.tar"), "w", m)
    c["clean.zip"] = _zip(at("clean.zip"), m)
    c["optimizer.tar.bz2"] = _tar(at("optimizer.tar.bz2"), "w:bz2", m, [("sub/optimizer.pt", EVIL)])
    c["unnamed.tar.xz"] = _tar(at("unnamed.tar.xz"), "w:xz", m, [("weights", EVIL)])   # no extension: torch.load reads it
    c["folder.zip"] = _zip(at("folder.zip"), m, [("checkpoints/last.ckpt", EVIL)])
    c["stored.zip"] = _zip(at("stored.zip"), m, [("model.pkl", EVIL)], zipfile.ZIP_STORED)
    keras_config = json.dumps({"class_name": "Sequential", "config": {"name": "s", "layers": []}, "module": "keras"})
    # a zip Keras' rules read by its weights' names (its config safe), with a pickle beside them: both judged
    c["keras-folder.zip"] = _zip(at("keras-folder.zip"), None, [("config.json", keras_config),
                                                               ("model.weights.h5", b""), ("extra/evil.pkl", EVIL)])
    c["hardlink.tar"] = _tar(at("hardlink.tar"), "w", None, [("a.safetensors", EVIL),
                                                             ("a.pth", b"", tarfile.LNKTYPE, "a.safetensors")])
    # torch.load hands only a path ending in `.safetensors`, exactly, to safetensors: it unpickles `model.SAFETENSORS`
    c["upper-case.tar.gz"] = _tar(at("upper-case.tar.gz"), "w:gz", None, [("model/model.SAFETENSORS", EVIL)])
    c["symlink.tgz"] = _tar(at("symlink.tgz"), "w:gz", None, [("blobs/x.safetensors", EVIL),
                                                              ("snap/model.bin", b"", tarfile.SYMTYPE,
                                                               "../blobs/x.safetensors")])
    benign = open(os.path.join(m, "pytorch_model.bin"), "rb").read()
    c["later.tar"] = _tar(at("later.tar"), "w", None, [("pytorch_model.bin", benign), ("pytorch_model.bin", EVIL)])
    c["earlier.tar"] = _tar(at("earlier.tar"), "w", None, [("pytorch_model.bin", EVIL), ("pytorch_model.bin", benign)])
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2), "extra": _Payload()}, buf)
    c["model.pt.gz"] = at("model.pt.gz")   # gunzip, then torch.load
    with open(c["model.pt.gz"], "wb") as f:
        f.write(__import__("gzip").compress(buf.getvalue()))
    c["notes.txt.xz"] = at("notes.txt.xz")
    with open(c["notes.txt.xz"], "wb") as f:
        f.write(__import__("lzma").compress(b"hello\n" * 100))
    zstandard = pytest.importorskip("zstandard")
    c["optimizer.tar.zst"] = at("optimizer.tar.zst")
    with open(c["optimizer.tar.zst"], "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(__import__("bz2").decompress(open(c["optimizer.tar.bz2"], "rb").read())))
    c["proto0.tgz"] = _tar(at("proto0.tgz"), "w:gz", None, [("notes.txt", pickle.dumps(_Payload(), protocol=0))])
    png = b"\x89PNG\r\n\x1a\n" + bytes(100)
    c["shards.tar"] = _tar(at("shards.tar"), "w", None, [(f"{i:05d}.{ext}", data) for i in range(3) for ext, data in
                                                         (("png", png), ("jpg", b"\xff\xd8\xff" + bytes(99)),
                                                          ("cls", b"3"), ("json", b'{"label": 3}'))])
    # names that climb out of the folder, which zipfile's extractall (and unzip) write inside it without their `..`
    # parts; a zip shaped as torch.save's (one folder holding data.pkl, here not a pickle) with another member beside
    c["climbing.zip"] = _zip(at("climbing.zip"), None, [("../evil.pkl", EVIL), ("README.txt", b"hi\n")])
    c["climbing-inside.zip"] = _zip(at("climbing-inside.zip"), None, [("a/../../model.pt", EVIL),
                                                                      ("b/../../weights.bin", EVIL)])
    c["torch-shaped.zip"] = _zip(at("torch-shaped.zip"), None, [("archive/data.pkl", b"not a pickle"),
                                                                ("archive/model.pt", EVIL)])
    # a whole torch archive (torch.load reads its benign data.pkl) holding a member under its own folders' names
    benign_pickle = pickle.dumps({"a": 1}, protocol=2)
    c["torch-data-member.zip"] = _zip(at("torch-data-member.zip"), None, [("archive/data.pkl", benign_pickle),
                                                                          ("archive/data/evil.pt", EVIL)])
    c["torch-data-climb.zip"] = _zip(at("torch-data-climb.zip"), None, [("archive/data.pkl", benign_pickle),
                                                                        ("archive/data/../../evil.pkl", EVIL)])
    inner = _tar(os.path.join(d, "inner.tar.xz"), "w:xz", None, [("weights.pt", EVIL)])
    shutil.copy(inner, os.path.join(m, "inner.tar.xz"))
    c["nested.tgz"] = _tar(at("nested.tgz"), "w:gz", m)
    os.unlink(os.path.join(m, "inner.tar.xz"))
    return d, c


def _ran(tmp: str, archive: str) -> bool:
    """Whether extracting `archive` with Python's tarfile / zipfile and torch.loading what it holds ran the payload."""
    case = os.path.join(tmp, os.path.basename(archive) + ".run")
    os.makedirs(case)
    library_runner.python(EXTRACT_AND_LOAD, archive, os.path.join(case, "out"), cwd=case)
    return os.path.isdir(os.path.join(case, MARKER))


def test_scan_says_unsafe_exactly_where_extracting_and_loading_runs_the_payload(archives, tmp_path):
    _, cases = archives
    wrong, ran_payload = [], 0
    for name, path in sorted(cases.items()):
        if name == "earlier.tar":   # extraction keeps the last member of a name: its payload never reaches a loader
            continue
        ran = _ran(str(tmp_path), path)
        ran_payload += ran
        r = scan_path(path)
        if (r["status"] == "unsafe") != ran or r["status"] not in ("unsafe", "safe"):
            wrong.append((name, r["status"], ran, r["verdict"]))
    assert not wrong, wrong
    assert ran_payload >= 18   # (the oracle ran most payloads: it is no loader that runs nothing)


def test_an_archives_report_names_the_member(archives):
    _, c = archives
    assert scan_path(c["optimizer.tar.bz2"])["verdict"].startswith("UNSAFE: sub/optimizer.pt: torch.load")
    assert scan_path(c["unnamed.tar.xz"])["findings"][0]["record"].startswith("weights: ")
    assert "inner.tar.xz: weights.pt: " in scan_path(c["nested.tgz"])["verdict"]
    r = scan_path(c["model.pt.gz"])   # a compressed file is one member, named as gunzip names it
    assert r["format"] == "gzip-compressed file" and [m["path"] for m in r["members"]] == ["model.pt"]
    assert scan_path(c["notes.txt.xz"])["members"] == []
    assert scan_path(c["optimizer.tar.zst"])["format"] == "tar archive (zstd-compressed)"
    assert scan_path(c["hardlink.tar"])["unsafe_globals"] == ["posix.mkdir"]
    assert "a.pth" in scan_path(c["hardlink.tar"])["verdict"]
    assert "snap/model.bin" in scan_path(c["symlink.tgz"])["verdict"]
    r = scan_path(c["clean.tar.gz"])
    assert r["format"] == "tar archive (gzip-compressed)"
    assert {m["path"]: m["status"] for m in r["members"]} == {"pytorch_model.bin": "safe"}
    assert any("safetensors" in n for n in r["notes"])
    assert scan_path(c["clean.zip"])["format"] == "zip archive"
    r = scan_path(c["keras-folder.zip"])
    assert r["verdict"].startswith("UNSAFE: extra/evil.pkl: ") and any("Keras" in n for n in r["notes"])


def test_archives_no_reader_here_opens_are_unknown(tmp_path, cli, monkeypatch):
    """7-Zip and RAR (no reader in Python's library), and zstd without the zstd extra: never passed by as clean."""
    from ckptstat.analysis.scan import archive

    (tmp_path / "model.7z").write_bytes(b"7z\xbc\xaf\x27\x1c" + bytes(200))
    (tmp_path / "model.rar").write_bytes(b"Rar!\x1a\x07\x01\x00" + bytes(200))
    for name, kind in (("model.7z", "a 7-Zip archive"), ("model.rar", "a RAR archive")):
        r = scan_path(str(tmp_path / name))
        assert r["status"] == "unknown" and f"{kind}, which scan does not open" in r["verdict"]
        rc, _, err = cli("summary", str(tmp_path / name))
        assert rc != 0 and f"reads: {kind} (extract it" in err
    monkeypatch.setattr(archive, "zstd_available", lambda: False)
    (tmp_path / "w.tar.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(200))
    r = scan_path(str(tmp_path / "w.tar.zst"))
    assert r["status"] == "unknown" and "zstd extra" in r["verdict"]
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 1 and {f["path"]: f["status"] for f in json.loads(out)["files"]} == {
        "model.7z": "unknown", "model.rar": "unknown", "w.tar.zst": "unknown"}


def test_members_no_loader_reads_are_not_extracted(archives):
    """A WebDataset shard's images and labels: no loader reads a pickle from them (the oracle above), so they are not
    written out (a folder of dataset shards is not copied to the temporary folder; nor its labels' `.json`, no config
    a library reads by name); a pickle of protocol 0 under a text name is (pickle.load, and torch.load's legacy path,
    run it)."""
    _, c = archives
    r = scan_path(c["shards.tar"])
    assert r["status"] == "safe" and r["members"] == [] and "12 member(s) not extracted" in " ".join(r["notes"])
    assert r["verdict"] == "safe: none of its 12 member(s) holds a pickle or config a loader reads"
    r = scan_path(c["proto0.tgz"])
    assert r["status"] == "unsafe" and r["members"][0]["path"] == "notes.txt"


def test_code_a_model_server_imports_from_the_archive_is_unknown(tmp_path):
    """SageMaker's inference toolkits import a model.tar.gz's code/inference.py (and pip-install code/requirements.txt);
    TorchServe imports the handler and modelFile a .mar's MAR-INF/MANIFEST.json names (torch-model-archiver's layout):
    Python scan does not vet, named, the verdict unknown. A built-in handler is no code of the archive's."""
    folder = _model_folder(str(tmp_path / "m"))
    with open(os.path.join(folder, "code", "inference.py"), "w") as f:
        f.write("def model_fn(model_dir):\n    return None\n")
    with open(os.path.join(folder, "code", "requirements.txt"), "w") as f:
        f.write("numpy\n")
    r = scan_path(_tar(str(tmp_path / "model.tar.gz"), "w:gz", folder))
    assert r["status"] == "unknown" and "code/inference.py: SageMaker's inference toolkits import it" in r["verdict"]
    assert any("code/requirements.txt" in n for n in r["notes"])
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf)
    manifest = {"createdOn": "06/12/2026 10:00:00", "runtime": "python", "archiverVersion": "0.12.0",
                "model": {"modelName": "resnet", "serializedFile": "model.pt", "handler": "handler.py",
                          "modelFile": "model.py", "modelVersion": "1.0"}}
    mar = _zip(str(tmp_path / "resnet.mar"), None, [("MAR-INF/MANIFEST.json", json.dumps(manifest)),
                                                    ("model.pt", buf.getvalue()), ("handler.py", "import os\n"),
                                                    ("model.py", "import torch\n")])
    r = scan_path(mar)
    assert r["status"] == "unknown" and "TorchServe imports the handler 'handler.py' (a module of the archive)" in \
        r["verdict"] and any("modelFile 'model.py'" in u for u in r["unknown"])
    manifest["model"] = {"modelName": "r", "serializedFile": "model.pt", "handler": "image_classifier"}
    builtin = _zip(str(tmp_path / "builtin.mar"), None, [("MAR-INF/MANIFEST.json", json.dumps(manifest)),
                                                          ("model.pt", buf.getvalue())])
    assert scan_path(builtin)["status"] == "safe"


def test_every_member_of_a_name_is_judged(archives):
    """tar keeps the last member of a name, `tar --keep-old-files` the first: a payload in either is found."""
    _, c = archives
    for name in ("later.tar", "earlier.tar"):
        r = scan_path(c[name])
        assert r["status"] == "unsafe", name
        assert [m["path"] for m in r["members"]] == ["pytorch_model.bin", "pytorch_model.bin (#2 of that name)"]


def test_a_member_written_outside_the_folder_is_a_finding(tmp_path):
    """Python's tarfile.extractall without a filter writes `../` and absolute names where they point (checked here by
    doing it), and through a link an earlier member made."""
    p = _tar(str(tmp_path / "escape.tar"), "w", None, [("../../escaped.txt", b"x\n")])
    out = tmp_path / "a" / "b" / "out"
    out.mkdir(parents=True)
    with tarfile.open(p) as t:
        t.extractall(out, filter="fully_trusted") if hasattr(tarfile, "fully_trusted_filter") else t.extractall(out)
    assert (tmp_path / "a" / "escaped.txt").exists()   # the oracle: it did write outside
    r = scan_path(p)
    assert r["status"] == "unsafe" and r["findings"][0]["opcode"] == "tar member"
    assert "writes '../../escaped.txt'" in r["verdict"]
    q = _tar(str(tmp_path / "through.tar"), "w", None, [("d", b"", tarfile.SYMTYPE, "/tmp"), ("d/x.py", b"1\n")])
    r = scan_path(q)
    assert r["status"] == "unsafe" and "through the link 'd'" in r["verdict"]
    assert any("link(s) out of the archive" in u for u in r["unknown"])


def test_a_zip_member_climbing_out_is_judged_where_extraction_writes_it(archives, cli, tmp_path):
    """Python's zipfile writes `../evil.pkl` as `evil.pkl` and `a/../../model.pt` as `a/model.pt`, inside the folder
    (the oracle, done here); scan judged nothing (safe) before: now each under that name, said in a note. A zip shaped
    as torch.save's whose data.pkl torch cannot read hid its other members, and a folder scan passed it by."""
    _, c = archives
    for name, written in (("climbing.zip", ["README.txt", "evil.pkl"]),
                          ("climbing-inside.zip", ["a/model.pt", "b/weights.bin"])):
        out = tmp_path / name
        zipfile.ZipFile(c[name]).extractall(out)
        assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == sorted(written)
        r = scan_path(c[name])
        assert r["status"] == "unsafe" and any("climbs out of the folder" in n for n in r["notes"])
        assert {m["path"] for m in r["members"]} >= {w for w in written if not w.endswith(".txt")}
    folder = tmp_path / "downloads"
    folder.mkdir()
    shutil.copy(c["torch-shaped.zip"], folder / "release.zip")
    rc, out, _ = cli("scan", str(folder))
    assert rc == 1 and "UNSAFE     release.zip" in out


def test_archives_inside_an_archive_share_its_bounds(tmp_path):
    """2,000 bz2 members of 85 bytes, each inflating to 64 MiB, in a 15 KB tar.gz: each nested stream had the floor to
    itself (128 GB written in turn, 0.2 s a member); they now share the outer archive's (128x its size + 64 MiB): the
    first is written out, every other one says it was not."""
    import bz2

    member = bz2.compress(b"(" + bytes((64 << 20) - 1024), 9)
    bomb = _tar(str(tmp_path / "nest.tar.gz"), "w:gz", None, [(f"m{i}.pkl.bz2", member) for i in range(2000)])
    assert os.path.getsize(bomb) < 32 << 10
    r = scan_path(bomb)
    assert r["status"] == "unknown"   # (every member after the first: nothing more written out of it)
    assert [m["path"] for m in r["members"] if "scan writes out of this archive" not in m["verdict"]] == ["m0.pkl.bz2"]


def test_sigterm_removes_what_scan_extracted(tmp_path):
    """`timeout` and job managers end a scan with SIGTERM: the temporary folder of extracted members goes with it
    (it stayed, holding the archive's hostile members)."""
    import signal
    import subprocess
    import time

    member = __import__("bz2").compress(b"(" + bytes((64 << 20) - 1024), 9)
    bomb = _tar(str(tmp_path / "slow.tar.gz"), "w:gz", None, [(f"m{i}.pkl.bz2", member) for i in range(3)])
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "from ckptstat.__main__ import run; run()", "scan", bomb],
                             env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(600):   # (until it has extracted something, or ended)
        if any(tmp.iterdir()) or child.poll() is not None:
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    child.wait()
    assert "Traceback" not in child.stderr.read().decode()
    assert list(tmp.iterdir()) == []


def test_bounds_make_the_verdict_unknown(tmp_path, cli):
    zeros = _tar(str(tmp_path / "zeros.tar.gz"), "w:gz", None, [("big.bin", bytes(300 << 20))])
    r = scan_path(zeros)   # ~300 KB of gzip inflating to 300 MB: past 128x + 64 MiB
    assert r["status"] == "unknown" and "inflate_ratio" in r["verdict"]
    rc, out, _ = cli("--limit", "inflate_ratio=2000", "scan", str(tmp_path / "zeros.tar.gz"))
    assert rc == 0, out
    evil = _tar(str(tmp_path / "spill.tar"), "w", None, [("a.bin", bytes(4096)), ("b.pkl", EVIL)])
    rc, out, _ = cli("--limit", "spill_bytes=4100", "scan", evil, "--json")
    r = json.loads(out)
    assert rc == 1 and r["status"] == "unknown" and "spill_bytes" in r["verdict"]
    deep = _tar(str(tmp_path / "l1.tar"), "w", None, [("w.pt", EVIL)])
    for level in (2, 3):
        deep = _tar(str(tmp_path / f"l{level}.tar"), "w", None, [(os.path.basename(deep), open(deep, "rb").read())])
    r = scan_path(deep)
    assert r["status"] == "unknown" and "nested 3 deep" in r["verdict"]
    limits.reset()


def _overlapping_zip(path: str, entries: int) -> str:
    """A zip whose `entries` directory records all point at one deflated member, 64 MiB of zeros named `x.pkl` (the
    non-recursive zip bomb: zipfile reads each record, and each inflates to 64 MiB)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.pkl", bytes(64 << 20))
    data = buf.getvalue()
    end = data.rindex(b"PK\x05\x06")
    cd_size, cd_at = struct.unpack_from("<II", data, end + 12)
    record = data[cd_at:cd_at + cd_size]
    tail = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, entries, entries, cd_size * entries, cd_at, 0)
    with open(path, "wb") as f:
        f.write(data[:cd_at] + record * entries + tail)
    return path


def test_a_zip_of_records_sharing_one_member_writes_no_more_than_it_may_inflate_to(tmp_path):
    """200 records of one 64 KB deflated member: 12.5 GiB once extracted, within spill_bytes; scan writes at most
    inflate_ratio x the archive + expansion_floor in all, then says unknown."""
    path = _overlapping_zip(str(tmp_path / "bomb.zip"), 200)
    assert os.path.getsize(path) < 200_000
    with zipfile.ZipFile(path) as z:   # the oracle: zipfile reads every record as a 64 MiB member
        assert len(z.infolist()) == 200 and z.open(z.infolist()[-1]).read(16) == bytes(16)
    r = scan_path(path)
    assert r["status"] == "unknown" and "scan writes out of this archive" in r["verdict"]
    assert len(r["members"]) <= 2


def test_a_damaged_archive_is_judged_as_far_as_extraction_goes(tmp_path, cli):
    data = open(_tar(str(tmp_path / "whole.tar.gz"), "w:gz", None,
                     [("a.pkl", EVIL), ("pad.bin", os.urandom(1 << 16))]), "rb").read()
    (tmp_path / "cut.tar.gz").write_bytes(data[:len(data) - 4096])
    rc, out, err = cli("scan", str(tmp_path / "cut.tar.gz"))
    assert rc == 1 and "Traceback" not in out + err and "UNSAFE: a.pkl" in out
    assert re.search(r"^member UNSAFE +a\.pkl$", out, re.M), out   # the members a loader reads, one line each


def test_what_is_no_archive_is_refused_as_before(tmp_path, cli):
    (tmp_path / "notes.txt").write_bytes(b"hello\n" * 100)
    rc, _, err = cli("scan", str(tmp_path / "notes.txt"))
    assert rc == 2 and err.count("\n") == 1
    # a loader's own name keeps that loader's error: a .keras zip Keras cannot read is unreadable, not an archive
    _zip(str(tmp_path / "broken.keras"), None, [("config.json", "{"), ("model.weights.h5", b"")])
    rc, _, err = cli("scan", str(tmp_path / "broken.keras"))
    assert rc == 2


def test_a_folder_scan_lists_archives_and_leaves_nothing_behind(archives, tmp_path, monkeypatch, cli):
    """Before, a folder scan passed `model.tar.gz` by without a word (no loader reads it): `0 unsafe`, exit 0."""
    d, c = archives
    folder = tmp_path / "downloads"
    folder.mkdir()
    for name in ("clean.tar.gz", "folder.zip", "nested.tgz"):
        shutil.copy(c[name], folder / name)
    before = {p: os.path.getmtime(p) for p in map(str, folder.iterdir())}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    rc, out, _ = cli("scan", str(folder), "--json")
    r = json.loads(out)
    assert rc == 1
    assert {f["path"]: f["status"] for f in r["files"]} == {"clean.tar.gz": "safe", "folder.zip": "unsafe",
                                                             "nested.tgz": "unsafe"}
    assert os.listdir(scratch) == []
    assert {p: os.path.getmtime(p) for p in map(str, folder.iterdir())} == before


def test_remote_archives_read_as_the_local_ones(archives):
    d, c = archives
    sources.reset()
    try:
        with Server(os.path.dirname(c["folder.zip"])) as s:
            for name in ("folder.zip", "clean.tar.gz", "nested.tgz", "hardlink.tar", "keras-folder.zip"):
                local, remote = scan_path(c[name]), scan_path(f"{s.url}/{name}")
                local.pop("path"), remote.pop("path")
                assert remote == local, name
            limits.set_limits(remote_scan_bytes=1000)
            r = scan_path(f"{s.url}/folder.zip")
            assert r["status"] == "unknown" and "remote_scan_bytes" in r["verdict"]
    finally:
        limits.reset()
        sources.reset()


@pytest.mark.parametrize("behaviour", [{"drop": True}, {"claim": 100, "hostile_from": 3}, {"cut": 50, "hostile_from": 3},
                                       {"short": 700, "hostile_from": 3}])
def test_a_server_that_fails_or_lies_never_gets_an_archive_called_clean(archives, behaviour):
    _, c = archives
    sources.reset()
    try:
        with Server(os.path.dirname(c["folder.zip"]), **behaviour) as s:
            try:
                r = scan_path(f"{s.url}/folder.zip")
            except CkptstatError:
                return
            assert r["status"] == "unsafe", r["verdict"]
    finally:
        sources.reset()


def test_other_commands_say_an_archive_is_one(archives, cli):
    """`ckptstat model.tar.gz` said "not a checkpoint format (first bytes 1f 8b 08 ...)": it now says what it is."""
    _, c = archives
    for name, kind in (("clean.tar.gz", "gzip-compressed data"), ("clean.tar", "a tar archive"),
                       ("clean.zip", "a zip archive")):
        rc, out, err = cli("summary", c[name])
        assert rc != 0 and out == "" and err.count("\n") == 1 and f"reads: {kind} (extract it" in err, err


@pytest.mark.parametrize("name", ["folder.zip", "clean.tar.gz", "hardlink.tar", "optimizer.tar.bz2", "unnamed.tar.xz",
                                  "nested.tgz", "keras-folder.zip", "shards.tar"])
def test_mutated_archives_scan_or_fail_in_one_line(archives, name):
    """The fuzz worker's contract (tests/fuzz/fuzzlib.py: only CkptstatError comes out, memory bounded by the input,
    the case's folder unchanged) over bit flips, cuts and byte runs of each archive (zipfile raised zlib.error on a
    flipped deflate stream before its errors were caught)."""
    import random

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "fuzz"))
    from fuzzlib import Case, check
    from test_fuzz_scan_loaders import _mutants

    _, c = archives
    data = open(c[name], "rb").read()
    for blob in _mutants(data, random.Random(f"ckptstat scan archives {name}")):
        with Case() as case:
            check(f"scan archive {name}", case.write(name, blob), action="scan_path")


def test_links_inside_an_archive_cost_no_bytes(tmp_path, cli, monkeypatch):
    """300 hard links to one 8 MiB torch.save: each judged under its own name, none of them copied (within a
    spill_bytes of 10 MiB, which 300 copies would pass by 2.3 GiB); where the temporary folder takes no hard link, the
    copies count against the bound."""
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(2 << 20)}, buf)
    links = [(f"copies/w{i}.pt", b"", tarfile.LNKTYPE, "w.pt") for i in range(300)]
    path = _tar(str(tmp_path / "links.tar"), "w", None, [("w.pt", buf.getvalue()), *links])
    rc, out, _ = cli("--limit", f"spill_bytes={10 << 20}", "scan", path, "--json")
    r = json.loads(out)
    assert rc == 0 and r["status"] == "safe" and len(r["members"]) == 301, r["verdict"]
    rc, out, _ = cli("--limit", f"spill_bytes={10 << 20}", "scan", path)   # the human report lists 20, counts the rest
    assert out.count("member SAFE") == 20 and "281 more (--json lists every one)" in out

    def no_links(src, dest):
        raise OSError(1, "Operation not permitted")
    monkeypatch.setattr(os, "link", no_links)
    rc, out, _ = cli("--limit", f"spill_bytes={10 << 20}", "scan", path, "--json")
    r = json.loads(out)
    assert rc == 1 and r["status"] == "unknown" and "to copy (no hard links here)" in r["verdict"]


def test_a_gzipped_tar_is_decompressed_once_and_a_gzipped_nemo_archive_keeps_nemos_verdict(archives, tmp_path,
                                                                                           monkeypatch):
    """NeMo's rules listed every gzip'd tar for a model_config.yaml, then the archive's rules listed it again: a
    gzip'd tar of another name is now listed once, and handed to NeMo's rules when it holds that config (NeMo < 1.7
    gzip'd its archives; restore_from takes any name)."""
    import gzip

    from conftest import FIXTURES

    from ckptstat.analysis.scan import nemo

    _, c = archives
    passes = []
    rewind = nemo.Inflating._rewind
    monkeypatch.setattr(nemo.Inflating, "_rewind", lambda self: passes.append(1) or rewind(self))
    assert scan_path(c["clean.tar.gz"])["status"] == "safe" and len(passes) == 1
    data = gzip.compress(open(os.path.join(FIXTURES, "nemo", "config-os-system.nemo"), "rb").read())
    for name in ("model.tar.gz", "model.nemo"):
        (tmp_path / name).write_bytes(data)
        r = scan_path(str(tmp_path / name))
        assert r["verdict"] == "UNSAFE: NeMo's restore_from would import and may call: os.system", (name, r["verdict"])
