"""Seed-OSS (transformers modeling_seed_oss.py): the LLaMA layout (layout.py) whose q/k/v biases follow
attention_bias (true by default) and o_proj's its own attention_out_bias (false by default); head_dim 128 by
default and an LM head untied by default. llama.cpp names its MLP norm post_attention_norm."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import BiasKeys, DecoderLayout, Paths

SEED_OSS = DecoderLayout(
    task_heads=("seqcls", "tokcls", "qa"), paths=Paths(tokcls="score", qa_body="transformer"),
    bias_keys=BiasKeys(o="attention_out_bias"), gguf_renames=(("ffn_norm", "post_attention_norm"),))

_SIZES = dict(layout.TINY, head_dim=8, pad_token_id=0)

FAMILY = Family(
    name="seed_oss",
    **{**layout.family_fields({"seed_oss": SEED_OSS}, "attn_q"),
       "signature": r"(?!)"},   # its tensor names are LLaMA's (Qwen2's biases): files without config.json read as llama
    samples=(
        # LLaMA's names with q/k/v biases: names alone read as llama (its Qwen2 layout, the same counts)
        Sample("SeedOssConfig", _SIZES, ("SeedOssModel", "SeedOssForCausalLM"), detected_as="llama"),
        Sample("SeedOssConfig", dict(_SIZES, attention_bias=False, attention_out_bias=True, mlp_bias=True,
                                     tie_word_embeddings=True), ("SeedOssForCausalLM",), detected_as="llama"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("SeedOssConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("SeedOssForSequenceClassification",),
               device="cpu", detected_as="llama"),
        Sample("SeedOssConfig", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("SeedOssForTokenClassification", "SeedOssForQuestionAnswering"), device="cpu", detected_as="llama"),
    ),
)
