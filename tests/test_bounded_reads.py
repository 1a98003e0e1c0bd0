"""Chunked reads (`Checkpoint.iter_chunks`) of the layouts whose values are not one byte range:
strided torch views, compressed zip members, TF partitioned variables. Values equal the whole read
and torch.load; memory stays a small multiple of the chunk; bytes read stay about the tensor's."""
from __future__ import annotations

import os
import tracemalloc
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_torch import _rezip, flat, fx, torch_values

from ckptstat import open_checkpoint
from ckptstat.core import Checkpoint, TensorInfo
from ckptstat.core.io import SLACK, RawFile, extent, read_view
from ckptstat.formats import torch as tr
from ckptstat.formats.tf_bundle import read_partitioned

CHUNK = 64 << 10
BIG = 1 << 40


def chunked(ckpt: Checkpoint, name: str, chunk_bytes: int) -> np.ndarray:
    parts = list(ckpt.iter_chunks(name, chunk_bytes))
    return np.concatenate(parts) if parts else np.empty(0)


def peak_of_chunked_read(ckpt: Checkpoint, name: str, chunk_bytes: int) -> int:
    """Traced peak (bytes) while every chunk is read and dropped."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        n = 0
        for chunk in ckpt.iter_chunks(name, chunk_bytes):
            n += chunk.size
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == ckpt[name].numel
    return peak


@pytest.fixture
def preadv_bytes(monkeypatch):
    """[total bytes, calls]: what the strided readers fetch from files (they read through os.preadv)."""
    if not hasattr(os, "preadv"):
        pytest.skip("no os.preadv")
    real = os.preadv
    total = [0, 0]

    def counting(fd, buffers, offset):
        n = real(fd, buffers, offset)
        total[0] += n
        total[1] += 1
        return n

    monkeypatch.setattr(os, "preadv", counting)
    return total


# --------------------------------------------------------------------------- strided.read_view

@pytest.fixture(scope="module")
def noise_file(tmp_path_factory) -> tuple[str, bytes]:
    data = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    path = tmp_path_factory.mktemp("noise") / "noise.bin"
    path.write_bytes(data)
    return str(path), data


dims = st.one_of(st.integers(0, 7), st.sampled_from([1, 33, 130]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(dims, max_size=4), data=st.data(), itemsize=st.sampled_from([1, 2, 4, 8, 16]),
       base=st.integers(0, 100))
def test_read_view_equals_as_strided(noise_file, shape, data, itemsize, base):
    """Any shape and (non-negative, overlapping, zero, permuted) strides: the bytes of elements
    [start, start + count) of the C-order flattening equal numpy's as_strided of the whole storage."""
    path, raw = noise_file
    strides = tuple(data.draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, 64, 131, 700, 4099]),
                                       min_size=len(shape), max_size=len(shape))))
    shape = tuple(shape)
    span = max(extent(shape, strides), 1)
    assume(base + span * itemsize <= len(raw))
    numel = int(np.prod(shape))
    start = data.draw(st.integers(0, numel))
    count = data.draw(st.integers(0, numel - start))
    storage = np.frombuffer(raw, dtype=np.dtype((np.void, itemsize)), count=span, offset=base)
    want = np.ascontiguousarray(np.lib.stride_tricks.as_strided(storage, shape, [s * itemsize for s in strides]))
    with open(path, "rb", buffering=0) as f:
        got = read_view(RawFile(f, path), base, itemsize, shape, strides, start, count)
    assert got.tobytes() == want.reshape(-1)[start:start + count].tobytes()


# --------------------------------------------------------------------------- torch views

def torch_views():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    return {
        "transposed": torch.randn(120, 90, generator=g).t(),
        "transposed_f64": torch.randn(64, 48, dtype=torch.float64, generator=g).t(),
        "permuted": torch.randn(16, 33, 40, generator=g).permute(2, 0, 1),
        "column": torch.randn(512, 130, generator=g)[:, 7],
        "stepped": torch.randn(100, 90, generator=g)[::3, 1::4],
        "narrowed_transpose": torch.randn(50, 60, generator=g).t()[5:40, 3:],
        "expand_middle": torch.randn(7, 1, 9, generator=g).expand(7, 11, 9),
        "expand_leading": torch.randn(1, 33, generator=g).expand(20, 33),
        "bf16_transposed": torch.randn(40, 70, generator=g).bfloat16().t(),
        "i64_stepped": torch.arange(5000).reshape(50, 100)[:, ::7],
        "u8_transposed": torch.randint(0, 255, (90, 70), dtype=torch.uint8, generator=g).t(),
        "overlapping": torch.randn(100, generator=g).as_strided((10, 10), (3, 1), 2),
        "contiguous": torch.randn(33, 17, generator=g),
    }


@pytest.fixture(scope="module")
def views_files(tmp_path_factory) -> dict[str, str]:
    torch = pytest.importorskip("torch")
    d = tmp_path_factory.mktemp("views")
    obj = torch_views()
    paths = {"zip": str(d / "views.pt"), "legacy": str(d / "views-legacy.pt"), "deflate": str(d / "views-deflate.pt")}
    torch.save(obj, paths["zip"])
    torch.save(obj, paths["legacy"], _use_new_zipfile_serialization=False)
    _rezip(paths["zip"], paths["deflate"], zipfile.ZIP_DEFLATED)
    return paths


@pytest.mark.parametrize("kind", ["zip", "legacy", "deflate"])
def test_view_chunks_equal_torch_load(views_files, kind):
    torch = pytest.importorskip("torch")
    path = views_files[kind]
    ckpt = open_checkpoint(path)
    assert (path in ckpt.readers) == (kind == "deflate")
    loaded = flat(torch.load(path, weights_only=True))
    assert set(loaded) == set(ckpt.tensors)
    strided = 0
    for name, t in loaded.items():
        want = torch_values(t)
        whole = ckpt.read(name)
        np.testing.assert_array_equal(whole, want, err_msg=name)
        strided += ckpt[name].stride is not None
        for chunk_bytes in (64, 1000, BIG):
            np.testing.assert_array_equal(chunked(ckpt, name, chunk_bytes), want.reshape(-1), err_msg=f"{name} {chunk_bytes}")
    assert strided == len(loaded) - 1


@pytest.mark.parametrize("rel", ["dtypes.pt", "dtypes-legacy.pt", "deflate"])
def test_fixture_chunks_equal_torch_load(tmp_path, rel):
    torch = pytest.importorskip("torch")
    path = fx(rel) if rel != "deflate" else str(tmp_path / "dtypes.pt")
    if rel == "deflate":
        _rezip(fx("dtypes.pt"), path, zipfile.ZIP_DEFLATED)
    ckpt = open_checkpoint(path)
    for name, t in flat(torch.load(path, weights_only=True)).items():
        want = torch_values(t).reshape(-1)
        np.testing.assert_array_equal(ckpt.read(name).reshape(-1), want, err_msg=name)
        for chunk_bytes in (64, BIG):
            np.testing.assert_array_equal(chunked(ckpt, name, chunk_bytes), want, err_msg=name)


@pytest.fixture(scope="module")
def big_transposed(tmp_path_factory) -> tuple[str, np.ndarray]:
    """An 8 MiB float32 tensor saved transposed (a strided view over its storage)."""
    torch = pytest.importorskip("torch")
    t = torch.randn(1024, 2048, generator=torch.Generator().manual_seed(1))
    path = str(tmp_path_factory.mktemp("big") / "transposed.pt")
    torch.save({"w": t.t()}, path)
    return path, t.t().contiguous().numpy()


def test_transposed_view_memory_is_bounded_by_the_chunk(big_transposed):
    path, want = big_transposed
    ckpt = open_checkpoint(path)
    assert ckpt["w"].stride == (1, 2048) and ckpt["w"].nbytes == 8 << 20
    peak = peak_of_chunked_read(ckpt, "w", CHUNK)
    assert peak < 8 * CHUNK, peak          # the old reader decoded the whole 8 MiB span per chunk


def test_transposed_view_reads_each_byte_once(big_transposed, preadv_bytes):
    path, want = big_transposed
    ckpt = open_checkpoint(path)
    got = chunked(ckpt, "w", CHUNK)
    np.testing.assert_array_equal(got, want.reshape(-1))
    # every byte fetched (through the counted read), and not many twice: the old reader read the
    # 8 MiB span for each of the 128 chunks
    assert want.nbytes <= preadv_bytes[0] <= 2 * want.nbytes, preadv_bytes[0]


def test_sparse_views_read_about_what_they_need(tmp_path, preadv_bytes):
    torch = pytest.importorskip("torch")
    base = torch.randn(512, 512, generator=torch.Generator().manual_seed(2))
    views = {"column": base[:, 3], "every_fourth": base[:, ::4], "rows_of_transpose": base.t()[::8]}
    path = str(tmp_path / "sparse.pt")
    torch.save(views, path)
    ckpt = open_checkpoint(path)
    for name, t in views.items():
        preadv_bytes[:] = [0, 0]
        np.testing.assert_array_equal(chunked(ckpt, name, 4096), t.contiguous().numpy().reshape(-1), err_msg=name)
        fetched, reads = preadv_bytes
        # each read fetches at most twice the bytes it needs plus strided.SLACK (small gaps are
        # cheaper read than skipped), at most one read per element; never a pass over the whole
        # storage per chunk (the old reader: 1 MiB for each of the 4 KiB chunks)
        assert ckpt[name].nbytes <= fetched <= 2 * ckpt[name].nbytes + SLACK * reads, name
        assert reads <= ckpt[name].numel and fetched <= base.numel() * 4, name


# --------------------------------------------------------------------------- compressed members

@pytest.fixture(scope="module")
def big_deflated(tmp_path_factory) -> tuple[str, dict[str, np.ndarray]]:
    """A torch.save file re-zipped with deflate: a 4 MiB contiguous tensor and a transposed view."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    obj = {"big": torch.randn(1024, 1024, generator=g), "small": torch.randn(10, generator=g),
           "transposed": torch.randn(128, 192, generator=g).t()}
    d = tmp_path_factory.mktemp("deflate")
    torch.save(obj, str(d / "stored.pt"))
    path = str(d / "deflated.pt")
    _rezip(str(d / "stored.pt"), path, zipfile.ZIP_DEFLATED)
    return path, {k: v.contiguous().numpy() for k, v in obj.items()}


def test_compressed_member_memory_is_bounded_by_the_chunk(big_deflated):
    path, _ = big_deflated
    ckpt = open_checkpoint(path)
    assert ckpt["big"].offset is None and ckpt["big"].nbytes == 4 << 20
    peak = peak_of_chunked_read(ckpt, "big", CHUNK)
    assert peak < 8 * CHUNK, peak


@pytest.fixture
def member_reads(monkeypatch):
    """How often a zip member is opened, and the decompressed bytes read from members."""
    counts = {"opens": 0, "bytes": 0}
    real_open, real_read = tr.CheckedZipFile.open, zipfile.ZipExtFile.read

    def opening(self, *a, **k):
        counts["opens"] += 1
        return real_open(self, *a, **k)

    def reading(self, n=-1):
        out = real_read(self, n)
        counts["bytes"] += len(out)
        return out

    monkeypatch.setattr(tr.CheckedZipFile, "open", opening)
    monkeypatch.setattr(zipfile.ZipExtFile, "read", reading)
    return counts


def test_compressed_member_is_decompressed_once(big_deflated, member_reads):
    path, want = big_deflated
    ckpt = open_checkpoint(path)
    member_reads.update(opens=0, bytes=0)
    np.testing.assert_array_equal(chunked(ckpt, "big", CHUNK), want["big"].reshape(-1))
    # one pass over the member (the old reader reopened it and skipped from byte 0 for every chunk)
    assert member_reads["opens"] == 1
    assert member_reads["bytes"] <= want["big"].nbytes + CHUNK


def test_compressed_strided_view_is_decompressed_once(big_deflated, member_reads):
    path, want = big_deflated
    ckpt = open_checkpoint(path)
    assert ckpt["transposed"].stride is not None
    member_reads.update(opens=0, bytes=0)
    for chunk_bytes in (CHUNK, 64, BIG):
        np.testing.assert_array_equal(chunked(ckpt, "transposed", chunk_bytes), want["transposed"].reshape(-1))
    assert member_reads["opens"] == 1 and member_reads["bytes"] == want["transposed"].nbytes


def test_backward_read_restarts_the_member(big_deflated, member_reads):
    path, want = big_deflated
    ckpt = open_checkpoint(path)
    reader, info = ckpt.readers[path], ckpt["big"]
    member_reads.update(opens=0, bytes=0)
    flat_want = want["big"].reshape(-1)
    for start in (5000, 9000, 100, 200_000, 0):
        np.testing.assert_array_equal(reader(info, start, 777), flat_want[start:start + 777])
    assert member_reads["opens"] == 3   # the first read, then two that went backwards
    # another record, then back: one open each
    np.testing.assert_array_equal(reader(ckpt["small"], 0, 10), want["small"])
    np.testing.assert_array_equal(reader(info, 1, 3), flat_want[1:4])
    assert member_reads["opens"] == 5
    reader._pid = -1   # as in a forked stats worker: the inherited member is not reused
    np.testing.assert_array_equal(reader(info, 4, 3), flat_want[4:7])
    assert member_reads["opens"] == 6


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_compressed_reader_keeps_at_most_one_member_open(tmp_path):
    path = str(tmp_path / "dtypes.pt")
    _rezip(fx("dtypes.pt"), path, zipfile.ZIP_DEFLATED)
    ckpt = open_checkpoint(path)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        for t in ckpt:
            if t.dt.kind != "str":
                chunked(ckpt, t.name, 64)
    # one member (its file) and one temporary file for strided views
    assert len(os.listdir("/proc/self/fd")) <= before + 2
    ckpt.close()  # Checkpoint.close releases what its readers hold
    assert len(os.listdir("/proc/self/fd")) == before
    with open_checkpoint(path) as again:  # and a Checkpoint is a context manager
        for t in again:
            if t.dt.kind != "str":
                chunked(again, t.name, 64)
    assert len(os.listdir("/proc/self/fd")) == before


# --------------------------------------------------------------------------- TF partitioned variables

def test_partitioned_fixture_chunks_equal_whole_read():
    ckpt = open_checkpoint(fx("../tf1-partitioned/model.ckpt-5"))
    parted = [t.name for t in ckpt if "partitions" in t.extra]
    assert parted
    for name in parted:
        whole = ckpt.read(name).reshape(-1)
        for chunk_bytes in (4, 12, 64, BIG):
            np.testing.assert_array_equal(chunked(ckpt, name, chunk_bytes), whole, err_msg=name)


def partitioned(tmp_path, shape: tuple[int, int], row_cuts: list[int], col_cuts: list[int]):
    """A partitioned variable laid out as tf_bundle describes one: every slice a C-contiguous array of
    its extent in one of two data files (as TF's shards hold them), in a TensorInfo with `partitions`."""
    values = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    files = [str(tmp_path / "data-0"), str(tmp_path / "data-1")]
    handles = [open(f, "wb") for f in files]
    parts = []
    rows, cols = [0, *row_cuts, shape[0]], [0, *col_cuts, shape[1]]
    for i, (r0, r1) in enumerate(zip(rows, rows[1:])):
        for j, (c0, c1) in enumerate(zip(cols, cols[1:])):
            h = handles[(i + j) % 2]
            h.write(b"\0" * 13)                     # something else between slices
            raw = values[r0:r1, c0:c1].tobytes()
            parts.append({"file": files[(i + j) % 2], "offset": h.tell(), "bytes": len(raw), "crc32c": None,
                          "extent": [[r0, r1 - r0], [c0, c1 - c0]]})
            h.write(raw)
    for h in handles:
        h.close()
    index = str(tmp_path / "model.index")
    info = TensorInfo("v", "F32", shape, index, None, values.nbytes, storage="v", extra={"partitions": parts[::-1]})
    ckpt = Checkpoint(index, "tf-bundle", {"v": info}, (index, *files), readers={index: read_partitioned})
    return ckpt, values


@pytest.mark.parametrize("row_cuts,col_cuts", [([1000, 1001, 2500], []), ([700, 3000], [100])])
def test_partitioned_reads_only_overlapping_slices(tmp_path, preadv_bytes, row_cuts, col_cuts):
    ckpt, values = partitioned(tmp_path, (4096, 256), row_cuts, col_cuts)
    for chunk_bytes in (4000, CHUNK, BIG):
        preadv_bytes[0] = 0
        np.testing.assert_array_equal(chunked(ckpt, "v", chunk_bytes), values.reshape(-1))
        assert preadv_bytes[0] == values.nbytes   # each stored byte once (old: the whole variable per chunk)
    np.testing.assert_array_equal(ckpt.read("v"), values)
    np.testing.assert_array_equal(ckpt._read(ckpt["v"], 256 * 999 + 17, 600), values.reshape(-1)[256 * 999 + 17:][:600])


def test_partitioned_memory_is_bounded_by_the_chunk(tmp_path):
    ckpt, values = partitioned(tmp_path, (4096, 256), [700, 3000], [100])
    assert values.nbytes == 4 << 20
    peak = peak_of_chunked_read(ckpt, "v", CHUNK)
    assert peak < 8 * CHUNK, peak
