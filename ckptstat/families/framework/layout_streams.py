"""The parts of a layout walk around the residual stream (layout_base.Walk.norm calls them): A.X-K2's gated norms
(DecoderLayout.gated_norms) and HY-V4's hyper-connections (DecoderLayout.hyper), with the sizes they read from
ArchSpec.variant."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .archspec import ArchSpec, Variant
from .ops import Builder, ew_cost


class Walk(Protocol):
    """What these parts use of layout_base.Walk (which imports them: named structurally, no import back)."""
    B: Builder
    s: ArchSpec
    p: Any                                # layout_base.Paths
    tok: tuple[int, int]

    def label(self, sub: str, layers: tuple[int, ...]) -> str: ...

    def record(self, sub: str, gguf: str | None, shapes: tuple[tuple[str, tuple[int, ...]], ...],
               layers: tuple[int, ...] | None) -> None: ...

    def linear(self, sub: str, gguf: str | None, fin: int, fout: int, bias: bool, layers: tuple[int, ...] | None) -> None: ...

    def norm(self, sub: str, gguf: str | None, dim: int, layers: tuple[int, ...] | None, residual: bool = True) -> None: ...


@dataclass(frozen=True)
class GatedNorm(Variant):
    """DecoderLayout.gated_norms: the rank of each gated norm's low-rank gate MLP (A.X-K2's gated_norm_rank)."""
    rank: int


@dataclass(frozen=True)
class Hyper(Variant):
    """DecoderLayout.hyper: how many copies of the stream the hyper-connections hold (HY-V4's hc_mult)."""
    mult: int


def gated_norm(w: Walk, sub: str, layers: tuple[int, ...], residual: bool) -> None:
    """A.X-K2's AXK2GatedRMSNorm at {sub} (DecoderLayout.gated_norms): its RMSNorm, then a low-rank gate over the
    normed stream, W_down (h -> rank), SiLU, W_up (rank -> h), and the stream x sigmoid(gate). llama.cpp has no names."""
    s, p, B, L = w.s, w.p, w.B, len(layers)
    h, r = s.hidden, s.variant_as(GatedNorm).rank
    w.norm(f"{sub}.{p.inner_norm}", None, h, layers, residual)
    w.linear(f"{sub}.{p.norm_gate_in}", None, h, r, False, layers)
    B.activation(w.label(f"{sub} gate act", layers), "encoder", w.tok, r, "silu", L)
    w.linear(f"{sub}.{p.norm_gate_out}", None, r, h, False, layers)
    B.add(w.label(f"{sub} x sigmoid(gate)", layers), "activation", "encoder", L, w.tok + (h,), w.tok + (h,),
          ew=B.b * B.seq * h * (ew_cost("sigmoid") + 1))


def hyper_connection(w: Walk, sub: str, layers: tuple[int, ...] | None) -> None:
    """The hyper-connection before the norm `sub` (DecoderLayout.hyper; HY-V4's HYV4HyperConnection before a layer's
    attention and MLP norms, HYV4HyperHead before the final norm): fn over the N copies flattened (N x h -> 2N, or N for
    the head), times their weightless RMSNorm, sigmoid mixes with base and scale, the copies' weighted sum; after the
    sublayer, its output spread back over the N copies and added (element-wise). llama.cpp has no names."""
    B, p, h, L = w.B, w.p, w.s.hidden, len(layers) if layers is not None else 1
    N = w.s.variant_as(Hyper).mult
    path, names, out = ((p.hc_head_base if w.s.head == "base" else p.hc_head, p.hc_head_params, N) if layers is None
                        else (p.hc_attn if sub == p.attn_in else p.hc_ffn, p.hc_params, 2 * N))
    fn, base, scale = (f"{path}.{n}" for n in names)
    w.record(fn, None, (("", (out, N * h)),), layers)
    w.record(base, None, (("", (out,)),), layers)
    w.record(scale, None, (("", (1 if layers is None else 2,)),), layers)
    label = path if layers is None else w.label(path, layers)
    B.linear(f"{label} ({fn.rsplit('.', 1)[-1]})", "encoder", w.tok, N * h, out, False, L)
    B.add(f"{label} (mixes: norm, sigmoid, sum over the copies)", "activation", "encoder", L, w.tok + (N * h,),
          w.tok + (h,), params=(out + (1 if layers is None else 2)) * L,
          ew=B.b * B.seq * (N * h * (ew_cost("rmsnorm") + 2) + out * (ew_cost("sigmoid") + 2)),
          weights_per_call=out + (1 if layers is None else 2))
