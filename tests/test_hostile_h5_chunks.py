"""An HDF5 dataset whose one compressed chunk is far bigger than what the file stores (fuzz red-team pass). HDF5
decompresses a filtered chunk whole to read any element of it, and again on every read: a 260 KB `.weights.h5` whose
one 256 MiB chunk of zeros held a 64M-element dataset took 124 s of CPU in `stats` (64 reads of 4 MiB, each inflating
256 MiB), and a dataset of 16 elements (maxshape unlimited) over a 128 MiB chunk made any value read allocate 128 MiB,
although the dataset's own size passes the `expansion` bound. A chunk is now held, before values are read, to
`inflate_ratio` x the bytes its dataset stores + `expansion_floor`, as a deflated member is (.h5 and .keras alike).
The files are written by h5py; its own chunk and storage sizes are the oracle for the ratio."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import zipfile

import h5py
import numpy as np
from conftest import fixture

CHUNK = 1 << 25   # float32 elements: a 128 MiB chunk of zeros, stored in ~130 KB by gzip


def run(*args: str) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True,
                       env={**os.environ, "COLUMNS": "200"})
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def _write(f, name: str, values: np.ndarray, chunk: int) -> None:
    d = f.create_dataset(name, shape=values.shape, maxshape=(None,) * values.ndim, dtype=values.dtype,
                         chunks=(chunk,) + values.shape[1:], compression="gzip", compression_opts=9)
    d[...] = values


def _ratio(path, name: str) -> float:
    with h5py.File(path, "r") as f:
        d = f[name]
        return math.prod(d.chunks) * d.dtype.itemsize / d.id.get_storage_size()


def _check(path, name: str, expected: np.ndarray) -> None:
    before = sorted(os.listdir(os.path.dirname(path)))
    rc, out, err = run("stats", path)
    assert rc == 1 and out == "" and err.count("\n") == 1, err
    assert path in err and "HDF5 chunk" in err and "inflate_ratio" in err and "Traceback" not in err, err
    rc, _, err = run("summary", path)   # headers only: still described
    assert rc == 0, err
    rc, out, err = run("--limit", "inflate_ratio=100000", "stats", "--all-roles", "--json", path)
    assert rc == 0, err
    (t,) = [t for t in json.loads(out)["tensors"] if t["name"] == name]
    assert (t["min"], t["max"], t["mean"]) == (float(expected.min()), float(expected.max()),
                                               float(expected.astype(np.float64).mean()))
    assert sorted(os.listdir(os.path.dirname(path))) == before


def test_h5_chunk_far_bigger_than_stored(tmp_path):
    path = str(tmp_path / "chunk.weights.h5")
    values = np.arange(16, dtype=np.float32)
    with h5py.File(path, "w") as f:
        _write(f, "layers/dense/vars/0", values, CHUNK)
    assert _ratio(path, "layers/dense/vars/0") > 128   # h5py: the chunk inflates past the default bound
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["layers/dense/vars/0"][...], values)   # the oracle reads it
    _check(path, "layers/dense/vars/0", values)


def test_keras_archive_weights_with_such_a_chunk(tmp_path):
    """The same dataset inside a .keras archive's model.weights.h5 (formats/keras_zip.py reads it)."""
    src = zipfile.ZipFile(fixture("keras3-zip", "mlp.keras"))
    members = {i.filename: src.read(i) for i in src.infolist()}
    inner = tmp_path / "model.weights.h5"
    inner.write_bytes(members["model.weights.h5"])
    with h5py.File(inner, "r+") as f:
        name = next(n for n, o in _datasets(f) if o.ndim == 2)
        values = f[name][...]
        del f[name]
        _write(f, name, values, CHUNK)
    path = str(tmp_path / "chunk.keras")
    with zipfile.ZipFile(path, "w") as z:
        for n, b in members.items():
            z.writestr(n, inner.read_bytes() if n == "model.weights.h5" else b)
    os.unlink(inner)
    with h5py.File(zipfile.ZipFile(path).open("model.weights.h5"), "r") as f:
        assert math.prod(f[name].chunks) * 4 / f[name].id.get_storage_size() > 128
    _check(path, name, values)


def _datasets(f):
    out = []
    f.visititems(lambda n, o: out.append((n, o)) if isinstance(o, h5py.Dataset) else None)
    return out
