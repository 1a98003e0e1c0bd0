"""Zamba (transformers modeling_zamba.py: ZambaModel, ZambaForCausalLM, ZambaForSequenceClassification): every layer a
Mamba layer (`input_layernorm`, then ZambaMambaMixer, added to the stream); the layers config layers_block_type marks
"hybrid" (by default the third and every attn_layer_period-th from attn_layer_offset + 3) first run one shared
transformer block on the stream concatenated with the token embeddings (2 x hidden_size = attention_hidden_size wide:
an RMSNorm over it, q/k/v of it, no rotary, o_proj back to hidden_size, `pre_ff_layernorm`, a gated MLP of
intermediate_size; no residual), then their own `linear` (h -> h), whose output is added to the stream before the Mamba
layer's norm. Its matmuls run on every hybrid layer; its weights are saved under each, and held once
(ZambaModel._tied_weights_keys ties the others' to the first's) only with tie_word_embeddings: transformers 5 applies a
model's _tied_weights_keys only then, so an untied Zamba holds a copy of the block per hybrid layer.

ZambaMambaMixer as it runs off CUDA (causal_conv1d_fn's and mamba_selective_scan's torch fallbacks; use_associative_scan
only while compiling): in_proj (h -> 2i: x and the gate, i = mamba_expand x h), the depthwise conv1d over x (over the
padded output, as layout_ssm.py counts Jamba's), then per each of n_mamba_heads heads of i / heads channels x_proj_weight
[heads, r + 2N, head] and dt_proj_weight [heads, head, r] as batched matmuls (Jamba's x_proj and dt_proj MACs: i (r + 2N)
and r i per token), dt_proj_bias, A_log [heads, head, N] and D [heads, head], the recurrent scan (one [i, N] @ [N, 1]
matmul per token), out_proj (i -> h). The cache: K/V per hybrid layer, and per layer a conv state [i, k] and a float32
recurrent state [i, N] (LinearAttentionLayer, LinearAttentionAndFullAttentionLayer).

Described once, by its forward (`walk`, layout_base.Walk): the op template and the expected tensors derive from it."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import infer, layout, walk_names
from .framework.archspec import SSM, Variant
from .framework.base import FROM_CLASS, STATE_BYTES, ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Module, Walk, walk_tensors
from .framework.layout_parts import output_heads, task_labels
from .framework.ops import Builder

LAYOUT = DecoderLayout(tied_default=True, task_heads=("seqcls",),
                       paths=Paths(mlp="feed_forward", mlp_in="pre_ff_layernorm", norm="final_layernorm"))
_P = LAYOUT.paths
_SHARED, _MAMBA, _HYBRID_MAMBA = "shared_transf", "mamba", "mamba_decoder"


@dataclass(frozen=True)
class ZambaVariant(Variant):
    hybrid: tuple[int, ...]        # the layers layers_block_type marks "hybrid"
    mamba_heads: int               # n_mamba_heads
    attn_width: int                # attention_hidden_size: the stream and the embeddings concatenated (2 x hidden)


def _hybrid(c: Cfg, L: int) -> tuple[int, ...]:
    """ZambaConfig's layers_block_type, or its default: layers 0 and 1 Mamba, 2 hybrid, then the period's."""
    kinds = c.get("layers_block_type", default=None)
    if kinds is None:
        period, offset = c.int("attn_layer_period", default=FROM_CLASS), c.int("attn_layer_offset", default=FROM_CLASS)
        return tuple(i for i in range(L) if i == 2 or (i >= 3 and (i - 3) % period == offset))
    if not isinstance(kinds, list) or len(kinds) != L or not all(isinstance(k, str) for k in kinds):
        raise UsageError(f"{c.path}: config layers_block_type is not a list of {L} layer kinds")
    return tuple(i for i, k in enumerate(kinds) if k == "hybrid")


def from_config(c: Cfg) -> ArchSpec:
    h, L, a = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads")
    aw = c.int("attention_hidden_size", default=None) if c.get("attention_hidden_size", default=None) else 2 * h
    d = c.int("attention_head_dim") if c.get("attention_head_dim", default=None) else 2 * h // a
    i, r = c.int("mamba_expand", default=FROM_CLASS) * h, c.get("mamba_dt_rank", default=None)   # None, "auto": h / 16
    ssm = SSM(heads=i, head_dim=1, state=c.int("mamba_d_state", default=FROM_CLASS), groups=0,
              conv_kernel=c.int("mamba_d_conv", default=FROM_CLASS), chunk=0, intermediate=i,
              conv_bias=bool(c.get("mamba_conv_bias", default=FROM_CLASS)),
              bias=bool(c.get("mamba_proj_bias", default=FROM_CLASS)),
              dt_rank=math.ceil(h / 16) if r in (None, "auto") else c.int("mamba_dt_rank"))
    v = ZambaVariant(hybrid=_hybrid(c, L), mamba_heads=c.int("n_mamba_heads", default=FROM_CLASS), attn_width=aw)
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=c.int("num_key_value_heads", default=FROM_CLASS), head_dim=d,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    activation=str(c.get("hidden_act", default=FROM_CLASS)), gated_mlp=True, norm="rmsnorm",
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)), ssm=ssm,
                    ssm_layers=tuple(range(L)), variant=v, **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The sizes from the modules the walk records (_NAMES). Only the products heads x head_dim (q_proj's rows) and
    kv_heads x head_dim (k_proj's) show: head_dim is taken as their greatest common divisor (noted)."""
    N = _NAMES
    V, h = walk_names.shape(T, N, _P.embed)
    x = rf"(?:^|\.){_P.layers}\.(\d+)\.(?:{_HYBRID_MAMBA}\.)?{_MAMBA}\.x_proj_weight$"   # a Mamba or a hybrid layer
    L = infer.count_layers(T, x)
    rx = walk_names.pattern(N, "linear", layer=r"(\d+)")
    hybrid = tuple(sorted({int(m.group(1)) for n in T if (m := re.search(rx, n))}))
    H, rn, hd = infer.shape(T, x, "mamba.x_proj_weight")
    S = infer.shape(T, walk_names.pattern(N, f"{_MAMBA}.A_log"), "mamba.A_log")[-1]
    k = infer.shape(T, walk_names.pattern(N, f"{_MAMBA}.conv1d"), "mamba.conv1d")[-1]
    q, aw = walk_names.shape(T, N, f"{_SHARED}.self_attn.{_P.q}")
    kv = walk_names.shape(T, N, f"{_SHARED}.self_attn.{_P.k}")[0]
    d = math.gcd(q, kv)
    f = walk_names.shape(T, N, f"{_SHARED}.{_P.mlp}.{_P.gate}")[0]
    # untied (the module docstring): an lm_head, or a second copy of the shared block, stored apart (not an alias)
    rq = walk_names.pattern(N, f"{_SHARED}.self_attn.{_P.q}")
    lm, emb = infer.find(T, walk_names.pattern(N, _P.lm_head)), infer.find(T, walk_names.pattern(N, _P.embed))
    apart = (lm is not None and (emb is None or lm.alias_key != emb.alias_key)
             or len({t.alias_key for name, t in T.items() if re.search(rq, name)}) > 1)
    i = H * hd
    ssm = SSM(heads=i, head_dim=1, state=S, groups=0, conv_kernel=k, chunk=0, intermediate=i,
              conv_bias=infer.has(T, walk_names.pattern(N, f"{_MAMBA}.conv1d", "bias")),
              bias=infer.has(T, walk_names.pattern(N, f"{_MAMBA}.in_proj", "bias")), dt_rank=rn - 2 * S)
    return ArchSpec(layers=L, hidden=h, heads=q // d, kv_heads=kv // d, head_dim=d, intermediate=f, vocab=V,
                    activation="gelu", gated_mlp=True, norm="rmsnorm", ssm=ssm, ssm_layers=tuple(range(L)),
                    tied_embeddings=not apart,
                    num_labels=task_labels(LAYOUT, T),
                    variant=ZambaVariant(hybrid=hybrid, mamba_heads=H, attn_width=aw),
                    assumptions=(f"no config: head_dim assumed {d} (the shapes show heads x head_dim alone)",
                                 "no config: hidden_act assumed gelu (ZambaConfig's default)"), **common)


def _shared_block(w: Walk, hybrid: tuple[int, ...], v: ZambaVariant) -> None:
    """The shared transformer block on every hybrid layer, its weights held once when tied (the module docstring)."""
    s, B, tok = w.s, w.B, w.tok
    h, a, g, d, f, aw, n = s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, v.attn_width, len(hybrid)
    held = 1 if s.tied_embeddings else n
    at = f"{_SHARED}.self_attn."

    def linear(sub: str, fin: int, fout: int) -> None:
        w.record(sub, None, (("weight", (fout, fin)),), hybrid)
        B.linear(w.label(sub, hybrid) + " (shared)", "encoder", tok, fin, fout, False, n, copies=held)

    def norm(sub: str, dim: int) -> None:
        w.record(sub, None, (("weight", (dim,)),), hybrid)
        B.norm(w.label(sub, hybrid) + " (shared)", "encoder", tok, dim, n, copies=held, residual=False)

    norm(f"{_SHARED}.{_P.attn_in}", aw)   # over [stream; embeddings]
    for sub, width in ((_P.q, a), (_P.k, g), (_P.v, g)):
        linear(at + sub, aw, width * d)
    B.attention(w.label(at.rstrip("."), hybrid), "encoder", a, B.seq, B.seq, d, n, True)
    linear(at + _P.o, a * d, h)
    norm(f"{_SHARED}.{_P.mlp_in}", h)
    mp = f"{_SHARED}.{_P.mlp}."
    linear(mp + _P.gate, h, f)
    linear(mp + _P.up, h, f)
    B.activation(w.label(f"{mp}act*up", hybrid), "encoder", tok, f, s.activation, n, gated=True)
    linear(mp + _P.down, f, h)
    w.linear("linear", None, h, h, False, hybrid)
    B.add(w.label("stream + linear(shared block)", hybrid), "activation", "encoder", n, tok + (h,), tok + (h,),
          ew=B.b * B.seq * h)


def _mixer(w: Walk, pre: str, layers: tuple[int, ...], heads: int) -> None:
    """ZambaMambaMixer at {pre} (the module docstring)."""
    s, B = w.s, w.B
    m, L, b, n = s.ssm, len(layers), B.b, B.seq
    assert m is not None
    h, i, S, r, k, hd = s.hidden, m.intermediate, m.state, m.dt_rank, m.conv_kernel, m.intermediate // heads
    w.linear(pre + "in_proj", None, h, 2 * i, m.bias, layers)
    # the planner splits what the meta path splits, every parameter of 2 or more dimensions (the conv1d's weight and the
    # per-head tensors: kinds conv and ssm_weight), and replicates the conv1d's bias (kind ssm)
    w.record(pre + "conv1d", None, (("weight", (i, 1, k)),) + ((("bias", (i,)),) if m.conv_bias else ()), layers)
    B.add(w.label(pre + "conv1d (+silu)", layers), "conv", "encoder", L, (b, i, n), (b, i, n), params=i * k * L,
          macs=b * (max(n, k) + k - 1) * i * k, ew=b * n * i * 4, weights_per_call=i * k)
    if m.conv_bias:
        B.add(w.label(pre + "conv1d.bias", layers), "ssm", "encoder", L, (b, i, n), (b, i, n), params=i * L,
              ew=b * n * i, weights_per_call=i)
    w.record(pre + "x_proj_weight", None, (("", (heads, r + 2 * S, hd)),), layers)
    B.add(w.label(pre + "x_proj_weight (per head)", layers), "ssm_weight", "encoder", L, (b, n, i),
          (b, n, heads * (r + 2 * S)), params=i * (r + 2 * S) * L, macs=b * n * i * (r + 2 * S),
          weights_per_call=i * (r + 2 * S))
    w.record(pre + "dt_proj_weight", None, (("", (heads, hd, r)),), layers)
    w.record(pre + "dt_proj_bias", None, (("", (heads, hd)),), layers)
    B.add(w.label(pre + "dt_proj_weight (per head; + dt_proj_bias)", layers), "ssm_weight", "encoder", L,
          (b, n, heads * r), (b, n, i), params=(i * r + i) * L, macs=b * n * i * r, ew=b * n * i, weights_per_call=i * r + i)
    w.record(pre + "A_log", None, (("", (heads, hd, S)),), layers)
    w.record(pre + "D", None, (("", (heads, hd)),), layers)
    B.add(w.label(pre + "scan (state @ C per token; A_log, D)", layers), "ssm_weight", "encoder", L, (b, i, n, S),
          (b, i, n), params=(i * S + i) * L, macs=b * n * i * S, ew=b * n * i * (4 * S + 6), weights_per_call=i * S + i)
    w.linear(pre + "out_proj", None, i, h, m.bias, layers)


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes (ZambaModel.forward): writes its ops to B and returns the modules it met."""
    s, n = B.s, B.seq
    v, w = s.variant_as(ZambaVariant), Walk(B, LAYOUT)
    h, hybrid = s.hidden, v.hybrid
    alone = tuple(i for i in range(s.layers) if i not in hybrid)
    w.record(_P.embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(_P.embed, "embedding", s.vocab, h, n)
    if hybrid:
        _shared_block(w, hybrid, v)
    for pre, layers in ((f"{_MAMBA}.", alone), (f"{_HYBRID_MAMBA}.{_MAMBA}.", hybrid)):
        if layers:
            w.norm(pre.removesuffix(f"{_MAMBA}.") + _P.attn_in, None, h, layers)
            _mixer(w, pre, layers, v.mamba_heads)
    w.norm(_P.norm, None, h, None, residual=False)
    output_heads(w, h)
    return w.modules


def build(B: Builder) -> None:
    walk(B)


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """K/V of the hybrid layers over s tokens; every layer's conv state [i, k] and float32 recurrent state [i, N]."""
    m, hy = s.ssm, len(s.variant_as(ZambaVariant).hybrid)
    assert m is not None
    per, rb = 2 * s.kv_heads * s.head_dim * ab, max(ab, STATE_BYTES)
    state = m.intermediate * (m.conv_kernel * ab + m.state * rb)
    return [(f"b={b}, s={n}", b * (per * hy * n + state * s.layers),
             f"{hy} hybrid layers x 2 x g x d x s x {ab} B (= {per * hy:,} B/token) + {s.layers} Mamba layers x "
             f"(i x conv_kernel x {ab} B + i x state x {rb} B, float32) (= {state * s.layers:,} B/sequence, any s), x b")]


expected_tensors = walk_tensors(walk, _P.body)
# the paths the name regexes read: a Mamba layer and a hybrid one
_NAMES = walk_names.walked(walk, **walk_names.LM, ssm=SSM(heads=8, head_dim=1, state=2, groups=0, conv_kernel=2, chunk=0,
                                                          intermediate=8, conv_bias=True, bias=False, dt_rank=1),
                           variant=ZambaVariant(hybrid=(1,), mamba_heads=2, attn_width=8))

_SIZES = dict(hidden_size=32, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
              vocab_size=99, attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8, mamba_d_conv=3, n_mamba_heads=2)

FAMILY = Family(
    name="zamba",
    model_types=("zamba",),
    signature=walk_names.signature(_NAMES, f"{_MAMBA}.x_proj_weight", tf1=False),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **{**layout.decoder_lm(LAYOUT), "kv_cache": kv_cache},
    gguf_architectures=(),   # llama.cpp has no Zamba architecture
    samples=(
        # layers_block_type derived from the period (hybrid layers 2 and 4); on the CPU, as Jamba's: the cache's conv
        # padding and the scan's per-token loop run on values
        Sample("ZambaConfig", dict(_SIZES, pad_token_id=0), ("ZambaForCausalLM", "ZambaModel"), device="cpu"),
        # untied (tie_word_embeddings false): the shared block held once per hybrid layer, as the file shows it; biased
        # in_proj / out_proj, no conv1d bias, a given dt_rank and head_dim
        Sample("ZambaConfig", dict(_SIZES, layers_block_type=["hybrid", "mamba", "hybrid"], num_hidden_layers=3,
                                   attention_head_dim=8, mamba_conv_bias=False, mamba_proj_bias=True, mamba_dt_rank=3,
                                   tie_word_embeddings=False, pad_token_id=0), ("ZambaForCausalLM", "ZambaModel"),
               device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("ZambaConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("ZambaForSequenceClassification",),
               device="cpu"),
    ),
)
