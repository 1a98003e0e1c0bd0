"""The fast paths of opening a torch zip with many records (docs/performance.md): a dict lookup and a C sort
when the archive's names are distinct, direct reads of an in-memory data.pkl. Each gives what the general
path gives (miniz's heap order and binary search; the Bounded reader), and what torch.load gives."""
from __future__ import annotations

import io
import zipfile

import torch

from ckptstat import open_checkpoint
from ckptstat.formats.torch import containers
from ckptstat.formats.torch.containers import TorchZip, _heap_order


def _saved(tmp_path, n: int = 3000) -> tuple[str, dict[str, torch.Tensor]]:
    sd = {f"h.{i}.w": torch.full((i % 5 + 1, 2), float(i)) for i in range(n)}
    sd["tied"] = sd["h.7.w"]
    path = str(tmp_path / "many.pt")
    torch.save(sd, path)
    return path, sd


def test_distinct_names_locate_as_miniz(tmp_path):
    path, _ = _saved(tmp_path)
    infos = zipfile.ZipFile(path).infolist()
    fast = TorchZip(infos)
    assert fast._index is not None
    slow = TorchZip(infos)   # the general path: miniz's heap sort and binary search
    slow._index, slow._order = None, _heap_order(slow._keys)
    assert fast._order == slow._order and fast.records == slow.records and fast.refusal == slow.refusal
    queries = [r.decode() for r in fast.records] + ["DATA.PKL", "data/999999", "", "data", "byteorder\0x"]
    assert [fast.locate(q) for q in queries] == [slow.locate(q) for q in queries]


def test_repeated_names_keep_the_general_path():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name in ("a/data.pkl", "a/DATA.pkl", "a/version"):
            z.writestr(name, name)
    tz = TorchZip(zipfile.ZipFile(buf).infolist())
    assert tz._index is None and tz.locate("data.pkl") is not None


def test_in_memory_pickle_reads_as_streamed_and_as_torch(tmp_path, monkeypatch):
    path, sd = _saved(tmp_path)
    fast = open_checkpoint(path)
    monkeypatch.setattr(containers, "MAX_SMALL_PICKLE", 0)   # data.pkl streamed through Bounded
    slow = open_checkpoint(path)
    want = {k: tuple(v.shape) for k, v in torch.load(path, weights_only=True).items()}
    assert {t.name: t.shape for t in fast} == want
    assert [(t.name, t.shape, t.dtype) for t in fast] == [(t.name, t.shape, t.dtype) for t in slow]
    assert fast.read("h.42.w").tolist() == sd["h.42.w"].tolist()


def test_scan_parses_a_torch_zip_directory_once(tmp_path, monkeypatch):
    """scan_other (numpy / Keras) looks at the central directory's raw bytes before parsing a zip torch.load reads
    as a torch archive: it is left to torch's scan, whose verdict is unchanged; .npz and .keras archives are still
    recognised (and any other zip is looked into: np.load reads members by their bytes, test_scan_npz_members)."""
    import numpy as np

    from ckptstat.analysis.scan import loaders as loader_scan
    from ckptstat.analysis.scan import scan_path
    from ckptstat.analysis.scan.torch_load import trace

    path, _ = _saved(tmp_path, 10)
    before = scan_path(path)
    np.savez(tmp_path / "a.npz", x=np.ones(2))
    with zipfile.ZipFile(tmp_path / "m.keras", "w") as z:
        z.writestr("config.json", "{}")
        z.writestr("model.weights.h5", b"")
    parsed: list[str] = []
    real = loader_scan.zip_open
    monkeypatch.setattr(loader_scan, "zip_open", lambda p, f: parsed.append(p) or real(p, f))
    assert loader_scan.scan_other(path, trace(path)) is None and not parsed
    assert scan_path(path) == before and not parsed
    assert loader_scan.scan_other(str(tmp_path / "a.npz"))["format"] == "numpy (npz)"
    assert loader_scan.scan_other(str(tmp_path / "m.keras"))["format"] == "keras (zip)"
