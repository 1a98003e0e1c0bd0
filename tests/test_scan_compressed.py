"""`ckptstat scan` of pickles in compressed streams (analysis/scan/compressed.py): joblib.dump(..., compress=...)
files written by joblib 1.6.0 (fixtures/make_joblib.py; each file against what joblib.load did with it:
tests/test_scan_joblib.py), and `.pkl.gz`-style files that pickle.load(gzip.open(...)) (and bz2, lzma) reads,
written and loaded here. torch.load reads none of them (scan said "unreadable", exit 2): every payload that runs is
now `unsafe` or `unknown` (exit 1), plain data `safe`."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import pickle
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES

from ckptstat.analysis.scan import scan_path

OPENERS = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}
OPEN = f"{open.__module__}.{open.__qualname__}"   # the global pickle writes for the builtin open (io.open)


class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_compressed_pickle_is_judged_as_pickle_load_of_it_runs(kind, tmp_path, cli):
    marker = str(tmp_path / "ran")
    evil, plain = tmp_path / f"evil.pkl.{kind}", tmp_path / f"plain.pkl.{kind}"
    with OPENERS[kind](evil, "wb") as f:
        pickle.dump({"x": _Payload(marker)}, f, protocol=4)
    with OPENERS[kind](plain, "wb") as f:
        pickle.dump({"lr": 0.1, "steps": [1, 2, 3], "name": "run"}, f, protocol=4)
    load = f"import {'lzma' if kind == 'xz' else kind} as c, pickle, sys; pickle.load(c.open(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", load, str(evil)], capture_output=True, timeout=120)
    assert os.path.exists(marker)
    os.remove(marker)
    rc, out, _ = cli("scan", str(evil), "--json")
    assert rc == 1 and json.loads(out)["unsafe_globals"] == [OPEN]
    rc, out, _ = cli("scan", str(plain), "--json")
    assert rc == 0 and json.loads(out)["status"] == "safe"
    assert not os.path.exists(marker)


def test_a_folder_lists_them_by_their_bytes(tmp_path, cli):
    for name in ("payload-gzip.joblib", "arrays-zlib.joblib"):
        shutil.copy(os.path.join(FIXTURES, "joblib", name), tmp_path / name)
    (tmp_path / "notes.txt.gz").write_bytes(gzip.compress(b"not a pickle\n"))
    (tmp_path / "cut.joblib").write_bytes(b"\x00garbage")   # a name that says joblib is listed, read or not
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 1
    assert {f["path"]: f["status"] for f in json.loads(out)["files"]} == {
        "payload-gzip.joblib": "unsafe", "arrays-zlib.joblib": "safe", "cut.joblib": "unreadable"}


def test_lz4_and_bombs_are_unknown_not_read_whole(tmp_path, cli):
    lz4 = tmp_path / "model.joblib"
    lz4.write_bytes(b"\x04\x22\x4d\x18" + bytes(60))
    rc, out, _ = cli("scan", str(lz4), "--json")
    assert rc == 1 and "lz4" in json.loads(out)["verdict"]
    bomb = tmp_path / "bomb.pkl.gz"       # 200 MB of NONE opcodes in 200 KB: the walk stops at its bounds
    bomb.write_bytes(gzip.compress(b"\x80\x04" + b"N" * (200 << 20), 9))
    rc, out, _ = cli("scan", str(bomb), "--json")
    r = json.loads(out)
    assert rc == 1 and r["status"] == "unknown", r["verdict"]


def test_over_http_the_same():
    """`ckptstat scan URL` (a subprocess, a loopback server): the same report as the local file's."""
    from remote_server import Server

    with Server(os.path.join(FIXTURES, "joblib")) as s:
        for name in ("payload-xz.joblib", "arrays-gzip.joblib"):
            p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", f"{s.url}/{name}", "--json"],
                               capture_output=True, text=True, timeout=300)
            remote, local = json.loads(p.stdout), scan_path(os.path.join(FIXTURES, "joblib", name))
            assert p.returncode == (0 if local["status"] == "safe" else 1), (name, p.stderr)
            assert remote["status"] == local["status"], name
            assert remote["findings"] == local["findings"] and remote["unknown"] == local["unknown"], name


def test_an_lzma_header_asking_for_a_huge_dictionary_is_unknown_not_allocated(tmp_path, cli):
    """Found by tests/test_fuzz_scan_loaders.py: a flipped dictionary size made liblzma allocate it (MemoryError under
    the fuzz worker's address-space cap). The decoder's memory is capped (DECODER_MEMORY)."""
    data = bytearray(open(os.path.join(FIXTURES, "joblib", "arrays-lzma.joblib"), "rb").read())
    data[1:5] = (1 << 30).to_bytes(4, "little")       # the lzma-alone header's dictionary size: 1 GiB
    p = tmp_path / "m.joblib"
    p.write_bytes(bytes(data))
    rc, out, _ = cli("scan", str(p), "--json")
    assert rc == 1 and "decoder memory" in json.loads(out)["verdict"]


SPLIT = {"gzip": (gzip.compress, "import gzip as c, pickle, sys; pickle.load(c.open(sys.argv[1]))"),
         "bz2": (bz2.compress, "import bz2 as c, pickle, sys; pickle.load(c.open(sys.argv[1]))"),
         "xz": (lzma.compress, "import lzma as c, pickle, sys; pickle.load(c.open(sys.argv[1]))"),
         "lzma": (lambda b: lzma.compress(b, format=lzma.FORMAT_ALONE),
                  "import lzma as c, pickle, sys; pickle.load(c.open(sys.argv[1], format=c.FORMAT_ALONE))")}


@pytest.mark.parametrize("kind", sorted(SPLIT))
def test_a_pickle_split_across_streams_is_one_pickle(kind, tmp_path, cli):
    """gzip.open, bz2.open and lzma.open (joblib's LZMA reader too) read a file of several streams as one: a payload
    whose GLOBAL starts in the second stream runs (measured here); scan read only the first and called the file safe."""
    marker = str(tmp_path / "ran")
    data = pickle.dumps({"a": [1, 2, 3], "x": _Payload(marker)}, protocol=2)
    cut = data.index(b"open") - 4                     # inside the pickle, before the payload's global
    compress, load = SPLIT[kind]
    path = tmp_path / f"split.pkl.{kind}"
    path.write_bytes(compress(data[:cut]) + compress(data[cut:]))
    subprocess.run([sys.executable, "-c", load, str(path)], capture_output=True, timeout=120)
    assert os.path.exists(marker)
    rc, out, _ = cli("scan", str(path), "--json")
    assert rc == 1 and json.loads(out)["unsafe_globals"] == [OPEN]


def test_a_zstd_pickle_is_judged_as_pickle_load_of_zstandard_open_runs(tmp_path, cli):
    """pandas' `.pkl.zst` (read through zstandard.open, every frame one after another): torch.load cannot read it
    (exit 2) and a folder scan did not list it (exit 0), while `pickle.load(zstandard.open(path))` runs its payload
    (measured here). Decompressed with the `zstd` extra: a payload `unsafe`, plain data `safe`; a frame asking for a
    1 GiB window `unknown`, not allocated. A payload split across two frames is `unsafe` too, the cautious side:
    zstandard.open's read() goes on across frames, while pickle.load's short read at the frame's end stops it (the
    split payload did not run here, with zstandard 0.25)."""
    zstandard = pytest.importorskip("zstandard")
    marker = str(tmp_path / "ran")
    data = pickle.dumps({"a": [1, 2, 3], "x": _Payload(marker)}, protocol=4)
    cut = data.index(b"open") - 4
    c = zstandard.ZstdCompressor()
    files = {"evil.pkl.zst": c.compress(data), "split.pkl.zst": c.compress(data[:cut]) + c.compress(data[cut:]),
             "plain.pkl.zst": c.compress(pickle.dumps({"lr": 0.1, "steps": [1, 2, 3]}, protocol=4))}
    wide = zstandard.ZstdCompressor(compression_params=zstandard.ZstdCompressionParameters(window_log=30,
                                                                                          write_content_size=False))
    cobj = wide.compressobj()
    files["wide.pkl.zst"] = cobj.compress(pickle.dumps({"lr": 0.1}, protocol=4)) + cobj.flush()
    assert zstandard.get_frame_parameters(files["wide.pkl.zst"]).window_size == 1 << 30
    folder = tmp_path / "f"
    folder.mkdir()
    for name, blob in files.items():
        (folder / name).write_bytes(blob)
    load = "import zstandard as c, pickle, sys; pickle.load(c.open(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", load, str(folder / "evil.pkl.zst")], capture_output=True, timeout=120)
    assert os.path.exists(marker)
    os.remove(marker)
    for name in ("evil.pkl.zst", "split.pkl.zst"):
        rc, out, _ = cli("scan", str(folder / name), "--json")
        assert rc == 1 and json.loads(out)["unsafe_globals"] == [OPEN], name
    rc, out, _ = cli("scan", str(folder / "plain.pkl.zst"), "--json")
    assert rc == 0 and json.loads(out)["status"] == "safe"
    rc, out, _ = cli("scan", str(folder / "wide.pkl.zst"), "--json")
    assert rc == 1 and "decoder memory" in json.loads(out)["verdict"]
    rc, out, _ = cli("scan", str(folder), "--json")
    assert rc == 1 and {f["path"]: f["status"] for f in json.loads(out)["files"]} == {
        "evil.pkl.zst": "unsafe", "split.pkl.zst": "unsafe", "plain.pkl.zst": "safe", "wide.pkl.zst": "unknown"}
    assert not os.path.exists(marker)


def test_a_zstd_pickle_without_the_extra_is_unknown(tmp_path, cli, monkeypatch):
    zstandard = pytest.importorskip("zstandard")
    from ckptstat.analysis.scan import compressed

    monkeypatch.setattr(compressed, "zstd_available", lambda: False)   # as where zstandard is not installed
    path = tmp_path / "plain.pkl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(pickle.dumps([1, 2, 3])))
    rc, out, _ = cli("scan", str(path), "--json")
    assert rc == 1 and "pip install 'ckptstat[zstd]'" in json.loads(out)["verdict"]
