"""Qwen3 (transformers modeling_qwen3.py): the LLaMA layout (layout.py) with an RMSNorm over each head's d on
q and k before the rotary embedding (q_norm, k_norm: d weights each per layer), attention_bias on q, k, v and o
alike, no MLP bias, and an LM head untied by default (Qwen3ForCausalLM's _tied_weights_keys ties it to
embed_tokens when tie_word_embeddings is set, as the small Qwen3 models do)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .framework import infer, layout
from .framework.base import Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

QWEN3 = DecoderLayout(task_heads=("seqcls", "tokcls", "qa"), paths=Paths(tokcls="score", qa_body="transformer"),
                      qk_norm="head", mlp_bias=False)


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """llama.cpp's `qwen3` files: LLaMA's keys, head_dim from attention.key_length (Qwen3's is not hidden / heads);
    attention_bias (no metadata key) from whether the first layer's q has a bias."""
    cfg = infer.gguf_config(arch, metadata, tensors, "Qwen3ForCausalLM")
    if cfg is not None:
        cfg["attention_bias"] = "blk.0.attn_q.bias" in tensors
    return cfg


_SIZES = dict(layout.TINY, head_dim=16)

FAMILY = Family(
    name="qwen3",
    before=("llama",),   # tried before them: its q_proj names match llama's signature
    # the signature, q_norm, is also in OLMo2 and Gemma3 files: those families come before this one in the registry
    **layout.family_fields({"qwen3": QWEN3}, "attn_q_norm"),
    gguf_config=gguf_config,
    samples=(
        Sample("Qwen3Config", _SIZES, ("Qwen3Model", "Qwen3ForCausalLM")),
        Sample("Qwen3Config", dict(_SIZES, attention_bias=True, tie_word_embeddings=True), ("Qwen3ForCausalLM",)),
        # a window on the layers after max_window_layers (Qwen3Config's layer_types)
        Sample("Qwen3Config", dict(_SIZES, use_sliding_window=True, sliding_window=4, max_window_layers=1),
               ("Qwen3ForCausalLM",)),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("Qwen3Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("Qwen3ForSequenceClassification",),
               device="cpu"),
        Sample("Qwen3Config", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("Qwen3ForTokenClassification", "Qwen3ForQuestionAnswering"), device="cpu"),
    ),
)
