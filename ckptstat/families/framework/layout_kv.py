"""The attention's q/k/v projections where the key/value heads differ by layer kind or the values have their own head
width (layout.walk): the sliding layers' ArchSpec.sliding_kv_heads and the values' ArchSpec.v_head_dim (MiMo-V2-Flash's
MiMoV2FlashAttention: twice num_key_value_heads on its sliding layers, v_head_dim narrower than head_dim)."""
from __future__ import annotations

from .layout_base import Attention, Walk


def projections(w: Walk, attn: tuple[int, ...], q_width: int, kinds: tuple[Attention, ...]) -> None:
    """q_proj on every layer of `attn`; k_proj (g x d) and v_proj (g x v_head_dim) with the layer kind's g heads."""
    s, p = w.s, w.p
    at, h, vd = f"{p.attn}.", s.hidden, s.v_head_dim or s.head_dim
    w.linear(at + p.q, "attn_q", h, q_width, s.qkv_bias, attn)
    wide = tuple(i for i in attn if s.sliding_kv_heads and kinds[i] == "sliding")
    for layers, g in ((tuple(i for i in attn if i not in wide), s.kv_heads), (wide, s.sliding_kv_heads)):
        for sub, gguf, width in ((p.k, "attn_k", s.head_dim), (p.v, "attn_v", vd)) if layers else ():
            w.linear(at + sub, gguf, h, g * width, s.qkv_bias, layers, label=w.label(f"{at}{sub} ({g} heads)", layers))
