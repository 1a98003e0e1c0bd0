"""Mellum (transformers modeling_mellum.py): Qwen3-MoE's layout (qwen_moe.py: per-head q/k RMSNorms, a router
mlp.gate over num_experts MLPs of moe_intermediate_size of which each token visits num_experts_per_tok, no shared
expert) with q/k/v/o biased by attention_bias, dense layers where mlp_layer_types says "dense" (intermediate_size;
by default none) and sliding layers where layer_types says so (by default none). The routed experts' FLOPs are
Qwen-MoE's (transformers 5's default grouped_mm: the top-k rows of each token; layout_moe.routed). Active parameters:
the router's top-k experts and every other part, per token.

Its tensor names are Qwen3-MoE's: names alone read as qwen_moe, so Mellum files are told by config.json."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.decoders import MAX_COUNT
from .framework.layout import DecoderLayout

MELLUM = DecoderLayout(qk_norm="head", mlp="routed", dense_layers=True, mlp_bias=False)


def from_config(c: Cfg) -> ArchSpec:
    L = c.int("num_hidden_layers")
    filled = dict(c.cfg)
    if filled.get("layer_types") is None:   # MellumConfig's: every layer full
        filled["layer_types"] = ["full_attention"] * min(L, MAX_COUNT)
    spec = layout.spec_from_config(MELLUM, Cfg(filled, c.path, c.model_type, c.head, c.common))
    spec = layout.with_experts(spec, c, "num_experts")
    return replace(spec, moe_intermediate=c.int("moe_intermediate_size", default=FROM_CLASS),
                   dense_layers=layout.mlp_dense_layers(c, spec.layers, 0))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(MELLUM, T, common, "mellum")


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=3, head_dim=8, moe_intermediate_size=24, num_experts=4, pad_token_id=0)

FAMILY = Family(
    name="mellum",
    # no tensor name tells it from Qwen3-MoE's (see the docstring): config.json does
    **{**layout.family_fields({"mellum": MELLUM}, "ffn_gate_inp"), "signature": r"(?!)",
       "from_config": from_config, "from_tensors": from_tensors,
       "gguf_tensor_names": ()},   # llama.cpp has no architecture for it
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("MellumConfig", _SIZES, ("MellumModel", "MellumForCausalLM"), device="cpu", detected_as="qwen_moe"),
        Sample("MellumConfig", dict(_SIZES, attention_bias=True, tie_word_embeddings=True, sliding_window=4,
                                    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                    mlp_layer_types=["dense", "sparse", "sparse"]),
               ("MellumForCausalLM",), device="cpu", detected_as="qwen_moe"),
    ),
)
