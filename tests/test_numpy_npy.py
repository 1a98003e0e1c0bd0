"""numpy .npy / .npz (ckptstat/formats/numpy_npy.py, docs/numpy.md): fixtures by numpy.save / savez /
savez_compressed (fixtures/make_numpy.py); the oracle is np.load. Round trip, truncation, bit flips
and hostile claims are in tests/test_reader_contract.py."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint, summarize
from ckptstat.errors import CorruptCheckpointError, UnsafeCheckpointError
from ckptstat.formats import registry


@pytest.mark.parametrize("name", ["bert-layer.npz", "bert-layer-compressed.npz"])
def test_npz_counts_and_places_as_numpy_sees_it(name):
    path = fixture("numpy", name)
    with np.load(path, allow_pickle=False) as z:
        arrays = dict(z.items())
    report = summarize(path)
    floats = {k: v for k, v in arrays.items() if v.dtype.kind == "f"}
    assert report["parameters"]["unique"] == sum(v.size for v in floats.values())
    assert {b["bucket"] for b in report["buckets"]} >= {"embedding", "encoder"}
    buffers = {n for r in report["non_parameters"] for n in r["names"]}
    assert {"position_ids", "flags"} <= buffers
    ckpt = open_checkpoint(path)
    for k, v in arrays.items():
        chunks = list(ckpt.iter_chunks(k, chunk_bytes=8))     # bounded, in order, across chunks
        np.testing.assert_array_equal(np.concatenate(chunks).reshape(v.shape), v)


def test_detected_by_content_not_name(tmp_path):
    for src, want in (("bert-layer.npz", "numpy (npz)"), ("embedding.npy", "numpy (npy)")):
        p = tmp_path / "weights.bin"
        shutil.copy(fixture("numpy", src), p)
        assert registry.detect(str(p)).name == want


def test_object_arrays_are_refused_not_unpickled(tmp_path):
    p = tmp_path / "objects.npy"
    np.save(p, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(UnsafeCheckpointError, match="pickle"):
        open_checkpoint(p)


def test_npz_without_arrays_is_an_error(tmp_path):
    import zipfile

    p = tmp_path / "empty.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("readme.npy.txt", "no arrays")
    with pytest.raises(CorruptCheckpointError):
        open_checkpoint(p)


def test_version_2_header(tmp_path):
    p = tmp_path / "v2.npy"
    a = np.arange(6, dtype="<u2").reshape(3, 2)
    with open(p, "wb") as f:
        np.lib.format.write_array(f, a, version=(2, 0))
    np.testing.assert_array_equal(open_checkpoint(p).read("v2"), np.load(p))


def test_compressed_npz_storage_line_is_not_negative_padding(tmp_path, capsys):
    """np.savez_compressed stores 4 MB of zeros in ~4 KB: the summary said `headers/padding -3,995,894 B`."""
    from ckptstat.cli import main

    path = str(tmp_path / "zeros.npz")
    np.savez_compressed(path, z=np.zeros((1000, 1000), np.float32))
    size, nbytes = os.path.getsize(path), np.load(path)["z"].nbytes
    assert main(["summary", path]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"file {size:,} B holds tensors of {nbytes:,} B compressed ({nbytes / size:.1f}x)" in out
    assert "headers/padding" not in out
    assert summarize(open_checkpoint(path))["storage"]["overhead_bytes"] == size - nbytes


def test_npz_members_not_named_npy_are_read_as_np_load_offers_them(tmp_path):
    """np.load offers every member of an .npz: one not named `*.npy` under its whole name, as an array when its
    bytes are .npy bytes, else as raw bytes. Before, only `*.npy` members were read: the array `w` below was dropped
    without a word, and the count was short by its 12 elements."""
    import io
    import zipfile

    p = tmp_path / "hand-made.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("meta.json", '{"step": 3}')
        for member, array, how in (("w", np.arange(12, dtype="<f4").reshape(3, 4), zipfile.ZIP_DEFLATED),
                                   ("b.npy", np.ones(4, ">f8"), zipfile.ZIP_STORED),
                                   ("params/kernel", np.arange(6, dtype="<i2"), zipfile.ZIP_STORED)):
            buf = io.BytesIO()
            np.save(buf, array)
            z.writestr(member, buf.getvalue(), compress_type=how)
    with np.load(p, allow_pickle=False) as npz:
        loaded = {k: npz[k] for k in npz.files}
    arrays = {k: v for k, v in loaded.items() if isinstance(v, np.ndarray)}
    assert set(arrays) == {"w", "b", "params/kernel"} and loaded["meta.json"] == b'{"step": 3}'
    ckpt = open_checkpoint(p)
    assert set(ckpt.tensors) == set(arrays)
    for k, v in arrays.items():
        np.testing.assert_array_equal(ckpt.read(k), v)
    assert summarize(ckpt)["parameters"]["unique"] == sum(v.size for v in arrays.values() if v.dtype.kind == "f")
    assert any("1 member(s) hold no .npy array" in n for n in ckpt.notes)


def test_ml_dtypes_arrays_saved_as_void_are_named_so(tmp_path, cli):
    """np.save writes an ml_dtypes bfloat16 array with descr '<V2' (its dtype.str), and np.load gives back an untyped
    void array: one line that says so, not 'not one ckptstat reads'."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    p = tmp_path / "bf16.npy"
    np.save(p, np.arange(6, dtype=ml_dtypes.bfloat16))
    assert np.load(p).dtype.kind == "V"
    rc, out, err = cli("summary", str(p))
    assert rc != 0 and "untyped bytes (numpy void)" in err and len(err.strip().splitlines()) == 1
