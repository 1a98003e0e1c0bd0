"""BLOOM (transformers modeling_bloom.py, configuration_bloom.py): word_embeddings followed by a LayerNorm
(word_embeddings_layernorm), no position table (ALiBi: a per-head linear bias on the scores, added by the
baddbmm that computes Q K^T; FlopCounterMode counts it as that bmm), pre-LayerNorm layers with a fused, biased
query_key_value [3h, h] (per head q, k, v), dense, and an MLP dense_h_to_4h / GELU / dense_4h_to_h that is 4h
wide whatever the config says, ln_f, and an LM head tied to word_embeddings by default
(BloomForCausalLM._tied_weights_keys). `pretraining_tp` with `slow_but_exact` splits dense and dense_4h_to_h
into tp slices of the input: the same MACs."""
from __future__ import annotations

from typing import Any

from .framework import base, decoder_heads, decoders, infer
from .framework.base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule, add_linear, add_norm, decoder_kv_cache
from .framework.ops import Builder


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size", "n_embed"), c.int("n_head", "num_attention_heads")
    return ArchSpec(layers=c.int("n_layer", "num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=4 * h, vocab=c.int("vocab_size"), activation="gelu",
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"word_embeddings\.weight$", "word_embeddings")
    a, note = infer.heads_for(h, 128 if h >= 4096 else 64)   # bloom-560m..3b: 64; 7b1 and 176B: 128
    return ArchSpec(layers=infer.count_layers(T, r"(?:^|\.)h\.(\d+)\."), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=4 * h, vocab=V, activation="gelu", num_labels=decoder_heads.labels(T),
                    tied_embeddings=infer.find(T, r"(^|\.)lm_head\.weight$") is None, assumptions=(note,), **common)


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, L, f = s.hidden, s.layers, s.intermediate
    tok = (b, n)
    B.embedding("word_embeddings", "embedding", s.vocab, h, n)
    B.norm("word_embeddings_layernorm", "embedding", tok, h, residual=False)
    lay = f"h[{L}]"
    B.norm(f"{lay}.input_layernorm", "encoder", tok, h, L, residual=False)
    B.linear(f"{lay}.self_attention.query_key_value", "encoder", tok, h, 3 * h, True, L)
    # ALiBi's bias is added to every score (the baddbmm), besides the scale and the mask
    B.attention(f"{lay}.self_attention", "encoder", s.heads, n, n, s.head_dim, L, causal=True, extra_ew=3)
    B.linear(f"{lay}.self_attention.dense", "encoder", tok, h, h, True, L)
    B.norm(f"{lay}.post_attention_layernorm", "encoder", tok, h, L)
    B.linear(f"{lay}.mlp.dense_h_to_4h", "encoder", tok, h, f, True, L)
    B.activation(f"{lay}.mlp act", "encoder", tok, f, s.activation, L)
    B.linear(f"{lay}.mlp.dense_4h_to_h", "encoder", tok, f, h, True, L)
    B.add(f"{lay} + residual", "activation", "encoder", L, tok + (h,), tok + (h,), ew=b * n * h)
    B.norm("ln_f", "encoder", tok, h, residual=False)
    decoders.lm_head(B, "lm_head", "word_embeddings")
    decoder_heads.build(B, h)


def expected_tensors(s: ArchSpec) -> Shapes:
    h, f = s.hidden, s.intermediate
    p = "" if s.head == "base" else "transformer."
    out: Shapes = {p + "word_embeddings.weight": (s.vocab, h)}
    add_norm(out, p + "word_embeddings_layernorm", h)
    for i in range(s.layers):
        q = f"{p}h.{i}."
        add_norm(out, q + "input_layernorm", h)
        add_linear(out, q + "self_attention.query_key_value", 3 * h, h)
        add_linear(out, q + "self_attention.dense", h, h)
        add_norm(out, q + "post_attention_layernorm", h)
        add_linear(out, q + "mlp.dense_h_to_4h", f, h)
        add_linear(out, q + "mlp.dense_4h_to_h", h, f)
    add_norm(out, p + "ln_f", h)
    if s.head == "lm":
        add_linear(out, "lm_head", s.vocab, h, bias=False)
    decoder_heads.tensors(out, s, h)
    return out


_SIZES = dict(hidden_size=32, n_layer=2, n_head=4, vocab_size=99)

FAMILY = Family(
    name="bloom",
    before=("falcon",),   # tried before them: its h.N.self_attention.query_key_value names match falcon's signature
    model_types=("bloom",),
    # the embedding LayerNorm: Falcon's files share h.N.self_attention.query_key_value but have none
    signature=r"(^|[./])word_embeddings_layernorm[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "seqcls", "tokcls", "qa"),
    head_rules=base.decoder_head_rules(r"(^|\.)lm_head\.weight$", r"^transformer\."),
    default_head="lm",
    tie_rules=(TieRule("lm_head.weight", "transformer.word_embeddings.weight", "config", heads=("lm",)),),
    kv_cache=decoder_kv_cache,
    gguf_architectures=(),
    samples=(
        Sample("BloomConfig", _SIZES, ("BloomModel", "BloomForCausalLM", "BloomForQuestionAnswering")),
        Sample("BloomConfig", dict(_SIZES, n_head=8, tie_word_embeddings=False, num_labels=3, pad_token_id=0, pretraining_tp=2,
                                   slow_but_exact=True),
               ("BloomForCausalLM", "BloomForSequenceClassification", "BloomForTokenClassification")),
    ),
)
