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
DynamicCache it does not return; the forward returns none, so there is no cache to count (kv_cache None)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import decoders, infer, layout
from .framework.archspec import Variant
from .framework.base import (
    FROM_CLASS,
    ArchSpec,
    Cfg,
    Family,
    Sample,
    Shapes,
    Tensors,
    add_linear,
    add_norm,
    class_default,
)
from .framework.layout import DecoderLayout
from .framework.ops import Builder, ew_cost


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
    V, h = infer.shape(T, r"(^|\.)embed_tokens\.weight$", "embed_tokens")
    L = infer.count_layers(T, r"layers\.(\d+)\.temporal_pre_norm\.")
    rx = r"layers\.(\d+)\.temporal_block\.linear_x\.weight$"
    recurrent = tuple(sorted({int(m.group(1)) for n in T if (m := re.search(rx, n))}))
    lru = infer.shape(T, rx, "temporal_block.linear_x")[0]
    H = infer.shape(T, r"rg_lru\.input_gate_bias$", "rg_lru.input_gate_bias")[0]
    k = infer.shape(T, r"temporal_block\.conv_1d\.weight$", "temporal_block.conv_1d")[-1]
    f = infer.shape(T, r"mlp_block\.up_proj\.weight$", "mlp_block.up_proj")[0]
    d, w = h // H, int(class_default("recurrent_gemma", "attention_window_size"))
    kv = infer.find(T, r"temporal_block\.k_proj\.weight$")
    return ArchSpec(layers=L, hidden=h, heads=H, kv_heads=kv.shape[0] // d if kv is not None else H, head_dim=d,
                    intermediate=f, vocab=V, activation="gelu_pytorch_tanh", gated_mlp=True, norm="rmsnorm",
                    qkv_bias=infer.has(T, r"temporal_block\.q_proj\.bias$"), o_bias=True, mlp_bias=True,
                    tied_embeddings=not infer.has(T, r"(^|\.)lm_head\.weight$"), rope_dim=d // 2,
                    logit_softcap=True, variant=GriffinVariant(lru=lru, conv=k, recurrent=recurrent, window=w),
                    assumptions=(f"no config: the logits soft-capped, half of each head rotated and a window of {w}, as "
                                 "the config class defaults them",), **common)


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    v = s.variant_as(GriffinVariant)
    h, a, g, d, f, L, lru = s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.layers, v.lru
    rec = len(v.recurrent)
    att = L - rec
    tok = (b, n)
    B.embedding("model.embed_tokens", "embedding", s.vocab, h, n)
    B.add("model.embed_tokens x sqrt(hidden_size)", "activation", "embedding", 1, tok + (h,), tok + (h,), ew=b * n * h)
    B.norm(f"model.layers[{L}].temporal_pre_norm", "encoder", tok, h, L)
    if rec:
        blk, H = f"model.layers[{rec}].temporal_block", a
        for name in ("linear_y", "linear_x"):
            B.linear(f"{blk}.{name}", "encoder", tok, h, lru, True, rec)
        B.activation(f"{blk} act(y)", "encoder", tok, lru, s.activation, rec)
        # the padded output FlopCounterMode counts (the forward keeps n of it); one token with the cache (use_cache, the
        # config's default) is a decoding step: the window times the weight, summed, element-wise
        out = n + v.conv - 1
        B.add(f"{blk}.conv_1d (depthwise)", "conv", "encoder", rec, (b, lru, n), (b, lru, n),
              params=(lru * v.conv + lru) * rec, macs=0 if n == 1 else b * lru * out * v.conv, ew=b * lru * out * 2,
              weights_per_call=lru * v.conv + lru)
        bw = lru // H
        B.add(f"{blk}.rg_lru input and recurrent gates ({H} blocks of {bw})", "linear", "encoder", rec, tok + (lru,),
              tok + (2 * lru,), params=(2 * H * bw * bw + 2 * H * bw + lru) * rec, macs=2 * b * n * lru * bw,
              ew=2 * b * n * lru * (1 + ew_cost("sigmoid")), weights_per_call=2 * H * bw * bw + 2 * H * bw + lru)
        B.add(f"{blk}.rg_lru scan", "ssm", "encoder", rec, tok + (lru,), tok + (lru,), ew=b * n * lru * 12)
        B.activation(f"{blk} x * y", "encoder", tok, lru, "mul", rec, gated=True)
        B.linear(f"{blk}.linear_out", "encoder", tok, lru, h, True, rec)
    if att:
        blk, rot = f"model.layers[{att}].temporal_block", s.rope_dim or d
        for name, width in (("q_proj", a), ("k_proj", g), ("v_proj", g)):
            B.linear(f"{blk}.{name}", "encoder", tok, h, width * d, s.qkv_bias, att)
        decoders.rotary(B, rot, f"{blk}.rotary_emb")
        decoders.rope_apply(B, f"{blk} rotary", a + g, rot, att)
        B.attention(blk, "encoder", a, n, n, d, att, True, window=v.window)
        B.linear(f"{blk}.o_proj", "encoder", tok, a * d, h, True, att)
    B.norm(f"model.layers[{L}].channel_pre_norm", "encoder", tok, h, L)
    mlp = f"model.layers[{L}].mlp_block"
    for name in ("gate_proj", "up_proj"):
        B.linear(f"{mlp}.{name}", "encoder", tok, h, f, True, L)
    B.activation(f"{mlp} act*up", "encoder", tok, f, s.activation, L, gated=True)
    B.linear(f"{mlp}.down_proj", "encoder", tok, f, h, True, L)
    B.norm("model.final_norm", "encoder", tok, h, residual=False)
    decoders.lm_head(B, "lm_head", "model.embed_tokens")
    if s.head == "lm" and s.logit_softcap:
        B.add("logit soft-capping (tanh(x / cap) x cap)", "activation", "cls", 1, tok + (s.vocab,), tok + (s.vocab,),
              ew=b * n * s.vocab * (ew_cost("tanh") + 2))


def expected_tensors(s: ArchSpec) -> Shapes:
    v = s.variant_as(GriffinVariant)
    h, a, g, d, f, lru = s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, v.lru
    m = "" if s.head == "base" else "model."
    out: Shapes = {m + "embed_tokens.weight": (s.vocab, h)}
    for j in range(s.layers):
        p = f"{m}layers.{j}."
        add_norm(out, p + "temporal_pre_norm", h, bias=False)
        t = p + "temporal_block."
        if j in v.recurrent:
            add_linear(out, t + "linear_y", lru, h)
            add_linear(out, t + "linear_x", lru, h)
            add_linear(out, t + "linear_out", h, lru)
            out[t + "conv_1d.weight"] = (lru, 1, v.conv)
            out[t + "conv_1d.bias"] = (lru,)
            bw = lru // a
            out[t + "rg_lru.recurrent_param"] = (lru,)
            for gate in ("input_gate", "recurrent_gate"):
                out[t + f"rg_lru.{gate}_weight"] = (a, bw, bw)
                out[t + f"rg_lru.{gate}_bias"] = (a, bw)
        else:
            add_linear(out, t + "q_proj", a * d, h, s.qkv_bias)
            add_linear(out, t + "k_proj", g * d, h, s.qkv_bias)
            add_linear(out, t + "v_proj", g * d, h, s.qkv_bias)
            add_linear(out, t + "o_proj", h, a * d)
        add_norm(out, p + "channel_pre_norm", h, bias=False)
        add_linear(out, p + "mlp_block.gate_proj", f, h)
        add_linear(out, p + "mlp_block.up_proj", f, h)
        add_linear(out, p + "mlp_block.down_proj", h, f)
    add_norm(out, m + "final_norm", h, bias=False)
    if s.head == "lm":
        out["lm_head.weight"] = (s.vocab, h)
    return out


_SIZES = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
              vocab_size=99, attention_window_size=4, conv1d_width=3, lru_width=24)

FAMILY = Family(
    name="recurrent_gemma",
    model_types=("recurrent_gemma",),
    signature=r"(^|[./])layers[./]\d+[./]temporal_block[./]rg_lru[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    # LLaMA's module names at the top (model.embed_tokens, lm_head): its heads, head rules and RecurrentGemmaForCausalLM's
    # _tied_weights_keys; no cache: the forward returns none (the module docstring)
    **{**layout.decoder_lm(DecoderLayout(tied_default=True)), "kv_cache": None},
    gguf_architectures=(),   # llama.cpp has no RecurrentGemma architecture: no GGUF names
    samples=(
        Sample("RecurrentGemmaConfig", _SIZES, ("RecurrentGemmaForCausalLM", "RecurrentGemmaModel")),
        Sample("RecurrentGemmaConfig", dict(_SIZES, block_types=["attention", "recurrent"], attention_bias=True,
                                            tie_word_embeddings=False, lru_width=None),
               ("RecurrentGemmaForCausalLM",)),
    ),
)
