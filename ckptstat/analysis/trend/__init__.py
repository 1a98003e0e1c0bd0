"""`ckptstat trend RUN_DIR`: what changed across the checkpoints of a training run, per tensor, layer and bucket.

Each step's parameter tensors are streamed beside the previous step's and the first step's (diff's `aligned`:
one chunk of each held at a time), in float64; every figure comes from mergeable sums (count, sum, sum of squares,
max), so a layer's or a bucket's figure is the one of its tensors' elements taken together, and any number of
worker processes (one step per task) gives the same bits. Names are aligned across steps as `diff` aligns them
(wrapper prefixes such as DeepSpeed's `module.` or Lightning's `state_dict.` stripped). Adam's second moments
(`exp_avg_sq`, where a step's checkpoint holds the optimizer state: formats/training.py) are summarised per step,
and per layer and bucket where the optimizer names the parameter it belongs to. One step's sums: steps.py; the
report from them: here. docs/training.md."""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...core import Checkpoint
from ...core.pools import sigint_deferred, worker_signals
from ...core.tensor import DEFAULT_CHUNK_BYTES
from ...errors import CkptstatError, UsageError
from ...formats.registry import open_checkpoint
from ...naming import BUCKETS
from ..diff import natural_key
from ..stats import Item, pool_context
from .find import Step, discover
from .steps import SECOND_MOMENT, Moments, Plan, Sums, plan, step_result

TREND_SCHEMA = "ckptstat.trend/1"
JUMP_FACTOR = 10.0   # a jump: relative change since the previous step > JUMP_FACTOR x the median of the group's earlier ones
JUMP_HISTORY = 2     # ... of at least this many earlier steps, with a median above 0
MAX_VALUES = 500     # non-tensor values that change across the steps, listed (the rest counted)
CONVENTIONS = {
    "norm": "L2 norm of the step's values, float64 (a group: of all its tensors' elements together)",
    "rel_prev": "||w_t - w_(t-1)|| / ||w_(t-1)||, relative L2 change since the previous checkpoint",
    "rel_first": "||w_t - w_0|| / ||w_0||, relative L2 change since the first checkpoint",
    "max_abs_prev": "max |w_t - w_(t-1)| over elements", "max_abs_first": "max |w_t - w_0| over elements",
    "update_ratio": "std(w_t - w_(t-1)) / std(w_(t-1)), population std (ddof=0): the update-to-weight ratio",
    "frozen": "a tensor (or layer) whose values never change: w_t == w_0 element for element at every step",
    "dead": "a tensor (or layer) whose elements are all exactly 0 at the last step",
    "jump": f"rel_prev at a step > {JUMP_FACTOR:g} x the median of the same group's rel_prev at its earlier steps "
            f"(at least {JUMP_HISTORY} of them, median > 0)",
    "second_moment": f"Adam's {SECOND_MOMENT} (v): its mean, max and mean sqrt(v) (the update's denominator) per step; "
                     "per layer and bucket only for the state attributed to a parameter (`mapping`: named in the file, "
                     "or an order derived and shape-checked; docs/training.md)",
    "nonfinite": "elements that are NaN or Inf at the step, the previous or the first are counted and left out",
}


def _std(m2: float, n: int) -> float:
    return math.sqrt(m2 / n) if n else 0.0


def _ratio(a: float, b: float) -> float | None:
    """a / b; None where b is 0 or either is not finite (float64 values above ~1e154 overflow the sums of squares:
    inf / inf was NaN in the report)."""
    return a / b if b > 0 and math.isfinite(a) and math.isfinite(b) else None


_W: dict[str, Any] = {}


def _worker(t: int) -> tuple:
    try:
        return ("ok", t, *step_result(dict(enumerate(_W["ckpts"])), _W["plan"], t, _W["chunk"]))
    except CkptstatError as e:   # the tree's exceptions take extra __init__ args: sent as data
        return ("error", t, type(e).__name__, getattr(e, "path", None), getattr(e, "reason", str(e)))


def _run(ckpts: list[Checkpoint], p: Plan, chunk_bytes: int, workers: int,
         progress: Callable[[int, int], None] | None, scheduler: Any = None) -> list[tuple[dict[str, Sums], list]]:
    if scheduler is not None:   # the steps read on a Dask cluster (analysis/trend/cluster.py)
        from .cluster import run_dask

        return run_dask(p, chunk_bytes, scheduler, progress)
    n = len(ckpts)
    results: list[Any] = [None] * n
    if workers <= 1:
        for t in range(n):
            results[t] = step_result(dict(enumerate(ckpts)), p, t, chunk_bytes)
            if progress:
                progress(t + 1, n)
        return results
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    from ..stats.cluster import raise_task_error  # (dask is imported on --scheduler only)

    ctx = pool_context()
    if ctx.get_start_method() != "fork":
        raise UsageError("trend --workers needs the fork start method (Linux); use --workers 1")
    _W.update(ckpts=ckpts, plan=p, chunk=chunk_bytes)
    try:
        with ProcessPoolExecutor(min(workers, n), mp_context=ctx, initializer=worker_signals) as pool:
            with sigint_deferred():   # (the first submit forks the workers)
                futs = [pool.submit(_worker, t) for t in range(n)]
            for done, fut in enumerate(as_completed(futs), 1):
                try:
                    res = fut.result()
                except BrokenProcessPool:
                    raise CkptstatError(f"{p.steps[0].path}: a trend worker process died (killed, or out of memory?); "
                                        "no report") from None
                if res[0] == "error":
                    raise_task_error(*res[2:])
                results[res[1]] = res[2:]
                if progress:
                    progress(done, n)
    finally:
        _W.clear()
    return results


# ------------------------------------------------------------------------------------------ the report
GroupKey = tuple   # ("total",) | ("bucket", b) | ("layer", b, n)


def _groups(it: Item) -> list[GroupKey]:
    g: list[GroupKey] = [("total",), ("bucket", it.bucket)]
    return g + ([("layer", it.bucket, it.layer)] if it.layer is not None else [])


def _row(step: Step, t: int, s: Sums) -> dict:
    r: dict[str, Any] = {"step": step.step, "elements": s.n, "norm": math.sqrt(s.qw), "zeros": s.zeros,
                         "nonfinite": s.nonfinite}
    if t:
        r.update(rel_prev=_ratio(math.sqrt(s.qd), math.sqrt(s.qp)), max_abs_prev=s.md,
                 rel_first=_ratio(math.sqrt(s.qf), math.sqrt(s.q0)) if t > 1 else _ratio(math.sqrt(s.qd), math.sqrt(s.qp)),
                 max_abs_first=s.mf if t > 1 else s.md,
                 update_ratio=_ratio(_std(s.cd, s.n), _std(s.cp, s.n)))
    else:
        r.update(rel_prev=None, max_abs_prev=None, rel_first=None, max_abs_first=None, update_ratio=None)
    return r


def _jumps(label: str, series: list[dict]) -> list[dict]:
    out = []
    for i, r in enumerate(series):
        earlier = [x["rel_prev"] for x in series[:i] if x["rel_prev"] is not None]
        if r["rel_prev"] is None or len(earlier) < JUMP_HISTORY:
            continue
        med = float(np.median(earlier))
        if med > 0 and r["rel_prev"] > JUMP_FACTOR * med:
            out.append({"group": label, "step": r["step"], "rel_prev": r["rel_prev"], "median_before": med,
                        "factor": r["rel_prev"] / med})
    return out


def _flags(series: list[dict]) -> list[str]:
    moved = [r for r in series if r["max_abs_first"] is not None]
    out = ["frozen"] if moved and all(r["max_abs_first"] == 0 and not r["nonfinite"] for r in moved) else []
    last = series[-1]
    return out + (["dead"] if last["elements"] and last["zeros"] == last["elements"] else [])


def _label(key: GroupKey) -> str:
    return "total" if key[0] == "total" else key[1] if key[0] == "bucket" else f"{key[1]}.{key[2]}"


def changing_values(ckpts: list[Checkpoint]) -> tuple[list[dict], int]:
    """The non-tensor values (`objects`: an epoch, a learning rate in param_groups, a callback's best score) that are not
    the same at every step: [{name, series (each step's value, None where it has none), changes (steps whose value is
    not the previous step's)}], the shallowest names first (`epoch`, `global_step` before Lightning's loop counters),
    at most MAX_VALUES, and how many more."""
    names = sorted({n for c in ckpts for n in c.objects}, key=lambda n: (n.count("."), natural_key(n)))
    out = []
    for name in names:
        series = [c.object_value(name) for c in ckpts]
        changes = sum(a != b for a, b in zip(series, series[1:]))
        if changes:
            out.append({"name": name, "series": series, "changes": changes})
    return out[:MAX_VALUES], max(len(out) - MAX_VALUES, 0)


def build(p: Plan, results: list[tuple[dict[str, Sums], list]], layout: str, paths: list[str], chunk_bytes: int,
          workers: int, seconds: float, meta: list[dict], values: tuple[list[dict], int] = ([], 0)) -> dict:
    steps = p.steps
    tensors: list[dict[str, Any]] = []
    groups: dict[GroupKey, list[Sums]] = {}
    for key in sorted(p.items, key=natural_key):
        it = p.items[key]
        series = [_row(steps[t], t, results[t][0][key]) for t in range(len(steps))]
        tensors.append({"name": it.name, "bucket": it.bucket, "layer": it.layer, "series": series, "flags": _flags(series)})
        for g in _groups(it):
            per = groups.setdefault(g, [Sums() for _ in steps])
            for t in range(len(steps)):
                per[t].merge(results[t][0][key])
    rows: dict[GroupKey, dict[str, Any]] = {}
    for g, per in groups.items():
        series = [_row(steps[t], t, per[t]) for t in range(len(steps))]
        rows[g] = {"tensors": sum(1 for k in p.items if g in _groups(p.items[k])), "series": series, "flags": _flags(series)}
    jumps = [j for g in sorted(rows, key=_order) for j in _jumps(_label(g), rows[g]["series"])]
    optimizer: list[dict | None] = []
    for t, (_, moms) in enumerate(results):
        if not moms:
            optimizer.append(None)
            continue
        total, by_group = Moments(), dict[GroupKey, Moments]()
        for key, m in moms:
            total.merge(m)
            if key is not None:
                for g in _groups(p.items[key]):
                    by_group.setdefault(g, Moments()).merge(m)
        total.tensors = len(p.second[t])   # tensors, whatever their slices
        optimizer.append({"step": steps[t].step, **total.row(), "attributed": sum(1 for k, _ in moms if k is not None),
                          "mapping": p.mapping[t] if p.mapping else [],
                          "groups": [{"group": _label(g), **by_group[g].row()} for g in sorted(by_group, key=_order)]})
    bucket_order = {b: i for i, b in enumerate(BUCKETS)}
    return {
        "schema": TREND_SCHEMA, "paths": paths, "layout": layout, "chunk_bytes": chunk_bytes, "workers": workers,
        "seconds": seconds, "conventions": CONVENTIONS,
        "steps": [{"step": s.step, "label": s.label, "path": s.path, **m} for s, m in zip(steps, meta)],
        "total": rows.get(("total",)),
        "buckets": [{"bucket": g[1], **rows[g]} for g in sorted((g for g in rows if g[0] == "bucket"),
                                                               key=lambda g: bucket_order.get(g[1], len(BUCKETS)))],
        "layers": [{"bucket": g[1], "layer": g[2], **rows[g]} for g in sorted((g for g in rows if g[0] == "layer"), key=_order)],
        "tensors": tensors,
        "frozen": [x["name"] for x in tensors if "frozen" in x["flags"]],
        "dead": [x["name"] for x in tensors if "dead" in x["flags"]],
        "frozen_layers": [_label(g) for g in sorted(rows, key=_order) if g[0] == "layer" and "frozen" in rows[g]["flags"]],
        "dead_layers": [_label(g) for g in sorted(rows, key=_order) if g[0] == "layer" and "dead" in rows[g]["flags"]],
        "jumps": jumps,
        "optimizer": optimizer,
        "values": values[0],
        "values_left_out": values[1],
        "skipped": p.skipped,
    }


def _order(g: GroupKey) -> tuple:
    return ({"total": 0, "bucket": 1, "layer": 2}[g[0]], *(natural_key(str(x)) for x in g[1:]))


FACTORED = ("exp_avg_sq_row", "exp_avg_sq_col")   # Adafactor's factored second moments (transformers' Adafactor)


def step_meta(ckpt: Checkpoint) -> dict:
    """What the step's checkpoint says of its training (formats/training.py): format, learning rate, epoch, and how
    many second moments are Adafactor's factored rows and columns, which the v summary leaves out."""
    info = ckpt.training or {}
    return {"format": ckpt.format, "learning_rate": info.get("learning_rate"), "epoch": info.get("epoch"),
            "global_step": info.get("global_step"), "factored_second_moments": sum(n.endswith(FACTORED) for n in ckpt.tensors)}


def trend(paths: list[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES, workers: int = 1,
          progress: Callable[[int, int], None] | None = None, scheduler: Any = None) -> dict:
    """The trend report (schema ckptstat.trend/1) of a run folder or a list of checkpoints; `scheduler`: a Dask
    scheduler address (or Client) to read the steps on."""
    if chunk_bytes < 8:
        raise UsageError(f"chunk size must be at least 8 bytes, got {chunk_bytes}")
    if workers < 0:
        raise UsageError(f"--workers must be >= 0, got {workers}")
    workers = workers or (os.cpu_count() or 1)
    steps, layout, left_out = discover(paths)
    t0 = time.perf_counter()
    ckpts = [open_checkpoint(s.path) for s in steps]
    try:
        p = plan(ckpts, steps)
        if not p.items:
            raise UsageError(f"{paths[0]}: no parameter tensor is in every checkpoint of the run")
        p.skipped[:0] = left_out
        results = _run(ckpts, p, chunk_bytes, workers, progress, scheduler)
        return build(p, results, layout, paths, chunk_bytes, workers, time.perf_counter() - t0,
                     [step_meta(c) for c in ckpts], changing_values(ckpts))
    finally:
        for c in ckpts:
            c.close()
