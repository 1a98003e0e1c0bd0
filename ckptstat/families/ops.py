"""The machinery of the op templates: a family's `build(B)` (families/<name>.py) describes its forward
pass as a list of modules, each with its parameters, matmul MACs, element-wise FLOPs and bytes moved.
One list serves the parameter prediction (sum of params) and the FLOPs table (sum of calls x per-call
costs); graph.py walks it. Pure arithmetic: no torch, no file access.

Counting rules (docs/oracles.md): a matmul of (m x k) by (k x n) is m*k*n MACs = 2*m*k*n FLOPs, which is
what torch.utils.flop_counter.FlopCounterMode counts for mm/addmm/bmm (the bias add of addmm is not
counted there; we put it in the element-wise figure). Embedding lookups are 0 MACs. Eager attention is
two bmm's per layer (Q K^T and P V), each b*a*s_q*s_k*d MACs, not halved for causal masks unless asked.
"""
from __future__ import annotations

from dataclasses import dataclass

from .archspec import ArchSpec

# Element-wise cost estimates, FLOPs per output element (labelled as estimates in every output; tools
# disagree on these). A reduction's adds are counted once per input element.
EW_COST = {
    "layernorm": 5,   # mean (1), subtract (1), square+sum for variance (2), normalise*gamma+beta folded (1)
    "rmsnorm": 4,     # square (1), sum (1), scale by rsqrt (1), *gamma (1)
    "softmax": 5,     # max (1), subtract (1), exp (1), sum (1), divide (1)
    "gelu": 8, "gelu_new": 8, "gelu_pytorch_tanh": 8, "gelu_fast": 8,  # tanh approximation
    "silu": 4, "swish": 4, "relu": 1, "tanh": 4,
    "add": 1, "mul": 1,
    "rotary": 3,      # x*cos + rotate(x)*sin per element of q and k
}


def ew_cost(kind: str) -> int:
    return EW_COST.get(kind, 8)


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


class Builder:
    """What a family's op template writes to: B.s is the ArchSpec, B.b the batch, B.seq the (encoder)
    sequence length, B.dec_seq the decoder's; each method appends one module's Op to B.ops."""

    def __init__(self, spec: ArchSpec, batch: int, seq: int, dec_seq: int, w_bytes: float, a_bytes: int,
                 causal_halving: bool = False):
        self.s, self.b, self.seq, self.dec_seq = spec, batch, seq, dec_seq
        self.wb, self.ab, self.halve = w_bytes, a_bytes, causal_halving
        self.ops: list[Op] = []

    def add(self, module: str, kind: str, bucket: str, calls: int, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
            params: int = 0, macs: int = 0, ew: int = 0, weights_per_call: int = 0, extra_in: int = 0,
            active: int | None = None) -> None:
        n_in = _prod(in_shape) + extra_in
        read = int(weights_per_call * self.wb) + n_in * self.ab
        self.ops.append(Op(module, kind, bucket, calls, in_shape, out_shape, params, macs, ew, read,
                           _prod(out_shape) * self.ab, active))

    def embedding(self, module: str, bucket: str, rows: int, dim: int, seq: int, params: bool = True) -> None:
        # A lookup: 0 MACs; reads one row per token.
        n = self.b * seq
        self.ops.append(Op(module, "embedding", bucket, 1, (self.b, seq), (self.b, seq, dim),
                           rows * dim if params else 0, 0, 0, int(n * dim * self.wb) + n * 8, n * dim * self.ab))

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
             copies: int | None = None, residual: bool = True, kind: str | None = None) -> None:
        kind = kind or self.s.norm
        per = 2 * dim if kind == "layernorm" else dim
        n = _prod(tokens) * dim
        self.add(module + (" (+residual)" if residual else ""), "norm", bucket, calls, tokens + (dim,), tokens + (dim,),
                 params=per * (calls if copies is None else copies), ew=n * (ew_cost(kind) + (1 if residual else 0)),
                 weights_per_call=per, extra_in=n if residual else 0)

    def activation(self, module: str, bucket: str, tokens: tuple[int, ...], dim: int, kind: str, calls: int = 1,
                   gated: bool = False) -> None:
        n = _prod(tokens) * dim
        self.add(module, "activation", bucket, calls, tokens + (dim * (2 if gated else 1),), tokens + (dim,),
                 ew=n * (ew_cost(kind) + (1 if gated else 0)))

    def attention(self, prefix: str, bucket: str, heads: int, q_len: int, k_len: int, d: int, calls: int,
                  causal: bool, extra_ew: int = 2) -> None:
        """Q K^T, softmax, P V. extra_ew: element-wise ops per score besides softmax (scale, mask/bias)."""
        b = self.b
        pairs = q_len * k_len
        if causal and self.halve:
            pairs = q_len * (q_len + 1) // 2   # the unmasked (q, k) pairs of a causal square
        scores = b * heads * pairs
        self.add(prefix + ".scores (QK^T)", "attention", bucket, calls, (b, heads, q_len, d), (b, heads, q_len, k_len),
                 macs=scores * d, ew=b * heads * q_len * k_len * (ew_cost("softmax") + extra_ew),
                 extra_in=b * heads * k_len * d)
        self.add(prefix + ".context (PV)", "attention", bucket, calls, (b, heads, q_len, k_len), (b, heads, q_len, d),
                 macs=scores * d, extra_in=b * heads * k_len * d)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for x in shape:
        out *= x
    return out
