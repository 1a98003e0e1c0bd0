"""The 16-bit kernel of `ckptstat stats` (analysis/stats/kernel16.py): F16 and BF16 statistics from one
bincount over the stored bit patterns. Oracles: the values torch wrote, widened to float64 by torch,
and numpy's reductions and np.quantile over them."""
from __future__ import annotations

import json
import math
import mmap
import os
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import save_file  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.stats import QUANTILES, Acc, collect, new_acc  # noqa: E402
from ckptstat.analysis.stats import kernel16 as k16  # noqa: E402
from ckptstat.analysis.stats.kernel16 import acc_from_hist16, bits16_chunks  # noqa: E402
from ckptstat.errors import CheckpointError, CorruptCheckpointError  # noqa: E402

DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16}


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(22)
    out = {}
    for code, dt in DTYPES.items():
        x = torch.randn(4099, generator=g) * 0.02
        x[::97] = 0.0
        x[5] = -0.0
        out[f"{code}.plain"] = x.to(dt)
        y = (torch.randn(301, generator=g) * 300).to(dt)
        y[3], y[7], y[11] = float("nan"), float("inf"), float("-inf")
        out[f"{code}.special"] = y
        out[f"{code}.allnan"] = torch.full((5,), float("nan"), dtype=dt)
        out[f"{code}.const"] = torch.full((64, 3), 1.0009765625, dtype=dt)   # var 0, mean far from 0
    return out


def _write(tmp_path_factory, name: str, t: dict[str, torch.Tensor]) -> tuple[str, dict[str, torch.Tensor]]:
    path = str(tmp_path_factory.mktemp(name) / f"{name}.safetensors")
    save_file(t, path)
    return path, t


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[str, dict[str, torch.Tensor]]:
    return _write(tmp_path_factory, "k16", _tensors())


def _oracle(x: torch.Tensor) -> dict:
    v = x.to(torch.float64).numpy().reshape(-1)
    fin = v[np.isfinite(v)]
    return {"count": v.size, "finite": fin.size, "nan": int(np.isnan(v).sum()), "posinf": int((v == np.inf).sum()),
            "neginf": int((v == -np.inf).sum()), "zeros": int((v == 0).sum()), "fin": fin}


@pytest.fixture(params=["compiled", "numpy"])
def counter(request, monkeypatch) -> str:
    """Each 16-bit test both ways: the compiled count (_count16.c) and numpy's, which an install without a C
    compiler uses."""
    if request.param == "numpy":
        monkeypatch.setattr(k16, "_compiled_count", None)
    return request.param


@pytest.mark.parametrize("chunk", [2, 6, 4096, 1 << 20])
def test_rows_match_torch_values(written, chunk, counter):
    path, t = written
    rows = {r["name"]: r for r in collect(open_checkpoint(path), all_roles=True, chunk_bytes=chunk).report["tensors"]}
    assert set(rows) == set(t)
    for name, x in t.items():
        _check_row(rows[name], x, exact=True)


def test_histogram_kernel_equals_the_chunk_accumulator(written):
    """acc_from_hist16 gives what Acc.update gives on the decoded values (moments to rounding)."""
    path, t = written
    ckpt = open_checkpoint(path)
    for name in t:
        info = ckpt[name]
        hist = np.zeros(1 << 16, dtype=np.int64)
        for bits in bits16_chunks(ckpt, info, 100):
            hist += np.bincount(bits, minlength=1 << 16)
        fast: Acc = acc_from_hist16(hist, info.dtype)
        slow = new_acc(info.dtype)
        slow.update(ckpt.read(name).reshape(-1))
        assert np.array_equal(fast.hist, slow.hist), name
        for k in ("domain", "exact", "count", "n", "nan", "posinf", "neginf", "zeros"):
            assert getattr(fast, k) == getattr(slow, k), (name, k)
        for k in ("min", "max", "mean", "m2", "sum_abs"):
            a, b = getattr(fast, k), getattr(slow, k)
            assert a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12), (name, k, a, b)


def test_other_readers_give_the_same_rows(tmp_path, written):
    """A torch.save zip (its own reader) goes through iter_chunks; the rows are the safetensors file's."""
    path, t = written
    pt = str(tmp_path / "k16.pt")
    torch.save(t, pt)
    a = collect(open_checkpoint(path), all_roles=True).report["tensors"]
    b = collect(open_checkpoint(pt), all_roles=True).report["tensors"]
    key = lambda r: r["name"]  # noqa: E731
    for ra, rb in zip(sorted(a, key=key), sorted(b, key=key)):
        assert {k: v for k, v in ra.items() if k != "spread_z"} == {k: v for k, v in rb.items() if k != "spread_z"}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_file_cut_short_after_opening_is_one_error(tmp_path, dtype):
    path = str(tmp_path / "cut.safetensors")
    save_file({"w": torch.ones(1000, dtype=dtype)}, path)
    ckpt = open_checkpoint(path)
    os.truncate(path, os.path.getsize(path) - 10)
    with pytest.raises(CorruptCheckpointError, match="the file ends first"):
        collect(ckpt)


# --- the count itself (_count16.c), and the file read where the page cache holds it -----------------------

def test_the_test_install_has_the_compiled_count():
    """setup.py's extension is optional for users; the test install (a C compiler at hand) must have built it, or
    the tests above would test numpy twice."""
    assert k16._compiled_count is not None


@pytest.mark.parametrize("n", [0, 1, 2, 3, 65_535, 65_536, 65_537, 300_001])
def test_compiled_count_equals_bincount(n):
    rng = np.random.default_rng(n)
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    bits[: n // 2] = bits[0] if n else 0   # runs of one pattern (the two tables' case)
    want = np.bincount(bits, minlength=1 << 16)
    hist = np.full(1 << 16, 7, dtype=np.int64)   # added to, not overwritten
    k16._compiled_count(bits, hist)
    assert np.array_equal(hist, want + 7)
    raw = np.zeros(2 * n + 1, dtype=np.uint8)   # at an odd address
    raw[1:] = bits.view(np.uint8)
    hist[:] = 0
    k16._compiled_count(memoryview(raw)[1:], hist)
    assert np.array_equal(hist, want)


def test_compiled_count_in_many_threads_at_once():
    """The GIL is released while it counts, and each thread has its own tables (a URL's stats counts in threads)."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(9)
    inputs = [rng.integers(0, 50 + 1000 * k, 400_000, dtype=np.uint16) for k in range(8)]

    def count(bits: np.ndarray) -> np.ndarray:
        hist = np.zeros(1 << 16, dtype=np.int64)
        for _ in range(5):
            k16._compiled_count(bits, hist)
        return hist

    with ThreadPoolExecutor(8) as pool:
        for bits, hist in zip(inputs, pool.map(count, inputs)):
            assert np.array_equal(hist, 5 * np.bincount(bits, minlength=1 << 16))


@pytest.mark.parametrize("counter_", ["compiled", "numpy"])
def test_count16_of_either_byte_order_and_any_layout(counter_, monkeypatch):
    if counter_ == "numpy":
        monkeypatch.setattr(k16, "_compiled_count", None)
    bits = np.random.default_rng(1).integers(0, 1 << 16, 100_003, dtype=np.uint16)
    want = np.bincount(bits, minlength=1 << 16)
    for view in (bits, bits.astype(">u2"), bits.astype("<u2"), np.stack([bits, bits])[:, ::1][0]):
        hist = np.zeros(1 << 16, dtype=np.int64)
        k16.count16(view, hist)
        assert np.array_equal(hist, want)
    hist = np.zeros(1 << 16, dtype=np.int64)
    k16.count16(np.repeat(bits, 2)[::2], hist)   # strided
    assert np.array_equal(hist, want)


def test_compiled_count_refuses_what_it_cannot_count():
    bits = np.zeros(4, dtype=np.uint16)
    with pytest.raises(ValueError, match="odd number of bytes"):
        k16._compiled_count(memoryview(bits.view(np.uint8))[1:], np.zeros(1 << 16, dtype=np.int64))
    for hist in (np.zeros(10, dtype=np.int64), np.zeros(1 << 16, dtype=np.int32)):
        with pytest.raises(ValueError, match="65,536"):
            k16._compiled_count(bits, hist)
    frozen = np.zeros(1 << 16, dtype=np.int64)
    frozen.setflags(write=False)
    with pytest.raises(ValueError):
        k16._compiled_count(bits, frozen)


def test_16_bit_tensors_at_odd_offsets(tmp_path, counter):
    """A header whose length is odd puts every tensor at an odd file offset (safetensors pads its own headers to 8
    bytes; the format does not require it): mapped and counted there, rows as torch's values (safe_open reads it)."""
    from safetensors import safe_open
    g = torch.Generator().manual_seed(3)
    t = {"a": (torch.randn(70_001, generator=g) * 0.02).to(torch.bfloat16),
         "b": (torch.randn(1001, generator=g) * 5).to(torch.float16)}
    blobs = {k: v.view(torch.int16).numpy().tobytes() for k, v in t.items()}
    header, at = {}, 0
    for k, v in t.items():
        header[k] = {"dtype": "BF16" if v.dtype == torch.bfloat16 else "F16", "shape": list(v.shape),
                     "data_offsets": [at, at + len(blobs[k])]}
        at += len(blobs[k])
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (1 - len(text) % 2)   # an odd length
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs.values()))
    with safe_open(str(path), "pt") as f:
        assert all(torch.equal(f.get_tensor(k).view(torch.int16), t[k].view(torch.int16)) for k in t)
    rows = {r["name"]: r for r in collect(open_checkpoint(str(path)), chunk_bytes=4098).report["tensors"]}
    for k, x in t.items():
        _check_row(rows[k], x, exact=True)


def test_a_large_tensor_is_mapped_a_window_at_a_time(tmp_path, monkeypatch):
    """Memory stays a window or two whatever the tensor's size: while the count runs, at most two of the file's
    mappings exist (the window the last chunk views, and the next one's being made), each at most a window and a
    page long; consecutive chunks share a window; none is left once the run lets its window go."""
    path = str(tmp_path / "big.safetensors")
    save_file({"w": torch.ones(1 << 20, dtype=torch.bfloat16)}, path)
    ckpt = open_checkpoint(path)
    chunk, window = 64 << 10, 256 << 10
    monkeypatch.setattr(k16.Windows, "WINDOW", window)
    seen, mapped = [], set()
    for bits in bits16_chunks(ckpt, ckpt["w"], chunk):
        maps = [line.split()[0] for line in open("/proc/self/maps") if line.rstrip().endswith(os.path.basename(path))]
        seen.append(len(maps))
        mapped.update(maps)
        for m in maps:
            lo, hi = (int(x, 16) for x in m.split("-"))
            assert hi - lo <= window + os.sysconf("SC_PAGE_SIZE")
        assert bits.size == chunk // 2
    assert len(seen) == ckpt["w"].nbytes // chunk and max(seen) <= 2
    assert len(mapped) <= ckpt["w"].nbytes // window + 2   # (a window per 256 KiB, not a mapping per chunk)
    del bits
    k16.WINDOWS.clear()
    assert not [line for line in open("/proc/self/maps") if line.rstrip().endswith(os.path.basename(path))]


def test_consecutive_tensors_share_a_window_and_a_run_lets_it_go(tmp_path, monkeypatch):
    """Small tensors of one file are views of one mapping (a mapping per tensor cost a third of a 1 MiB tensor's
    count); `stats` leaves none behind; the counts are numpy's."""
    path = str(tmp_path / "many.safetensors")
    g = torch.Generator().manual_seed(5)
    t = {f"t{i}": (torch.randn(3000 + i, generator=g) * 0.02).to(torch.bfloat16) for i in range(40)}
    save_file(t, path)
    ckpt = open_checkpoint(path)
    mappings = []
    real = mmap.mmap

    def counted(*args: object, **kw: object) -> mmap.mmap:
        mappings.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(k16.mmap, "mmap", counted)
    for name, x in t.items():
        want = np.bincount(x.view(torch.int16).numpy().view(np.uint16), minlength=1 << 16)
        assert np.array_equal(k16.hist16(ckpt, ckpt[name], 1 << 20), want)
    assert len(mappings) == 1
    monkeypatch.undo()
    k16.WINDOWS.clear()
    rows = collect(open_checkpoint(path)).report["tensors"]
    assert len(rows) == len(t)
    assert not [line for line in open("/proc/self/maps") if line.rstrip().endswith("many.safetensors")]


def test_a_file_truncated_while_its_mapped_chunk_is_counted_is_one_error(tmp_path, monkeypatch):
    """Another process truncates the file between the chunk's mapping and its count: the pages are gone (SIGBUS where
    they are read), and the compiled count's guard turns that into the one-line error, not a crash; the next count
    in the same thread is right (its tables zeroed)."""
    path = str(tmp_path / "shrinks.safetensors")
    save_file({"a": torch.ones(1 << 19, dtype=torch.bfloat16), "b": torch.ones(1 << 19, dtype=torch.bfloat16)}, path)
    ckpt = open_checkpoint(path)
    count = k16.count16

    def truncated_first(bits: np.ndarray, hist: np.ndarray) -> None:
        os.truncate(path, 4096)
        count(bits, hist)

    monkeypatch.setattr(k16, "count16", truncated_first)
    with pytest.raises(CheckpointError, match=r"tensor 'a': cannot read its values: its bytes are gone \(the file shrank"):
        k16.hist16(ckpt, ckpt["a"], 1 << 20)
    bits = np.random.default_rng(2).integers(0, 1 << 16, 300_000, dtype=np.uint16)
    hist = np.zeros(1 << 16, dtype=np.int64)
    k16._compiled_count(bits, hist)
    assert np.array_equal(hist, np.bincount(bits, minlength=1 << 16))


def test_a_file_truncated_while_counted_exits_with_one_line(tmp_path):
    """The same through the CLI, in its own process (a SIGBUS there would be the process's end, exit -7): `stats`
    of a file another process truncates while it reads; one line on stderr, exit 1, nothing on stdout."""
    import subprocess
    import sys
    path = str(tmp_path / "shrinks.safetensors")
    save_file({f"t{i}": torch.ones(1 << 20, dtype=torch.bfloat16) for i in range(8)}, path)
    code = ("import os, sys\n"
            "from ckptstat.analysis.stats import kernel16 as k16\n"
            "count, path = k16.count16, sys.argv[1]\n"
            "def shrink(bits, hist):\n"
            "    os.truncate(path, 4096)\n"
            "    count(bits, hist)\n"
            "k16.count16 = shrink\n"
            "sys.argv = ['ckptstat', 'stats', sys.argv[1], '--no-progress']\n"
            "from ckptstat.__main__ import run\n"
            "run()\n")
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and "shrinks.safetensors" in r.stderr, r.stderr
    assert "the file shrank while it was read" in r.stderr


# --- F32 (analysis/stats/kernel32.py) -------------------------------------------------------------------

def _f32_tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(32)
    out = {}
    x = torch.randn(200_003, generator=g) * 0.02   # > F32_SUB: the one-pass moments after the first sub-read
    x[::97] = 0.0
    x[5] = -0.0
    out["plain"] = x
    y = torch.randn(1001, generator=g) * 300
    y[3], y[7], y[11] = float("nan"), float("inf"), float("-inf")
    y[19], y[23], y[29] = 1e-45, -1e-40, 1.2e-38   # denormals: in the keys of +-0 (1e-45, -1e-40) and beyond
    # NaNs whose payload is only in the low half (key 0x7F80, +Inf's) and a negative quiet NaN
    y[31:33] = torch.tensor([0x7F800001, -0x00400000], dtype=torch.int32).view(torch.float32)
    out["special"] = y
    out["denormal_only"] = torch.tensor([1e-45, -1e-42, 5e-41, 0.0], dtype=torch.float32)
    out["allnan"] = torch.full((5,), float("nan"))
    out["const"] = torch.full((70_000,), 1000.5)   # var 0, |mean| >> std
    out["offset"] = 1000.0 + torch.randn(150_001, generator=g) * 1e-3   # |mean| = 1e6 std
    z = torch.randn(140_000, generator=g)
    z[70_000:] += 1e4   # drifts: the running mean is far from the later sub-reads' own
    out["drift"] = z
    out["one"] = torch.tensor([-2.5])
    out["empty"] = torch.zeros(0)
    out["huge"] = torch.full((300,), -3.0e38)   # sums beyond FLT_MAX: float64 holds them
    # FLT_MAX and its neighbours (x^2 stays finite in float64), among values of the same scale: mixed with
    # small ones, no summation order would keep the small ones, and the oracle's mean would be noise
    out["flt_max"] = torch.tensor([3.4028234663852886e38, -3.4028234663852886e38, 3.0e38, 1.0e38, -2.5e38, float("inf")])
    return {f"F32.{k}": v.to(torch.float32) for k, v in out.items()}


@pytest.fixture(scope="module")
def written32(tmp_path_factory) -> tuple[str, dict[str, torch.Tensor]]:
    return _write(tmp_path_factory, "k32", _f32_tensors())


def _check_row(r: dict, x: torch.Tensor, exact: bool) -> None:
    """A row against numpy float64 over the torch-written values. `exact`: a 16-bit tensor, whose histogram
    holds every value (quantiles exact); else F32 (bfloat16-key quantiles; std's absolute slack scaled to
    the values, which reach FLT_MAX)."""
    o = _oracle(x)
    for k in ("count", "finite", "nan", "posinf", "neginf", "zeros"):
        assert r[k] == o[k], k
    fin = o["fin"]
    if fin.size == 0:
        assert r["min"] is None and r["mean"] is None
        return
    assert r["min"] == fin.min() and r["max"] == fin.max()
    assert r["mean"] == pytest.approx(fin.mean(), rel=1e-12, abs=1e-15)
    assert r["std"] == pytest.approx(fin.std(), rel=1e-9, abs=1e-12 * (1.0 if exact else max(1.0, float(np.abs(fin).max()))))
    assert r["mean_abs"] == pytest.approx(np.abs(fin).mean(), rel=1e-12)
    assert r["l2"] == pytest.approx(np.linalg.norm(fin), rel=1e-12)
    assert r["quantiles_exact"] is exact
    if exact:
        for p in QUANTILES:
            assert r["quantiles"][f"p{100 * p:g}"] == pytest.approx(float(np.quantile(fin, p)), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("sub", [64, None])
@pytest.mark.parametrize("chunk", [4, 12, 4096, 1 << 20])
def test_f32_rows_match_torch_values(written32, tmp_path, monkeypatch, chunk, sub):
    """Sub-reads of 64 values and the default, reads from one value (the small tensors only: a read
    each) to beyond most tensors."""
    import ckptstat.analysis.stats.kernel32 as k32
    if sub:
        monkeypatch.setattr(k32, "F32_SUB", sub)
    path, t = written32
    if chunk < 16:
        t = {k: v for k, v in t.items() if v.numel() < 2000}
        path = str(tmp_path / "small.safetensors")
        save_file(t, path)
    rows = {r["name"]: r for r in collect(open_checkpoint(path), all_roles=True, chunk_bytes=chunk).report["tensors"]}
    assert set(rows) == set(t)
    for name, x in t.items():
        _check_row(rows[name], x, exact=False)


@pytest.mark.parametrize("fast_at", [True, False])
def test_f32_kernel_equals_the_chunk_accumulator(written32, monkeypatch, fast_at):
    """The kernel gives what Acc.update gives on the same values: histogram and counts exactly, moments
    to float64 rounding; with numpy's ufunc.at and with the bincount fallback (numpy < 1.25)."""
    import ckptstat.analysis.stats.kernel32 as k32
    monkeypatch.setattr(k32, "_FAST_AT", fast_at)
    monkeypatch.setattr(k32, "F32_SUB", 1000)
    path, t = written32
    ckpt = open_checkpoint(path)
    for name in t:
        info = ckpt[name]
        seen: list[int] = []
        fast = k32.tensor_stats32(ckpt, info, 40_000, progress=seen.append)
        assert sum(seen) == info.nbytes
        slow = new_acc(info.dtype)
        with np.errstate(invalid="ignore"):   # widening a signalling NaN raises the invalid flag
            slow.update(ckpt.read(name).reshape(-1))
        assert np.array_equal(fast.hist, slow.hist), name
        for k in ("domain", "exact", "count", "n", "nan", "posinf", "neginf", "zeros", "min", "max"):
            assert getattr(fast, k) == getattr(slow, k), (name, k)
        for k in ("mean", "sum_abs"):
            a, b = getattr(fast, k), getattr(slow, k)
            assert a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300), (name, k, a, b)
        assert math.isclose(fast.m2, slow.m2, rel_tol=2e-9, abs_tol=1e-12 * max(1.0, fast.max ** 2)), name
        assert fast.row()["quantiles"] == slow.row()["quantiles"], name


def test_f32_decoded_and_strided_paths(tmp_path, written32):
    """A torch.save zip (its own reader, through iter_chunks) gives the safetensors file's rows (the moments to
    float64 rounding: the safetensors file's tiny tensors are reduced as one run, analysis/stats/tiny.py), and a
    transposed view (stored with its strides) the rows of its values."""
    path, t = written32
    pt = str(tmp_path / "k32.pt")
    base = torch.randn(300, 7, generator=torch.Generator().manual_seed(3))
    torch.save({**t, "F32.strided": base.t()}, pt)
    a = {r["name"]: r for r in collect(open_checkpoint(path), all_roles=True).report["tensors"]}
    b = {r["name"]: r for r in collect(open_checkpoint(pt), all_roles=True).report["tensors"]}
    moments = ("mean", "std", "l2", "mean_abs")
    drop = ("spread_z", *moments)
    for name in t:
        ra, rb = ({k: v for k, v in r.items() if k not in drop} for r in (a[name], b[name]))
        assert ra == rb, name
        for k in moments:
            assert a[name][k] == b[name][k] or math.isclose(a[name][k], b[name][k], rel_tol=1e-12), (name, k)
    _check_row(b["F32.strided"], base.t(), exact=False)


def test_f32_big_endian_npy(tmp_path):
    """A big-endian float32 .npy (numpy writes '>f4' as asked) is swapped to native before the kernel."""
    x = (np.random.default_rng(4).standard_normal(5000) * 3).astype(">f4")
    x[10] = np.nan
    path = str(tmp_path / "be.npy")
    np.save(path, x)
    [row] = collect(open_checkpoint(path), all_roles=True, chunk_bytes=1000).report["tensors"]
    _check_row(row, torch.from_numpy(x.astype(np.float32)), exact=False)


@pytest.mark.parametrize("order", [">f2", "<f2"])
def test_f16_npy_of_either_byte_order(tmp_path, order, counter):
    """numpy writes '>f2' as asked: the patterns are counted as stored, then their bins swapped (compiled), or
    counted through numpy's byte-order-aware indexing."""
    x = (np.random.default_rng(5).standard_normal(70_001) * 3).astype(order)
    x[10], x[11] = np.nan, -np.inf
    path = str(tmp_path / "f16.npy")
    np.save(path, x)
    [row] = collect(open_checkpoint(path), all_roles=True, chunk_bytes=10_000).report["tensors"]
    _check_row(row, torch.from_numpy(x.astype(np.float16)), exact=True)


def test_chunk_buffers_are_shared_by_size_class():
    """A URL's chunk buffers are kept by size class (a multiple of 1 MiB; 64 KiB below it): a shard's tensors of
    slightly different sizes reuse one buffer, and no more than the cap is kept."""
    b = k16.Buffers(4 << 20)
    first = b.take(2_031_776)
    assert first.size == 2 << 20
    b.give(first)
    again = b.take(2_097_152)
    assert again.ctypes.data == first.ctypes.data and b.kept == 0
    assert b.take(1000).size == 64 << 10 and b.take(1 << 16).size == 64 << 10 and b.take(0).size == 64 << 10
    for buf in [again, b.take(3 << 20)]:
        b.give(buf)
    assert b.kept == 2 << 20   # (the 3 MiB one over the cap: let go)


ONE_BYTE = {"F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
            "F8_E5M2FNUZ": torch.float8_e5m2fnuz, "F8_E8M0": torch.float8_e8m0fnu, "I8": torch.int8, "U8": torch.uint8,
            "BOOL": torch.bool}


@pytest.fixture(scope="module")
def written_bytes(tmp_path_factory):
    """A safetensors file (its header written here: safetensors writes no FNUZ or E8M0) of one-byte tensors: every
    one of the 256 patterns of each FP8 dtype (NaN and Inf included), then N(0, s) values of an odd count, and I8,
    U8 and BOOL tensors; the oracle is torch's own conversion of the stored bytes."""
    g = torch.Generator().manual_seed(8)
    t: dict[str, torch.Tensor] = {}
    for name, dt in ONE_BYTE.items():
        if name.startswith("F8"):
            every = torch.arange(256, dtype=torch.uint8).view(dt)
            scale = 4.0 if name != "F8_E8M0" else 1e6
            t[f"all.{name}"] = every
            normal = torch.randn(100_001, generator=g) * scale
            t[f"normal.{name}"] = (normal.abs() if name == "F8_E8M0" else normal).to(dt)
        elif name == "BOOL":
            t[f"w.{name}"] = torch.rand(70_001, generator=g) < 0.3
        else:
            t[f"w.{name}"] = torch.randint(-128 if name == "I8" else 0, 128 if name == "I8" else 256, (70_001,),
                                           generator=g, dtype=dt)
    header, blobs, at = {}, [], 0
    for k, v in t.items():
        blob = v.view(torch.uint8).numpy().tobytes()
        dtype = next(n for n, dt in ONE_BYTE.items() if dt == v.dtype)
        header[k] = {"dtype": dtype, "shape": list(v.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header).encode()
    path = tmp_path_factory.mktemp("bytes") / "bytes.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return str(path), t


@pytest.mark.parametrize("chunk", [3, 4096, 1 << 20])
def test_one_byte_rows_match_torch_values(written_bytes, chunk, counter):
    """FP8 (all five), I8, U8 and BOOL through the byte count (kernel16.byte_hist: bytes counted in pairs, odd
    lengths and odd chunks included), both counters: every row against numpy over torch's values, quantiles exact."""
    path, t = written_bytes
    rows = {r["name"]: r for r in collect(open_checkpoint(path), all_roles=True, chunk_bytes=chunk).report["tensors"]}
    assert set(rows) == set(t)
    for name, x in t.items():
        _check_row(rows[name], x.to(torch.float64), exact=True)


def test_one_byte_tensors_are_counted_not_decoded(written_bytes, monkeypatch):
    """The byte count never decodes a plain tensor's values (no Acc.update, no iter_chunks): the report is read from
    the counts of its 256 patterns."""
    from ckptstat.analysis.stats import accumulate

    path, t = written_bytes
    monkeypatch.setattr(accumulate.Acc, "update", lambda *a: pytest.fail("values decoded"))
    report = collect(open_checkpoint(path), all_roles=True).report
    assert report["total"]["count"] == sum(x.numel() for x in t.values())


def test_one_byte_tensors_of_a_torch_zip(tmp_path, counter):
    """One-byte tensors a format's own reader serves (torch.save's zip records): their decoded values keyed the same
    way (I8, U8 and BOOL widened to float32 first), rows as numpy over torch's values."""
    g = torch.Generator().manual_seed(1)
    e5m2 = (torch.randn(70_001, generator=g) * 3).to(torch.float8_e5m2)
    e5m2[[5, 9, 11]] = torch.tensor([float("inf"), float("-inf"), float("nan")]).to(torch.float8_e5m2)
    t = {"a.i8": torch.randint(-128, 128, (70_001,), generator=g, dtype=torch.int8),
         "a.u8": torch.randint(0, 256, (70_001,), generator=g, dtype=torch.uint8),
         "a.bool": torch.rand(70_001, generator=g) < 0.4, "a.e5m2": e5m2}
    torch.save(t, tmp_path / "bytes.bin")
    rows = {r["name"]: r for r in collect(open_checkpoint(str(tmp_path / "bytes.bin")), all_roles=True,
                                          chunk_bytes=4097).report["tensors"]}
    for name, x in t.items():
        _check_row(rows[name], x.to(torch.float64), exact=True)
