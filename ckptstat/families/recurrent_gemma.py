"""RecurrentGemma / Griffin (transformers modeling_recurrent_gemma.py): the embedding times sqrt(h), then per layer a
temporal block after temporal_pre_norm and a gated MLP (gate_proj, up_proj of intermediate_size // 2, down_proj, all
biased) after channel_pre_norm (RMSNorms x (1 + weight)); final_norm, the LM head (tied by default) soft-capped by
logits_soft_cap. The temporal block by config block_types, repeated over the layers: "recurrent" (linear_y and linear_x
h -> lru_width, biased; a depthwise conv1d of conv1d_width over x, biased, FlopCounterMode counting its padded output
s + conv1d_width - 1, none for one token, a decoding step; the RG-LRU: two block-diagonal gates, each a baddbmm of
num_attention_heads blocks of lru_width / heads, and an element-wise scan; x y; linear_out lru_width -> h) or
"attention" (local attention: q/k/v by attention_bias, o_proj biased, rotary on partial_rotary_factor of head_dim
h / heads; eager attention counts the whole square, the window only masks).

The cache: RecurrentGemmaModel keeps its states in the modules (conv1d_state, the RG-LRU's recurrent_states) and in a
DynamicCache it does not return; the forward returns none, so there is no cache to count (kv_cache None).

Described once, by its forward (`walk`): each parameterised module recorded as its op is written (layout_base.Walk,
the names as LAYOUT's paths give them), from which the expected tensors derive; llama.cpp has no RecurrentGemma, so
no GGUF names."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import decoders, infer, layout, walk_names
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Module, Walk, walk_tensors
from .framework.layout_parts import mlp
from .framework.ops import Builder, ew_cost

# the module names as RecurrentGemmaForCausalLM saves them (LLaMA's elsewhere); the walk records with them; the Gemma
# RMSNorms (x (1 + weight)) hold a weight alone
LAYOUT = DecoderLayout(tied_default=True, paths=Paths(attn="temporal_block", mlp="mlp_block", attn_in="temporal_pre_norm",
                                                      mlp_in="channel_pre_norm", norm="final_norm"))
_P = LAYOUT.paths
_X, _CONV, _LRU = "linear_x", "conv_1d", "rg_lru"   # the recurrent block's modules the shape look-ups read too


@dataclass(frozen=True)
class GriffinVariant(Variant):
    lru: int                       # lru_width
    conv: int                      # conv1d_width
    recurrent: tuple[int, ...]     # the layers whose temporal block is recurrent (the others: local attention)
    window: int                    # attention_window_size: the local attention's mask (causal halving counts it)


# RecurrentGemmaConfig's block_types default (tests/test_config_defaults.py compares it with the class's)
BLOCK_TYPES = ("recurrent", "recurrent", "attention")


def _recurrent(c: Cfg, layers: int) -> tuple[int, ...]:
    # RecurrentGemmaConfig's block_types default, a tuple (config_defaults.json keeps scalars only): absent, it is this
    kinds = c.get("block_types", default=None) or BLOCK_TYPES
    if not isinstance(kinds, (list, tuple)) or not kinds or any(k not in ("recurrent", "attention") for k in kinds):
        raise UsageError(f"{c.path}: config block_types is not a list of 'recurrent' / 'attention'")
    return tuple(i for i in range(layers) if kinds[i % len(kinds)] == "recurrent")


def from_config(c: Cfg) -> ArchSpec:
    h, a, L = c.int("hidden_size"), c.int("num_attention_heads"), c.int("num_hidden_layers")
    d = h // a
    v = GriffinVariant(lru=c.int("lru_width", default=h), conv=c.int("conv1d_width", default=FROM_CLASS),
                       recurrent=_recurrent(c, L), window=c.int("attention_window_size", default=FROM_CLASS))
    bias = bool(c.get("attention_bias", default=FROM_CLASS))
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=c.int("num_key_value_heads", default=a), head_dim=d,
                    intermediate=c.int("intermediate_size", default=FROM_CLASS) // 2, vocab=c.int("vocab_size"),
                    activation=str(c.get("hidden_activation", default=FROM_CLASS)), gated_mlp=True, norm="rmsnorm",
                    qkv_bias=bias, o_bias=True, mlp_bias=True,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    rope_dim=int(d * decoders.rotary_factor(c, default=0.5)),
                    logit_softcap=c.get("logits_soft_cap", default=FROM_CLASS) is not None, variant=v, **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The widths from the modules the walk records (_NAMES), as it names them."""
    N = _NAMES
    V, h = walk_names.shape(T, N, _P.embed)
    L = infer.count_layers(T, walk_names.pattern(N, _P.attn_in, layer=r"(\d+)"))
    rx = walk_names.pattern(N, _X, layer=r"(\d+)")
    recurrent = tuple(sorted({int(m.group(1)) for n in T if (m := re.search(rx, n))}))
    lru, k = walk_names.shape(T, N, _X)[0], walk_names.shape(T, N, _CONV)[-1]
    H, f = walk_names.shape(T, N, _LRU, "input_gate_bias")[0], walk_names.shape(T, N, "ffn_up")[0]
    d, w = h // H, int(class_default("recurrent_gemma", "attention_window_size"))
    kv = infer.find(T, walk_names.pattern(N, _P.k))
    return ArchSpec(layers=L, hidden=h, heads=H, kv_heads=kv.shape[0] // d if kv is not None else H, head_dim=d,
                    intermediate=f, vocab=V, activation="gelu_pytorch_tanh", gated_mlp=True, norm="rmsnorm",
                    qkv_bias=infer.has(T, walk_names.pattern(N, _P.q, "bias")), o_bias=True, mlp_bias=True,
                    tied_embeddings=not infer.has(T, walk_names.pattern(N, _P.lm_head)), rope_dim=d // 2,
                    logit_softcap=True, variant=GriffinVariant(lru=lru, conv=k, recurrent=recurrent, window=w),
                    assumptions=(f"no config: the logits soft-capped, half of each head rotated and a window of {w}, as "
                                 "the config class defaults them",), **common)


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes (RecurrentGemmaModel.forward, RecurrentGemmaDecoderLayer): writes its ops to B and
    returns the modules it met."""
    s, b, n = B.s, B.b, B.seq
    v, w = s.variant_as(GriffinVariant), Walk(B, LAYOUT)
    h, a, g, d, f, L, lru, tok = s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.layers, v.lru, w.tok
    every, t = tuple(range(L)), f"{_P.attn}."
    rec, att = v.recurrent, tuple(i for i in range(L) if i not in v.recurrent)
    w.record(_P.embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(_P.embed, "embedding", s.vocab, h, n)
    B.add(f"{_P.embed} x sqrt(hidden_size)", "activation", "embedding", 1, tok + (h,), tok + (h,), ew=b * n * h)
    w.norm(_P.attn_in, None, h, every)
    if rec:
        R = len(rec)
        for name in ("linear_y", _X):
            w.linear(t + name, None, h, lru, True, rec)
        B.activation(w.label(f"{_P.attn} act(y)", rec), "encoder", tok, lru, s.activation, R)
        # the padded output FlopCounterMode counts (the forward keeps n of it); one token with the cache (use_cache, the
        # config's default) is a decoding step: the window times the weight, summed, element-wise
        out = n + v.conv - 1
        w.record(t + _CONV, None, (("weight", (lru, 1, v.conv)), ("bias", (lru,))), rec)
        B.add(w.label(f"{t}{_CONV} (depthwise)", rec), "conv", "encoder", R, (b, lru, n), (b, lru, n),
              params=(lru * v.conv + lru) * R, macs=0 if n == 1 else b * lru * out * v.conv, ew=b * lru * out * 2,
              weights_per_call=lru * v.conv + lru)
        bw = lru // a   # two block-diagonal gates, each a baddbmm of `a` blocks, and the recurrent parameter
        w.record(t + _LRU, None, (("recurrent_param", (lru,)),) + tuple(
            (f"{gate}_{part}", shape) for gate in ("input_gate", "recurrent_gate")
            for part, shape in (("weight", (a, bw, bw)), ("bias", (a, bw)))), rec)
        B.add(w.label(f"{t}{_LRU} input and recurrent gates ({a} blocks of {bw})", rec), "linear", "encoder", R,
              tok + (lru,), tok + (2 * lru,), params=(2 * a * bw * bw + 2 * a * bw + lru) * R, macs=2 * b * n * lru * bw,
              ew=2 * b * n * lru * (1 + ew_cost("sigmoid")), weights_per_call=2 * a * bw * bw + 2 * a * bw + lru)
        B.add(w.label(f"{t}{_LRU} scan", rec), "ssm", "encoder", R, tok + (lru,), tok + (lru,), ew=b * n * lru * 12)
        B.activation(w.label(f"{_P.attn} x * y", rec), "encoder", tok, lru, "mul", R, gated=True)
        w.linear(t + "linear_out", None, lru, h, True, rec)
    if att:   # local attention: eager attention counts the whole square, the window only masks
        rot = s.rope_dim or d
        for sub, width in ((_P.q, a), (_P.k, g), (_P.v, g)):
            w.linear(t + sub, None, h, width * d, s.qkv_bias, att)
        decoders.rotary(B, rot, w.label(t + "rotary_emb", att))
        decoders.rope_apply(B, w.label(f"{_P.attn} rotary", att), a + g, rot, len(att))
        B.attention(w.label(_P.attn, att), "encoder", a, n, n, d, len(att), True, window=v.window)
        w.linear(t + _P.o, None, a * d, h, True, att)
    w.norm(_P.mlp_in, None, h, every)
    mlp(w, every, "gated", f)
    w.norm(_P.norm, None, h, None, residual=False)
    if s.head == "lm":
        w.modules.append(Module(_P.lm_head, None, (("weight", (s.vocab, h)),), top=True))
    decoders.lm_head(B, _P.lm_head, _P.embed)
    if s.head == "lm" and s.logit_softcap:
        B.add("logit soft-capping (tanh(x / cap) x cap)", "activation", "cls", 1, tok + (s.vocab,), tok + (s.vocab,),
              ew=b * n * s.vocab * (ew_cost("tanh") + 2))
    return w.modules


def build(B: Builder) -> None:
    walk(B)


expected_tensors = walk_tensors(walk, _P.body)
# the paths the name regexes read: a recurrent layer and an attention one
_NAMES = walk_names.walked(walk, **walk_names.LM, variant=GriffinVariant(lru=8, conv=2, recurrent=(0,), window=2))


_SIZES = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
              vocab_size=99, attention_window_size=4, conv1d_width=3, lru_width=24)

FAMILY = Family(
    name="recurrent_gemma",
    model_types=("recurrent_gemma",),
    signature=walk_names.signature(_NAMES, _LRU, tf1=False),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    # LLaMA's module names at the top (model.embed_tokens, lm_head): its heads, head rules and RecurrentGemmaForCausalLM's
    # _tied_weights_keys; no cache: the forward returns none (the module docstring)
    **{**layout.decoder_lm(LAYOUT), "kv_cache": None},
    gguf_architectures=(),   # llama.cpp has no RecurrentGemma architecture: no GGUF names
    samples=(
        Sample("RecurrentGemmaConfig", _SIZES, ("RecurrentGemmaForCausalLM", "RecurrentGemmaModel")),
        Sample("RecurrentGemmaConfig", dict(_SIZES, block_types=["attention", "recurrent"], attention_bias=True,
                                            tie_word_embeddings=False, lru_width=None),
               ("RecurrentGemmaForCausalLM",)),
    ),
)
