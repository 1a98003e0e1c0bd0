"""Runs of tiny tensors reduced together (analysis/stats/tiny.py): every row against numpy on the values torch
wrote, every group equal to the tensor-by-tensor path's (counts, min/max, histograms and so quantiles exactly,
moments to float64 rounding), the same bits whatever the workers, and the file's bytes checked as on any read."""
from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest

from ckptstat import open_checkpoint
from ckptstat.analysis.stats import collect, select
from ckptstat.analysis.stats import tiny as tiny_mod
from ckptstat.errors import CheckpointError

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

MOMENTS = ("mean", "std", "l2", "mean_abs")


def _tensors() -> dict[str, torch.Tensor]:
    """A MoE-like file: many tiny F16 / BF16 / F32 tensors over layers, norm gains, special values, an empty
    tensor, and a few tensors too big for a run between them."""
    g = torch.Generator().manual_seed(7)
    out: dict[str, torch.Tensor] = {}
    dtypes = (torch.float16, torch.bfloat16, torch.float32)
    for layer in range(6):
        p = f"model.layers.{layer}."
        out[p + "input_layernorm.weight"] = (1 + 0.01 * torch.randn(16, generator=g)).to(dtypes[layer % 3])
        for e in range(12):
            shape = (1,) if e % 4 == 0 else (e, 3)
            out[p + f"mlp.experts.{e}.w1.weight"] = torch.randn(*shape, generator=g).to(dtypes[(layer + e) % 3])
        out[p + "self_attn.q_proj.weight"] = torch.randn(96, 96, generator=g).to(dtypes[layer % 3])   # 18+ KiB
    special = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-45, 65504.0, -3.5])
    out["model.special.weight"] = special.to(torch.float32)
    out["model.special16.weight"] = special.to(torch.float16)
    out["model.specialbf.weight"] = special.to(torch.bfloat16)
    out["model.nan.weight"] = torch.full((5,), float("nan"), dtype=torch.float16)
    out["model.empty.weight"] = torch.zeros(0, dtype=torch.float32)
    out["model.norm.weight"] = torch.ones(16, dtype=torch.bfloat16)
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tiny") / "model.safetensors")
    t = _tensors()
    safetensors_torch.save_file(t, path)
    return path, t


def _report(path: str, **kw) -> dict:
    return collect(open_checkpoint(path), all_roles=True, **kw).report


def test_runs_are_formed(written):
    path, t = written
    ckpt = open_checkpoint(path)
    items, _ = select(ckpt, all_roles=True)
    names = [it.name for it in items]
    units = tiny_mod.units(ckpt, names, 1 << 20)
    assert [n for a, b in units for n in names[a:b]] == names   # every tensor once, in file order
    runs = [names[a:b] for a, b in units if b - a > 1]
    assert runs and sum(map(len, runs)) > len(names) // 2
    for a, b in units:
        if b - a > 1:
            assert all(tiny_mod.tiny(ckpt, ckpt[n]) for n in names[a:b])
    assert all([n] in [names[a:b] for a, b in units] for n in names if "q_proj" in n)   # never in a run


def test_rows_equal_numpy(written):
    path, t = written
    rows = {r["name"]: r for r in _report(path)["tensors"]}
    for name, tensor in t.items():
        if tensor.numel() == 0:
            continue
        r = rows[name]
        x = tensor.to(torch.float64).numpy().reshape(-1)
        f = x[np.isfinite(x)]
        assert (r["count"], r["finite"], r["nan"]) == (x.size, f.size, int(np.isnan(x).sum())), name
        assert (r["posinf"], r["neginf"], r["zeros"]) == (int((x == np.inf).sum()), int((x == -np.inf).sum()),
                                                          int((f == 0).sum())), name
        if not f.size:
            assert r["min"] is None and r["mean"] is None and all(v is None for v in r["quantiles"].values()), name
            continue
        assert (r["min"], r["max"]) == (f.min(), f.max()), name
        for k, want in (("mean", f.mean()), ("std", f.std()), ("mean_abs", np.abs(f).mean()),
                        ("l2", np.sqrt((f * f).sum()))):
            assert math.isclose(r[k], want, rel_tol=1e-12, abs_tol=1e-300), (name, k, r[k], want)
        if tensor.dtype != torch.float32:   # exact order statistics: numpy's own quantiles
            want = np.quantile(f, [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99])
            got = list(r["quantiles"].values())
            assert np.allclose(got, want, rtol=1e-12, atol=0), name
            assert r["quantiles_exact"], name


def test_rows_are_held_as_arrays_and_written_as_their_values(written):
    """A run's statistics stay numpy columns when joined with the single tensors' rows (core/table.py), and are
    written (JSON, CSV) as the dicts they read as would be: each value the float numpy computes from the tensor's
    values (as the numpy oracle above), None (null, an empty CSV cell) where a tensor has no finite value."""
    from ckptstat.analysis.stats import to_csv
    from ckptstat.core.jsontext import dumps

    path, t = written
    report = _report(path)
    rows = report["tensors"]
    for k in ("count", "finite", "min", "mean", "std", "zero_fraction", "quantiles_exact", "spread_z"):
        assert isinstance(rows.columns[k], np.ndarray), k
    assert isinstance(rows.columns["quantiles"].columns["p50"], np.ndarray)
    plain = [dict(r) for r in rows]   # a row's values: Python's, NaN read back as None
    assert all(type(r["min"]) in (float, type(None)) and type(r["count"]) is int for r in plain)
    by_name = {r["name"]: r for r in plain}
    x = t["model.layers.0.mlp.experts.0.w1.weight"].to(torch.float64).numpy()
    assert by_name["model.layers.0.mlp.experts.0.w1.weight"]["max"] == float(x.max())
    assert by_name["model.nan.weight"]["min"] is None and by_name["model.nan.weight"]["quantiles"]["p50"] is None
    assert dumps(report) == json.dumps({**report, "tensors": plain}, indent=2)
    assert to_csv(report) == to_csv({**report, "tensors": plain})


def _dictwriter_csv(report: dict) -> str:
    """`stats --csv` as the csv module's DictWriter writes the report's rows (the oracle of the columnar writer):
    a name made inert, a shape as AxB, flags joined by ';', None empty, text opening a formula quoted with `'`."""
    from ckptstat.analysis.stats import CSV_FIELDS
    from ckptstat.core.text import inert

    buf = io.StringIO()
    w = csv.DictWriter(buf, CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    levels = [("tensor", r["name"], r) for r in report["tensors"]]
    levels += [("layer", f"{r['bucket']}.{r['layer']}", r) for r in report["layers"]]
    levels += [("bucket", r["bucket"], r) for r in report["buckets"]] + [("total", "total", report["total"])]
    for level, name, r in levels:
        row = {k: v for k, v in r.items() if k in CSV_FIELDS}
        row.update(r["quantiles"], level=level, name=inert(name), flags=";".join(r.get("flags", [])))
        if "shape" in r:
            row["shape"] = "x".join(map(str, r["shape"]))
        w.writerow({k: "" if row.get(k) is None else
                    "'" + row[k] if isinstance(row[k], str) and row[k][:1] in "=+-@\t\r" and row[k] else row[k]
                    for k in CSV_FIELDS})
    return buf.getvalue()


def test_csv_is_what_a_dictwriter_of_the_rows_writes(written, monkeypatch):
    """`stats --csv` is written column by column, BLOCK rows a piece: the same text as csv.DictWriter fed the
    report's rows, in more than one piece when there are more rows than a block."""
    from ckptstat.analysis.stats import csv_pieces, csv_table, to_csv

    path, _ = written
    report = _report(path)
    assert to_csv(report) == _dictwriter_csv(report)
    monkeypatch.setattr(csv_table, "BLOCK", 7)
    pieces = list(csv_pieces(report))
    assert len(pieces) > len(report["tensors"]) // 7 and "".join(pieces) == _dictwriter_csv(report)


def test_equal_to_the_tensor_by_tensor_path(written, monkeypatch):
    """The same report with runs turned off (every tensor alone): exact but for the float64 moments."""
    path, _ = written
    runs = _report(path)
    monkeypatch.setattr(tiny_mod, "TINY_BYTES", 0)
    alone = _report(path)

    def same(a: dict, b: dict, where: str) -> None:
        assert {k: v for k, v in a.items() if k not in MOMENTS} == {k: v for k, v in b.items() if k not in MOMENTS}, where
        for k in MOMENTS:
            assert a[k] == b[k] or math.isclose(a[k], b[k], rel_tol=1e-12), (where, k, a[k], b[k])

    drop = ("seconds", "spread_z")
    for ra, rb in zip(runs["tensors"], alone["tensors"]):
        same({k: v for k, v in ra.items() if k not in drop}, {k: v for k, v in rb.items() if k not in drop}, ra["name"])
    for level in ("buckets", "layers"):
        assert len(runs[level]) == len(alone[level])
        for ra, rb in zip(runs[level], alone[level]):
            same(ra, rb, f"{level} {ra.get('bucket')} {ra.get('layer')}")
    same(runs["total"], alone["total"], "total")


@pytest.mark.parametrize("chunk", [64, 4096, 1 << 20])
def test_workers_give_the_same_bits(written, chunk):
    """Tasks are cut only between units, so every worker count forms the runs one process forms."""
    path, _ = written

    def text(workers: int) -> str:
        r = _report(path, workers=workers, chunk_bytes=chunk)
        r.pop("seconds"), r.pop("workers")
        return json.dumps(r, sort_keys=True, default=list)   # the rows: a core.table.Table

    assert text(2) == text(1)


def test_a_truncated_run_is_one_error(written, tmp_path):
    path, _ = written
    data = open(path, "rb").read()
    ckpt = open_checkpoint(path)
    first = next(t for t in ckpt if tiny_mod.tiny(ckpt, t))
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data)
    ckpt = open_checkpoint(str(cut))   # opened whole, then cut under it: the run's read must say so
    with open(cut, "r+b") as f:
        f.truncate((first.offset or 0) + 1)
    with pytest.raises(CheckpointError) as e:
        collect(ckpt, all_roles=True)
    assert e.value.path == str(cut)
