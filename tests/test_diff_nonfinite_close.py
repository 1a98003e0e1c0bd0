"""`ckptstat diff` on tensors holding NaN or inf at the same places: within the tolerance wherever torch's
`isclose(..., equal_nan=True)` says so. Was: the tolerance `atol + rtol * abs(b)` of a NaN or inf is NaN, so a
tensor whose bytes differ anywhere (another NaN payload, or a change within --atol beside an inf) read `values`,
exit 1, though docs/diff.md counts NaN facing NaN and an infinity facing the same one as equal."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import save_file


def _run(tmp_path, x: torch.Tensor, y: torch.Tensor, *args: str) -> tuple[int, str]:
    save_file({"w": x}, str(tmp_path / "a.safetensors"))
    save_file({"w": y}, str(tmp_path / "b.safetensors"))
    p = subprocess.run([sys.executable, "-m", "ckptstat", "diff", str(tmp_path / "a.safetensors"),
                        str(tmp_path / "b.safetensors"), "--json", *args], capture_output=True, text=True)
    return p.returncode, json.loads(p.stdout)["tensors"][0]["status"]


def test_nan_payloads_at_the_same_place(tmp_path) -> None:
    x = torch.tensor([1.0, float("nan"), 2.0, float("nan")])
    bits = x.view(torch.int32).clone()
    bits[1] = 0x7FC00001                  # another quiet NaN payload
    bits[3] = np.int32(np.uint32(0xFFC00000).view(np.int32))   # x86's default NaN (sign bit set)
    y = bits.view(torch.float32)
    assert torch.isnan(y[1]) and torch.isnan(y[3]) and not torch.equal(x.view(torch.int32), y.view(torch.int32))
    assert bool(torch.isclose(x, y, atol=0, rtol=0, equal_nan=True).all())
    assert _run(tmp_path, x, y) == (0, "equal")


@pytest.mark.parametrize("atol, rtol", [(1e-6, 0.0), (0.0, 1e-6)])
def test_inf_beside_a_change_within_tolerance(tmp_path, atol, rtol) -> None:
    x = torch.tensor([float("-inf"), 1.0, 2.0, float("inf")])
    y = torch.tensor([float("-inf"), 1.0000001, 2.0, float("inf")])
    assert bool(torch.isclose(y, x, atol=atol, rtol=rtol).all()) and not torch.equal(x, y)
    assert _run(tmp_path, x, y, "--atol", str(atol), "--rtol", str(rtol)) == (0, "equal")
    z = torch.tensor([float("-inf"), 1.1, 2.0, float("inf")])     # beyond it: still a change
    assert not bool(torch.isclose(z, x, atol=atol, rtol=rtol).all())
    assert _run(tmp_path, x, z, "--atol", str(atol), "--rtol", str(rtol)) == (1, "values")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conversion_keeping_nan_and_inf_is_converted(tmp_path, dtype) -> None:
    """Was: a tensor holding a NaN or an inf, cast by torch's .to(dtype), read `dtype` (exit 1), never `converted`,
    though torch keeps NaN and inf as they are and rounds every other element to nearest."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(500, generator=g), torch.tensor([float("nan"), float("-inf"), float("inf"), -0.0])])
    y = x.to(dtype)
    assert torch.equal(torch.isnan(y), torch.isnan(x)) and torch.equal(y.float()[-3:-1], x[-3:-1])
    assert _run(tmp_path, x, y) == (0, "converted")
    assert _run(tmp_path, x, y, "--strict") == (1, "dtype")
    z = y.clone()
    z[0] = z[0] + 0.25   # not the nearest value: a change
    assert not torch.equal(z, x.to(dtype))
    assert _run(tmp_path, x, z) == (1, "dtype")
    w = x.clone()
    w[1] = 1.0   # a NaN in the cast facing a finite source: a change
    assert _run(tmp_path, w, y) == (1, "dtype")
