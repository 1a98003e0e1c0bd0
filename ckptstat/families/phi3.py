"""Phi-3 (transformers modeling_phi3.py): the LLaMA layout (layout.py) with q, k and v fused in one qkv_proj
[(a + 2g) d, h] and gate and up fused in one gate_up_proj [2f, h], no biases, partial rotary
(partial_rotary_factor, Phi-4-mini) and an LM head untied by default."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .framework import infer, layout
from .framework.base import Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

PHI3 = DecoderLayout(
    task_heads=("seqcls", "tokcls"), paths=Paths(tokcls="score"),
    fused_qkv=True, fused_gate_up=True, qkv_bias=False, o_bias=False, mlp_bias=False, partial_rotary=1.0)


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """llama.cpp's `phi3` files (Phi-3, Phi-3.5, Phi-4): LLaMA's keys; the rotated dims per head,
    `rope.dimension_count`, give partial_rotary_factor; `attention.sliding_window` the window (0: none, Phi-4)."""
    cfg = infer.gguf_config(arch, metadata, tensors, "Phi3ForCausalLM")
    if cfg is None:
        return None
    infer.gguf_rotary(arch, metadata, cfg, "partial_rotary_factor")
    window = infer.gguf_int(metadata, f"{arch}.attention.sliding_window")
    if window:
        cfg["sliding_window"] = window
    return cfg


_SIZES = dict(layout.TINY, pad_token_id=0)

FAMILY = Family(
    name="phi3",
    before=("glm",),   # tried before them: Phi-3's files have gate_up_proj, glm's signature
    **layout.family_fields({"phi3": PHI3}, "attn_qkv"),
    gguf_config=gguf_config,
    samples=(
        Sample("Phi3Config", _SIZES, ("Phi3Model", "Phi3ForCausalLM")),
        Sample("Phi3Config", dict(_SIZES, partial_rotary_factor=0.5, tie_word_embeddings=True), ("Phi3ForCausalLM",)),
        Sample("Phi3Config", dict(_SIZES, sliding_window=5), ("Phi3ForCausalLM",)),   # every layer slides
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("Phi3Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("Phi3ForSequenceClassification",),
               device="cpu"),
        Sample("Phi3Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("Phi3ForTokenClassification",), device="cpu"),
    ),
)
