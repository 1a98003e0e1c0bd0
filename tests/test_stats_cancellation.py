"""`ckptstat stats` moments of values whose mean is far larger than their spread (1e8 + noise of 1e-4): the mean
rounded to float64 is off by up to half an ulp of 1e8 (7.5e-9), a part of the spread that Chan's update of two
sets took into their delta at every merge, first order, so the std of many chunks, or of a layer of many small
tensors, drifted from numpy's by ~1e-5 relative (accumulate.py `centred`, docs/stats.md "Means far from zero").

Oracle: numpy's np.mean / np.std over the values torch wrote (safetensors.torch.save_file), less the first of them: an
exact shift (every value is within a factor 2 of it, Sterbenz), which leaves the std as it is and spares numpy's own
two-pass sum the rounding of a mean of 1e8 (its std of four such values is itself ~4e-8 off the exact one)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from ckptstat import open_checkpoint
from ckptstat.analysis.stats import collect


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[str, dict[str, np.ndarray]]:
    g = torch.Generator().manual_seed(7)
    t = {"model.layers.0.big.weight": 1e8 + torch.randn(20_000, generator=g, dtype=torch.float64) * 1e-4,
         "model.layers.2.wide.weight": 4096 + torch.randn(20_000, generator=g) * 1e-3}   # F32: its own kernel
    for i in range(500):   # one layer of many small tensors, merged tensor by tensor
        t[f"model.layers.1.t{i}.weight"] = 1e8 + torch.randn(4, generator=g, dtype=torch.float64) * 1e-4
    path = str(tmp_path_factory.mktemp("cancel") / "model.safetensors")
    save_file(t, path)
    return path, {k: v.numpy() for k, v in t.items()}


def _check(row: dict, arrays: list[np.ndarray], what: str) -> None:
    x64 = np.concatenate([a.astype(np.float64) for a in arrays])
    c = x64[0]
    y = x64 - c
    assert np.all(y + c == x64)   # the shift is exact
    assert row["mean"] == pytest.approx(float(np.mean(y)) + c, rel=1e-15), what
    assert row["std"] == pytest.approx(float(np.std(y)), rel=1e-12), what


@pytest.mark.parametrize("chunk_bytes,workers", [(64, 1), (64, 2), (4 << 20, 1)])
def test_std_of_a_large_mean_matches_numpy(written, chunk_bytes: int, workers: int) -> None:
    path, values = written
    r = collect(open_checkpoint(path), chunk_bytes=chunk_bytes, workers=workers).report
    rows = {row["name"]: row for row in r["tensors"]}
    for name, x in values.items():
        _check(rows[name], [x], name)
    for layer in r["layers"]:
        _check(layer, [x for n, x in values.items() if n.startswith(f"model.layers.{layer['layer']}.")], layer["layer"])
