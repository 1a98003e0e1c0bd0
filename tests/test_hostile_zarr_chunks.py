"""An orbax zarr array whose chunk shape is far bigger than the array (fuzz red-team pass). zarr stores an edge chunk
padded to the whole chunk shape, and ckptstat decodes a chunk whole (into memory, or a temporary file past 8 MiB):
the fixture's float32 array of shape [6, 5] given chunks [6, 2^25] and a 24 KB zstd chunk made `stats` decode 768 MiB
and hold 700 MB, since the inflate_ratio check compared the compressed bytes with the array's 120 bytes of values,
not with what its chunks decode to. It now counts the padded chunks (`extra["inflated"]`), as check_inflation
bounds a deflated member. The chunk is written with zstandard, the codec tensorstore uses; the fixture is orbax's."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import fixture

zstandard = pytest.importorskip("zstandard")

WIDE = 1 << 22   # chunks [6, 2^22] of float32: 96 MiB, stored in a few KB


def run(*args: str) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True,
                       env={**os.environ, "COLUMNS": "200"})
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def _snapshot(folder) -> dict[str, tuple[int, int]]:
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            st = os.stat(os.path.join(root, name))
            out[os.path.join(root, name)] = (st.st_size, st.st_mtime_ns)
    return out


def test_chunk_far_bigger_than_its_array(tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(fixture("orbax", "no-ocdbt"), folder)
    array = folder / "float32"
    meta = json.loads((array / ".zarray").read_text())
    assert meta["compressor"]["id"] == "zstd" and meta["shape"] == [6, 5]
    with open(array / "0.0", "rb") as f:   # the oracle: orbax's chunk, decoded by zstandard and numpy
        values = np.frombuffer(zstandard.ZstdDecompressor().stream_reader(f).read(), "<f4").reshape(6, 5)
    meta["chunks"] = [6, WIDE]
    (array / ".zarray").write_text(json.dumps(meta))
    padded = np.zeros((6, WIDE), "<f4")
    padded[:, :5] = values
    (array / "0.0").write_bytes(zstandard.ZstdCompressor(level=3).compress(padded.tobytes()))
    stored = os.path.getsize(array / "0.0")
    assert padded.nbytes > 128 * stored + (64 << 20)   # past the default inflate_ratio and expansion_floor

    before = _snapshot(folder)
    rc, out, err = run("stats", str(folder))
    assert rc == 1 and out == "" and err.count("\n") == 1, err
    assert str(folder) in err and "'float32'" in err and "inflate_ratio" in err and "Traceback" not in err, err
    rc, _, err = run("summary", str(folder))   # headers only: still described
    assert rc == 0, err
    rc, out, err = run("--limit", "inflate_ratio=1000000", "stats", "--json", str(folder))
    assert rc == 0, err
    (t,) = [t for t in json.loads(out)["tensors"] if t["name"] == "float32"]
    assert (t["min"], t["max"], t["mean"]) == (float(values.min()), float(values.max()),
                                               float(values.astype(np.float64).mean()))
    assert _snapshot(folder) == before
