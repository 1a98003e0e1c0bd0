"""NomicBERT (transformers modeling_nomic_bert.py, nomic-embed-text): the GTE-shaped encoder (gte.py; DecoderLayout.causal
false) without biases in its layers: word embeddings, token types and a LayerNorm (emb_ln), rotary q/k, a fused Wqkv,
post-LayerNorm layers (norm1, norm2; no final norm), a gated MLP (fc11 up, fc12 gate, fc2 down), and NomicBertForMaskedLM's
BERT-style head (cls.predictions: transform dense + hidden_act + layer_norm, a biased decoder tied to the word embeddings,
its bias also saved as cls.predictions.bias). Names as saved (transformers 5 renames them on load: conversion_mapping.py)."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.encoder_heads import EncoderHeads, with_heads
from .framework.layout import DecoderLayout, Paths

NOMIC_BERT = DecoderLayout(causal=False, norm="layernorm", placement="post", embeddings="bert", final_norm=False,
                           fused_qkv=True, qkv_bias=False, o_bias=False, mlp_bias=False, lm_transform="hidden_act",
                           lm_head_bias="always", tied_default=True,
                           paths=Paths(body="nomic_bert", embed="embeddings.word_embeddings", embed_norm="emb_ln",
                                       layers="encoder.layers", attn="attn", qkv="Wqkv", o="out_proj", attn_out="norm1",
                                       mlp_out="norm2", gate="fc12", up="fc11", down="fc2",
                                       lm_dense="cls.predictions.transform.dense",
                                       lm_norm="cls.predictions.transform.layer_norm", lm_head="cls.predictions.decoder",
                                       lm_bias="cls.predictions.bias"))

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64, pad_token_id=0)

FAMILY = Family(
    name="nomic_bert",
    **with_heads({**layout.family_fields({"nomic_bert": NOMIC_BERT}, "attn_qkv"),
                  "gguf_tensor_names": ()},   # llama.cpp's nomic-bert converter renames the HF names: not mapped here
                 NOMIC_BERT, EncoderHeads(("seqcls", "tokcls"), pooler=True)),
    before=("modernbert",),   # its encoder.layers.N.attn.Wqkv is ModernBERT's signature (layers.N.attn.Wqkv) too
    samples=(
        # the task heads: a sequence classifier on the pooler, a token classifier (encoder_heads.with_heads)
        Sample("NomicBertConfig", dict(_SIZES, num_labels=3),
               ("NomicBertForSequenceClassification", "NomicBertForTokenClassification"), device="cpu"),
        Sample("NomicBertConfig", _SIZES, ("NomicBertModel", "NomicBertForMaskedLM")),
        Sample("NomicBertConfig", dict(_SIZES, type_vocab_size=1, tie_word_embeddings=False),
               ("NomicBertModel", "NomicBertForMaskedLM")),
    ),
)
