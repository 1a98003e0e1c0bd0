"""Inkling text (transformers modeling_inkling.py InklingTextModel / InklingForCausalLM, model_type inkling_text): a
pre-norm decoder whose every layer attends ("hybrid": full attention at num_attention_heads x head_dim; "hybrid_sliding":
a window of sliding_window_size at swa_num_attention_heads x swa_head_dim) and convolves:

* attention: q / k / v / o and r_proj (h -> heads x d_rel); k and v each through a depthwise causal conv1d of
  conv_kernel_size plus its input (k_sconv, v_sconv, float32); per-head q / k RMSNorms; a relative position bias, each
  token's relative states times rel_logits_proj.proj [d_rel, extent] (extent: sliding_window_size on sliding layers,
  rel_extent elsewhere), gathered by distance; scores scaled by 1 / head_dim; the full layers' queries and bias scaled by
  log(n / log_scaling_n_floor) where set (element-wise);
* the attention's and the MLP's outputs each through a depthwise conv1d over h plus its input (attn_sconv, mlp_sconv);
* the MLP by mlp_layer_types: dense (gate / up / down of intermediate_size, x global_scale) or an MoE: a sigmoid router
  over n_routed_experts + n_shared_experts (gate.weight, a float32 matmul), num_experts_per_tok experts held fused
  (gate_up_proj, down_proj) and every token through the n_shared_experts as bmm's (gate_proj, up_proj, down_proj [S, ...]);
* embed_tokens with its RMSNorm (embed_tokens.embed_norm), the final norm, the LM head (never tied) over the hidden
  states / logits_mup_width_multiplier.

FLOPs: FlopCounterMode's of one eager forward with the cache, as the coverage walk runs it: each conv over its input
padded to at least conv_kernel_size, its output kernel - 1 longer (causal_conv1d_fn's padding). The cache (DynamicCache:
LinearAttentionAndSlidingWindowAttentionLayer / ...FullAttentionLayer): K and V (a sliding layer's last
sliding_window_size - 1 tokens) and the four conv states, [b, channels, conv_kernel_size] in float32, per layer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import decoders, layout, walk_names
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, SLIDING_HELD, STATE_BYTES, ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Walk, walk_tensors
from .framework.layout_parts import mlp
from .framework.ops import Builder, ew_cost

LAYOUT = DecoderLayout(ties=False, paths=Paths())


@dataclass(frozen=True)
class InklingVariant(Variant):
    swa_heads: int
    swa_kv_heads: int
    swa_head_dim: int
    d_rel: int
    rel_extent: int
    kernel: int                 # conv_kernel_size (sconv_kernel_size): all four convs of a layer
    shared: int                 # n_shared_experts
    log_scaling: bool           # log_scaling_n_floor set: the full layers' queries and bias scaled (element-wise)

    def runs(self, i: int) -> int:
        """How many times layer i runs in one forward, each run with a cache layer of its own (Inkling 2 Loop's
        looped layers: several)."""
        return 1


def from_config(c: Cfg) -> ArchSpec:
    L, h = c.int("num_hidden_layers"), c.int("hidden_size")
    types = c.get("layer_types", default=None)
    if types is None:   # InklingTextConfig.__post_init__: local_layer_ids slide, else all but every 6th
        ids = c.get("local_layer_ids", default=None)
        local = set(ids) if isinstance(ids, list) else {i for i in range(L) if (i + 1) % 6}
        types = ["hybrid_sliding" if i in local else "hybrid" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in ("hybrid", "hybrid_sliding") for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {L} 'hybrid' / 'hybrid_sliding'")
    kinds = c.get("mlp_layer_types", default=None)
    if kinds is None:
        first = int(c.get("dense_mlp_idx", default=0))   # the class pops it with a default of 0
        kinds = ["dense" if i < first else "sparse" for i in range(L)]
    if not isinstance(kinds, list) or len(kinds) != L or any(k not in ("dense", "sparse") for k in kinds):
        raise UsageError(f"{c.path}: config mlp_layer_types is not a list of {L} 'dense' / 'sparse'")
    f, F = c.int("intermediate_size"), c.int("moe_intermediate_size", default=FROM_CLASS)
    if c.get("dense_intermediate_size", default=None) is not None:   # the class's rewrite (#49416)
        f, F = c.int("dense_intermediate_size"), f
    sparse = "sparse" in kinds
    shared = c.int("n_shared_experts", default=FROM_CLASS) if sparse else 0
    if sparse and not shared:
        raise NoAnalyticModel(f"{c.path}: config n_shared_experts = 0: the inkling router slices off no shared logits")
    sliding = tuple(i for i, t in enumerate(types) if t == "hybrid_sliding")
    return ArchSpec(layers=L, hidden=h, heads=c.int("num_attention_heads"),
                    kv_heads=c.int("num_key_value_heads", default=FROM_CLASS), head_dim=c.int("head_dim", default=FROM_CLASS),
                    intermediate=f, vocab=c.int("vocab_size"), context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_act", default=FROM_CLASS)), gated_mlp=True, norm="rmsnorm",
                    qkv_bias=False, o_bias=False, mlp_bias=False, tied_embeddings=False,
                    sliding_window=c.int("sliding_window_size", default=FROM_CLASS) if sliding else None,
                    sliding_layers=sliding, dense_layers=tuple(i for i, k in enumerate(kinds) if k == "dense"),
                    experts=c.int("n_routed_experts", default=FROM_CLASS) if sparse else 0,
                    top_k=c.int("num_experts_per_tok", default=FROM_CLASS) if sparse else 0, moe_intermediate=F,
                    variant=InklingVariant(swa_heads=c.int("swa_num_attention_heads", default=FROM_CLASS),
                                           swa_kv_heads=c.int("swa_num_key_value_heads", default=FROM_CLASS),
                                           swa_head_dim=c.int("swa_head_dim", default=FROM_CLASS),
                                           d_rel=c.int("d_rel", default=FROM_CLASS),
                                           rel_extent=c.int("rel_extent", default=FROM_CLASS),
                                           kernel=c.int("conv_kernel_size", default=FROM_CLASS), shared=shared,
                                           log_scaling=c.get("log_scaling_n_floor", default=None) is not None),
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    raise NoAnalyticModel("Inkling without config.json: its layer kinds and windows are config-only")


def geometry(s: ArchSpec, sliding: bool) -> tuple[int, int, int, int]:
    """(heads, kv heads, head_dim, relative extent) of a sliding or a full layer."""
    v = s.variant_as(InklingVariant)
    if sliding:
        return v.swa_heads, v.swa_kv_heads, v.swa_head_dim, s.sliding_window or 0
    return s.heads, s.kv_heads, s.head_dim, v.rel_extent


def conv(w: Walk, sub: str, channels: int, layers: tuple[int, ...]) -> None:
    """InklingShortConvolution (Inkling2's too): a depthwise conv1d at `sub` (no bias) over the input padded to at least
    the kernel, plus its input."""
    B, v = w.B, w.s.variant_as(InklingVariant)
    k = v.kernel
    w.record(sub, None, (("weight", (channels, 1, k)),), layers)
    out = max(B.seq, k) + k - 1
    B.add(w.label(f"{sub}.conv1d (depthwise, + input)", layers), "linear", "encoder", sum(v.runs(i) for i in layers),
          w.tok + (channels,),
          w.tok + (channels,), params=channels * k * len(layers), macs=B.b * channels * k * out,
          ew=B.b * B.seq * channels, weights_per_call=channels * k)


def walk(B: Builder) -> list[layout.Module]:
    """The forward at B.s's sizes: writes its ops to B and returns the modules it met."""
    s = B.s
    v = s.variant_as(InklingVariant)
    w = Walk(B, LAYOUT)
    p, h, L, n, tok = w.p, s.hidden, s.layers, B.b * B.seq, w.tok
    every = tuple(range(L))
    at = f"{p.attn}."
    w.record(p.embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(p.embed, "embedding", s.vocab, h, B.seq)
    w.norm(f"{p.embed}.embed_norm", None, h, None, residual=False)
    w.norm(p.attn_in, None, h, every, residual=False)
    for sliding in (True, False):
        ls = tuple(i for i in every if (i in s.sliding_layers) == sliding)
        if not ls:
            continue
        a, g, d, extent = geometry(s, sliding)
        for sub, width in ((p.q, a * d), (p.k, g * d), (p.v, g * d), ("r_proj", a * v.d_rel)):
            w.linear(at + sub, None, h, width, False, ls)
        conv(w, at + "k_sconv.conv1d", g * d, ls)
        conv(w, at + "v_sconv.conv1d", g * d, ls)
        w.norm(at + p.q_norm, None, d, ls, residual=False, tokens=tok + (a,))
        w.norm(at + p.k_norm, None, d, ls, residual=False, tokens=tok + (g,))
        w.record(at + "rel_logits_proj.proj", None, (("", (v.d_rel, extent)),), ls)
        B.add(w.label(f"{p.attn}.rel_logits_proj (relative states x proj, gathered by distance)", ls), "attention",
              "encoder", len(ls), tok + (a * v.d_rel,), (B.b, a, B.seq, B.seq), params=v.d_rel * extent * len(ls),
              macs=n * a * v.d_rel * extent, ew=B.b * a * B.seq * B.seq, weights_per_call=v.d_rel * extent)
        if v.log_scaling and not sliding:
            B.add(w.label(f"{p.attn} log scaling of queries and bias", ls), "activation", "encoder", len(ls),
                  tok + (a * d,), tok + (a * d,), ew=n * a * d + B.b * a * B.seq * B.seq)
        B.causal_self_attention(f"{p.layers}[{{layers}}].{p.attn}", "encoder", a, d, extra_ew=3, layers=ls)
        w.linear(at + p.o, None, a * d, h, False, ls)
    conv(w, "attn_sconv.conv1d", h, every)
    w.norm(p.attn_out, None, h, every)
    if dense := s.dense_layers:
        mlp(w, dense, "gated", s.intermediate)
        w.record(f"{p.mlp}.global_scale", None, (("", (1,)),), dense)
        B.add(w.label(f"{p.mlp} x global_scale", dense), "activation", "encoder", len(dense), tok + (h,), tok + (h,),
              params=len(dense), ew=n * h, weights_per_call=1)
    if sparse := tuple(i for i in every if i not in dense):
        _moe(w, sparse)
    conv(w, "mlp_sconv.conv1d", h, every)
    w.norm(p.norm, None, h, None, residual=False)
    if s.head == "lm":
        w.modules.append(layout.Module(p.lm_head, None, (("weight", (s.vocab, h)),), top=True))
        B.add("hidden / logits_mup_width_multiplier", "activation", "cls", 1, tok + (h,), tok + (h,), ew=n * h)
        decoders.lm_head(B, p.lm_head, p.embed)
    return w.modules


def _moe(w: Walk, layers: tuple[int, ...]) -> None:
    """InklingMoE: the sigmoid router over routed + shared experts, k rows per token through the fused experts, every
    token through the shared experts (three bmm's over S)."""
    s, B = w.s, w.B
    v = s.variant_as(InklingVariant)
    h, E, S, k, F, L, n, tok = s.hidden, s.experts, v.shared, s.top_k, s.moe_intermediate, len(layers), B.b * B.seq, w.tok
    m = f"{w.p.mlp}."
    w.record(m + "gate.weight", None, (("", (E + S, h)),), layers)
    B.linear(w.label(m + "gate (router, float32)", layers), "encoder", tok, h, E + S, False, L)
    w.record(m + "gate.global_scale", None, (("", (1,)),), layers)
    B.add(w.label(m + "gate sigmoid, top-k, normalised x route_scale x global_scale", layers), "activation", "encoder", L,
          tok + (E + S,), tok + (k + S,), params=L, ew=n * (E + S) * (ew_cost("sigmoid") + 1) + n * (k + S) * 6,
          weights_per_call=1)
    rows = (n * k,)
    w.record(m + "experts.gate_up_proj", None, (("", (E, 2 * F, h)),), layers)
    B.linear(w.label(m + "experts.gate_up_proj", layers), "encoder", rows, h, 2 * F, False, L, copies=L * E,
             active_copies=L * k)
    B.activation(w.label(m + "experts act x up", layers), "encoder", rows, F, s.activation, L, gated=True)
    w.record(m + "experts.down_proj", None, (("", (E, h, F)),), layers)
    B.linear(w.label(m + "experts.down_proj", layers), "encoder", rows, F, h, False, L, copies=L * E, active_copies=L * k)
    shared = (S * n,)
    for sub, fin, fout in (("gate_proj", h, F), ("up_proj", h, F), ("down_proj", F, h)):
        w.record(m + f"shared_experts.{sub}", None, (("", (S, fout, fin)),), layers)
        B.linear(w.label(m + f"shared_experts.{sub} (bmm over S)", layers), "encoder", shared, fin, fout, False, L,
                 copies=L * S)
    B.activation(w.label(m + "shared experts act x up x gamma", layers), "encoder", shared, F, s.activation, L, gated=True)
    B.add(w.label(m + "experts + shared experts (summed over S)", layers), "activation", "encoder", L, tok + (S * h,),
          tok + (h,), ew=n * (k + S) * h * 2)


def build(B: Builder) -> None:
    walk(B)


expected_tensors = walk_tensors(walk, LAYOUT.paths.body)


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """Per layer K and V, 2 x its kv heads x its head_dim x bytes per token, s tokens (a sliding layer's too:
    SLIDING_HELD), and the four conv states (k, v: kv heads x head_dim channels; attention and MLP outputs: h) of
    conv_kernel_size each, float32; a layer run more than once (Inkling 2 Loop) a copy per run."""
    v = s.variant_as(InklingVariant)
    rb = max(ab, STATE_BYTES)
    total = 0
    for i in range(s.layers):
        sliding = i in s.sliding_layers
        _, g, d, _ = geometry(s, sliding)
        total += v.runs(i) * (2 * g * d * ab * n + (2 * g * d + 2 * s.hidden) * v.kernel * rb)
    return [(f"b={b}, s={n}", b * total,
             f"per layer 2 x g x d x {ab} B per token x s = {n} ({SLIDING_HELD}) "
             f"+ four conv states (2 x g x d + 2 x h channels) x conv_kernel_size = {v.kernel} x {rb} B (float32), x b")]


# the variant the signatures' names are walked at (walk_names.walked; Inkling 2's sizes too)
NAMED = InklingVariant(swa_heads=2, swa_kv_heads=1, swa_head_dim=4, d_rel=2, rel_extent=4, kernel=2, shared=0,
                       log_scaling=False)
_SIZES = dict(vocab_size=97, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
              swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=4, sliding_window_size=4, d_rel=4,
              rel_extent=32, intermediate_size=24, moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2,
              n_shared_experts=2, max_position_embeddings=64, layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding"],
              mlp_layer_types=["dense", "sparse", "sparse"])

FAMILY = Family(
    name="inkling",
    model_types=("inkling_text",),
    signature=walk_names.signature(walk_names.walked(walk, **walk_names.LM, variant=NAMED, dense_layers=(0, 1)),
                                   "rel_logits_proj.proj", tf1=False),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **{**layout.decoder_lm(LAYOUT), "kv_cache": kv_cache},
    gguf_architectures=(),   # llama.cpp has no Inkling architecture
    samples=(
        Sample("InklingTextConfig", _SIZES, ("InklingTextModel", "InklingForCausalLM"), device="cpu", infer=False),
        Sample("InklingTextConfig", dict(_SIZES, log_scaling_n_floor=4, n_shared_experts=1,
                                         mlp_layer_types=["sparse"] * 3), ("InklingForCausalLM",), device="cpu", infer=False),
    ),
)
