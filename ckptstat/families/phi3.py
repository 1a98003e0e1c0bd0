"""Phi-3 (transformers modeling_phi3.py): the LLaMA-shaped decoder (decoders.llama_like) with q, k and v
fused in one qkv_proj [(a + 2g) d, h] and gate and up fused in one gate_up_proj [2f, h], no biases,
partial rotary (partial_rotary_factor, Phi-4-mini) and an LM head untied by default."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from . import decoders, infer, llama
from .base import ArchSpec, Cfg, Family, Sample, Tensors


def from_config(c: Cfg) -> ArchSpec:
    spec = decoders.llama_like_spec(c, mlp_bias_key=None)
    spec = replace(spec, qkv_bias=False, o_bias=False)
    return replace(spec, extra=(("fused_qkv", 1), ("fused_mlp", 1), ("rotary_dim", decoders.partial_rotary(c, spec.head_dim))))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"embed_tokens\.weight$", "embed_tokens")
    qkv = infer.shape(T, r"self_attn\.qkv_proj\.weight$", "qkv_proj")[0]
    q = infer.shape(T, r"self_attn\.o_proj\.weight$", "o_proj")[1]        # o_proj reads the a x d query width
    kv = (qkv - q) // 2
    d = 128 if q % 128 == 0 and kv % 128 == 0 else 64 if q % 64 == 0 and kv % 64 == 0 else kv
    f = infer.shape(T, r"mlp\.gate_up_proj\.weight$", "gate_up_proj")[0] // 2
    spec = llama.spec_from_tensors(T, common, (V, h, q, kv, d), f,
                                   notes=("no config: rotary on all of head_dim (partial_rotary_factor 1)",))
    return replace(spec, extra=(("fused_qkv", 1), ("fused_mlp", 1)))


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
              vocab_size=99, max_position_embeddings=64, pad_token_id=0)

# HF module -> llama.cpp GGUF tensor name, as convert_hf_to_gguf.py maps them (gguf-py tensor_mapping.py
# TensorNameMap, the oracle in tests/test_gguf_names.py); `ckptstat diff` aligns a GGUF file with HF through it.
GGUF_TENSOR_NAMES = (
    ("model.embed_tokens", "token_embd"), ("model.norm", "output_norm"), ("lm_head", "output"),
    ("model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm"),
    ("model.layers.{bid}.self_attn.qkv_proj", "blk.{bid}.attn_qkv"),
    ("model.layers.{bid}.self_attn.o_proj", "blk.{bid}.attn_output"),
    ("model.layers.{bid}.post_attention_layernorm", "blk.{bid}.ffn_norm"),
    ("model.layers.{bid}.mlp.gate_up_proj", "blk.{bid}.ffn_up"),   # fused [gate; up], kept fused in GGUF
    ("model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down"),
)

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


FAMILY = Family(
    name="phi3",
    model_types=("phi3",),
    signature=r"(^|[./])layers[./]\d+[./]self_attn[./]qkv_proj",
    from_config=from_config, from_tensors=from_tensors, build=decoders.llama_like, expected_tensors=decoders.llama_like_tensors,
    **llama.DECODER_LM,
    gguf_config=gguf_config, gguf_tensor_names=GGUF_TENSOR_NAMES,
    samples=(
        Sample("Phi3Config", _SIZES, ("Phi3Model", "Phi3ForCausalLM")),
        Sample("Phi3Config", dict(_SIZES, partial_rotary_factor=0.5, tie_word_embeddings=True), ("Phi3ForCausalLM",)),
        Sample("Phi3Config", dict(_SIZES, sliding_window=5), ("Phi3ForCausalLM",)),   # every layer slides
    ),
)
