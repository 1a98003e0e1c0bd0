"""torch.load does not check a zip member's CRC-32 (its miniz is built with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS), and
torch.save with `torch.utils.serialization.config.save.compute_crc32 = False` (torch 2.6+, to save faster) stores every
CRC as 0. ckptstat refused such a file whole ("BadZipFile: Bad CRC-32 for file '.../byteorder'", found by the formats
red-team pass): the byteorder record, data.pkl and compressed storage records were read through zipfile, which checks
them. A torch zip is now read as torch reads it (docs/torch.md)."""
from __future__ import annotations

import zipfile

import numpy as np
import pytest

from ckptstat import open_checkpoint
from ckptstat.analysis.stats import stats

torch = pytest.importorskip("torch")
config = pytest.importorskip("torch.utils.serialization").config


def _objects() -> dict:
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(16, 8, generator=g), "b": torch.randn(8, generator=g).bfloat16(),
            "t": torch.randn(4, 6, generator=g).t()}


def _zero_crcs(path, part: bytes = b"") -> None:
    """The CRC-32 of every local header and central-directory entry whose name holds `part` set to 0, as
    compute_crc32=False writes them."""
    data = bytearray(path.read_bytes())
    for sig, at, name_len, name_at in ((b"PK\x03\x04", 14, 26, 30), (b"PK\x01\x02", 16, 28, 46)):
        i = data.find(sig)
        while i >= 0:
            n = int.from_bytes(data[i + name_len:i + name_len + 2], "little")
            if part in data[i + name_at:i + name_at + n]:
                data[i + at:i + at + 4] = b"\0\0\0\0"
            i = data.find(sig, i + 4)
    path.write_bytes(bytes(data))


def _check(path) -> None:
    want = torch.load(path, weights_only=True)   # torch reads it
    ckpt = open_checkpoint(str(path))
    for name, t in want.items():
        np.testing.assert_array_equal(ckpt.read(name), t.float().numpy(), err_msg=name)
    assert {r["name"] for r in stats(ckpt, workers=1)["tensors"]} == set(want)


def test_compute_crc32_off(tmp_path):
    path = tmp_path / "nocrc.pt"
    config.save.compute_crc32 = False
    try:
        torch.save(_objects(), path)
    finally:
        config.save.compute_crc32 = True
    with zipfile.ZipFile(path) as z:
        assert {i.CRC for i in z.infolist()} == {0}   # the form under test
    _check(path)


def test_recompressed_records_with_zero_crcs(tmp_path):
    """Deflated storage records (a zip tool's recompression) stream through ZipStreamReader, unchecked too (only
    their CRCs are zeroed here: the small records are the test above's)."""
    src, path = tmp_path / "src.pt", tmp_path / "deflated.pt"
    torch.save(_objects(), src)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
    _zero_crcs(path, b"/data/")
    _check(path)
