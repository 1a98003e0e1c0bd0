"""`ckptstat trend RUN_DIR`: what changed across the checkpoints of a training run, per tensor, layer and bucket.

Each step's parameter tensors are streamed beside the previous step's and the first step's (diff's `aligned`:
one chunk of each held at a time), in float64; every figure comes from mergeable sums (count, sum, sum of squares,
max), so a layer's or a bucket's figure is the one of its tensors' elements taken together, and any number of
worker processes (one step per task) gives the same bits. Names are aligned across steps as `diff` aligns them
(wrapper prefixes such as DeepSpeed's `module.` or Lightning's `state_dict.` stripped). Adam's second moments
(`exp_avg_sq`, where a step's checkpoint holds the optimizer state: formats/training.py) are summarised per step,
and per layer and bucket where the optimizer names the parameter it belongs to. docs/training.md."""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ...census import placements
from ...core import Checkpoint
from ...core.tensor import DEFAULT_CHUNK_BYTES
from ...errors import CkptstatError, UsageError
from ...formats.registry import open_checkpoint
from ...naming import BUCKETS
from ..diff import align, aligned, natural_key
from ..stats import Item, pool_context, select
from .find import Step, discover

TREND_SCHEMA = "ckptstat.trend/1"
JUMP_FACTOR = 10.0   # a jump: relative change since the previous step > JUMP_FACTOR x the median of the group's earlier ones
JUMP_HISTORY = 2     # ... of at least this many earlier steps, with a median above 0
SECOND_MOMENT = "exp_avg_sq"   # torch.optim.Adam/AdamW's state (torch/optim/adam.py), as DeepSpeed and Lightning save it
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
                     "per layer and bucket only for the state the optimizer names a parameter for",
    "nonfinite": "elements that are NaN or Inf at the step, the previous or the first are counted and left out",
}


@dataclass
class Sums:
    """Mergeable sums of one tensor or group at one step: the values w, the change since the previous step d and
    since the first f (d and f: zero at the first step)."""
    n: int = 0
    zeros: int = 0
    nonfinite: int = 0
    sw: float = 0.0
    qw: float = 0.0
    sp: float = 0.0   # the previous step's values, over the same elements (for the update ratio)
    qp: float = 0.0
    sd: float = 0.0
    qd: float = 0.0
    md: float = 0.0
    qf: float = 0.0
    q0: float = 0.0   # the first step's values' sum of squares, over the same elements
    mf: float = 0.0

    def merge(self, o: Sums) -> None:
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(o, f.name)
            setattr(self, f.name, max(a, b) if f.name in ("md", "mf") else a + b)


@dataclass
class Moments:
    """Mergeable sums of Adam second moments v."""
    n: int = 0
    sv: float = 0.0
    sr: float = 0.0   # sum of sqrt(v)
    mx: float = 0.0
    tensors: int = 0

    def merge(self, o: Moments) -> None:
        self.n, self.sv, self.sr, self.tensors = self.n + o.n, self.sv + o.sv, self.sr + o.sr, self.tensors + o.tensors
        self.mx = max(self.mx, o.mx)

    def row(self) -> dict:
        return {"tensors": self.tensors, "elements": self.n, "mean": self.sv / self.n if self.n else None,
                "max": self.mx if self.n else None, "mean_sqrt": self.sr / self.n if self.n else None}


def _std(s: float, q: float, n: int) -> float:
    return math.sqrt(max(q / n - (s / n) ** 2, 0.0)) if n else 0.0


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def tensor_sums(cur: Checkpoint, name: str, prev: tuple[Checkpoint, str] | None,
                first: tuple[Checkpoint, str] | None, chunk_bytes: int) -> Sums:
    """One tensor at one step, streamed beside the previous and the first step's (None at the first step)."""
    streams = [cur.iter_chunks(name, chunk_bytes)]
    for other in (prev, first):
        if other is not None:
            streams.append(other[0].iter_chunks(other[1], chunk_bytes))
    s = Sums()
    with np.errstate(invalid="ignore", over="ignore"):
        for pieces in aligned(*streams):
            w = pieces[0].astype(np.float64)
            p = pieces[1].astype(np.float64) if len(pieces) > 1 else w
            f = pieces[2].astype(np.float64) if len(pieces) > 2 else w
            ok = np.isfinite(w) & np.isfinite(p) & np.isfinite(f)
            if not ok.all():
                s.nonfinite += int(w.size - np.count_nonzero(ok))
                w, p, f = w[ok], p[ok], f[ok]
            d, g = w - p, w - f
            s.n += w.size
            s.zeros += int(w.size - np.count_nonzero(w))
            s.sw += float(w.sum())
            s.qw += float(np.dot(w, w))
            s.sp += float(p.sum())
            s.qp += float(np.dot(p, p))
            s.sd += float(d.sum())
            s.qd += float(np.dot(d, d))
            s.qf += float(np.dot(g, g))
            s.q0 += float(np.dot(f, f))
            if w.size:
                s.md = max(s.md, float(np.max(np.abs(d))))
                s.mf = max(s.mf, float(np.max(np.abs(g))))
    return s


Segment = tuple[str | None, int, int]   # (the aligned key of the parameter or None, first element, elements)


def moments(ckpt: Checkpoint, name: str, segments: Sequence[Segment], chunk_bytes: int) -> list[tuple[str | None, Moments]]:
    """The tensor's second moments, summed per segment (a whole tensor is one; a ZeRO flat partition one per
    parameter slice, the gaps between them unattributed), streamed."""
    out = [(key, Moments(tensors=1)) for key, _, _ in segments]
    pos = 0
    for chunk in ckpt.iter_chunks(name, chunk_bytes):
        for (_, start, count), (_, m) in zip(segments, out):
            a, b = max(start, pos), min(start + count, pos + chunk.size)
            if a >= b:
                continue
            v = chunk[a - pos:b - pos].astype(np.float64)
            v = v[np.isfinite(v)]
            m.n += v.size
            m.sv += float(v.sum())
            m.sr += float(np.sqrt(np.maximum(v, 0.0)).sum())
            if v.size:
                m.mx = max(m.mx, float(v.max()))
        pos += chunk.size
    return out


# ------------------------------------------------------------------------------------------ one step
@dataclass
class Plan:
    """What every step reads: the tracked parameters (aligned key -> Item of the first step) and, per step, the
    checkpoint's name of each key, and its second-moment tensors with the key of the parameter each belongs to."""
    steps: list[Step]
    items: dict[str, Item]
    names: list[dict[str, str]]
    second: list[list[tuple[str, list[Segment]]]]
    skipped: list[dict] = field(default_factory=list)


def _second_moments(ckpt: Checkpoint, keys: dict[str, str]) -> list[tuple[str, list[Segment]]]:
    """Each Adam second moment in the checkpoint and its segments. Its parameter: the one the reader names for its
    state (Checkpoint.optimizer_params: param_groups' param_names), or the one whose key ends the state's name (FSDP
    and DCP key the state by the parameter's name); a ZeRO flat partition: each parameter's slice of it
    (Checkpoint.optimizer_fragments)."""
    place = placements(ckpt)
    by_name = {n: k for k, n in keys.items()}
    out = []
    for t in ckpt:
        if place[t.name].role != "optimizer" or not t.name.endswith(SECOND_MOMENT) or t.dt.kind == "str":
            continue
        state = t.name[: -len(SECOND_MOMENT)].rstrip(".")
        frags = ckpt.optimizer_fragments.get(state)
        if frags is not None and len(t.shape) == 1:
            out.append((t.name, _segments(t.numel, [(_key_of(name, keys, by_name), a, n) for name, a, n in frags])))
            continue
        param = ckpt.optimizer_params.get(state)
        out.append((t.name, [(by_name.get(param) if param is not None else _key_of(state, keys), 0, t.numel)]))
    return out


def _key_of(name: str, keys: dict[str, str], by_name: dict[str, str] | None = None) -> str | None:
    """The aligned key of a parameter named `name` (the checkpoint's name, or one that ends with a key)."""
    if by_name and name in by_name:
        return by_name[name]
    parts = name.split(".")
    return next((k for k in (".".join(parts[i:]) for i in range(len(parts))) if k in keys), None)


def _segments(numel: int, frags: list[Segment]) -> list[Segment]:
    """Slices in order covering [0, numel): the fragments that fit without overlap, the gaps (padding) unattributed."""
    out: list[Segment] = []
    pos = 0
    for key, start, count in sorted(frags, key=lambda f: f[1]):
        if start < pos or start + count > numel:
            continue   # (a map that does not fit the tensor: those elements stay unattributed)
        if start > pos:
            out.append((None, pos, start - pos))
        out.append((key, start, count))
        pos = start + count
    return out + ([(None, pos, numel - pos)] if pos < numel else [])


def plan(ckpts: Sequence[Checkpoint], steps: list[Step]) -> Plan:
    first_items, _ = select(ckpts[0])
    keys0, _ = align(ckpts[0], [])
    key_of = {n: k for k, n in keys0.items()}
    items = {key_of[it.name]: it for it in first_items}
    names: list[dict[str, str]] = []
    skipped: list[dict] = []
    for step, ckpt in zip(steps, ckpts):
        keys, _ = align(ckpt, [])
        here: dict[str, str] = {}
        for key, it in list(items.items()):
            name = keys.get(key)
            if name is None or ckpt[name].shape != ckpts[0][it.name].shape:
                skipped.append({"name": key, "reason": f"{'shape changed' if name else 'missing'} at step {step.step}"})
                del items[key]
                continue
            here[key] = name
        names.append(here)
    names = [{k: n[k] for k in items} for n in names]
    second = [_second_moments(c, keys) for c, keys in zip(ckpts, (align(c, [])[0] for c in ckpts))]
    return Plan(steps, items, names, second, skipped)


def step_result(ckpts: Mapping[int, Checkpoint], p: Plan, t: int, chunk_bytes: int) -> tuple[dict[str, Sums], list]:
    """Step t's sums per tracked tensor (beside step t-1 and step 0), and its second moments (key, Moments)."""
    out = {}
    for key in sorted(p.items, key=natural_key):
        prev = (ckpts[t - 1], p.names[t - 1][key]) if t else None
        first = (ckpts[0], p.names[0][key]) if t > 1 else None
        out[key] = tensor_sums(ckpts[t], p.names[t][key], prev, first, chunk_bytes)
    return out, [km for name, segments in p.second[t] for km in moments(ckpts[t], name, segments, chunk_bytes)]


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
        with ProcessPoolExecutor(min(workers, n), mp_context=ctx) as pool:
            for done, fut in enumerate(as_completed([pool.submit(_worker, t) for t in range(n)]), 1):
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
                 update_ratio=_ratio(_std(s.sd, s.qd, s.n), _std(s.sp, s.qp, s.n)))
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


def build(p: Plan, results: list[tuple[dict[str, Sums], list]], layout: str, paths: list[str], chunk_bytes: int,
          workers: int, seconds: float, meta: list[dict]) -> dict:
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
        "skipped": p.skipped,
    }


def _order(g: GroupKey) -> tuple:
    return ({"total": 0, "bucket": 1, "layer": 2}[g[0]], *(natural_key(str(x)) for x in g[1:]))


def step_meta(ckpt: Checkpoint) -> dict:
    """What the step's checkpoint says of its training (formats/training.py): format, learning rate, epoch."""
    info = ckpt.training or {}
    return {"format": ckpt.format, "learning_rate": info.get("learning_rate"), "epoch": info.get("epoch"),
            "global_step": info.get("global_step")}


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
                     [step_meta(c) for c in ckpts])
    finally:
        for c in ckpts:
            c.close()
