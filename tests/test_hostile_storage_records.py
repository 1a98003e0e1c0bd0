"""A torch storage whose bytes disagree with the size its pickle declares (the persistent id's element count): torch.load
refuses the file ("record size ... does not match expected size" for a zip record, "storage has wrong byte size" for a
legacy storage), so ckptstat does too, in one line naming the file. Before, ckptstat read such a file (exit 0, "N stored
bytes lie outside every tensor view"), even when the central directory stretched a record over the members after it.
The files are written by torch.save, then one record grown, cut, or its directory entry's sizes changed."""
from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import zipfile

import pytest

torch = pytest.importorskip("torch")


def run(*args: str) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True,
                       env={**os.environ, "COLUMNS": "200"})
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def _saved(**kw) -> bytes:
    buf = io.BytesIO()
    torch.save({"w": torch.arange(16, dtype=torch.float32), "b": torch.ones(1000)}, buf, **kw)
    return buf.getvalue()


def _rewritten(data: bytes, change) -> bytes:
    """The zip again with the first storage record's bytes replaced by change(bytes)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info in src.infolist():
            body = src.read(info)
            z.writestr(info.filename, change(body) if info.filename.endswith("/data/0") else body)
    return out.getvalue()


def _directory_sizes(data: bytes, size: int) -> bytes:
    """The first record's sizes in its local header and central-directory entry set to `size` (its bytes unchanged:
    the record then runs over the members after it)."""
    b = bytearray(data)
    name = next(n for n in zipfile.ZipFile(io.BytesIO(data)).namelist() if n.endswith("/data/0")).encode()
    for sig, at in ((b"PK\x03\x04", 18), (b"PK\x01\x02", 20)):
        name_at = 30 if sig == b"PK\x03\x04" else 46
        i = b.find(sig)
        while i >= 0:
            n = struct.unpack_from("<H", b, i + (26 if name_at == 30 else 28))[0]
            if b[i + name_at:i + name_at + n] == name:
                struct.pack_into("<II", b, i + at, size, size)
            i = b.find(sig, i + 4)
    return bytes(b)


def _legacy_count_grown() -> bytes:
    buf = io.BytesIO()
    torch.save({"w": torch.ones(4)}, buf, _use_new_zipfile_serialization=False)
    data = buf.getvalue()
    i = data.rfind(struct.pack("<q", 4))   # the last storage's element count, then its 16 bytes
    assert i == len(data) - 8 - 16
    return data[:i] + struct.pack("<q", 8) + data[i + 8:] + bytes(16)   # 8 elements, all there


CASES = {
    "record grown": lambda: _rewritten(_saved(), lambda b: b * 4),
    "record cut": lambda: _rewritten(_saved(), lambda b: b[:8]),
    "directory stretches the record": lambda: _directory_sizes(_saved(), 64 + 2000),
    "legacy count grown": _legacy_count_grown,
}


@pytest.mark.parametrize("case", list(CASES))
def test_storage_size_differs_from_its_declaration(case, tmp_path):
    path = tmp_path / "bad.pt"
    path.write_bytes(CASES[case]())
    with pytest.raises(RuntimeError, match="size"):   # the oracle: torch.load refuses it
        torch.load(path, weights_only=True)
    before = sorted(os.listdir(tmp_path))
    for command in ("summary", "stats", "tensors"):
        rc, out, err = run(command, str(path))
        assert rc == 1 and out == "" and err.count("\n") == 1, (command, err)
        assert str(path) in err and "is declared as" in err and "Traceback" not in err, err
    assert sorted(os.listdir(tmp_path)) == before


def test_matching_records_still_read(tmp_path):
    """The unchanged files, zip and legacy, a view of a larger storage among them, still read."""
    t = torch.arange(16.0)
    for name, kw in (("zip.pt", {}), ("legacy.pt", {"_use_new_zipfile_serialization": False})):
        torch.save({"view": t[3:9], "all": t}, tmp_path / name, **kw)
        loaded = torch.load(tmp_path / name, weights_only=True)
        rc, out, err = run("tensors", str(tmp_path / name))
        assert rc == 0 and err == "", err
        assert f"{loaded['view'].numel()}" in out and "view" in out
