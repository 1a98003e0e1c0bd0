"""`ckptstat trend`'s sums of one step: what a step's tensors hold beside the previous and the first step's, and its
Adam second moments, streamed; computed the same in this process, a worker process or a Dask task (cluster.py)."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from ...census import placements
from ...core import Checkpoint
from ..diff import align, aligned, natural_key
from ..optimizer_names import optimizer_names
from ..stats import Item, select
from .find import Step

SECOND_MOMENT = "exp_avg_sq"   # torch.optim.Adam/AdamW's state (torch/optim/adam.py), as DeepSpeed and Lightning save it
# optax's Adam family (scale_by_adam's ScaleByAdamState(count, mu, nu)): `nu` mirrors the parameters' tree, so a state
# `opt_state.0.nu.<path>` belongs to the parameter whose name ends with <path> (an orbax or Flax save's names)
OPTAX_SECOND_MOMENT = re.compile(r"(?:^|\.)nu\.(?P<path>.+)$")


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
    cp: float = 0.0   # ... their squared deviations from their mean (M2), for std(w_(t-1))
    sd: float = 0.0
    qd: float = 0.0
    cd: float = 0.0   # M2 of d, for std(d): sum(x^2) - sum(x)^2 / n cancels where the mean is far above the spread
    md: float = 0.0
    qf: float = 0.0
    q0: float = 0.0   # the first step's values' sum of squares, over the same elements
    mf: float = 0.0

    def merge(self, o: Sums) -> None:
        """Sums add, maxima take the larger, and each M2 merges by Chan et al.'s update (stats' Acc.add_moments)."""
        n, tot = self.n, self.n + o.n
        if n and o.n:
            for m2, s in (("cp", "sp"), ("cd", "sd")):
                delta = getattr(o, s) / o.n - getattr(self, s) / n
                setattr(self, m2, getattr(self, m2) + delta * delta * n * o.n / tot)
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(o, f.name)
            setattr(self, f.name, max(a, b) if f.name in ("md", "mf") else a + b)


def _m2(x: np.ndarray) -> float:
    """The sum of squared deviations from the mean (two passes: no cancellation)."""
    c = x - x.mean() if x.size else x
    return float(np.dot(c, c))


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
            nonfinite = int(w.size - np.count_nonzero(ok))
            if nonfinite:
                w, p, f = w[ok], p[ok], f[ok]
            d, g = w - p, w - f
            s.merge(Sums(n=w.size, zeros=int(w.size - np.count_nonzero(w)), nonfinite=nonfinite,
                         sw=float(w.sum()), qw=float(np.dot(w, w)), sp=float(p.sum()), qp=float(np.dot(p, p)), cp=_m2(p),
                         sd=float(d.sum()), qd=float(np.dot(d, d)), cd=_m2(d),
                         md=float(np.max(np.abs(d))) if w.size else 0.0, qf=float(np.dot(g, g)),
                         q0=float(np.dot(f, f)), mf=float(np.max(np.abs(g))) if w.size else 0.0))
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
    mapping: list[list[dict]] = field(default_factory=list)   # per step, how its optimizer states were named (optimizer_names)


def _second_moments(ckpt: Checkpoint, keys: dict[str, str]) -> list[tuple[str, list[Segment]]]:
    """Each Adam second moment in the checkpoint and its segments. Its parameter: the one named for its state
    (analysis/optimizer_names.py: param_groups' param_names, else a shape-checked order), or the one whose key ends
    the state's name (FSDP and DCP key the state by the parameter's name); a ZeRO flat partition: each parameter's
    slice of it (Checkpoint.optimizer_fragments)."""
    place = placements(ckpt)
    params = optimizer_names(ckpt)[0]
    by_name = {n: k for k, n in keys.items()}
    out = []
    for t in ckpt:
        if place[t.name].role != "optimizer" or t.dt.kind == "str":
            continue
        if not t.name.endswith(SECOND_MOMENT):
            if m := OPTAX_SECOND_MOMENT.search(t.name):
                ends = [k for k, n in keys.items() if (k == m["path"] or k.endswith("." + m["path"]))
                        and place[n].role == "parameter"]
                out.append((t.name, [(ends[0] if len(ends) == 1 else None, 0, t.numel)]))
            continue
        state = t.name[: -len(SECOND_MOMENT)].rstrip(".")
        frags = ckpt.optimizer_fragments.get(state)
        if frags is not None and len(t.shape) == 1:
            out.append((t.name, _segments(t.numel, [(_key_of(name, keys, by_name), a, n) for name, a, n in frags])))
            continue
        param = params.get(state)
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
    return Plan(steps, items, names, second, skipped, [optimizer_names(c)[1] for c in ckpts])


def step_result(ckpts: Mapping[int, Checkpoint], p: Plan, t: int, chunk_bytes: int) -> tuple[dict[str, Sums], list]:
    """Step t's sums per tracked tensor (beside step t-1 and step 0), and its second moments (key, Moments)."""
    out = {}
    for key in sorted(p.items, key=natural_key):
        prev = (ckpts[t - 1], p.names[t - 1][key]) if t else None
        first = (ckpts[0], p.names[0][key]) if t > 1 else None
        out[key] = tensor_sums(ckpts[t], p.names[t][key], prev, first, chunk_bytes)
    return out, [km for name, segments in p.second[t] for km in moments(ckpts[t], name, segments, chunk_bytes)]
