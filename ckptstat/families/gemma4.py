"""Gemma 4 text (transformers modeling_gemma4.py Gemma4TextModel / Gemma4ForCausalLM, model_type gemma4_text; and
modeling_gemma4_unified.py Gemma4UnifiedTextModel / Gemma4UnifiedForCausalLM, gemma4_unified_text: the same layers
without per-layer embeddings or MoE). Gemma3's sandwich-normed layer (input, post-attention, pre- and post-feedforward
RMSNorms), the embedding times sqrt(hidden_size), per-head q/k RMSNorms and a weightless v RMSNorm, attention scaled by
1.0, sliding and full layers by layer_types, a GeGLU MLP, the layer's output times a persistent [1] buffer
(layer_scalar, no parameter), the LM head tied by default and optionally soft-capped. What Gemma 4 adds:

* per-layer sizes: the config's per_layer_config overrides head_dim (and num_key_value_heads) on some layers (the
  class writes {"head_dim": global_head_dim, "num_key_value_heads": num_global_key_value_heads} for the full-attention
  layers when the file has none); each layer's projections, norms and attention run at its own head width;
* attention_k_eq_v: the full-attention layers have no v_proj; the values are k_proj's output (v_norm'd, no rotary);
* num_kv_shared_layers: the last layers hold no k_proj / v_proj / k_norm and run no key or value projection; they
  attend over the keys and values the last earlier layer of their type computed, and the cache holds nothing for
  them (cache_utils: a "dummy" layer); use_double_wide_mlp doubles those layers' MLP width;
* per-layer embeddings (hidden_size_per_layer_input p > 0, Gemma4TextModel only): embed_tokens_per_layer
  [vocab_size_per_layer_input, L x p] looked up, per_layer_model_projection (h -> L x p) of the scaled embeddings,
  per_layer_projection_norm over each p, the two summed; each layer then runs per_layer_input_gate (h -> p), the
  activation, x its slice, per_layer_projection (p -> h), post_per_layer_input_norm, + residual;
* enable_moe_block: beside the dense MLP, a router (a weightless RMSNorm x scale [h], proj h -> num_experts, softmax,
  top_k_experts, x per_expert_scale [E]) over the layer's pre-MLP stream and experts held fused (gate_up_proj
  [E, 2 x moe_intermediate, h], down_proj [E, h, moe_intermediate]), run on pre_feedforward_layernorm_2's output;
  the dense and expert outputs normed (post_feedforward_layernorm_1 / _2) and summed before post_feedforward_layernorm.

FLOPs are FlopCounterMode's of one eager forward (every score of each layer's head width; the window only masks). A
use_bidirectional_attention "all" config (an encoder: the class halves the window) and per_layer_config overrides of
anything but head_dim and num_key_value_heads are NoAnalyticModel (the meta path answers)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import decoders, layout, walk_names
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, SLIDING_HELD, ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Walk, walk_tensors
from .framework.layout_parts import mlp
from .framework.ops import Builder, ew_cost

# the module names of Gemma4TextDecoderLayer (Gemma2's sandwich norms); Walk records with them
LAYOUT = DecoderLayout(placement="sandwich", qk_norm="head", embed_scale=True, tied_default=True,
                       paths=Paths(mlp_in="pre_feedforward_layernorm"))
_OVERRIDABLE = {"head_dim", "num_key_value_heads"}


@dataclass(frozen=True)
class Gemma4Variant(Variant):
    head_dims: tuple[int, ...]      # each layer's head_dim (per_layer_config's override, else head_dim)
    kv_heads: tuple[int, ...]       # each layer's num_key_value_heads
    shared: tuple[int, ...]         # the KV-shared layers (num_kv_shared_layers, the last ones)
    no_v: tuple[int, ...] = ()      # the layers without v_proj (attention_k_eq_v: the full-attention ones)
    double_wide: bool = False       # use_double_wide_mlp: the shared layers' MLP twice intermediate_size
    per_layer: int = 0              # hidden_size_per_layer_input (0: no per-layer embeddings)
    per_layer_vocab: int = 0        # vocab_size_per_layer_input
    moe: bool = False               # enable_moe_block
    # Gemma 3n (families/gemma3n.py): each layer's MLP width (() : intermediate), AltUp's streams (altup_num_inputs; 0:
    # none), LAuReL's rank (0: none), whether the corrected stream is scaled (altup_correct_scale); Gemma 4's
    # layer_scalar multiply (a buffer, no parameter)
    widths: tuple[int, ...] = ()
    altup: int = 0
    laurel: int = 0
    altup_scale: bool = False
    layer_scalar: bool = True
    # a multimodal wrapper's embedders its forward runs over every token (wrappers.EMBEDDERS: Gemma 3n's embed_vision and
    # embed_audio), (name, width): their projections' FLOPs, their weights outside the analytic model
    embedders: tuple[tuple[str, int], ...] = ()


def _overrides(c: Cfg, types: list[str]) -> dict[int, Mapping[str, Any]]:
    """per_layer_config as saved ({"<layer>": {key: value}}), else the class's rule for the full-attention layers:
    head_dim global_head_dim (its __post_init__ pops it with a default of 512) and, with attention_k_eq_v,
    num_key_value_heads num_global_key_value_heads where given."""
    saved = c.get("per_layer_config", default=None)
    if saved is None:
        over: dict[str, Any] = {"head_dim": c.int("global_head_dim", default=512)}
        if c.get("attention_k_eq_v", default=FROM_CLASS) and (g := c.get("num_global_key_value_heads", default=None)):
            over["num_key_value_heads"] = int(g)
        return {i: over for i, t in enumerate(types) if t == "full_attention"}
    if not isinstance(saved, Mapping):
        raise UsageError(f"{c.path}: config per_layer_config is not an object of layer -> overrides")
    out: dict[int, Mapping[str, Any]] = {}
    for k, v in saved.items():
        if not isinstance(v, Mapping) or not str(k).isdigit():
            raise UsageError(f"{c.path}: config per_layer_config[{k!r}] is not a layer's overrides")
        if extra := set(v) - _OVERRIDABLE:
            raise NoAnalyticModel(f"{c.path}: config per_layer_config overrides {sorted(extra)} on layer {k}: the "
                                  f"{c.model_type} op template describes only per-layer head_dim and num_key_value_heads")
        out[int(k)] = v
    return out


def layer_types(c: Cfg, layers: int, period: int) -> list[str]:
    """config layer_types, else the class's rule: a full-attention layer every `period` layers, sliding ones between."""
    types = c.get("layer_types", default=None)
    if types is None:
        types = ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(t not in ("sliding_attention", "full_attention")
                                                                  for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {layers} 'sliding_attention' / 'full_attention'")
    return types


def spec(c: Cfg, types: list[str], intermediate: int, **fields: Any) -> ArchSpec:
    """The ArchSpec of a Gemma 4 or Gemma 3n text config: the fields both read, the KV-shared layers (the last
    num_kv_shared_layers, each reading the K/V of the last earlier layer of its type), the variant's other `fields`."""
    L, S = len(types), c.int("num_kv_shared_layers", default=FROM_CLASS)
    if S >= L and S:
        raise NoAnalyticModel(f"{c.path}: config num_kv_shared_layers = {S}: every layer shares another's keys and values")
    if S and set(types[:L - S]) != set(types):
        raise UsageError(f"{c.path}: config num_kv_shared_layers = {S} leaves a layer type no layer producing its cache")
    if c.get("use_bidirectional_attention", default=None) in ("all", True):
        raise NoAnalyticModel(f"{c.path}: config use_bidirectional_attention = 'all': the {c.model_type} op template "
                              "describes only causal attention")
    sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    bias = bool(c.get("attention_bias", default=FROM_CLASS))
    return ArchSpec(layers=L, hidden=c.int("hidden_size"), heads=c.int("num_attention_heads"),
                    kv_heads=c.int("num_key_value_heads", default=FROM_CLASS), head_dim=c.int("head_dim", default=FROM_CLASS),
                    intermediate=intermediate, vocab=c.int("vocab_size"), context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_activation", default=FROM_CLASS)), gated_mlp=True, norm="rmsnorm",
                    qkv_bias=bias, o_bias=bias, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    sliding_window=c.int("sliding_window", default=FROM_CLASS) if sliding else None, sliding_layers=sliding,
                    logit_softcap=c.get("final_logit_softcapping", default=None) is not None,
                    variant=Gemma4Variant(shared=tuple(range(L - S, L)), **fields), **c.common)


def from_config(c: Cfg) -> ArchSpec:
    L = c.int("num_hidden_layers")
    # Gemma4TextConfig.__post_init__: 5 sliding layers to 1 full; the last is always full
    types = layer_types(c, L, 6)[:-1] + ["full_attention"]
    d, g = c.int("head_dim", default=FROM_CLASS), c.int("num_key_value_heads", default=FROM_CLASS)
    over = _overrides(c, types)
    k_eq_v = bool(c.get("attention_k_eq_v", default=FROM_CLASS))
    unified = c.model_type != "gemma4_text"   # Gemma4UnifiedTextConfig: no per-layer embeddings, no MoE
    p = 0 if unified else c.int("hidden_size_per_layer_input", default=FROM_CLASS)
    moe = not unified and bool(c.get("enable_moe_block", default=FROM_CLASS))
    s = spec(c, types, c.int("intermediate_size"), head_dims=tuple(int(over.get(i, {}).get("head_dim", d)) for i in range(L)),
             kv_heads=tuple(int(over.get(i, {}).get("num_key_value_heads", g)) for i in range(L)),
             no_v=tuple(i for i, t in enumerate(types) if k_eq_v and t == "full_attention"),
             double_wide=bool(c.get("use_double_wide_mlp", default=FROM_CLASS)), per_layer=p,
             per_layer_vocab=c.int("vocab_size_per_layer_input", default=FROM_CLASS) if p else 0, moe=moe)
    return replace(s, experts=c.int("num_experts"), top_k=c.int("top_k_experts"),
                   moe_intermediate=c.int("moe_intermediate_size")) if moe else s


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    raise NoAnalyticModel("Gemma 4 without config.json: the per-layer head widths, windows and KV sharing are config-only")


def _groups(s: ArchSpec) -> dict[tuple[int, int, bool, bool, int], tuple[int, ...]]:
    """The layers alike in their parameters and matmuls: (head_dim, kv heads, own K/V, own v_proj, MLP width)."""
    v = s.variant_as(Gemma4Variant)
    out: dict[tuple[int, int, bool, bool, int], tuple[int, ...]] = {}
    for i in range(s.layers):
        shared = i in v.shared
        f = (v.widths[i] if v.widths else s.intermediate) * (2 if v.double_wide and shared else 1)
        key = (v.head_dims[i], v.kv_heads[i], not shared, i not in v.no_v, f)
        out[key] = out.get(key, ()) + (i,)
    return out


def build(B: Builder) -> None:
    walk(B)


def walk(B: Builder) -> list[layout.Module]:
    """The forward at B.s's sizes: writes its ops to B and returns the modules it met."""
    s = B.s
    v = s.variant_as(Gemma4Variant)
    w = Walk(B, LAYOUT)
    p, h, a, L, P = w.p, s.hidden, s.heads, s.layers, v.per_layer
    tok, n = w.tok, B.b * B.seq
    w.record(p.embed, "token_embd", (("weight", (s.vocab, h)),), None)
    B.embedding(p.embed, "embedding", s.vocab, h, B.seq)
    B.add(f"{p.embed} x sqrt(hidden_size)", "activation", "embedding", 1, tok + (h,), tok + (h,), ew=n * h)
    if P:   # per-layer embeddings: the token's rows and a projection of the embeddings, normed per layer, averaged
        w.record("embed_tokens_per_layer", "per_layer_token_embd", (("weight", (v.per_layer_vocab, L * P)),), None)
        B.embedding("embed_tokens_per_layer", "embedding", v.per_layer_vocab, L * P, B.seq)
        w.linear("per_layer_model_projection", "per_layer_model_proj", h, L * P, False, None)
        w.norm("per_layer_projection_norm", "per_layer_proj_norm", P, None, residual=False, tokens=tok + (L,))
        B.add("per-layer inputs: scales, (projection + embedding) x 2^-0.5", "activation", "embedding", 1,
              tok + (L * P,), tok + (L * P,), ew=n * L * P * 4)
    for name, width in v.embedders:   # (weights counted from the checkpoint, outside: no parameters here)
        B.linear(f"{name}.embedding_projection (every token; a multimodal embedder)", "embedding", tok, width, h, False,
                 tied=True)
    if v.altup:   # the embeddings and K - 1 projections of them, each rescaled to their magnitude: K streams
        _streams(w, "altup_projections")
    for kind in sorted({v.head_dims[i] for i in range(L)}):
        decoders.rotary(B, kind, f"rotary_emb (head_dim {kind})")
    at = f"{p.attn}."
    every = tuple(range(L))
    if v.altup:
        _altup(w, every)
    w.norm(p.attn_in, "attn_norm", h, every, residual=False)
    if v.laurel:   # LAuReL beside the attention: x + norm(right(left(x))), averaged with the attention's residual
        w.linear("laurel.linear_left", "laurel_l", h, v.laurel, False, every)
        w.linear("laurel.linear_right", "laurel_r", v.laurel, h, False, every)
        w.norm("laurel.post_laurel_norm", "laurel_post_norm", h, every)
        B.add(w.label("(attention + laurel) / sqrt(2)", every), "activation", "encoder", L, tok + (h,), tok + (h,),
              ew=n * h * 2)
    for (d, g, own, has_v, _), ls in _groups(s).items():
        w.linear(at + p.q, "attn_q", h, a * d, s.qkv_bias, ls)
        w.norm(at + p.q_norm, "attn_q_norm", d, ls, residual=False, tokens=tok + (a,))
        heads = a
        if own:
            w.linear(at + p.k, "attn_k", h, g * d, s.qkv_bias, ls)
            if has_v:
                w.linear(at + p.v, "attn_v", h, g * d, s.qkv_bias, ls)
            w.norm(at + p.k_norm, "attn_k_norm", d, ls, residual=False, tokens=tok + (g,))
            B.add(w.label(f"{p.attn}.v_norm (weightless RMSNorm)", ls), "norm", "encoder", len(ls), tok + (g * d,),
                  tok + (g * d,), ew=n * g * d * (ew_cost("rmsnorm") - 1))
            heads += g
        decoders.rope_apply(B, w.label(f"{p.attn} rotary", ls), heads, d, len(ls))
        B.causal_self_attention(f"{p.layers}[{{layers}}, head_dim {d}].{p.attn}", "encoder", a, d, layers=ls)
        w.linear(at + p.o, "attn_output", a * d, h, s.o_bias, ls)
    w.norm(p.attn_out, "post_attention_norm", h, every)
    w.norm(p.mlp_in, "ffn_norm", h, every, residual=False)
    for f in sorted({key[4] for key in _groups(s)}):
        mlp(w, tuple(i for ls in (ls for key, ls in _groups(s).items() if key[4] == f) for i in ls), "gated", f)
    if v.moe:
        _experts(w, every)
    w.norm(p.mlp_out, "post_ffw_norm", h, every)
    if P:
        w.linear("per_layer_input_gate", "inp_gate", h, P, False, every)
        B.activation(w.label("per-layer input act x its slice", every), "encoder", tok, P, s.activation, L, gated=True)
        w.linear("per_layer_projection", "proj", P, h, False, every)
        w.norm("post_per_layer_input_norm", "post_norm", h, every)
    if v.layer_scalar:
        B.add(w.label("x layer_scalar (a buffer)", every), "activation", "encoder", L, tok + (h,), tok + (h,), ew=n * h)
    if v.altup:   # K - 1 streams projected back, rescaled, the K averaged
        _streams(w, "altup_unembed_projections")
    w.norm(p.norm, "output_norm", h, None, residual=False)
    if s.head == "lm":
        w.modules.append(layout.Module(p.lm_head, "output", (("weight", (s.vocab, h)),), top=True))
        decoders.lm_head(B, p.lm_head, p.embed)
        if s.logit_softcap:
            B.add("final logit soft-capping (tanh(x / cap) x cap)", "activation", "cls", 1, tok + (s.vocab,),
                  tok + (s.vocab,), ew=n * s.vocab * (ew_cost("tanh") + 2))
    return w.modules


def _streams(w: Walk, name: str) -> None:
    """Gemma 3n's K - 1 model-level projections {name}.j (h -> h) between one stream and the K AltUp streams."""
    s, B = w.s, w.B
    h, K, n = s.hidden, s.variant_as(Gemma4Variant).altup, B.b * B.seq
    for j in range(K - 1):
        w.linear(f"{name}.{j}", None, h, h, False, None)
    B.add(f"{name}: magnitudes, rescale", "activation", "encoder", 1, w.tok + (K * h,), w.tok + (K * h,), ew=n * K * h * 5)


def _altup(w: Walk, layers: tuple[int, ...]) -> None:
    """Gemma3nTextAltUp around each layer: predict (router_norm, modality_router h -> K, tanh, prediction_coefs K -> K^2,
    the K streams x those coefficients, a [h, K] x [K, K] matmul per token), the layer on the active stream, then
    correct (router_norm and modality_router again on its output, correction_coefs K -> K, each stream + coefficient x
    the innovation) and the active stream x correct_output_scale."""
    s, B = w.s, w.B
    v = s.variant_as(Gemma4Variant)
    h, K, L, n, tok = s.hidden, v.altup, len(layers), B.b * B.seq, w.tok
    w.record("altup.router_norm", "altup_router_norm", (("weight", (h,)),), layers)
    B.norm(w.label("altup.router_norm (predict, correct)", layers), "encoder", tok, h, 2 * L, copies=L, residual=False)
    w.record("altup.modality_router", "altup_router", (("weight", (K, h)),), layers)
    B.linear(w.label("altup.modality_router (predict, correct)", layers), "encoder", tok, h, K, False, 2 * L, copies=L)
    w.linear("altup.prediction_coefs", "altup_predict_coef", K, K * K, False, layers)
    B.add(w.label("altup predict (streams x coefficients, + streams)", layers), "activation", "encoder", L,
          tok + (h, K), tok + (h, K), macs=n * h * K * K, ew=n * h * K)
    w.linear("altup.correction_coefs", "altup_correct_coef", K, K, False, layers)
    B.add(w.label("altup correct (streams + coefficients x innovation)", layers), "activation", "encoder", L,
          tok + (K * h,), tok + (K * h,), ew=n * K * h * 3)
    w.record("altup.correct_output_scale", "altup_correct_scale", (("", (h,)),), layers)
    B.add(w.label("altup.correct_output_scale", layers), "activation", "encoder", L if v.altup_scale else 0, tok + (h,),
          tok + (h,), params=h * L, ew=n * h, weights_per_call=h)


def _experts(w: Walk, layers: tuple[int, ...]) -> None:
    """Gemma4TextRouter and Gemma4TextExperts beside the dense MLP: k rows per token through each fused projection."""
    s, B = w.s, w.B
    h, E, k, F, L, n = s.hidden, s.experts, s.top_k, s.moe_intermediate, len(layers), B.b * B.seq
    tok = w.tok
    B.add(w.label("router norm x scale", layers), "norm", "encoder", L, tok + (h,), tok + (h,), params=h * L,
          ew=n * h * (ew_cost("rmsnorm") + 1), weights_per_call=h)
    w.record("router.scale", None, (("", (h,)),), layers)
    w.linear("router.proj", "ffn_gate_inp", h, E, False, layers)
    w.record("router.per_expert_scale", None, (("", (E,)),), layers)
    B.add(w.label("router softmax, top-k, x per_expert_scale", layers), "activation", "encoder", L, tok + (E,),
          tok + (k,), params=E * L, ew=n * (E * ew_cost("softmax") + 3 * k), weights_per_call=E)
    w.norm("pre_feedforward_layernorm_2", "pre_ffw_norm_2", h, layers, residual=False)
    rows = (n * k,)
    w.record("experts.gate_up_proj", "ffn_gate_up_exps", (("", (E, 2 * F, h)),), layers)
    B.linear(w.label("experts.gate_up_proj", layers), "encoder", rows, h, 2 * F, False, L, copies=L * E, active_copies=L * k)
    B.activation(w.label("experts act x up", layers), "encoder", rows, F, s.activation, L, gated=True)
    w.record("experts.down_proj", "ffn_down_exps", (("", (E, h, F)),), layers)
    B.linear(w.label("experts.down_proj", layers), "encoder", rows, F, h, False, L, copies=L * E, active_copies=L * k)
    B.add(w.label("experts x weights, summed", layers), "activation", "encoder", L, rows + (h,), tok + (h,), ew=n * k * h * 2)
    for j in (1, 2):
        w.norm(f"post_feedforward_layernorm_{j}", f"post_ffw_norm_{j}", h, layers, residual=False)
    B.add(w.label("MLP + experts", layers), "activation", "encoder", L, tok + (h,), tok + (h,), ew=n * h)


expected_tensors = walk_tensors(walk, LAYOUT.paths.body)


def modules(**parts: Any) -> tuple[layout.Module, ...]:
    """The modules the walk records at a spec holding every part (a layer with its own K/V, one without; `parts`: the
    variant's switches), and Gemma 4's layer_scalar, a persistent buffer (no parameter, no expected tensor) that
    save_pretrained writes and llama.cpp keeps as layer_output_scale."""
    v = Gemma4Variant(head_dims=(4, 8), kv_heads=(1, 1), shared=(1,), **parts)
    scalar = layout.Module(f"{LAYOUT.paths.layers}.{{bid}}.layer_scalar", "blk.{bid}.layer_output_scale", (("", (1,)),),
                           (0, 1))
    return walk_names.walked(walk, **walk_names.LM, experts=2, top_k=1, moe_intermediate=4, sliding_window=2,
                             sliding_layers=(0,), variant=v) + (scalar,) * v.layer_scalar


def gguf_tensor_names(every: tuple[layout.Module, ...]) -> tuple[tuple[str, str], ...]:
    """HF module -> llama.cpp name (gguf-py MODEL_ARCH.GEMMA4 / GEMMA3N, tensor_mapping.py) of `every` part's modules."""
    body = LAYOUT.paths.body
    return tuple({m.path if m.top else f"{body}.{m.path}": m.gguf for m in every if m.gguf is not None}.items())


# Gemma 3n's signature (families/gemma3n.py): a parameter under AltUp, which no Gemma 4 file holds
ALTUP = walk_names.signature(modules(altup=2), "altup", tf1=False)
_EVERY = modules(per_layer=2, per_layer_vocab=8, moe=True)


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """DynamicCache(config): K and V of each layer that computes its own (the KV-shared ones a "dummy" layer that
    stores none), 2 x its kv heads x its head_dim x bytes per token, s tokens on every one (SLIDING_HELD). A second
    line, where it differs, as base.decoder_kv_cache's: from the first decode step on, and in StaticCache (its
    StaticSlidingWindowLayers; DummyLayers for the KV-shared ones), a sliding layer holds min(s, sliding_window)."""
    v = s.variant_as(Gemma4Variant)
    own = [i for i in range(s.layers) if i not in v.shared]
    marked = [i for i in own if i in set(s.sliding_layers)]
    per = {i: 2 * v.kv_heads[i] * v.head_dims[i] * ab for i in own}
    total = b * n * sum(per.values())
    lines: KVLines = [(f"b={b}, s={n}", total,
                       f"2 x g x d x {ab} B per token of each of the {len(own)} layers with their own K/V (each its "
                       f"head_dim and kv heads), s = {n} tokens each ({len(marked)} sliding: {SLIDING_HELD})")]
    w = s.sliding_window
    static = b * sum(p * (min(n, w) if w and i in marked else n) for i, p in per.items())
    if w and static != total:
        lines.append((f"decoding or static cache, window {w}", static,
                      f"from the first decode step on, or transformers' StaticCache (max_cache_len = s) or a "
                      f"rolling-window kernel: {len(marked)} sliding layers x sliding_window = {w} tokens, "
                      f"{len(own) - len(marked)} full layers x s (each its head_dim and kv heads; the KV-shared "
                      f"layers none)"))
    return lines


_SIZES = dict(vocab_size=97, hidden_size=32, intermediate_size=40, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, max_position_embeddings=64, sliding_window=4,
              layer_types=["sliding_attention", "full_attention"] * 2)
_PLE = dict(hidden_size_per_layer_input=8, vocab_size_per_layer_input=50)
_MOE = dict(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=16)

FAMILY = Family(
    name="gemma4",
    model_types=("gemma4_text", "gemma4_unified_text"),
    # a persistent [1] buffer on every layer, which save_pretrained writes (Gemma 2/3 have none), or the per-layer
    # embeddings' gate or the router's per-expert scale; Gemma 3n's layers have the gate too, and AltUp
    signature=walk_names.signature(_EVERY, "layer_output_scale", "inp_gate", "router.per_expert_scale", tf1=False),
    signature_without=ALTUP,
    before=("gemma", "llama", "olmo", "qwen3"),   # Gemma 4 files hold Gemma3's pre_feedforward_layernorm and q_norm
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **{**layout.decoder_lm(LAYOUT), "kv_cache": kv_cache},
    gguf_architectures=("gemma4",),
    gguf_tensor_names=gguf_tensor_names(_EVERY),
    samples=(
        Sample("Gemma4TextConfig", dict(_SIZES, **_PLE), ("Gemma4TextModel", "Gemma4ForCausalLM"), infer=False),
        Sample("Gemma4TextConfig", dict(_SIZES, **_PLE, **_MOE, global_head_dim=16, attention_k_eq_v=True,
                                        num_global_key_value_heads=1, num_kv_shared_layers=2, use_double_wide_mlp=True,
                                        tie_word_embeddings=False, final_logit_softcapping=30.0),
               ("Gemma4ForCausalLM",), device="cpu", infer=False),
        # without per-layer embeddings or MoE, the parameters' names are Gemma3's (the layer_scalar buffers, which a
        # file holds and the test's parameter names do not, show Gemma 4)
        Sample("Gemma4TextConfig", dict(_SIZES, hidden_size_per_layer_input=0, attention_bias=True),
               ("Gemma4ForCausalLM",), detected_as="gemma"),
        Sample("Gemma4UnifiedTextConfig", dict(_SIZES, global_head_dim=16, num_kv_shared_layers=2),
               ("Gemma4UnifiedTextModel", "Gemma4UnifiedForCausalLM"), detected_as="gemma"),
    ),
)
