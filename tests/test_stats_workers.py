"""`stats --workers`: the sparse histograms that cross processes, and a pool's report against one process's.

Oracles: numpy's bincount of the bfloat16 keys (a float32's top 16 bits) of the concatenated values and
numpy.quantile over them, for the merges; the one-process report, byte for byte, for the pool (issue 22)."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from ckptstat import open_checkpoint
from ckptstat.analysis.stats import NBINS, Acc, GroupRow, _run_pool, collect, group_acc, new_acc, run_items, select, tables
from ckptstat.analysis.stats.kernel16 import acc_from_hist16


def _bf16_keys(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.int64)


def _parts() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(22)
    out: list[tuple[str, np.ndarray]] = []
    for i in range(6):
        x = (rng.standard_normal(2000 + 37 * i) * 10.0 ** rng.uniform(-4, 2)).astype(np.float32)
        x[:: 11 + i] = 0.0
        x[3] = -0.0
        out.append(("F32", x))
        out.append(("BF16", x))   # truncated to bfloat16 below
        out.append(("F16", x.astype(np.float16)))
    special = np.array([np.nan, np.inf, -np.inf, 1.5, -2.0], dtype=np.float32)
    out.append(("F32", special))
    return out


def _acc(dtype: str, x: np.ndarray) -> Acc:
    if dtype == "F32":
        acc = new_acc("F32")
        acc.update(x)
        return acc
    bits = x.view(np.uint16) if dtype == "F16" else (x.view(np.uint32) >> 16).astype(np.uint16)
    return acc_from_hist16(np.bincount(bits, minlength=NBINS), dtype)


def _finite_values(dtype: str, x: np.ndarray) -> np.ndarray:
    v = x.astype(np.float32)
    if dtype == "BF16":
        v = (v.view(np.uint32) & 0xFFFF0000).view(np.float32)
    return v[np.isfinite(v)]


def _tree(accs: list[Acc]) -> Acc:
    """Pairwise merges of sparse accumulators, each pair through pickle (as from a worker process)."""
    while len(accs) > 1:
        nxt = []
        for a, b in zip(accs[::2], accs[1::2]):
            m = Acc()
            m.merge(pickle.loads(pickle.dumps(a)))
            m.merge(pickle.loads(pickle.dumps(b)))
            nxt.append(m)
        accs = nxt + ([accs[-1]] if len(accs) % 2 else [])
    return accs[0]


def test_merged_histograms_equal_numpy_bincount_of_the_concatenation() -> None:
    parts = _parts()
    values = np.concatenate([_finite_values(d, x) for d, x in parts])
    want = np.bincount(_bf16_keys(values), minlength=NBINS)
    sequential, dense = Acc(), group_acc(("total",))
    for d, x in parts:
        sequential.merge(_acc(d, x))
        dense.merge(_acc(d, x))
    tree = _tree([_acc(d, x) for d, x in parts])
    backwards = Acc()
    for d, x in reversed(parts):
        backwards.merge(_acc(d, x))
    assert sequential.dense is None and tree.dense is None and dense.dense is not None
    value = tables("bf16")[0]
    for acc in (sequential, dense, tree, backwards):
        assert np.array_equal(acc.hist, want)
        keys, counts = acc.bins()   # the nonzero bins, by value
        assert np.all(counts > 0) and np.all(np.diff(value[keys]) >= 0) and counts.sum() == values.size
        assert acc.count == sum(x.size for _, x in parts) and acc.n == values.size
        assert acc.min == values.min() and acc.max == values.max()
        assert acc.quantiles((0.01, 0.5, 0.99)) == sequential.quantiles((0.01, 0.5, 0.99))
        assert acc.exact is False   # F32 values mixed in


def test_merged_bfloat16_quantiles_are_numpy_quantiles() -> None:
    """BF16 parts only: every value is its bin's, so the merged quantiles are numpy's exactly."""
    parts = [(d, x) for d, x in _parts() if d == "BF16"]
    values = np.concatenate([_finite_values(d, x) for d, x in parts]).astype(np.float64)
    ps = (0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 1.0)
    dense = group_acc(("bucket", "encoder"))
    for d, x in parts:
        dense.merge(_acc(d, x))
    for acc in (_tree([_acc(d, x) for d, x in parts]), dense):
        assert acc.exact
        assert acc.quantiles(ps) == pytest.approx([float(np.quantile(values, p)) for p in ps], rel=1e-15, abs=0)


def test_pickled_accumulator_keeps_big_counts() -> None:
    """Bins go over the wire as uint16 keys and uint32 counts, unless a count needs more."""
    for counts in ([5, 7], [5, 2 ** 33]):
        acc = Acc(count=sum(counts), n=sum(counts), hist_keys=np.array([0x3F80, 0x4000]),
                  hist_counts=np.array(counts, dtype=np.int64))
        back = pickle.loads(pickle.dumps(acc))
        assert back.hist_keys.dtype == np.int64 and back.hist_counts.dtype == np.int64
        assert back.hist_keys.tolist() == [0x3F80, 0x4000] and back.hist_counts.tolist() == counts


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> str:
    """Many small tensors, three dtypes a layer, some NaN and Inf: the tasks' boundaries cut layers."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(7)
    t = {"model.embed_tokens.weight": torch.randn(64, 33, generator=g).to(torch.bfloat16)}
    for i in range(24):
        p = f"model.layers.{i}"
        t[f"{p}.self_attn.q_proj.weight"] = (torch.randn(40, 41, generator=g) * 0.02 * (1 + i % 5)).to(torch.bfloat16)
        t[f"{p}.mlp.up_proj.weight"] = (torch.randn(30, 77, generator=g) * 0.05).to(torch.float16)
        t[f"{p}.input_layernorm.weight"] = 1 + torch.randn(41, generator=g) * 0.1
        if i == 5:
            t[f"{p}.input_layernorm.weight"][3] = float("nan")
            t[f"{p}.mlp.up_proj.weight"][0, 0] = float("inf")
    t["model.norm.weight"] = torch.ones(41, dtype=torch.bfloat16)
    path = str(tmp_path_factory.mktemp("many") / "many.safetensors")
    save_file(t, path)
    return path


def _json(report: dict) -> str:
    return json.dumps({k: v for k, v in report.items() if k not in ("seconds", "workers")}, indent=2,
                      default=list)   # the rows: a core.table.Table


@pytest.mark.parametrize("chunk", [1000, 1 << 20])
def test_pool_report_is_the_one_process_report(many: str, chunk: int) -> None:
    ckpt = open_checkpoint(many)
    one = _json(collect(ckpt, all_roles=True, chunk_bytes=chunk, workers=1).report)
    for workers in (2, 3):
        assert _json(collect(ckpt, all_roles=True, chunk_bytes=chunk, workers=workers).report) == one, workers


def test_finished_layers_are_their_rows(tmp_path) -> None:
    """run_items(finish=...) turns each layer into its row once its last tensor is in: the same row the
    accumulator gives, without the histogram (a file of many layers holds only the open layers' counts)."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(5)
    path = str(tmp_path / "layers.safetensors")
    save_file({f"model.layers.{i}.{w}.weight": torch.randn(30, 7, generator=g).to(dt)
               for i in range(12) for w, dt in (("q", torch.bfloat16), ("k", torch.float16), ("v", torch.float32))}, path)
    ckpt = open_checkpoint(path)
    items, _ = select(ckpt)
    rows, kept = run_items(ckpt, items, 1 << 20)
    rows2, done = run_items(ckpt, items, 1 << 20, finish={("layer", "encoder", i) for i in range(12)} | {("total",)})
    assert rows2 == rows and set(done) == set(kept)
    for key, g2 in done.items():
        if key[0] == "layer":
            assert isinstance(g2, GroupRow) and g2.row() == kept[key].row() and g2.tensors == 3
        else:   # only layers are finished
            assert isinstance(g2, Acc)


def test_open_layers_go_dense_within_the_cap(tmp_path, monkeypatch) -> None:
    """A layer's accumulator is made dense once it holds DENSE_AFTER tensors while fewer than DENSE_LAYERS are (a MoE
    layer's hundreds of merges, each then a scatter-add); the others stay sparse. Integer counts: the same
    histograms and the same report as with every layer sparse, in one process and in a pool. (safetensors orders
    tensors by dtype, then name: the layers of a mixed-dtype file are all open at once.)"""
    import torch
    from safetensors.torch import save_file

    from ckptstat.analysis import stats

    g = torch.Generator().manual_seed(11)
    dtypes = (torch.bfloat16, torch.float16, torch.float32)
    t = {f"model.layers.{i}.mlp.experts.{e}.{w}.weight": (torch.randn(100, 90, generator=g) * 0.02).to(dtypes[e % 3])
         for i in range(6) for e in range(8) for w in ("gate_proj", "down_proj")}
    t["model.layers.2.mlp.experts.4.gate_proj.weight"][0, 0] = float("nan")
    path = str(tmp_path / "moe.safetensors")
    save_file(t, path)
    ckpt = open_checkpoint(path)
    items, _ = select(ckpt)
    monkeypatch.setattr(stats, "DENSE_LAYERS", 4)
    _, groups = run_items(ckpt, items, 1 << 20)   # (no `finish`: every layer stays open)
    layers = {k: a for k, a in groups.items() if k[0] == "layer"}
    per_layer = len(t) // 6
    assert len(layers) == 6 and all(a.tensors == per_layer > stats.DENSE_AFTER for a in layers.values())
    assert sum(a.dense is not None for a in layers.values()) == 4
    with_dense = {k: (a.hist.copy(), a.row()) for k, a in layers.items()}
    report = {w: _json(collect(ckpt, workers=w).report) for w in (1, 2)}
    monkeypatch.setattr(stats, "DENSE_LAYERS", 0)
    _, sparse = run_items(ckpt, items, 1 << 20)
    assert all(sparse[k].dense is None for k in layers)
    for k, (hist, row) in with_dense.items():
        assert np.array_equal(sparse[k].hist, hist) and sparse[k].row() == row
    assert report[1] == report[2] == _json(collect(ckpt, workers=1).report)


def test_pool_finishes_whole_layers_in_the_workers(tmp_path) -> None:
    """A layer wholly inside one task comes back as its row; a layer a task boundary cuts, as accumulators;
    the report is the one process's either way. (One dtype: safetensors orders tensors by dtype, then name.)"""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(3)
    path = str(tmp_path / "uniform.safetensors")
    save_file({f"model.layers.{i}.{w}.weight": torch.randn(96, 96, generator=g).to(torch.bfloat16)
               for i in range(30) for w in ("q", "k", "v")}, path)
    ckpt = open_checkpoint(path)
    items, _ = select(ckpt)
    _, groups = _run_pool(ckpt, items, 1 << 20, 2, None)
    layers = [g for k, g in groups.items() if k[0] == "layer"]
    assert len(layers) == 30
    assert any(isinstance(g, GroupRow) for g in layers) and any(isinstance(g, Acc) for g in layers)
    assert all(isinstance(groups[k], Acc) for k in groups if k[0] != "layer")
    assert _json(collect(ckpt, workers=2).report) == _json(collect(ckpt, workers=1).report)


def test_linux_workers_fork_and_inherit_the_open_checkpoint(monkeypatch) -> None:
    # Python 3.14 made forkserver Linux's default: the pool asks for fork there, so a worker reuses the parent's
    # parsed checkpoint instead of opening it again (elsewhere, the platform's default and a reopen)
    import multiprocessing as mp
    import sys

    from ckptstat.analysis import stats
    asked: list[str | None] = []
    real = mp.get_context
    monkeypatch.setattr(mp, "get_context", lambda method=None: asked.append(method) or real(method))
    monkeypatch.setattr(sys, "platform", "linux")
    assert stats.pool_context().get_start_method() == "fork"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert stats.pool_context().get_start_method() == mp.get_start_method()
    assert asked == ["fork", None]   # (on this Linux machine the default is fork too: what was asked for tells)
