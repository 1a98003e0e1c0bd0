"""torch's conjugate and negative bits: torch.save writes a lazy `x.conj()` or negated view as its storage's bytes plus
`_rebuild_tensor_v2(..., metadata={'conj': True})` / `{'neg': True}`, and torch.load gives the values conjugated /
negated. Every value ckptstat reads (read, iter_chunks, stats' fast paths, diff) must be torch.load's, in torch zips,
legacy files and DCP folders (docs/torch.md). Found by the formats red-team pass: the metadata was dropped, so the
imaginary parts (conj) or every value (neg) came out with the wrong sign."""
from __future__ import annotations

import zipfile

import numpy as np
import pytest

from ckptstat import open_checkpoint
from ckptstat.analysis.diff import diff
from ckptstat.analysis.stats import stats
from ckptstat.errors import CheckpointError

torch = pytest.importorskip("torch")


def _objects() -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, dtype=torch.complex64, generator=g)
    return {
        "conj": x.conj(),
        "conj_neg_t": x.conj()._neg_view().t(),   # both bits, a strided view
        "neg": torch.randn(5, generator=g)._neg_view(),
        "neg_f16": torch.randn(64, generator=g).half()._neg_view(),     # stats' 16-bit count of the stored patterns
        "neg_bf16": torch.randn(64, generator=g).bfloat16()._neg_view(),
        "plain": torch.randn(3, generator=g),
    }


def _loaded(t) -> np.ndarray:
    t = t.resolve_conj().resolve_neg()
    return t.numpy() if t.is_complex() else t.to(torch.float64).numpy()


@pytest.fixture(params=["zip", "legacy"])
def saved(request, tmp_path):
    path = tmp_path / "bits.pt"
    torch.save(_objects(), path, _use_new_zipfile_serialization=request.param == "zip")
    return str(path)


def test_values_are_torch_loads(saved):
    want = torch.load(saved, weights_only=True)
    assert want["conj"].is_conj() and want["neg"].is_neg()
    ckpt = open_checkpoint(saved)
    for name, t in want.items():
        np.testing.assert_array_equal(ckpt.read(name), _loaded(t).astype(ckpt.read(name).dtype), err_msg=name)
        chunks = np.concatenate(list(ckpt.iter_chunks(name, chunk_bytes=1)))
        np.testing.assert_array_equal(chunks, ckpt.read(name).reshape(-1), err_msg=name)


def test_stats_are_over_torch_loads_values(saved):
    want = torch.load(saved, weights_only=True)
    rows = {row["name"]: row for row in stats(open_checkpoint(saved), workers=1)["tensors"]}
    for name, t in want.items():
        v = _loaded(t)
        numbers = np.stack([v.real, v.imag], -1).reshape(-1) if np.iscomplexobj(v) else v.reshape(-1)
        row = rows[name]
        assert (row["min"], row["max"]) == (float(numbers.min()), float(numbers.max())), name
        assert row["mean"] == pytest.approx(float(numbers.astype(np.float64).mean()), rel=1e-12, abs=1e-15), name


def test_diff_sees_the_conjugate(tmp_path):
    x = torch.randn(6, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    a, b, c = (str(tmp_path / n) for n in ("a.pt", "b.pt", "c.pt"))
    torch.save({"w": x}, a)
    torch.save({"w": x.conj()}, b)
    torch.save({"w": x.conj().resolve_conj()}, c)   # the same values, stored conjugated
    assert diff(open_checkpoint(a), open_checkpoint(b))["tensors"][0]["status"] == "values"
    assert diff(open_checkpoint(b), open_checkpoint(c))["tensors"][0]["status"] == "equal"


def test_dcp_conjugate(tmp_path):
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    objs = {"conj": _objects()["conj"], "neg": _objects()["neg"]}
    out = str(tmp_path / "ck")
    dcp.save(objs, checkpoint_id=out, no_dist=True)
    ckpt = open_checkpoint(out)
    for name, t in objs.items():
        np.testing.assert_array_equal(ckpt.read(name), _loaded(t).astype(ckpt.read(name).dtype), err_msg=name)


def test_conjugate_bit_on_a_real_tensor_is_refused(tmp_path):
    """torch.load fails on it (an internal assert): refused in one line, not read as plain values."""
    path = tmp_path / "bad.pt"
    torch.save({"w": torch.randn(3, dtype=torch.complex64).conj()}, path)
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    pkl = next(n for n in members if n.endswith("data.pkl"))
    members[pkl] = members[pkl].replace(b"torch\nComplexFloatStorage", b"torch\nFloatStorage")   # (protocol 2: no frames)
    assert b"ComplexFloatStorage" not in members[pkl]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, data in members.items():
            z.writestr(n, data)
    with pytest.raises(CheckpointError, match="conjugate bit"):
        open_checkpoint(str(path))
