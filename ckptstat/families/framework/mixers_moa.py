"""A mixture of attention heads in place of q/k/v/o (DecoderLayout.moa; JetMoE's modeling_jetmoe.py JetMoeMoA,
JetMoeAttention), dispatched by layout.walk on the softmax-attention layers."""
from __future__ import annotations

from . import decoders
from .layout_base import Walk
from .layout_moe import expert_bias


def moa(w: Walk, layers: tuple[int, ...]) -> None:
    """JetMoE's attention: a router ({attn}.{moa}.{router}) picks each token's top k of E query experts; each expert's
    input_linear [E, g x d, h] projects its tokens to g heads of d (JetMoeParallelExperts: one F.linear per expert over
    the tokens routed to it, b x s x k rows in all), the k projections side by side are the query's k x g heads; keys
    and values come from one fused {kv} [2 g d, h] (the cache holds their g heads) and are repeated k times, so eager
    attention runs k x g heads; each expert's output_linear [E, h, g x d] projects its rows back, weighted by the
    router and summed, plus a [h] bias. llama.cpp has no JetMoE architecture: no GGUF names."""
    s, p, B = w.s, w.p, w.B
    h, g, d, E, k, L = s.hidden, s.kv_heads, s.head_dim, s.experts, s.top_k, len(layers)
    x, rows = f"{p.attn}.{p.moa}", (B.b * B.seq * k,)
    w.linear(f"{x}.{p.router}", None, h, E, False, layers, label=w.label(f"{x}.{p.router} (router)", layers))

    def experts(sub: str, fin: int, fout: int) -> None:
        w.record(f"{x}.{sub}", None, (("weight", (E, fout, fin)),), layers)
        B.linear(w.label(f"{x}[{E}].{sub} (top-{k})", layers), "encoder", rows, fin, fout, False, L, L * E,
                 active_copies=L * k)

    experts(p.stacked_in, h, g * d)
    w.linear(f"{p.attn}.{p.kv}", None, h, 2 * g * d, False, layers)
    decoders.rope_apply(B, w.label(f"{p.attn} rotary", layers), k * g + g, d, L)
    B.causal_self_attention(f"{p.layers}[{{layers}}].{p.attn}", "encoder", k * g, d, layers=layers)
    experts(p.stacked_out, g * d, h)
    B.add(w.label(f"{x}.combine (x routing weight)", layers), "activation", "encoder", L, rows + (h,), (B.b, B.seq, h),
          ew=B.b * B.seq * k * h * 2)
    expert_bias(w, x, layers)
