"""GTE (transformers modeling_gte.py, Alibaba's gte-*-v1.5 "NewModel"): an encoder (layout.py, DecoderLayout.causal
false) with BERT's embeddings module less its positions (word embeddings, token types when type_vocab_size is not 0,
a LayerNorm), rotary q/k, LLaMA's projection names all biased, a gated MLP whose down projection alone is biased,
post-LayerNorm layers (post_attention_layernorm and post_mlp_layernorm after each residual add; no final norm), and
GteForMaskedLM's RoBERTa-style lm_head (dense, gelu, LayerNorm, a biased decoder tied to the word embeddings)."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.encoder_heads import EncoderHeads, with_heads
from .framework.layout import DecoderLayout, Paths

# the names as saved (the original NewModel's, which transformers 5 renames on load: conversion_mapping.py "gte"):
# fused qkv_proj and up_gate_proj, encoder.layer.N, attn_ln and mlp_ln, lm_head.norm
GTE = DecoderLayout(causal=False, norm="layernorm", placement="post", embeddings="bert", final_norm=False,
                    fused_qkv=True, fused_gate_up=True, qkv_bias=True, o_bias=True, mlp_bias=False, down_bias=True,
                    lm_transform="gelu", lm_head_bias="always", tied_default=True,
                    paths=Paths(body="gte", embed="embeddings.word_embeddings", layers="encoder.layer", attn="attention",
                                attn_out="attn_ln", mlp_out="mlp_ln", gate_up="up_gate_proj", lm_head="lm_head.decoder",
                                lm_norm="lm_head.norm"))

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64, pad_token_id=0)

FAMILY = Family(
    name="gte",
    **with_heads({**layout.family_fields({"gte": GTE}, "post_ffw_norm"),
                  "gguf_tensor_names": ()},   # llama.cpp has no GTE architecture
                 GTE, EncoderHeads(("seqcls", "tokcls"), pooler=True)),
    samples=(
        # the task heads: a sequence classifier on the pooler, a token classifier (encoder_heads.with_heads)
        Sample("GteConfig", dict(_SIZES, num_labels=3), ("GteForSequenceClassification", "GteForTokenClassification"),
               device="cpu"),
        Sample("GteConfig", _SIZES, ("GteModel", "GteForMaskedLM")),
        Sample("GteConfig", dict(_SIZES, type_vocab_size=0, tie_word_embeddings=False), ("GteModel", "GteForMaskedLM")),
    ),
)
