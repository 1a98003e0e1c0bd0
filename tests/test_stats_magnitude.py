"""`ckptstat stats` moments of float64 values of any magnitude (analysis/stats/accumulate.py, MOMENT_RULE): values
near float64's max, whose squares and sums overflow, and subnormals, whose squares underflow, through every path
(one tensor, chunks, the tiny-tensor runs, the groups, --workers 2).

Oracles: numpy over the values the writers (safetensors.numpy, torch.save, onnx) were given, each set scaled by
the power of two of its largest |x| first (np.ldexp: exact), so that numpy's own sums neither overflow nor
underflow, and the result scaled back (math.ldexp)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
from conftest import fixture
from safetensors.numpy import save_file

from ckptstat import open_checkpoint
from ckptstat.analysis.stats import collect

MOMENTS = ("mean", "std", "mean_abs", "l2")


def _oracle(values: list[np.ndarray]) -> dict[str, float]:
    """mean, population std, mean |x| and L2 norm of the finite values, by numpy on values scaled by 2^-k."""
    v = np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1) for a in values])
    v = v[np.isfinite(v)]
    top = float(np.abs(v).max())
    k = math.frexp(top)[1] if top else 0
    y = np.ldexp(v, -k)
    return {"mean": math.ldexp(float(np.mean(y)), k), "std": math.ldexp(float(np.std(y)), k),
            "mean_abs": math.ldexp(float(np.mean(np.abs(y))), k), "l2": math.ldexp(float(np.linalg.norm(y)), k)}


def _check(row: dict, values: list[np.ndarray], what: str) -> None:
    want = _oracle(values)
    for f in MOMENTS:
        assert math.isfinite(row[f]), (what, f, row[f])
        assert row[f] == pytest.approx(want[f], rel=1e-12, abs=0.0), (what, f)


def _values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(64)
    mixed = rng.standard_normal(6000)
    mixed[5000::97] = rng.standard_normal(11) * 1e305   # ordinary chunks first, then huge ones
    return {
        "model.layers.0.huge.weight": rng.standard_normal(20000) * 1e300 + 3e299,   # many chunks
        "model.layers.0.pair.weight": np.array([1e308, 1e308]),          # mean 1e308: the sum overflows
        "model.layers.0.sym.weight": np.array([1e300, -1e300]),          # std 1e300: the squares overflow
        "model.layers.0.four.weight": np.full(4, 1e300),                 # l2 2e300
        "model.layers.1.mixed.weight": mixed,
        "model.layers.1.tiny32.weight": (rng.standard_normal(300) * 3e37).astype(np.float32),   # a tiny-tensor run
        "model.layers.1.tiny32b.weight": rng.standard_normal(40).astype(np.float32),
        "model.layers.1.big32.weight": rng.standard_normal(9000).astype(np.float32),
        "model.layers.2.sub.weight": rng.standard_normal(3000) * 1e-310,   # subnormal: squares underflow
        "model.layers.2.small.weight": rng.standard_normal(500) * 1e-200,
        "model.layers.2.special.weight": np.array([np.nan, 1e300, np.inf, -3e299, -np.inf, 0.0]),
    }


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[str, dict[str, np.ndarray]]:
    t = _values()
    path = str(tmp_path_factory.mktemp("mag") / "model.safetensors")
    save_file(t, path)
    return path, t


def _check_report(report: dict, t: dict[str, np.ndarray]) -> None:
    """Every tensor's row, every layer's and bucket's, and the total against numpy over their values."""
    rows = list(report["tensors"])   # a Table of row dicts, or JSON's list of them
    for r in rows:
        _check(r, [t[r["name"]]], r["name"])
    for lay in report["layers"]:
        _check(lay, [t[r["name"]] for r in rows if (r["bucket"], r["layer"]) == (lay["bucket"], lay["layer"])],
               f"layer {lay['layer']}")
    for b in report["buckets"]:
        _check(b, [t[r["name"]] for r in rows if r["bucket"] == b["bucket"]], b["bucket"])
    _check(report["total"], list(t.values()), "total")


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("chunk", [64, 4096, 1 << 22])
def test_huge_and_subnormal_float64_moments_match_numpy(written, chunk, workers):
    path, t = written
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no overflow / underflow RuntimeWarning on the way
        report = collect(open_checkpoint(path), chunk_bytes=chunk, workers=workers).report
    _check_report(report, t)


def test_torch_save_float64(tmp_path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(65)
    t = {"w.weight": rng.standard_normal(3000) * 1e306, "b.weight": np.array([1e308, 1.2e308, -0.5e308])}
    over = np.array([1.7e308, 1.7e308])   # its L2 norm, 2.4e308, is beyond float64: reported inf
    path = str(tmp_path / "model.pt")
    torch.save({**{k: torch.from_numpy(v) for k, v in t.items()}, "over.weight": torch.from_numpy(over)}, path)
    rows = {r["name"]: r for r in collect(open_checkpoint(path), chunk_bytes=512).report["tensors"]}
    for name, v in t.items():
        _check(rows[name], [v], name)
    r = rows["over.weight"]
    assert (r["mean"], r["std"], r["mean_abs"], r["l2"]) == (float(over[0]), 0.0, float(over[0]), math.inf)


def _onnx_values(path: str) -> dict[str, np.ndarray]:
    """Every initializer, sparse initializer (densified) and Constant of the model, by onnx's numpy_helper."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    m = onnx.load(path, load_external_data=False)
    out = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    for s in m.graph.sparse_initializer:
        dense = np.zeros(math.prod(s.dims))
        dense[numpy_helper.to_array(s.indices).reshape(-1)] = numpy_helper.to_array(s.values)
        out[s.values.name] = dense
    for nd in m.graph.node:
        if nd.op_type == "Constant":
            out[nd.output[0]] = numpy_helper.to_array(nd.attribute[0].t).astype(np.float64)
    return out


def test_onnx_fixture_float64_std_is_finite_and_numpys():
    """The bug: fixtures/onnx/dtypes.onnx holds a float64 1e300; its tensor's, bucket's and total's std were NaN
    and numpy printed an overflow RuntimeWarning on stderr."""
    path = fixture("onnx", "dtypes.onnx")
    t = _onnx_values(path)
    proc = subprocess.run([sys.executable, "-m", "ckptstat", "stats", path, "--json", "--no-progress"],
                          capture_output=True, text=True, check=True)
    assert "Warning" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    names = [r["name"] for r in report["tensors"]]
    assert "field.f64" in names
    _check_report(report, {n: t[n] for n in names})


def _quantile_bound_ok(got: float | None, ordered: np.ndarray, p: float) -> bool:
    """QUANTILE_RULE for one level: within 2^-8 of the larger order statistic (+2^-133, and 2^-24 for float64's
    rounding to float32) of numpy's exact quantile, or null where an order statistic is beyond float32's range."""
    h = (ordered.size - 1) * p
    i = int(math.floor(h))
    j = min(i + 1, ordered.size - 1)
    top = max(abs(ordered[i]), abs(ordered[j]))
    if got is None:
        return top >= 2.0 ** 128
    want = float(np.quantile(ordered, p))
    return abs(got - want) <= (2.0 ** -8 + 2.0 ** -23) * top + 2.0 ** -133


def test_float64_quantiles_beyond_float32_range(tmp_path):
    """The bug: float64 values beyond float32's range (|x| >= 2^128, ~3.4e38) were keyed as +-FLT_MAX, so a quantile
    among them read ~3.4e38 where numpy's is 1e300: far outside the stated bound. A quantile whose order statistics
    lie there is null now, every other within the bound; and `plot --clip 0` draws them (min..max, wider than float64's
    max, made numpy's histogram fail: "internal error: ValueError: Too many bins for data range")."""
    t = {"model.layers.0.w.weight": np.array([1e300, 2e300, -3e300, 1.0, 2.0, 3.0, 4.0, 5.0]),
         "model.layers.0.v.weight": np.linspace(-1e39, 1e39, 101),
         "model.layers.1.x.weight": np.array([1e308, -1e308, 0.5])}   # min..max is wider than float64's max
    path = str(tmp_path / "model.safetensors")
    save_file(t, path)
    report = collect(open_checkpoint(path)).report
    groups = [(r, [t[r["name"]]]) for r in report["tensors"]] + [(report["total"], list(t.values()))]
    for row, values in groups:
        ordered = np.sort(np.concatenate(values))
        for p, (k, got) in zip((0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99), row["quantiles"].items()):
            assert _quantile_bound_ok(got, ordered, p), (row.get("name"), k, got, float(np.quantile(ordered, p)))
    w = next(r for r in report["tensors"] if r["name"] == "model.layers.0.w.weight")
    assert w["quantiles"]["p50"] is not None and w["quantiles"]["p99"] is None
    pytest.importorskip("matplotlib")
    out = tmp_path / "w.png"
    for clip in ("0", "0.1"):
        proc = subprocess.run([sys.executable, "-m", "ckptstat", "plot", path, "-o", str(out), "--clip", clip],
                              capture_output=True, text=True)
        assert proc.returncode == 0 and out.exists(), proc.stderr
        assert "Warning" not in proc.stderr and "error" not in proc.stderr, proc.stderr
