"""Qwen3 (transformers modeling_qwen3.py): the LLaMA-shaped decoder (decoders.llama_like) with an
RMSNorm over each head's d on q and k before the rotary embedding (q_norm, k_norm: d weights each per
layer), attention_bias on q, k, v and o alike, and an LM head untied by default (Qwen3ForCausalLM's
_tied_weights_keys ties it to embed_tokens when tie_word_embeddings is set, as the small Qwen3 models do)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from . import decoders, infer, llama
from .base import ArchSpec, Cfg, Family, Sample, Tensors

_EXTRA = (("qk_norm", 1),)


def from_config(c: Cfg) -> ArchSpec:
    return decoders.llama_like_spec(c, _EXTRA, mlp_bias_key=None)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h, q, kv, _ = llama.attention_dims(T)
    d = infer.shape(T, r"self_attn\.q_norm\.weight$", "q_norm")[0]     # q_norm is d wide: head_dim is exact
    spec = llama.spec_from_tensors(T, common, (V, h, q, kv, d), infer.shape(T, r"mlp\.gate_proj\.weight$", "gate_proj")[0])
    return replace(spec, o_bias=spec.qkv_bias, assumptions=(), extra=_EXTRA)


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
              vocab_size=99, max_position_embeddings=64, head_dim=16)

# HF module -> llama.cpp GGUF tensor name, as convert_hf_to_gguf.py maps them (gguf-py tensor_mapping.py
# TensorNameMap, the oracle in tests/test_gguf_names.py); `ckptstat diff` aligns a GGUF file with HF through it.
GGUF_TENSOR_NAMES = llama.GGUF_TENSOR_NAMES + (
    ("model.layers.{bid}.self_attn.q_norm", "blk.{bid}.attn_q_norm"),
    ("model.layers.{bid}.self_attn.k_norm", "blk.{bid}.attn_k_norm"),
)

def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """llama.cpp's `qwen3` files: LLaMA's keys, head_dim from attention.key_length (Qwen3's is not hidden / heads);
    attention_bias (no metadata key) from whether the first layer's q has a bias."""
    cfg = infer.gguf_config(arch, metadata, tensors, "Qwen3ForCausalLM")
    if cfg is not None:
        cfg["attention_bias"] = "blk.0.attn_q.bias" in tensors
    return cfg


FAMILY = Family(
    name="qwen3",
    model_types=("qwen3",),
    # q_norm also in OLMo2 and Gemma3 files: those families come before this one in the registry
    signature=r"(^|[./])layers[./]\d+[./]self_attn[./]q_norm",
    from_config=from_config, from_tensors=from_tensors, build=decoders.llama_like, expected_tensors=decoders.llama_like_tensors,
    **llama.DECODER_LM,
    gguf_config=gguf_config, gguf_tensor_names=GGUF_TENSOR_NAMES,
    samples=(
        Sample("Qwen3Config", _SIZES, ("Qwen3Model", "Qwen3ForCausalLM")),
        Sample("Qwen3Config", dict(_SIZES, attention_bias=True, tie_word_embeddings=True), ("Qwen3ForCausalLM",)),
        # a window on the layers after max_window_layers (Qwen3Config's layer_types)
        Sample("Qwen3Config", dict(_SIZES, use_sliding_window=True, sliding_window=4, max_window_layers=1),
               ("Qwen3ForCausalLM",)),
    ),
)
