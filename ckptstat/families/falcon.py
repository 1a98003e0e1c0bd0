"""Falcon (transformers modeling_falcon.py, configuration_falcon.py), all three decoder layouts its
FalconConfig builds:

* Falcon-7B: multi_query (one K/V head), parallel_attn (attention and MLP read one input_layernorm);
* Falcon-40B/180B, Falcon2: new_decoder_architecture, num_kv_heads grouped K/V heads, two LayerNorms
  (ln_attn, ln_mlp) when num_ln_in_parallel_attn is 2 (its default there), one otherwise;
* Falcon-RW: multi_query and parallel_attn off (input_layernorm, then post_attention_layernorm), ALiBi.

q, k and v are fused in query_key_value [(a + 2g) d, h] (g = 1 multi-query; a for the old multi-head
layout, whose fused width is 3h), `bias` switches every linear's bias, the MLP is dense_h_to_4h / gelu /
dense_4h_to_h (ffn_hidden_size, 4h by default), and the LM head is tied to word_embeddings by default
(FalconForCausalLM's _tied_weights_keys: lm_head.weight). The rotary table's matmul runs even with ALiBi.

Switches: FalconVariant."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .framework import base, decoders, infer
from .framework.archspec import Variant
from .framework.base import ArchSpec, Cfg, Family, KVLines, Sample, Shapes, Tensors, TieRule, add_linear, add_norm
from .framework.ops import Builder


@dataclass(frozen=True)
class FalconVariant(Variant):
    new_arch: bool      # new_decoder_architecture (40B/180B, Falcon2)
    alibi: bool         # ALiBi instead of rotary positions (RW)
    parallel: bool      # parallel_attn: attention and MLP read the same input
    ln_attn_mlp: bool   # two LayerNorms per parallel layer (ln_attn, ln_mlp: num_ln_in_parallel_attn 2)


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size", "n_embed"), c.int("num_attention_heads", "n_head")
    new = bool(c.get("new_decoder_architecture", default=False))
    mq = bool(c.get("multi_query", default=True))
    g = c.int("num_kv_heads", default=a) if new or not mq else 1
    parallel = bool(c.get("parallel_attn", default=True))
    n_ln = c.int("num_ln_in_parallel_attn", default=2 if new else 1)
    bias = bool(c.get("bias", default=False))
    return ArchSpec(layers=c.int("num_hidden_layers", "n_layer"), hidden=h, heads=a, kv_heads=g, head_dim=h // a,
                    intermediate=c.int("ffn_hidden_size", default=4 * h), vocab=c.int("vocab_size"),
                    context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("activation", default="gelu")), qkv_bias=bias, o_bias=bias, mlp_bias=bias,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    variant=FalconVariant(new_arch=new, alibi=bool(c.get("alibi", default=False)), parallel=parallel,
                                          ln_attn_mlp=parallel and n_ln == 2), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"word_embeddings\.weight$", "word_embeddings")
    qkv = infer.shape(T, r"self_attention\.query_key_value\.weight$", "query_key_value")[0]
    two_ln = infer.has(T, r"\.ln_attn\.weight$")
    parallel = not infer.has(T, r"\.post_attention_layernorm\.weight$")
    mq = not two_ln and qkv != 3 * h and (qkv - h) % 2 == 0 and h % ((qkv - h) // 2 or 1) == 0 and qkv < 3 * h
    new = two_ln or (qkv != 3 * h and not mq)
    if mq:   # one K and one V head: the fused width is h + 2d, so d is exact
        d = (qkv - h) // 2
    else:    # 64 as every released Falcon, else the largest d for which (a + 2g) d is the fused width
        d = next((x for x in (64, 128, 32, 16, 8, 4, 2, 1) if h % x == 0 and qkv % x == 0 and (qkv // x - h // x) % 2 == 0), 1)
    a = h // d
    g = (qkv // d - a) // 2 if new else a if qkv == 3 * h else 1
    return ArchSpec(layers=infer.count_layers(T, r"(?:^|\.)h\.(\d+)\."), hidden=h, heads=a, kv_heads=g, head_dim=d,
                    intermediate=infer.shape(T, r"mlp\.dense_h_to_4h\.weight$", "dense_h_to_4h")[0], vocab=V,
                    qkv_bias=infer.has(T, r"query_key_value\.bias$"), o_bias=infer.has(T, r"self_attention\.dense\.bias$"),
                    mlp_bias=infer.has(T, r"dense_h_to_4h\.bias$"), tied_embeddings=infer.find(T, r"lm_head\.weight$") is None,
                    variant=FalconVariant(new_arch=new, alibi=False, parallel=parallel, ln_attn_mlp=two_ln),
                    assumptions=(f"no config: head_dim assumed {d}, rotary positions (not ALiBi)",), **common)


def _norms(s: ArchSpec) -> tuple[str, ...]:
    """The LayerNorms FalconDecoderLayer creates (a non-parallel layer has two even in the new layout)."""
    v = s.variant_as(FalconVariant)
    if not v.parallel:
        return ("input_layernorm", "post_attention_layernorm")
    return ("ln_attn", "ln_mlp") if v.ln_attn_mlp else ("input_layernorm",)


def _qkv_width(s: ArchSpec) -> int:
    old_mha = s.kv_heads == s.heads and not s.variant_as(FalconVariant).new_arch
    return 3 * s.hidden if old_mha else (s.heads + 2 * s.kv_heads) * s.head_dim


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, L, a, d, f = s.hidden, s.layers, s.heads, s.head_dim, s.intermediate
    tok = (b, n)
    v = s.variant_as(FalconVariant)
    B.embedding("word_embeddings", "embedding", s.vocab, h, n)
    decoders.rotary(B, d)
    lay = f"h[{L}]"
    norms = _norms(s)
    sequential = not v.parallel and not v.new_arch
    B.norm(f"{lay}.{norms[0]}", "encoder", tok, h, L, residual=False)
    if len(norms) == 2 and not sequential:
        # ln_mlp; or a new-layout layer's post_attention_layernorm, created but never run
        B.norm(f"{lay}.{norms[1]}", "encoder", (b, n if norms[1] == "ln_mlp" else 0), h, L, residual=False)
    B.linear(f"{lay}.self_attention.query_key_value", "encoder", tok, h, _qkv_width(s), s.qkv_bias, L)
    if not v.alibi:
        decoders.rope_apply(B, f"{lay}.self_attention rotary", a + s.kv_heads, d, L)
    B.attention(f"{lay}.self_attention", "encoder", a, n, n, d, L, causal=True, extra_ew=3 if v.alibi else 2)
    B.linear(f"{lay}.self_attention.dense", "encoder", tok, h, h, s.o_bias, L)
    if sequential:
        B.norm(f"{lay}.post_attention_layernorm", "encoder", tok, h, L)
    B.linear(f"{lay}.mlp.dense_h_to_4h", "encoder", tok, h, f, s.mlp_bias, L)
    B.activation(f"{lay}.mlp act", "encoder", tok, f, s.activation, L)
    B.linear(f"{lay}.mlp.dense_4h_to_h", "encoder", tok, f, h, s.mlp_bias, L)
    B.add(f"{lay} + residual" if sequential else f"{lay} attn + mlp + residual", "activation", "encoder", L,
          tok + (h,), tok + (h,), ew=b * n * h * (1 if sequential else 2))
    B.norm("ln_f", "encoder", tok, h, residual=False)
    decoders.lm_head(B, "lm_head", "word_embeddings")


def expected_tensors(s: ArchSpec) -> Shapes:
    h, f = s.hidden, s.intermediate
    p = "" if s.head == "base" else "transformer."
    out: Shapes = {p + "word_embeddings.weight": (s.vocab, h)}
    for i in range(s.layers):
        q = f"{p}h.{i}."
        for nm in _norms(s):
            add_norm(out, q + nm, h)
        add_linear(out, q + "self_attention.query_key_value", _qkv_width(s), h, s.qkv_bias)
        add_linear(out, q + "self_attention.dense", h, h, s.o_bias)
        add_linear(out, q + "mlp.dense_h_to_4h", f, h, s.mlp_bias)
        add_linear(out, q + "mlp.dense_4h_to_h", h, f, s.mlp_bias)
    add_norm(out, p + "ln_f", h)
    if s.head == "lm":
        add_linear(out, "lm_head", s.vocab, h, bias=False)
    return out


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """transformers' FalconAttention caches K and V after broadcasting them to the a query heads in the
    new layout (and has a heads in the old multi-head one, 1 with multi_query)."""
    cached = s.heads if s.variant_as(FalconVariant).new_arch else s.kv_heads
    per_tok = 2 * s.layers * cached * s.head_dim * ab
    lines: KVLines = [(f"b={b}, s={n}", per_tok * b * n,
                       f"2 x L x {cached} heads x d x s x b x {ab} B = {per_tok:,} B/token (transformers' cache)")]
    if cached != s.kv_heads:
        g_tok = 2 * s.layers * s.kv_heads * s.head_dim * ab
        lines.append((f"b={b}, s={n}, {s.kv_heads} kv heads", g_tok * b * n,
                      f"a cache keeping only the {s.kv_heads} K/V heads (llama.cpp, vLLM): {g_tok:,} B/token"))
    return lines


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """convert_hf_to_gguf.py FalconModel writes head_count_kv (1 for Falcon-7B's multi-query) and a
    feed_forward_length of 4h whatever ffn_hidden_size is, so the MLP width comes from ffn_up. llama.cpp's
    falcon is the parallel layout only: one LayerNorm (attn_norm: 7B's input_layernorm, Falcon2's) or two
    (40B/180B: attn_norm is ln_mlp, attn_norm_2 ln_attn); a new-layout file shows itself by attn_norm_2 or
    grouped K/V heads."""
    cfg = infer.gguf_config(arch, metadata, tensors, "FalconForCausalLM")
    if cfg is None or arch != "falcon":
        return None
    g = cfg.pop("num_key_value_heads", 1)
    two_ln = any(n.endswith(".attn_norm_2.weight") for n in tensors)
    new = two_ln or g > 1
    cfg.update(num_kv_heads=g, new_decoder_architecture=new, multi_query=not new, parallel_attn=True,
               num_ln_in_parallel_attn=2 if two_ln else 1, bias="blk.0.attn_qkv.bias" in tensors)
    up = tensors.get("blk.0.ffn_up.weight")
    if up is not None and len(up.shape) == 2:
        cfg["ffn_hidden_size"] = up.shape[0]
    return cfg


# HF module -> llama.cpp GGUF tensor name (gguf-py tensor_mapping.py, MODEL_ARCH.FALCON). The converter
# reorders Falcon-40B's fused query_key_value rows (tensor_data_layout "jploski"): names and shapes align, values not.
GGUF_TENSOR_NAMES = (
    ("transformer.word_embeddings", "token_embd"), ("transformer.ln_f", "output_norm"), ("lm_head", "output"),
    ("transformer.h.{bid}.input_layernorm", "blk.{bid}.attn_norm"),
    ("transformer.h.{bid}.self_attention.query_key_value", "blk.{bid}.attn_qkv"),
    ("transformer.h.{bid}.self_attention.dense", "blk.{bid}.attn_output"),
    ("transformer.h.{bid}.mlp.dense_h_to_4h", "blk.{bid}.ffn_up"),
    ("transformer.h.{bid}.mlp.dense_4h_to_h", "blk.{bid}.ffn_down"),
)
# Falcon-40B/180B's two LayerNorms: attn_norm is ln_mlp there, attn_norm_2 ln_attn
GGUF_TENSOR_NAMES_TWO_LN = tuple(p for p in GGUF_TENSOR_NAMES if p[1] != "blk.{bid}.attn_norm") + (
    ("transformer.h.{bid}.ln_mlp", "blk.{bid}.attn_norm"), ("transformer.h.{bid}.ln_attn", "blk.{bid}.attn_norm_2"))


def gguf_table(arch: str, names: Collection[str]) -> tuple[tuple[str, str], ...]:
    return GGUF_TENSOR_NAMES_TWO_LN if any(n.endswith(".attn_norm_2.weight") for n in names) else GGUF_TENSOR_NAMES


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, vocab_size=99, max_position_embeddings=64)

FAMILY = Family(
    name="falcon",
    model_types=("falcon",),
    # BLOOM's files share h.N.self_attention.query_key_value (a BLOOM family would go before this one)
    signature=r"(^|[./])h[./]\d+[./]self_attention[./]query_key_value",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    head_rules=base.decoder_head_rules(r"(^|\.)lm_head\.weight$", r"^transformer\."),
    default_head="lm",
    tie_rules=(TieRule("lm_head.weight", "transformer.word_embeddings.weight", "config"),),
    kv_cache=kv_cache,
    gguf_config=gguf_config, gguf_tensor_names=GGUF_TENSOR_NAMES, gguf_table=gguf_table,
    samples=(
        Sample("FalconConfig", _SIZES, ("FalconModel", "FalconForCausalLM")),     # 7B: multi-query, parallel
        Sample("FalconConfig", dict(_SIZES, new_decoder_architecture=True, num_kv_heads=2, tie_word_embeddings=False),
               ("FalconForCausalLM",)),                                              # 40B
        Sample("FalconConfig", dict(_SIZES, new_decoder_architecture=True, num_kv_heads=2, num_ln_in_parallel_attn=1),
               ("FalconForCausalLM",)),                                              # Falcon2-11B
        # RW: ALiBi, multi-head, sequential, biased; inference cannot tell ALiBi from rotary (FLOPs only)
        Sample("FalconConfig", dict(_SIZES, alibi=True, multi_query=False, parallel_attn=False, bias=True),
               ("FalconForCausalLM",)),
    ),
)
