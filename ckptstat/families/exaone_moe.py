"""EXAONE MoE (transformers modeling_exaone_moe.py): EXAONE 4's attention (exaone4.py: per-head q_norm / k_norm, no
biases, sliding attention on the layers layer_types marks, rotary only on those sliding layers when a window is set)
in pre-norm layers (input_layernorm, post_attention_layernorm) whose MLP is DeepSeek's: dense on the layers
mlp_layer_types marks "dense" (by default the first first_k_dense_replace), elsewhere a router over num_experts
MLPs of moe_intermediate_size (top num_experts_per_tok per token, scored by sigmoid plus e_score_correction_bias, a
buffer) and num_shared_experts fused into one summed MLP. The routed experts' FLOPs are Qwen-MoE's (transformers 5's
default grouped_mm: the top-k rows of each token; layout_moe.routed)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

EXAONE_MOE = DecoderLayout(qk_norm="head", qkv_bias=False, o_bias=False, mlp_bias=False, nope="global", mlp="routed",
                           shared="summed", dense_layers=True, paths=Paths(shared="shared_experts"))


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(EXAONE_MOE, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    L, fe = spec.layers, c.int("moe_intermediate_size", default=FROM_CLASS)
    return replace(layout.with_experts(spec, c, "num_experts"), moe_intermediate=fe,
                   shared_intermediate=fe * c.int("num_shared_experts", default=FROM_CLASS),
                   dense_layers=layout.mlp_dense_layers(c, L, c.int("first_k_dense_replace", default=FROM_CLASS)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(EXAONE_MOE, T, common, "exaone_moe", note="no sliding window assumed")


_GGUF_KEYS = {**infer.GGUF_KEYS, "expert_count": "num_experts", "expert_feed_forward_length": "moe_intermediate_size",
              "expert_shared_count": "num_shared_experts", "leading_dense_block_count": "first_k_dense_replace"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """convert_hf_to_gguf.py's exaone-moe keys under EXAONE MoE's config names (the sliding pattern is not read)."""
    cfg = infer.gguf_config(arch, metadata, tensors, "ExaoneMoeForCausalLM", keys=_GGUF_KEYS) if arch == "exaone-moe" else None
    if cfg is not None:
        cfg.update(model_type="exaone_moe", sliding_window=None)
    return cfg


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=4, moe_intermediate_size=24, num_experts=4, num_shared_experts=1,
              first_k_dense_replace=1, pad_token_id=0)

FAMILY = Family(
    name="exaone_moe",
    **{**layout.family_fields({"exaone_moe": EXAONE_MOE}, "ffn_gate_inp"), "signature": r"(?!)",
       "from_config": from_config, "from_tensors": from_tensors,
       # the router's e_score_correction_bias (a buffer, which the walk does not meet; saved beside the router, at
       # mlp.e_score_correction_bias) is llama.cpp's exp_probs_b
       "gguf_tensor_names": layout.gguf_tensor_names(EXAONE_MOE) + (
           ("model.layers.{bid}.mlp.e_score_correction_bias", "blk.{bid}.exp_probs_b.bias"),)},
    gguf_architectures=("exaone-moe",), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU. Its tensor names are
        # GLM-4.5 MoE's with q/k norms (shared_experts beside q/k/v): files without config.json read as glm4_moe
        Sample("ExaoneMoeConfig", dict(_SIZES, sliding_window=4), ("ExaoneMoeModel", "ExaoneMoeForCausalLM"), device="cpu",
               detected_as="glm4_moe"),
        Sample("ExaoneMoeConfig", dict(_SIZES, sliding_window_pattern=2, num_shared_experts=2,
                                       mlp_layer_types=["dense", "sparse", "dense", "sparse"], tie_word_embeddings=True),
               ("ExaoneMoeForCausalLM",), device="cpu", detected_as="glm4_moe"),
    ),
)
