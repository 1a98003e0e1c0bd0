"""Linears a layout's forward runs as tensor-parallel slices (DecoderLayout.tp_slices; modeling_bloom.py's
BloomAttention and BloomMLP with config pretraining_tp > 1 and slow_but_exact): the attention's output projection
and the MLP's down projection each as `tp` F.linear over slices of their input, summed into a zeros tensor of the
stream's shape, then added to the residual. The same MACs as one linear; tp more adds of [b, s, h] each (their biases
held, and counted by the linear, but not added on this path)."""
from __future__ import annotations

from dataclasses import dataclass

from .archspec import Variant
from .base import Cfg
from .layout_base import Walk


@dataclass(frozen=True)
class TPSlices(Variant):
    """The slices a sliced linear runs as (config pretraining_tp, when slow_but_exact)."""
    tp: int


def from_config(c: Cfg) -> TPSlices | None:
    """TPSlices when the config runs the slow, exact path over more than one slice; None otherwise."""
    tp = c.int("pretraining_tp", default=1) if c.get("slow_but_exact", default=False) else 1
    return TPSlices(tp) if tp > 1 else None


def summed(w: Walk, sub: str, layers: tuple[int, ...]) -> None:
    """The adds that sum {sub}'s slices, on a spec that carries TPSlices (nothing otherwise). Its label names the
    stream, as an add of outputs to it does (tests/test_residual_adds.py)."""
    s, B = w.s, w.B
    if not isinstance(s.variant, TPSlices) or not layers:
        return
    B.add(w.label(f"{sub}: {s.variant.tp} pretraining_tp slices summed (adds of the residual stream's shape)", layers),
          "activation", "encoder", len(layers), w.tok + (s.hidden,), w.tok + (s.hidden,),
          ew=s.variant.tp * B.b * B.seq * s.hidden)
