"""OLMo and OLMo2 (transformers modeling_olmo.py, modeling_olmo2.py): LLaMA-shaped decoders
(decoders.llama_like). OLMo's LayerNorms have no weights (OlmoLayerNorm: elementwise_affine off), so its
files hold only the projections and embeddings; OLMo2 normalises after attention and after the MLP
(post_attention_layernorm, post_feedforward_layernorm; none before) and RMS-normalises the whole q and k
projections (q_norm [a d], k_norm [g d]). Both untie the LM head by default."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from . import decoders, infer, llama
from .base import ArchSpec, Cfg, Family, Sample, Tensors

_OLMO2 = (("post_norms", 1), ("qk_norm", 2))


def from_config(c: Cfg) -> ArchSpec:
    if c.model_type == "olmo2":
        return decoders.llama_like_spec(c, _OLMO2, mlp_bias_key=None)
    return replace(decoders.llama_like_spec(c, (("plain_norm", 1),), mlp_bias_key=None), norm="layernorm")


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """OLMo2 files (OLMo's names are LLaMA's less the norms: they are detected as LLaMA)."""
    dims = llama.attention_dims(T)
    spec = llama.spec_from_tensors(T, common, dims, infer.shape(T, r"mlp\.gate_proj\.weight$", "gate_proj")[0])
    return replace(spec, o_bias=spec.qkv_bias, extra=_OLMO2)


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
              vocab_size=99, max_position_embeddings=64, pad_token_id=0)

# HF module -> llama.cpp GGUF tensor name, as convert_hf_to_gguf.py maps them (gguf-py tensor_mapping.py
# TensorNameMap, the oracle in tests/test_gguf_names.py); `ckptstat diff` aligns a GGUF file with HF through it.
GGUF_TENSOR_NAMES = (   # OLMo's norms have no weights; OLMo2 norms after attention and MLP, and q/k norms
    ("model.embed_tokens", "token_embd"), ("model.norm", "output_norm"), ("lm_head", "output"),
    ("model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q"),
    ("model.layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k"),
    ("model.layers.{bid}.self_attn.v_proj", "blk.{bid}.attn_v"),
    ("model.layers.{bid}.self_attn.o_proj", "blk.{bid}.attn_output"),
    ("model.layers.{bid}.self_attn.q_norm", "blk.{bid}.attn_q_norm"),
    ("model.layers.{bid}.self_attn.k_norm", "blk.{bid}.attn_k_norm"),
    ("model.layers.{bid}.post_attention_layernorm", "blk.{bid}.post_attention_norm"),
    ("model.layers.{bid}.mlp.gate_proj", "blk.{bid}.ffn_gate"),
    ("model.layers.{bid}.mlp.up_proj", "blk.{bid}.ffn_up"),
    ("model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down"),
    ("model.layers.{bid}.post_feedforward_layernorm", "blk.{bid}.post_ffw_norm"),
)

GGUF_CLASSES = {"olmo": "OlmoForCausalLM", "olmo2": "Olmo2ForCausalLM"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """llama.cpp's `olmo` and `olmo2` files: LLaMA's keys (OLMo's clip_qkv changes no count); attention_bias
    (no metadata key) from whether the first layer's q has a bias."""
    cfg = infer.gguf_config(arch, metadata, tensors, GGUF_CLASSES[arch]) if arch in GGUF_CLASSES else None
    if cfg is not None:
        cfg["attention_bias"] = "blk.0.attn_q.bias" in tensors
    return cfg


FAMILY = Family(
    name="olmo",
    model_types=("olmo", "olmo2"),
    # OLMo2; also in Gemma2/3 files, whose families come before this one in the registry
    signature=r"(^|[./])layers[./]\d+[./]post_feedforward_layernorm",
    from_config=from_config, from_tensors=from_tensors, build=decoders.llama_like, expected_tensors=decoders.llama_like_tensors,
    **llama.DECODER_LM,
    gguf_config=gguf_config, gguf_tensor_names=GGUF_TENSOR_NAMES,
    # convert_hf_to_gguf.py's OlmoModel permutes q_proj / k_proj weights as LlamaModel does (OLMo2: NeoX, as stored)
    gguf_transforms=(("olmo", r"self_attn\.q_proj\.weight$", "rope_q"), ("olmo", r"self_attn\.k_proj\.weight$", "rope_k")),
    samples=(
        # OLMo's tensor names are LLaMA's without the (weightless) norms: names alone read as LLaMA
        Sample("OlmoConfig", _SIZES, ("OlmoModel", "OlmoForCausalLM"), detected_as="llama"),
        Sample("OlmoConfig", dict(_SIZES, attention_bias=True, clip_qkv=8.0, tie_word_embeddings=True),
               ("OlmoForCausalLM",), detected_as="llama"),
        Sample("Olmo2Config", _SIZES, ("Olmo2Model", "Olmo2ForCausalLM")),
    ),
)
