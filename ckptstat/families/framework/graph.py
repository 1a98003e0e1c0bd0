"""The forward pass of a model as a list of modules (ops.Op), from its family's op template
(Family.build over an ops.Builder): one list serves the parameter prediction (sum of params) and the
FLOPs table (sum of calls x per-call costs). Pure arithmetic: no torch, no file access."""
from __future__ import annotations

from .. import get
from .base import ArchSpec
from .ops import EW_COST, Builder, Op, ew_cost

__all__ = ["EW_COST", "Op", "build", "ew_cost", "predict_params"]


def build(spec: ArchSpec, batch: int = 1, seq: int = 1, dec_seq: int | None = None, w_bytes: float = 4,
          a_bytes: int = 4, causal_halving: bool = False) -> list[Op]:
    B = Builder(spec, batch, seq, seq if dec_seq is None else dec_seq, w_bytes, a_bytes, causal_halving)
    get(spec.family).build(B)
    return B.ops


def predict_params(spec: ArchSpec) -> dict:
    """Unique parameters the config implies (tied weights once), per bucket, and, when some parameters
    are routed (MoE experts), the active count: what one token uses."""
    ops = build(spec)
    buckets: dict[str, int] = {}
    for op in ops:
        if op.params:
            buckets[op.bucket] = buckets.get(op.bucket, 0) + op.params
    total = sum(buckets.values())
    out: dict = {"total": total, "buckets": buckets}
    if any(op.active is not None for op in ops):
        out["active"] = total - sum(op.params - op.active for op in ops if op.active is not None)
    return out
