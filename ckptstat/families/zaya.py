"""ZAYA (transformers modeling_zaya.py, ZayaModel / ZayaForCausalLM): the embeddings, (x + input_hidden_states_bias) x
input_hidden_states_scale, then per layer (config layer_types: "hybrid", or "hybrid_sliding" with the sliding_window)
an RMSNorm input_layernorm, the attention, a residual scaling (ZayaResidualScaling: hidden and residual each plus a bias
and times a scale, [h] each, then summed), an RMSNorm post_attention_layernorm, the routed MLP and a second residual
scaling; norm, and lm_head (tied by default; lm_head_bias biases it).

The attention (ZayaAttention) projects q, k, v with Compressed Convolutional Attention (ZayaCCAProjection): q_proj
h -> heads x d and k_proj h -> kv x d (attention_bias), concatenated into C = (heads + kv) x d channels, left-padded by
(cca_time0 - 1) + (cca_time1 - 1) = pad and mixed by a depthwise conv1d of cca_time0 (biased; FlopCounterMode counts
its padded output, S + cca_time1 - 1, S = max(s, pad): transformers 5.25's cache pads a first state shorter than pad)
and a grouped conv1d of cca_time1 (heads + kv groups of d channels, biased), plus the
q/k residuals; v from v_proj_current and v_proj_delayed (h -> kv x d / 2 each), the delayed half shifted one token,
its first token v_proj_delayed of a zero row (one more [b, 1, h] matmul per layer: the forward starts without a
state); qk_norm (L2 to sqrt(d), the keys times temp [kv]), partial rotary, eager GQA attention (the whole square: a
sliding layer's window only masks), o_proj heads x d -> h (attention_bias).

The MLP (ZayaSparseMoeBlock): the router (ZayaRouter: down_proj h -> router_hidden_size r, biased; from layer 1 on plus
the previous layer's router states x router_states_scale [r]; ZayaRouterMLP: RMSNorm, fc1 and fc2 r -> r biased with
GELU, out_proj r -> num_experts + 1, the last class "skip") and num_experts experts stored fused (gate_up_proj
[E, 2f, h], down_proj [E, h, f]), top-1 (ZayaConfig allows num_experts_per_tok 1 alone).

FLOPs: every token through one expert, exactly: a token the router sends to the skip class is re-indexed to expert 0
with weight 0 (ZayaRouter.forward's masked_fill), so it runs one too, in the grouped_mm and the eager experts alike.

The cache: transformers' DynamicCache(config) of LinearAttentionAndFullAttentionLayer (LinearAttentionAndSlidingWindow-
AttentionLayer for "hybrid_sliding"): per layer K and V [b, kv, s, d] (a sliding layer's last sliding_window - 1
tokens), the conv state [b, C, (cca_time0 - 1) + (cca_time1 - 1)] and the delayed value's recurrent state
[b, kv x d / 2], all in the model's dtype.

Described once, by its forward (`walk`): each parameterised module recorded as its op is written (layout_base.Walk,
LLaMA's paths), from which the expected tensors derive; llama.cpp has no ZAYA, so no GGUF names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import decoders, infer, layout, walk_names
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, SLIDING_HELD, ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Module, Walk, walk_tensors
from .framework.ops import Builder, ew_cost

LAYOUT = DecoderLayout(tied_default=True, paths=Paths())
_P = LAYOUT.paths
_CCA, _GATE = f"{_P.attn}.qkv_proj", f"{_P.mlp}.gate"


@dataclass(frozen=True)
class ZayaVariant(Variant):
    router: int                 # router_hidden_size
    time0: int                  # cca_time0: the depthwise conv's kernel
    time1: int                  # cca_time1: the grouped conv's kernel
    attn_bias: bool             # attention_bias: q, k, the two v projections and o_proj
    head_bias: bool             # lm_head_bias
    rope_dims: tuple[int, ...]  # per layer, the rotated width (partial_rotary_factor of its layer type)


def _rope_dim(c: Cfg, kind: str, d: int) -> int:
    """The rotated width of a layer type: int(d x partial_rotary_factor) of rope_parameters[kind] (ZayaConfig's
    default 0.5 for both types)."""
    rope = c.cfg.get("rope_parameters")
    params = rope.get(kind) if isinstance(rope, dict) else None
    factor = params.get("partial_rotary_factor", 1.0) if isinstance(params, dict) else 0.5
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 <= factor <= 1:
        raise UsageError(f"{c.path}: config rope_parameters.{kind}.partial_rotary_factor = {factor!r} is not in [0, 1]")
    return int(d * factor)


def from_config(c: Cfg) -> ArchSpec:
    """ZayaConfig: the attention's sizes, the router's, the experts' (top-1), layer_types (default all "hybrid")."""
    L, h = c.int("num_hidden_layers"), c.int("hidden_size")
    heads, kv, d = c.int("num_attention_heads"), c.int("num_key_value_heads"), c.int("head_dim", default=FROM_CLASS)
    if not kv or heads % kv or (kv * d) % 2:
        raise UsageError(f"{c.path}: ZAYA needs num_attention_heads ({heads}) a multiple of num_key_value_heads ({kv}) "
                         f"and kv x head_dim ({kv * d}) even")
    if c.int("num_experts_per_tok", default=FROM_CLASS) != 1:
        raise UsageError(f"{c.path}: ZAYA supports num_experts_per_tok 1 alone (ZayaConfig)")
    t0, t1 = c.int("cca_time0", default=FROM_CLASS), c.int("cca_time1", default=FROM_CLASS)
    if t0 < 1 or t1 < 1:
        raise UsageError(f"{c.path}: ZAYA's cca_time0 {t0} and cca_time1 {t1} are not positive conv kernels")
    kinds = c.get("layer_types", default=None) or ["hybrid"] * L
    if not isinstance(kinds, list) or len(kinds) != L or any(k not in ("hybrid", "hybrid_sliding") for k in kinds):
        raise UsageError(f"{c.path}: config layer_types is not {L} of \"hybrid\" / \"hybrid_sliding\"")
    sliding = tuple(i for i, k in enumerate(kinds) if k == "hybrid_sliding")
    window = c.int("sliding_window") if sliding else None
    return ArchSpec(layers=L, hidden=h, heads=heads, kv_heads=kv, head_dim=d, intermediate=0,
                    vocab=c.int("vocab_size"), activation=str(c.get("hidden_act", default=FROM_CLASS)), norm="rmsnorm",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    experts=c.int("num_experts", default=FROM_CLASS), top_k=1,
                    moe_intermediate=c.int("moe_intermediate_size", default=FROM_CLASS),
                    sliding_window=window, sliding_layers=sliding if window else (),
                    variant=ZayaVariant(router=c.int("router_hidden_size", default=FROM_CLASS), time0=t0, time1=t1,
                                        attn_bias=bool(c.get("attention_bias", default=FROM_CLASS)),
                                        head_bias=bool(c.get("lm_head_bias", default=FROM_CLASS)),
                                        rope_dims=tuple(_rope_dim(c, k, d) for k in kinds)),
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The widths from the modules the walk records; every layer assumed "hybrid" (no sliding window) with half of
    each head rotated, the activation silu."""
    V, h = walk_names.shape(T, _NAMES, _P.embed)
    kv = walk_names.shape(T, _NAMES, f"{_P.attn}.qk_norm")[0]
    d = walk_names.shape(T, _NAMES, f"{_CCA}.k_proj")[0] // kv
    heads = walk_names.shape(T, _NAMES, f"{_CCA}.q_proj")[0] // d
    t0 = walk_names.shape(T, _NAMES, f"{_CCA}.conv_qk_depthwise")[-1]
    t1 = walk_names.shape(T, _NAMES, f"{_CCA}.conv_qk_grouped")[-1]
    E, _, f = walk_names.shape(T, _NAMES, f"{_P.mlp}.experts", "down_proj")
    r = walk_names.shape(T, _NAMES, f"{_GATE}.down_proj")[0]
    L = infer.count_layers(T, walk_names.pattern(_NAMES, f"{_P.attn}.qk_norm", layer=r"(\d+)"))
    has = (lambda key, suffix: infer.find(T, walk_names.pattern(_NAMES, key, suffix)) is not None)
    return ArchSpec(layers=L, hidden=h, heads=heads, kv_heads=kv, head_dim=d, intermediate=0, vocab=V,
                    activation="silu", norm="rmsnorm", qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=not has(_P.lm_head, "weight"), experts=E, top_k=1, moe_intermediate=f,
                    variant=ZayaVariant(router=r, time0=t0, time1=t1, attn_bias=has(f"{_CCA}.q_proj", "bias"),
                                        head_bias=has(_P.lm_head, "bias"), rope_dims=(d // 2,) * L),
                    assumptions=("no config: every layer \"hybrid\" (full attention), half of each head rotated, "
                                 "activation silu",), **common)


def _scaling(w: Walk, sub: str, every: tuple[int, ...]) -> None:
    """ZayaResidualScaling: (x + hidden_states_bias) x hidden_states_scale + (residual + residual_bias) x residual_scale."""
    h, n = w.s.hidden, w.B.b * w.B.seq
    names = ("hidden_states_scale", "hidden_states_bias", "residual_scale", "residual_bias")
    w.record(sub, None, tuple((name, (h,)) for name in names), every)
    w.B.add(w.label(f"{sub} (+residual)", every), "norm", "encoder", len(every), w.tok + (h,), w.tok + (h,),
            params=4 * h * len(every), ew=5 * n * h, weights_per_call=4 * h, extra_in=n * h)


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes (ZayaModel.forward, ZayaDecoderLayer, ZayaCCAProjection, ZayaRouter): writes its ops
    to B and returns the modules it met."""
    s = B.s
    z = s.variant_as(ZayaVariant)
    w = Walk(B, LAYOUT)
    h, L, tok, b, n = s.hidden, s.layers, w.tok, B.b, B.b * B.seq
    heads, kv, d, E, f, r = s.heads, s.kv_heads, s.head_dim, s.experts, s.moe_intermediate, z.router
    every, later, at, cca = tuple(range(L)), tuple(range(1, L)), f"{_P.attn}.", f"{_CCA}."
    C, pad, bias = (heads + kv) * d, z.time0 + z.time1 - 2, z.attn_bias

    w.record(_P.embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(_P.embed, "embedding", s.vocab, h, B.seq)
    for name in ("input_hidden_states_scale", "input_hidden_states_bias"):
        w.record(name, None, (("", (h,)),), None)
    B.add("(embeddings + input_hidden_states_bias) x input_hidden_states_scale", "activation", "embedding", 1, tok + (h,),
          tok + (h,), params=2 * h, ew=2 * n * h, weights_per_call=2 * h)
    for d_rot in sorted(set(z.rope_dims)):
        decoders.rotary(B, d_rot, f"rotary_emb ({d_rot} dims)")
    w.norm(_P.attn_in, None, h, every)
    w.linear(cca + "q_proj", None, h, heads * d, bias, every)
    w.linear(cca + "k_proj", None, h, kv * d, bias, every)
    # the depthwise conv over the left-padded S + pad tokens (output S + cca_time1 - 1), the grouped conv over that (S
    # out, the last s kept): S = s, or pad when fewer (transformers 5.25's cache pads a first state short of the
    # kernels to pad tokens, and the layer pads that again)
    S = max(B.seq, pad)
    w.record(cca + "conv_qk_depthwise", None, (("weight", (C, 1, z.time0)), ("bias", (C,))), every)
    out0 = S + z.time1 - 1
    B.add(w.label(f"{cca}conv_qk_depthwise (padded by {pad})", every), "conv", "encoder", L, (b, C, S + pad),
          (b, C, out0), params=C * (z.time0 + 1) * L, macs=b * out0 * C * z.time0, ew=b * out0 * C,
          weights_per_call=C * (z.time0 + 1))
    w.record(cca + "conv_qk_grouped", None, (("weight", (C, d, z.time1)), ("bias", (C,))), every)
    B.add(w.label(f"{cca}conv_qk_grouped ({heads + kv} groups)", every), "conv", "encoder", L, (b, C, out0),
          (b, C, S), params=(C * d * z.time1 + C) * L, macs=b * S * C * d * z.time1, ew=b * S * C,
          weights_per_call=C * d * z.time1 + C)
    B.add(w.label(f"{_CCA} q/k residuals", every), "activation", "encoder", L, tok + (C,), tok + (C,),
          ew=n * (3 * heads * d + 2 * kv * d))
    w.linear(cca + "v_proj_current", None, h, kv * d // 2, bias, every)
    w.linear(cca + "v_proj_delayed", None, h, kv * d // 2, bias, every)
    # no state yet: the delayed value's first token is v_proj_delayed of a zero row
    B.linear(w.label(f"{cca}v_proj_delayed (zero row: no state)", every), "encoder", (b, 1), h, kv * d // 2, bias, L,
             copies=0)
    w.record(f"{_P.attn}.qk_norm", None, (("temp", (kv,)),), every)
    B.add(w.label(f"{_P.attn}.qk_norm (L2, x temp)", every), "norm", "encoder", L, tok + (C,), tok + (C,),
          params=kv * L, ew=n * (C * (ew_cost("rmsnorm") + 1)), weights_per_call=kv)
    for d_rot in sorted(set(z.rope_dims)):
        layers = tuple(i for i in every if z.rope_dims[i] == d_rot)
        decoders.rope_apply(B, w.label(f"{_P.attn} rotary ({d_rot} dims)", layers), heads + kv, d_rot, len(layers))
    B.causal_self_attention(f"{_P.layers}[{{layers}}].{_P.attn}", "encoder", heads, d)
    w.linear(at + _P.o, None, heads * d, h, bias, every)
    _scaling(w, "post_attention_residual_scale", every)
    w.norm(_P.mlp_in, None, h, every, residual=False)
    # the router: down_proj, the previous layer's states (layers 1..), the router MLP over num_experts + 1 classes
    w.linear(f"{_GATE}.down_proj", None, h, r, True, every)
    if later:
        w.record(f"{_GATE}.router_states_scale", None, (("", (r,)),), later)
        B.add(w.label(f"{_GATE} + previous router states x router_states_scale", later), "activation", "encoder",
              len(later), tok + (r,), tok + (r,), params=r * len(later), ew=2 * n * r, weights_per_call=r)
    w.norm(f"{_GATE}.router_mlp.norm", None, r, every, residual=False)
    for name in ("fc1", "fc2"):
        w.linear(f"{_GATE}.router_mlp.{name}", None, r, r, True, every)
        B.activation(w.label(f"{_GATE}.router_mlp gelu ({name})", every), "encoder", tok, r, "gelu", L)
    w.linear(f"{_GATE}.router_mlp.out_proj", None, r, E + 1, False, every)
    B.add(w.label(f"{_GATE} softmax, top-1 over {E} experts + skip", every), "activation", "encoder", L, tok + (E + 1,),
          tok + (1,), ew=n * (E + 1) * (ew_cost("softmax") + 2))
    # the experts, fused: every token through one (a skipped token through expert 0, weighted 0)
    w.record(f"{_P.mlp}.experts", None, (("gate_up_proj", (E, 2 * f, h)), ("down_proj", (E, h, f))), every)
    B.linear(w.label(f"{_P.mlp}.experts.gate_up_proj (top-1 of {E})", every), "encoder", tok, h, 2 * f, False, L,
             copies=L * E, active_copies=L)
    B.activation(w.label(f"{_P.mlp}.experts {s.activation}(gate) x up", every), "encoder", tok, f, s.activation, L,
                 gated=True)
    B.linear(w.label(f"{_P.mlp}.experts.down_proj (top-1 of {E})", every), "encoder", tok, f, h, False, L, copies=L * E,
             active_copies=L)
    _scaling(w, "post_mlp_residual_scale", every)
    w.norm(_P.norm, None, h, None, residual=False)
    if s.head == "lm":
        w.modules.append(Module(_P.lm_head, None, (("weight", (s.vocab, h)),) + ((("bias", (s.vocab,)),) if z.head_bias
                                                                              else ()), top=True))
        decoders.lm_head(B, _P.lm_head, _P.embed, bias=z.head_bias)
    return w.modules


def build(B: Builder) -> None:
    walk(B)


expected_tensors = walk_tensors(walk, _P.body)
# the paths the name regexes read (two layers: router_states_scale from layer 1 on)
_NAMES = walk_names.walked(walk, **walk_names.LM, heads=2, kv_heads=1, head_dim=4, experts=2, top_k=1,
                           moe_intermediate=4, variant=ZayaVariant(4, 2, 2, True, True, (2, 2)))


def state_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """DynamicCache(config): per layer K/V, the CCA conv state and the delayed value's state, in the model's dtype."""
    z = s.variant_as(ZayaVariant)
    per = 2 * s.kv_heads * s.head_dim * ab   # K and V, per token and layer
    state = ((s.heads + s.kv_heads) * s.head_dim * (z.time0 + z.time1 - 2) + s.kv_heads * s.head_dim // 2) * ab
    ns = len(s.sliding_layers)
    return [(f"b={b}, s={n}", b * (per * s.layers * n + state * s.layers),
             f"2 x g x d x {ab} B = {per:,} B per token and layer: {s.layers} layers x s = {n} tokens"
             + (f" ({ns} sliding: {SLIDING_HELD})" if ns else "")
             + f"; + L x (conv state (heads + g) x d x (cca_time0 + cca_time1 - 2) + delayed value g x d / 2) x {ab} B "
             f"= {state * s.layers:,} B/sequence, any s (LinearAttentionAndFullAttentionLayer); x b")]


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
              vocab_size=99, moe_intermediate_size=24, num_experts=4, num_experts_per_tok=1, router_hidden_size=16,
              eos_token_id=2)

FAMILY = Family(
    name="zaya",
    model_types=("zaya",),
    signature=walk_names.signature(_NAMES, f"{_CCA}.conv_qk_grouped", tf1=False),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    # the head rules (`lm_head`, or a name under `model.`) and ZayaForCausalLM._tied_weights_keys
    **{**layout.decoder_lm(LAYOUT), "kv_cache": state_cache},
    gguf_architectures=(),   # llama.cpp has no ZAYA: no GGUF names
    before=("mixtral", "phi3"),   # tried before them: its mlp.experts and self_attn.qkv_proj names match their signatures
    samples=(
        Sample("ZayaConfig", _SIZES, ("ZayaForCausalLM", "ZayaModel"), device="cpu"),
        # untied with a biased head and biased attention; MQA, wider kernels, three layers of both types
        Sample("ZayaConfig", dict(_SIZES, num_hidden_layers=3, num_key_value_heads=1, tie_word_embeddings=False,
                                  lm_head_bias=True, attention_bias=True, cca_time0=3, cca_time1=4, sliding_window=4,
                                  layer_types=["hybrid", "hybrid_sliding", "hybrid"]), ("ZayaForCausalLM",), device="cpu"),
    ),
)
