"""Streaming statistics against numpy on the whole array, for every dtype and every registered format.

The fixture list takes every committed checkpoint fixture (safetensors now; torch .bin/.pt, TF bundles
and .h5 files join automatically once their readers are merged); a fixture whose format has no
registered reader is skipped, not failed.
"""
from __future__ import annotations

import glob
import math
import os

import numpy as np
import pytest

from ckptstat import open_checkpoint
from ckptstat.analysis.stats import QUANTILES, collect, select
from ckptstat.core.jsontext import dumps
from ckptstat.errors import UnknownFormatError, UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures")


def _fixture_paths() -> list[str]:
    pats = ["*.safetensors", "*/model.safetensors", "*/*.safetensors.index.json", "*.bin", "*/*.bin",
            "*.pt", "*/*.pt", "*.pth", "*.h5", "*/*.h5", "*.index", "*/*.index", "*/checkpoint"]
    out: list[str] = []
    for p in pats:
        out += sorted(glob.glob(os.path.join(FIX, p)))
    sharded_dirs = {os.path.dirname(p) for p in out if p.endswith(".index.json")}
    # a shard is covered by its index; keep each path once
    out = [p for p in out if p.endswith(".index.json") or os.path.dirname(p) not in sharded_dirs
           or not p.endswith(".safetensors")]
    # a GradScaler's state holds numbers, no tensors (tests/test_torch.py test_files_saved_on_a_gpu reads it); so does
    # a TRL run's training_args.bin (tests/test_scan_plain_data.py reads it)
    return sorted(set(out) - {os.path.join(FIX, "cuda", "scaler.pt"), os.path.join(FIX, "trl", "training_args.bin")})


FIXTURES = _fixture_paths()


def _open(path: str):
    try:
        return open_checkpoint(path)
    except UnknownFormatError:
        pytest.skip(f"no reader registered for {os.path.relpath(path, ROOT)}")


def _values(ckpt, name: str) -> np.ndarray:
    x = ckpt.read(name).reshape(-1)
    if x.dtype.kind == "c":
        x = x.view(x.real.dtype)
    return x


def check_row(row: dict, x: np.ndarray) -> None:
    """One stats row against numpy on the whole array `x` (decoded values, any dtype)."""
    x64 = x.astype(np.float64)
    fin = x64[np.isfinite(x64)]
    assert row["count"] == x.size
    assert row["finite"] == fin.size
    assert row["nan"] == int(np.isnan(x64).sum())
    assert row["posinf"] == int((x64 == np.inf).sum())
    assert row["neginf"] == int((x64 == -np.inf).sum())
    assert row["zeros"] == int((x64 == 0).sum())
    if fin.size == 0:
        assert row["min"] is None and row["mean"] is None and row["quantiles"]["p50"] is None
        return
    assert row["min"] == fin.min() and row["max"] == fin.max()
    tol = dict(rel=1e-9, abs=1e-12 * max(1.0, float(np.abs(fin).max())))
    assert row["mean"] == pytest.approx(fin.mean(), **tol)
    assert row["std"] == pytest.approx(fin.std(), **tol)
    assert row["mean_abs"] == pytest.approx(np.abs(fin).mean(), **tol)
    assert row["l2"] == pytest.approx(np.linalg.norm(fin), **tol)
    srt = np.sort(fin)
    for p in QUANTILES:
        got = row["quantiles"][f"p{100 * p:g}"]
        want = float(np.quantile(fin, p))
        if row["quantiles_exact"]:
            assert got == pytest.approx(want, rel=1e-12, abs=1e-300), p
        else:   # the stated bound: 2^-8 of the neighbouring order statistics (+2^-133 near zero)
            h = (fin.size - 1) * p
            a, b = srt[int(math.floor(h))], srt[min(int(math.floor(h)) + 1, fin.size - 1)]
            bound = 2.0 ** -8 * max(abs(a), abs(b)) + 2.0 ** -133
            if a == b or x.dtype == np.float64:   # f64: also the f32 rounding before binning
                bound += 2.0 ** -23 * max(abs(a), abs(b))
            assert abs(got - want) <= bound, (p, got, want, bound)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: os.path.relpath(p, FIX))
def test_every_tensor_of_every_fixture_matches_numpy(path: str) -> None:
    ckpt = _open(path)
    r = collect(ckpt, all_roles=True, chunk_bytes=64).report
    assert r["schema"] == "ckptstat.stats/1"
    assert r["tensors"], "no tensor read"
    for row in r["tensors"]:
        check_row(row, _values(ckpt, row["name"]))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: os.path.relpath(p, FIX))
def test_chunked_equals_unchunked_and_workers(path: str) -> None:
    ckpt = _open(path)
    tiny = collect(ckpt, all_roles=True, chunk_bytes=8).report
    whole = collect(ckpt, all_roles=True, chunk_bytes=1 << 30).report
    pooled = collect(ckpt, all_roles=True, chunk_bytes=100, workers=2).report
    for other in (whole, pooled):
        for level in ("tensors", "layers", "buckets"):
            assert len(tiny[level]) == len(other[level])
            for a, b in zip(tiny[level], other[level]):
                for k in ("count", "finite", "nan", "posinf", "neginf", "zeros", "min", "max", "quantiles",
                          "quantiles_exact"):
                    assert a[k] == b[k], (level, k)
                for k in ("mean", "std", "mean_abs", "l2"):
                    if a[k] is None:
                        assert b[k] is None
                        continue
                    assert a[k] == pytest.approx(b[k], rel=1e-12, abs=1e-15), (level, k)


def test_dtypes_fixture_against_generator_values() -> None:
    """Independent oracle: the values torch wrote, recorded by fixtures/make_safetensors.py."""
    import json

    with open(os.path.join(FIX, "expected_safetensors.json")) as f:
        expected = json.load(f)["dtypes.safetensors"]
    r = collect(open_checkpoint(os.path.join(FIX, "dtypes.safetensors")), all_roles=True, chunk_bytes=8).report
    rows = {row["name"]: row for row in r["tensors"]}
    assert set(rows) == set(expected)
    for name, e in expected.items():
        check_row(rows[name], np.array(e["values"], dtype=np.float64).astype(
            np.float32 if name not in ("f64", "i64", "u64", "u32", "i32") else np.float64))


def _write(tmp_path, tensors: dict, name: str = "m.safetensors") -> str:
    from safetensors.torch import save_file

    path = str(tmp_path / name)
    save_file(tensors, path)
    return path


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> str:
    """Random tensors in every float dtype, with NaN, Inf, zeros, subnormals and wide ranges."""
    import torch

    g = torch.Generator().manual_seed(1)
    base = torch.randn(40_000, generator=g) * torch.logspace(-6, 3, 40_000)
    base[::97] = 0.0
    special = base.clone()
    special[5], special[77], special[1234] = float("nan"), float("inf"), float("-inf")
    t = {
        "layers.0.w_f32": base.reshape(200, 200),
        "layers.0.special_f32": special,
        "layers.1.w_f64": base.double() * 1e-30,
        "layers.1.w_f16": (base / 100).half(),
        "layers.2.w_bf16": base.bfloat16(),
        "layers.2.special_bf16": special.bfloat16(),
        "layers.3.w_e4m3": (base / 1000).clamp(-400, 400).to(torch.float8_e4m3fn),
        "layers.3.w_e5m2": (base / 1000).to(torch.float8_e5m2),
        "embed_tokens.weight": torch.randn(300, 17, generator=g).half(),
        "layers.4.tiny_f32": torch.tensor([1e-40, -1e-42, 0.0, 3.0]),
        "layers.4.idx": torch.arange(-1000, 1000, dtype=torch.int32),
        "layers.4.mask": torch.arange(100) % 3 == 0,
    }
    path = _write(tmp_path_factory.mktemp("gen"), {k: v.contiguous() for k, v in t.items()})
    return path


def test_generated_every_dtype_matches_numpy(generated: str) -> None:
    ckpt = open_checkpoint(generated)
    r = collect(ckpt, all_roles=True, chunk_bytes=4096).report
    rows = {row["name"]: row for row in r["tensors"]}
    assert len(rows) == 12
    for name, row in rows.items():
        check_row(row, _values(ckpt, name))
    assert rows["layers.1.w_f16"]["quantiles_exact"] and rows["layers.2.w_bf16"]["quantiles_exact"]
    assert rows["layers.3.w_e4m3"]["quantiles_exact"] and not rows["layers.0.w_f32"]["quantiles_exact"]
    assert not rows["layers.4.idx"]["quantiles_exact"]   # |int| > 256: bfloat16 bins are not exact
    assert rows["layers.0.special_f32"]["nan"] == 1 and rows["layers.0.special_f32"]["inf"] == 2


def test_groups_match_numpy_on_concatenation(generated: str) -> None:
    ckpt = open_checkpoint(generated)
    r = collect(ckpt, chunk_bytes=1000, workers=2).report
    names = [row["name"] for row in r["tensors"]]
    assert "layers.4.idx" not in names and "layers.4.mask" not in names   # int/bool: buffers
    for layer in r["layers"]:
        members = [row for row in r["tensors"] if row["layer"] == layer["layer"]]
        x = np.concatenate([_values(ckpt, m["name"]).astype(np.float64) for m in members])
        check_row(layer, x)
        assert layer["tensors"] == len(members)
    total = np.concatenate([_values(ckpt, n).astype(np.float64) for n in names])
    check_row(r["total"], total)
    # mixing F16 with others puts the group in bfloat16 bins: exact only if every value fits
    emb = next(b for b in r["buckets"] if b["bucket"] == "embedding")
    assert emb["quantiles_exact"] is False


def test_anomalies(tmp_path) -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    t = {f"encoder.layer.{i}.dense.weight": torch.randn(16, 16, generator=g) * 0.02 for i in range(8)}
    t["encoder.layer.3.dense.weight"] *= 100            # std 2.0 among 0.02s
    t["encoder.layer.5.dense.weight"] = torch.zeros(16, 16)
    t["encoder.layer.6.dense.weight"][0, 0] = float("nan")
    ckpt = open_checkpoint(_write(tmp_path, t))
    r = collect(ckpt).report
    kinds = {(a["name"], a["kind"]) for a in r["anomalies"]}
    assert kinds == {("encoder.layer.3.dense.weight", "spread_outlier"),
                     ("encoder.layer.5.dense.weight", "all_zero"),
                     ("encoder.layer.6.dense.weight", "nan_or_inf")}
    assert "spread_outlier" in {f for row in r["tensors"] for f in row["flags"]}
    detail = next(a["detail"] for a in r["anomalies"] if a["kind"] == "spread_outlier")
    assert " of 7 encoder matrices " in detail, detail   # was "matrixs"


def test_selection_filter_bucket_aliases() -> None:
    ckpt = open_checkpoint(os.path.join(FIX, "bert-tiny-buffers"))
    items, skipped = select(ckpt)
    assert "embeddings.position_ids" in {s["name"] for s in skipped}
    assert all(ckpt[i.name].dtype.startswith("F") for i in items)
    items, _ = select(ckpt, buckets=["pooler"])
    assert {i.name for i in items} == {"pooler.dense.weight", "pooler.dense.bias"}
    items, _ = select(ckpt, pattern="*LayerNorm*")
    assert items and all("LayerNorm" in i.name for i in items)
    with pytest.raises(UsageError):
        select(ckpt, buckets=["nope"])


@pytest.mark.parametrize("workers", [1, 2])
def test_progress_is_a_callback(generated: str, capsys, workers: int) -> None:
    """The library reports (done, total) in stored bytes and draws nothing; the CLI draws the bar."""
    calls: list[tuple[int, int]] = []
    r = collect(open_checkpoint(generated), chunk_bytes=4096, workers=workers,
                progress=lambda done, total: calls.append((done, total))).report
    total = r["bytes_read"]
    assert total > 0 and calls[0] == (0, total) and calls[-1] == (total, total)
    assert all(t == total for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)   # never goes back
    if workers == 1:
        assert len(calls) > 3   # one call per chunk read
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_analysis_never_imports_rich() -> None:
    import ast

    for path in glob.glob(os.path.join(os.path.dirname(__file__), "..", "ckptstat", "analysis", "*.py")):
        tree = ast.parse(open(path, encoding="utf-8").read())
        mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in mods if m.split(".")[0] == "rich"}, path


@pytest.mark.parametrize("workers", [1, 2])
def test_file_shrinking_after_open_is_a_checkpoint_error(tmp_path, workers: int) -> None:
    import shutil

    from ckptstat.errors import CorruptCheckpointError

    path = str(tmp_path / "model.safetensors")
    shutil.copy(os.path.join(FIX, "bert-tiny", "model.safetensors"), path)
    ckpt = open_checkpoint(path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(CorruptCheckpointError, match="model.safetensors"):
        collect(ckpt, workers=workers)


def test_layer_accumulators_stay_sparse(tmp_path):
    """A file of many tiny layers (a hostile header can name 100,000) holds no 512 KiB histogram per layer:
    the layer accumulators keep their counts sparse (the total's and the buckets', a handful, are dense),
    and their quantiles are numpy's."""
    import numpy as np
    from safetensors.numpy import save_file

    from ckptstat import open_checkpoint
    from ckptstat.analysis.stats import collect

    rng = np.random.default_rng(0)
    arrays = {f"layers.{i}.w": rng.standard_normal(3).astype(np.float32) for i in range(300)}
    save_file(arrays, tmp_path / "m.safetensors")
    from ckptstat.analysis.stats import Item, run_items

    ckpt = open_checkpoint(tmp_path / "m.safetensors")
    items = [Item(n, "encoder", int(n.split(".")[1]), "parameter") for n in arrays]
    _, groups = run_items(ckpt, items, 1 << 20)
    layers = [acc for key, acc in groups.items() if key[0] == "layer"]
    assert len(groups) == 303 and len(layers) == 300   # + total, bucket, and the bucket as plotted (no norm gains)
    assert all(acc.dense is None and len(acc.hist_keys) <= 3 for acc in layers)
    run = collect(ckpt, None, (), False, 1 << 20, 1, None)
    layer7 = next(r for r in run.report["layers"] if r["layer"] == 7)
    # F32 values are binned by their bfloat16 key: within the stated bound (docs/stats.md), 2^-8 relative
    assert layer7["quantiles"]["p50"] == pytest.approx(float(np.quantile(arrays["layers.7.w"], 0.5)), rel=2 ** -8)
    assert layer7["min"] == float(arrays["layers.7.w"].min()) and layer7["max"] == float(arrays["layers.7.w"].max())


def test_signalling_nan_is_counted_without_a_warning(tmp_path) -> None:
    """The bug: a float32 signalling NaN (0x7F800001, what a bit-flip or raw buffer can hold) widened to float64 made
    numpy print 'RuntimeWarning: invalid value encountered in cast' on stderr, from a tiny tensor (tiny.py) or a
    complex64 one (Acc.update); `diff` printed it too (analysis/diff.py). The NaN is counted, nothing printed."""
    import warnings

    torch = pytest.importorskip("torch")
    bits = np.array([0x7F800001, 0x3F800000, 0xFF800001, 0x40000000], dtype=np.uint32)
    x = bits.view(np.float32)
    path = str(tmp_path / "snan.pt")
    torch.save({"a.weight": torch.from_numpy(x.copy()), "b.weight": torch.ones(3),   # a and b: a tiny-tensor run
                "c.weight": torch.from_numpy(x.copy()).view(torch.complex64)}, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = {r["name"]: r for r in collect(open_checkpoint(path), all_roles=True).report["tensors"]}
    for name in ("a.weight", "c.weight"):   # numpy, quietly: two NaN and 1.0, 2.0
        assert (rows[name]["nan"], rows[name]["finite"], rows[name]["mean"]) == (2, 2, 1.5), name


def test_two_dtypes_over_one_storage_are_two_tensors(tmp_path) -> None:
    """The bug: alias_key (same storage, offset, shape, stride) left out the dtype, so a float8 tensor and its uint8
    view, which torch.save writes over one storage (its new dtypes pickle an untyped one), were one tensor: the
    second name was skipped as an 'alias', its values (other numbers) in no row. torch.load gives both back."""
    torch = pytest.importorskip("torch")
    w = (torch.randn(64, generator=torch.Generator().manual_seed(3)) * 8).to(torch.float8_e4m3fn)
    path = str(tmp_path / "fp8.pt")
    torch.save({"w.weight": w, "raw.weight": w.view(torch.uint8)}, path)
    back = torch.load(path, weights_only=True)
    assert back["w.weight"].untyped_storage().data_ptr() == back["raw.weight"].untyped_storage().data_ptr()
    report = collect(open_checkpoint(path), all_roles=True).report
    rows = {r["name"]: r for r in report["tensors"]}
    assert report["skipped"] == [] and set(rows) == {"w.weight", "raw.weight"}
    for name, dtype in (("w.weight", "F8_E4M3"), ("raw.weight", "U8")):
        v = back[name].float().double().numpy()
        assert (rows[name]["dtype"], rows[name]["mean"]) == (dtype, pytest.approx(v.mean(), rel=1e-12))


def test_mean_abs_of_an_integer_tensor_holding_its_minimum(tmp_path) -> None:
    """The bug: |x| was taken in the tensor's own integer dtype, where abs(-32768) of an int16 (and int32's, int64's
    minimum) wraps to itself: mean_abs read -10921.67 for [-32768, 1, 2] (numpy on the widened values: 10923.67)."""
    torch = pytest.importorskip("torch")
    t = {"i16.weight": torch.tensor([-32768, 1, 2], dtype=torch.int16),
         "i32.weight": torch.full((5000,), -2**31, dtype=torch.int32),
         "i64.weight": torch.tensor([-2**63, 1, 2], dtype=torch.int64)}
    rows = {r["name"]: r for r in collect(open_checkpoint(_write(tmp_path, t)), all_roles=True).report["tensors"]}
    for name, v in t.items():
        assert rows[name]["mean_abs"] == pytest.approx(np.abs(v.numpy().astype(np.float64)).mean(), rel=1e-15), name


@pytest.mark.parametrize("workers", [1, 2])
def test_min_and_max_of_integers_beyond_2_53_are_exact(tmp_path, workers: int) -> None:
    """The bug: min and max were float64, so an int64 of 2^53 + 1 read 2^53 and uint64's 2^64 - 1 read 1.8446744073709552e19
    (a position id, a hash, a seed held as a buffer); numpy's min and max are the integers themselves. Now each is the
    int where float64 cannot hold it, through the tensor, layer, bucket and total rows."""
    torch = pytest.importorskip("torch")
    t = {"layers.0.a": torch.tensor([2**53 + 3, 2**53 + 1, 2**53 + 5], dtype=torch.int64),
         "layers.0.b": torch.tensor([2**64 - 1, 2**63 + 1, 7], dtype=torch.uint64),
         "layers.1.c": torch.tensor([-2**63 + 1, 0, 3], dtype=torch.int64)}
    arrays = {k: v.numpy() if v.dtype != torch.uint64 else v.view(torch.int64).numpy().view(np.uint64) for k, v in t.items()}
    r = collect(open_checkpoint(_write(tmp_path, t)), all_roles=True, workers=workers).report
    rows = {row["name"]: row for row in r["tensors"]}
    for name, a in arrays.items():
        assert (rows[name]["min"], rows[name]["max"]) == (int(a.min()), int(a.max())), name
    for group, names in ((next(row for row in r["layers"] if row["layer"] == 0), ("layers.0.a", "layers.0.b")),
                         (r["total"], tuple(arrays))):
        want = (min(int(arrays[n].min()) for n in names), max(int(arrays[n].max()) for n in names))
        assert (group["min"], group["max"]) == want, names
    assert f'"max": {int(arrays["layers.0.b"].max())},' in dumps(r)
