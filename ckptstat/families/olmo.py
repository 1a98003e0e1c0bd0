"""OLMo and OLMo2 (transformers modeling_olmo.py, modeling_olmo2.py): LLaMA-shaped decoders
(decoders.llama_like). OLMo's LayerNorms have no weights (OlmoLayerNorm: elementwise_affine off), so its
files hold only the projections and embeddings; OLMo2 normalises after attention and after the MLP
(post_attention_layernorm, post_feedforward_layernorm; none before) and RMS-normalises the whole q and k
projections (q_norm [a d], k_norm [g d]). Both untie the LM head by default."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import decoders, infer, llama
from .base import ArchSpec, Cfg, Family, Sample, Tensors, decoder_kv_cache

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

FAMILY = Family(
    name="olmo",
    model_types=("olmo", "olmo2"),
    # OLMo2; also in Gemma2/3 files, whose families come before this one in the registry
    signature=r"(^|[./])layers[./]\d+[./]post_feedforward_layernorm",
    from_config=from_config, from_tensors=from_tensors, build=decoders.llama_like, expected_tensors=decoders.llama_like_tensors,
    heads=("base", "lm"),
    head_rules=llama.HEAD_RULES,
    default_head="lm",
    tie_rules=llama.TIE_RULES,
    tied_by_default=False,
    kv_cache=decoder_kv_cache,
    samples=(
        # OLMo's tensor names are LLaMA's without the (weightless) norms: names alone read as LLaMA
        Sample("OlmoConfig", _SIZES, ("OlmoModel", "OlmoForCausalLM"), detected_as="llama"),
        Sample("OlmoConfig", dict(_SIZES, attention_bias=True, clip_qkv=8.0, tie_word_embeddings=True),
               ("OlmoForCausalLM",), detected_as="llama"),
        Sample("Olmo2Config", _SIZES, ("Olmo2Model", "Olmo2ForCausalLM")),
    ),
)
