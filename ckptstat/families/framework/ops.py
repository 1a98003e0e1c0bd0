"""The machinery of the op templates: a family's `build(B)` (families/<name>.py) describes its forward
pass as a list of modules, each with its parameters, matmul MACs, element-wise FLOPs and bytes moved.
One list serves the parameter prediction (sum of params) and the FLOPs table (sum of calls x per-call
costs); graph.py walks it. Pure arithmetic: no torch, no file access.

Counting rules (docs/oracles.md): a matmul of (m x k) by (k x n) is m*k*n MACs = 2*m*k*n FLOPs, which is
what torch.utils.flop_counter.FlopCounterMode counts for mm/addmm/bmm (the bias add of addmm is not
counted there; we put it in the element-wise figure). Embedding lookups are 0 MACs. Eager attention is
two bmm's per layer (Q K^T and P V), each b*a*s_q*s_k*d MACs, not halved for causal masks unless asked:
then `causal_pairs` is the one rule every family's causal self-attention counts (docs/flops_memory.md).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .archspec import ArchSpec

# Element-wise cost estimates, FLOPs per output element (labelled as estimates in every output; tools
# disagree on these). A reduction's adds are counted once per input element.
EW_COST = {
    "layernorm": 5,   # mean (1), subtract (1), square+sum for variance (2), normalise*gamma+beta folded (1)
    "rmsnorm": 4,     # square (1), sum (1), scale by rsqrt (1), *gamma (1)
    "no_norm": 2,     # MobileBERT's NoNorm: x * weight + bias
    "softmax": 5,     # max (1), subtract (1), exp (1), sum (1), divide (1)
    "gelu": 8, "gelu_new": 8, "gelu_pytorch_tanh": 8, "gelu_fast": 8,  # tanh approximation
    "silu": 4, "swish": 4, "relu": 1, "tanh": 4,
    # xIELU (transformers activations.py): both branches, alpha_p x x x + beta x (4) and (expm1(min(x, eps)) - x) x alpha_n
    # + beta x (8), and the where (1)
    "xielu": 13,
    "add": 1, "mul": 1,
    "rotary": 3,      # x*cos + rotate(x)*sin per element of q and k
    # gpt-oss's experts: clamp gate (1), clamp up (2), x alpha (1), sigmoid (4), x gate (1), up + 1 (1); the x up, a
    # gated activation's own
    "clamped_swiglu": 10,
}


def ew_cost(kind: str) -> int:
    return EW_COST.get(kind, 8)


def causal_pairs(n: int, window: int | None = None, chunked: bool = False) -> int:
    """The (query, key) pairs a causal mask over n tokens lets through: query i sees keys j <= i, and with a
    sliding window w only j > i - w (transformers masking_utils.py: causal_mask_function and
    sliding_window_overlay, the masks create_causal_mask / create_sliding_window_causal_mask build), so
    min(i + 1, w) keys: a triangle of w rows, then w a row. Without a window (or w >= n): n(n + 1)/2. Chunked
    (ArchSpec.chunked_attention: chunked_overlay, create_chunked_causal_mask): only keys of i's chunk of w, a
    triangle per chunk."""
    w = min(window or n, n)
    if chunked:
        return (n // w) * (w * (w + 1) // 2) + (n % w) * (n % w + 1) // 2
    return w * (w + 1) // 2 + (n - w) * w


def window_groups(s: ArchSpec, layers: Iterable[int] | None = None) -> list[tuple[str, int, int | None]]:
    """`layers` (default all of s.layers) as (label, count, window) groups of alike causal self-attention:
    the sliding layers (ArchSpec.sliding_layers; every layer when that is empty and sliding_window is set)
    with the window, the others with None. One group, labelled by its count, when all are alike."""
    idx = list(range(s.layers) if layers is None else layers)
    w, marked = s.sliding_window, set(s.sliding_layers)
    slide = [i for i in idx if w and (not marked or i in marked)]
    if len(slide) in (0, len(idx)):
        return [(str(len(idx)), len(idx), w if slide else None)]
    return [(f"{len(slide)} sliding", len(slide), w), (f"{len(idx) - len(slide)} full", len(idx) - len(slide), None)]


@dataclass(frozen=True)
class Op:
    module: str
    kind: str                     # embedding, linear, attention, norm, activation, ...
    bucket: str                   # embedding, encoder, decoder, pooler, cls
    calls: int                    # times it runs in one forward pass
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    params: int                   # unique parameters this module owns, all its copies together
    macs: int                     # matmul MACs per call
    ew: int                       # element-wise FLOPs per call (estimate)
    read: int                     # bytes read per call (weights + inputs)
    written: int                  # bytes written per call (outputs)
    active: int | None = None     # parameters one token uses, when fewer than params (routed experts)
    fn: str = ""                  # an activation op's function (its ACT2FN name where it has one: quick_gelu, silu, ...)
    live: int = 0                 # elements its callers keep live while it runs (a residual block's input: Builder.holding)
    eager_live: int = 0           # more of them under eager attention only (a layer's attention probabilities)
    scratch: int = 0              # bytes it allocates beside its input and output, any dtype (max_pool2d's int64 indices)


class Builder:
    """What a family's op template writes to: B.s is the ArchSpec, B.b the batch, B.seq the (encoder)
    sequence length, B.dec_seq the decoder's; each method appends one module's Op to B.ops."""

    def __init__(self, spec: ArchSpec, batch: int, seq: int, dec_seq: int, w_bytes: float, a_bytes: int,
                 causal_halving: bool = False):
        self.s, self.b, self.seq, self.dec_seq = spec, batch, seq, dec_seq
        self.wb, self.ab, self.halve = w_bytes, a_bytes, causal_halving
        self.ops: list[Op] = []
        self.live = self.eager_live = 0

    @contextmanager
    def holding(self, elements: int, eager: bool = False) -> Iterator[None]:
        """The ops added inside run while their callers keep `elements` more live (a residual block's input, a conv
        layer's input under its BatchNorm; `eager`: only under eager attention, the probabilities it returns): the
        inference peak counts them beside the op (analysis/memory/peaks.py)."""
        name = "eager_live" if eager else "live"
        setattr(self, name, getattr(self, name) + elements)
        try:
            yield
        finally:
            setattr(self, name, getattr(self, name) - elements)

    def add(self, module: str, kind: str, bucket: str, calls: int, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
            params: int = 0, macs: int = 0, ew: int = 0, weights_per_call: int = 0, extra_in: int = 0,
            active: int | None = None, fn: str = "", scratch: int = 0) -> None:
        n_in = _prod(in_shape) + extra_in
        read = int(weights_per_call * self.wb) + n_in * self.ab
        self.ops.append(Op(module, kind, bucket, calls, in_shape, out_shape, params, macs, ew, read,
                           _prod(out_shape) * self.ab, active, fn, self.live, self.eager_live, scratch))

    def embedding(self, module: str, bucket: str, rows: int, dim: int, seq: int, params: bool = True) -> None:
        # A lookup: 0 MACs; reads one row per token.
        n = self.b * seq
        self.ops.append(Op(module, "embedding", bucket, 1, (self.b, seq), (self.b, seq, dim),
                           rows * dim if params else 0, 0, 0, int(n * dim * self.wb) + n * 8, n * dim * self.ab,
                           live=self.live, eager_live=self.eager_live))

    def linear(self, module: str, bucket: str, tokens: tuple[int, ...], fin: int, fout: int, bias: bool,
               calls: int = 1, copies: int | None = None, tied: bool = False, active_copies: int | None = None) -> None:
        """copies: stored copies of the weight (default: one per call); active_copies: the copies one
        token uses, when fewer (MoE experts: top-k of them)."""
        n = _prod(tokens)
        per = (0 if tied else fin * fout) + (fout if bias else 0)
        self.add(module, "linear", bucket, calls, tokens + (fin,), tokens + (fout,),
                 params=per * (calls if copies is None else copies), macs=n * fin * fout, ew=n * fout if bias else 0,
                 weights_per_call=fin * fout + (fout if bias else 0),
                 active=None if active_copies is None else per * active_copies)

    def norm(self, module: str, bucket: str, tokens: tuple[int, ...], dim: int, calls: int = 1,
             copies: int | None = None, residual: bool = True, kind: str | None = None, bias: bool | None = None) -> None:
        """bias: whether the norm has a bias beside its weight (default: a LayerNorm has, an RMSNorm has not)."""
        kind = kind or self.s.norm
        per = 2 * dim if (kind == "layernorm" if bias is None else bias) else dim
        n = _prod(tokens) * dim
        self.add(module + (" (+residual)" if residual else ""), "norm", bucket, calls, tokens + (dim,), tokens + (dim,),
                 params=per * (calls if copies is None else copies), ew=n * (ew_cost(kind) + (1 if residual else 0)),
                 weights_per_call=per, extra_in=n if residual else 0)

    def activation(self, module: str, bucket: str, tokens: tuple[int, ...], dim: int, kind: str, calls: int = 1,
                   gated: bool = False, params: int = 0) -> None:
        """params: the activation's own parameters, all its calls together (xIELU's alphas)."""
        n = _prod(tokens) * dim
        self.add(module, "activation", bucket, calls, tokens + (dim * (2 if gated else 1),), tokens + (dim,),
                 params=params, ew=n * (ew_cost(kind) + (1 if gated else 0)), weights_per_call=params // max(calls, 1),
                 fn=kind)

    def pairs(self, q_len: int, k_len: int, causal: bool, window: int | None = None) -> int:
        """(query, key) pairs attention computes: every one of q_len x k_len, as eager attention does (it masks
        rather than skips, and FlopCounterMode counts the full square); with causal halving, a causal square's
        unmasked ones (causal_pairs, the layer's sliding window included)."""
        return causal_pairs(q_len, window, self.s.chunked_attention) if causal and self.halve else q_len * k_len

    def attention(self, prefix: str, bucket: str, heads: int, q_len: int, k_len: int, d: int, calls: int,
                  causal: bool, extra_ew: int = 2, window: int | None = None, v_dim: int | None = None) -> None:
        """Q K^T, softmax, P V. extra_ew: element-wise ops per score besides softmax (scale, mask/bias,
        soft-capping); window: the layers' sliding window (None: full causal); v_dim: the value head width
        when it differs from d (DeepSeek's MLA). The scores' element-wise ops count over the same pairs
        as the matmuls."""
        b, dv = self.b, v_dim or d
        scores = b * heads * self.pairs(q_len, k_len, causal, window)
        self.add(prefix + ".scores (QK^T)", "attention", bucket, calls, (b, heads, q_len, d), (b, heads, q_len, k_len),
                 macs=scores * d, ew=scores * (ew_cost("softmax") + extra_ew), extra_in=b * heads * k_len * d)
        self.add(prefix + ".context (PV)", "attention", bucket, calls, (b, heads, q_len, k_len), (b, heads, q_len, dv),
                 macs=scores * dv, extra_in=b * heads * k_len * dv)

    def causal_self_attention(self, prefix: str, bucket: str, heads: int, d: int, extra_ew: int = 2,
                              layers: Iterable[int] | None = None, v_dim: int | None = None) -> None:
        """A decoder's causal self-attention over B.seq tokens in `layers` (default all), one attention per
        window group (window_groups); prefix holds "{layers}" for the group's label."""
        for label, calls, window in window_groups(self.s, layers):
            self.attention(prefix.format(layers=label), bucket, heads, self.seq, self.seq, d, calls, True, extra_ew, window,
                           v_dim)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for x in shape:
        out *= x
    return out
