"""The 16-bit kernel of `ckptstat stats` (analysis/stats_kernel.py): F16 and BF16 statistics from one
bincount over the stored bit patterns. Oracles: the values torch wrote, widened to float64 by torch,
and numpy's reductions and np.quantile over them."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import save_file  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.stats import QUANTILES, Acc, collect, new_acc  # noqa: E402
from ckptstat.analysis.stats_kernel import acc_from_hist16, bits16_chunks  # noqa: E402
from ckptstat.errors import CorruptCheckpointError  # noqa: E402

DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16}


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(22)
    out = {}
    for code, dt in DTYPES.items():
        x = torch.randn(4099, generator=g) * 0.02
        x[::97] = 0.0
        x[5] = -0.0
        out[f"{code}.plain"] = x.to(dt)
        y = (torch.randn(301, generator=g) * 300).to(dt)
        y[3], y[7], y[11] = float("nan"), float("inf"), float("-inf")
        out[f"{code}.special"] = y
        out[f"{code}.allnan"] = torch.full((5,), float("nan"), dtype=dt)
        out[f"{code}.const"] = torch.full((64, 3), 1.0009765625, dtype=dt)   # var 0, mean far from 0
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[str, dict[str, torch.Tensor]]:
    t = _tensors()
    path = str(tmp_path_factory.mktemp("k16") / "k16.safetensors")
    save_file(t, path)
    return path, t


def _oracle(x: torch.Tensor) -> dict:
    v = x.to(torch.float64).numpy().reshape(-1)
    fin = v[np.isfinite(v)]
    return {"count": v.size, "finite": fin.size, "nan": int(np.isnan(v).sum()), "posinf": int((v == np.inf).sum()),
            "neginf": int((v == -np.inf).sum()), "zeros": int((v == 0).sum()), "fin": fin}


@pytest.mark.parametrize("chunk", [2, 6, 4096, 1 << 20])
def test_rows_match_torch_values(written, chunk):
    path, t = written
    rows = {r["name"]: r for r in collect(open_checkpoint(path), all_roles=True, chunk_bytes=chunk).report["tensors"]}
    assert set(rows) == set(t)
    for name, x in t.items():
        r, o = rows[name], _oracle(x)
        for k in ("count", "finite", "nan", "posinf", "neginf", "zeros"):
            assert r[k] == o[k], (name, k)
        fin = o["fin"]
        if fin.size == 0:
            assert r["min"] is None and r["mean"] is None
            continue
        assert r["min"] == fin.min() and r["max"] == fin.max()
        assert r["mean"] == pytest.approx(fin.mean(), rel=1e-12, abs=1e-15)
        assert r["std"] == pytest.approx(fin.std(), rel=1e-9, abs=1e-12)
        assert r["mean_abs"] == pytest.approx(np.abs(fin).mean(), rel=1e-12)
        assert r["l2"] == pytest.approx(np.linalg.norm(fin), rel=1e-12)
        assert r["quantiles_exact"] is True
        for p in QUANTILES:
            assert r["quantiles"][f"p{100 * p:g}"] == pytest.approx(float(np.quantile(fin, p)), rel=1e-12, abs=1e-300)


def test_histogram_kernel_equals_the_chunk_accumulator(written):
    """acc_from_hist16 gives what Acc.update gives on the decoded values (moments to rounding)."""
    path, t = written
    ckpt = open_checkpoint(path)
    for name in t:
        info = ckpt[name]
        hist = np.zeros(1 << 16, dtype=np.int64)
        for bits in bits16_chunks(ckpt, info, 100):
            hist += np.bincount(bits, minlength=1 << 16)
        fast: Acc = acc_from_hist16(hist, info.dtype)
        slow = new_acc(info.dtype)
        slow.update(ckpt.read(name).reshape(-1))
        assert np.array_equal(fast.hist, slow.hist), name
        for k in ("domain", "exact", "count", "n", "nan", "posinf", "neginf", "zeros"):
            assert getattr(fast, k) == getattr(slow, k), (name, k)
        for k in ("min", "max", "mean", "m2", "sum_abs"):
            a, b = getattr(fast, k), getattr(slow, k)
            assert a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12), (name, k, a, b)


def test_other_readers_give_the_same_rows(tmp_path, written):
    """A torch.save zip (its own reader) goes through iter_chunks; the rows are the safetensors file's."""
    path, t = written
    pt = str(tmp_path / "k16.pt")
    torch.save(t, pt)
    a = collect(open_checkpoint(path), all_roles=True).report["tensors"]
    b = collect(open_checkpoint(pt), all_roles=True).report["tensors"]
    key = lambda r: r["name"]  # noqa: E731
    for ra, rb in zip(sorted(a, key=key), sorted(b, key=key)):
        assert {k: v for k, v in ra.items() if k != "spread_z"} == {k: v for k, v in rb.items() if k != "spread_z"}


def test_a_file_cut_short_after_opening_is_one_error(tmp_path):
    path = str(tmp_path / "cut.safetensors")
    save_file({"w": torch.ones(1000, dtype=torch.bfloat16)}, path)
    ckpt = open_checkpoint(path)
    os.truncate(path, os.path.getsize(path) - 10)
    with pytest.raises(CorruptCheckpointError, match="the file ends first"):
        collect(ckpt)
