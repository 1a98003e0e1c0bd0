"""MiniMax's lightning attention, a token mixer some layers of a layout run in place of softmax attention
(DecoderLayout.lightning; ArchSpec.lightning the layers and block size): MiniMaxLightningAttention (transformers
modeling_minimax.py).

Its forward: qkv_proj (h -> 3 a d), the activation, q / k / v per head; then over blocks of c = block_size tokens (the
last one shorter) the intra-block scores Q K^T [c, c], times the decay, by V; the inter-block Q (x decay) by the running
state [d, d]; the state updated by (K x decay)^T V: four matmuls per block and head, 2 c^2 d + 2 c d^2 MACs (FlopCounterMode
counts all four, the masked intra scores whole). A prefill reads no earlier state, whatever the cache. Then an RMSNorm
over a d (norm), x sigmoid(output_gate(x)) (h -> a d), out_proj (a d -> h). The cache keeps each such layer's state
[b, a, d, d] (MiniMaxCache.linear_cache), any s; its softmax layers keep keys and values in DynamicLayers built without
the config: every token, whatever sliding_window."""
from __future__ import annotations

import re
from typing import Any

from ...errors import UsageError
from .archspec import ArchSpec, Lightning
from .base import FROM_CLASS, Cfg, KVLines, Tensors, class_default
from .layout_base import Paths, Walk
from .ops import ew_cost

QKV, GATE, NORM, OUT = "qkv_proj", "output_gate", "norm", "out_proj"   # MiniMax's names under {attn}


def from_config(c: Cfg, layers: int) -> Lightning:
    """The layers config layer_types marks "linear_attention" (MiniMaxConfig's default: every second), block_size."""
    types = c.get("layer_types", default=None)
    if types is None:
        types = ["full_attention" if (i + 1) % 2 else "linear_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(t not in ("full_attention", "linear_attention")
                                                                   for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {layers} 'full_attention' / 'linear_attention'")
    return Lightning(block_size=c.int("block_size", default=FROM_CLASS),
                     layers=tuple(i for i, t in enumerate(types) if t == "linear_attention"))


def from_tensors(T: Tensors, paths: Paths, common: dict[str, Any]) -> Lightning:
    """The lightning layers of a checkpoint without config.json (those holding {attn}.qkv_proj); the block size, which
    no tensor shows, the config class's default (the family says so in its assumptions)."""
    rx = re.compile(rf"(^|\.){re.escape(paths.layers)}\.(\d+)\.{re.escape(paths.attn)}\.{QKV}\.weight$")
    return Lightning(block_size=int(class_default(str(common["model_type"]), "block_size")),
                     layers=tuple(sorted({int(m.group(2)) for n in T if (m := rx.search(n))})))


def block_macs(n: int, c: int, d: int) -> int:
    """One head's and sequence's MACs over n tokens in blocks of c: per block of c' tokens 2 c'^2 d + 2 c' d^2."""
    full, rest = divmod(n, c)
    return 2 * d * (full * c * c + rest * rest) + 2 * d * d * n


def _linear(w: Walk, sub: str, fin: int, fout: int, layers: tuple[int, ...]) -> None:
    """An unbiased projection llama.cpp has no name for (it has no MiniMax-Text architecture)."""
    w.record(sub, None, (("weight", (fout, fin)),), layers)
    w.B.linear(w.label(sub, layers), "encoder", w.tok, fin, fout, False, len(layers))


def lightning(w: Walk, layers: tuple[int, ...]) -> None:
    """The lightning attention on `layers` (the module docstring)."""
    s, B, p = w.s, w.B, w.p
    assert s.lightning is not None
    h, a, d, L = s.hidden, s.heads, s.head_dim, len(layers)
    at, tok = f"{p.attn}.", w.tok
    _linear(w, at + QKV, h, 3 * a * d, layers)
    B.activation(w.label(f"{p.attn} act(qkv)", layers), "encoder", tok, 3 * a * d, s.activation, L)
    B.add(w.label(f"{p.attn} blocks of {s.lightning.block_size} (Q K^T x decay, V; Q x decay, state; K^T V)", layers),
          "attention", "encoder", L, tok + (3 * a * d,), tok + (a * d,),
          macs=B.b * a * block_macs(B.seq, s.lightning.block_size, d), ew=B.b * a * B.seq * (B.seq + 4 * d))
    w.norm(at + NORM, None, a * d, layers, residual=False)
    _linear(w, at + GATE, h, a * d, layers)
    B.add(w.label(f"{p.attn} x sigmoid(output_gate)", layers), "activation", "encoder", L, tok + (a * d,), tok + (a * d,),
          ew=B.b * B.seq * a * d * (ew_cost("sigmoid") + 1))
    _linear(w, at + OUT, a * d, h, layers)


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """MiniMaxCache after a forward of n tokens: keys and values of every softmax layer (all n tokens: its DynamicLayers
    keep no window), a [b, a, d, d] state of each lightning layer."""
    lin = len(s.lightning.layers) if s.lightning is not None else 0
    full = s.layers - lin
    kv = 2 * s.kv_heads * s.head_dim * ab * full * n * b
    state = lin * s.heads * s.head_dim * s.head_dim * ab * b
    return [(f"b={b}, s={n}", kv + state, f"2 x g x d x {ab} B x {full} softmax layers x s x b = {kv:,} B; + {lin} lightning "
                                          f"layers x a x d x d x b x {ab} B = {state:,} B of states (any s)")]
