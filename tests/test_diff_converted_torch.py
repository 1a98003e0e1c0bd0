"""`converted` against torch's own `.to(dtype)`: every cast torch makes of a float64 / float32 tensor is a faithful
conversion (exit 0), one element moved off it is not. Was: torch rounds float64 -> float16 through float32, so near a
float16 tie it can land on the farther neighbour, which the bound (numpy's direct float64 -> float16 rounding) refused:
`dtype`, exit 1."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import save_file


def _status(tmp_path, x: torch.Tensor, y: torch.Tensor) -> tuple[int, str]:
    save_file({"w": x}, str(tmp_path / "a.safetensors"))
    save_file({"w": y}, str(tmp_path / "b.safetensors"))
    p = subprocess.run([sys.executable, "-m", "ckptstat", "diff", str(tmp_path / "a.safetensors"),
                        str(tmp_path / "b.safetensors"), "--json"], capture_output=True, text=True)
    return p.returncode, json.loads(p.stdout)["tensors"][0]["status"]


def _near_ties(dtype: torch.dtype) -> torch.Tensor:
    """float64 values just below the tie between an odd-mantissa value of `dtype` and the next one."""
    bits = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23}[dtype]   # stored mantissa bits
    odd = 1 + torch.arange(1, min(2 ** bits, 4001), 2, dtype=torch.float64) * 2.0 ** -bits
    g = torch.Generator().manual_seed(0)
    return torch.cat([odd + 2.0 ** -(bits + 1) - 2.0 ** -40, torch.randn(1000, dtype=torch.float64, generator=g)])


@pytest.mark.parametrize("target", [torch.float16, torch.bfloat16, torch.float32])
def test_torch_casts_of_float64_are_converted(tmp_path, target) -> None:
    x = _near_ties(target)
    y = x.to(target)
    if target is torch.float16:   # torch's cast is not numpy's direct rounding on these: the case that was refused
        assert not np.array_equal(y.double().numpy(), x.numpy().astype(np.float16).astype(np.float64))
    assert _status(tmp_path, x, y) == (0, "converted")
    z = y.clone()
    z[-1] = z[-1] + 4 * float(torch.finfo(target).eps) * max(1.0, abs(float(z[-1])))   # not a nearest value
    assert _status(tmp_path, x, z) == (1, "dtype")


def test_bf16_cast_to_f16_either_way_round(tmp_path) -> None:
    """Was: float16 facing bfloat16 was checked only as B rounded from A, so `diff F16_COPY BF16_ORIGINAL` of torch's
    own cast read `dtype` (exit 1) while the other order read `converted`."""
    g = torch.Generator().manual_seed(0)
    b = (torch.randn(10000, generator=g) * 5e-4).to(torch.bfloat16)
    f = b.to(torch.float16)
    assert not torch.equal(f.float(), b.float())      # some values rounded (float16's subnormals)
    assert _status(tmp_path, b, f) == (0, "converted")
    assert _status(tmp_path, f, b) == (0, "converted")
    z = f.clone()
    z[0] = -z[0] if z[0] != 0 else 1.0                 # one element moved
    assert _status(tmp_path, z, b) == (1, "dtype")
