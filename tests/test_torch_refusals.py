"""Tensors the torch reader does not read are refused in one line that says what they are, written by torch itself:
a meta-device state dict (no stored values), quantized and sparse tensors."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kind, make, words", [
    ("meta", lambda: torch.nn.Linear(4, 3, device="meta").state_dict(), "meta-device (no stored values) tensors"),
    ("quantized", lambda: {"q": torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8)}, "quantized"),
    ("sparse", lambda: {"s": torch.randn(3, 3).to_sparse()}, "sparse tensors"),
])
def test_one_line_naming_the_kind(kind, make, words, tmp_path, cli):
    path = tmp_path / f"{kind}.pt"
    torch.save(make(), path)
    rc, out, err = cli(str(path))
    assert rc == 1 and out == "" and err.count("\n") == 1, err
    assert words in err and "not supported by ckptstat" in err, err
