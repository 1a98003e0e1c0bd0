"""GLM-4.5 MoE (transformers modeling_glm4_moe.py): the LLaMA layout (layout.py), pre-norm, half of each head
rotated (partial_rotary_factor 0.5), q/k/v biased by attention_bias (o_proj never), q/k RMSNorms per head where
use_qk_norm; the first first_k_dense_replace layers run a dense gated MLP (intermediate_size), the others DeepSeek's
MLP: a router over n_routed_experts MLPs of moe_intermediate_size (top num_experts_per_tok per token, scored by
sigmoid plus e_score_correction_bias, a buffer) and n_shared_experts fused into one summed MLP of
n_shared_experts x moe_intermediate_size. The routed experts' FLOPs are Qwen-MoE's (transformers 5's default
grouped_mm: the top-k rows of each token; layout_moe.routed). The num_nextn_predict_layers MTP layers are not part
of the transformers model (nor counted)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.decoders import MAX_COUNT
from .framework.layout import DecoderLayout, Paths

GLM4_MOE = DecoderLayout(qk_norm="head", qk_norm_key="use_qk_norm", o_bias=False, partial_rotary=0.5, mlp="routed",
                         shared="summed", dense_layers=True, mlp_bias=False, paths=Paths(shared="shared_experts"),
                         # gguf-py MODEL_TENSORS[GLM4_MOE]: the MLP's norm is post_attention_norm
                         gguf_renames=(("ffn_norm", "post_attention_norm"),))


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(GLM4_MOE, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    spec, fe = layout.with_experts(spec, c, "n_routed_experts"), c.int("moe_intermediate_size", default=FROM_CLASS)
    first = min(c.int("first_k_dense_replace", default=FROM_CLASS), spec.layers)
    return replace(spec, moe_intermediate=fe, shared_intermediate=fe * c.int("n_shared_experts", default=FROM_CLASS),
                   dense_layers=tuple(range(first if spec.experts else spec.layers)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(GLM4_MOE, T, common, "glm4_moe")


# convert_hf_to_gguf.py Glm4MoeModel: LLaMA's keys under GLM-4.5's config names
_GGUF_KEYS = {**infer.GGUF_KEYS, "expert_count": "n_routed_experts", "expert_feed_forward_length": "moe_intermediate_size",
              "expert_shared_count": "n_shared_experts", "leading_dense_block_count": "first_k_dense_replace"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """q/k norms and q/k/v biases from the first layer's tensors, the rotated fraction from rope.dimension_count."""
    cfg = infer.gguf_config(arch, metadata, tensors, "Glm4MoeForCausalLM", keys=_GGUF_KEYS) if arch == "glm4moe" else None
    if cfg is not None:
        cfg.update(model_type="glm4_moe", use_qk_norm="blk.0.attn_q_norm.weight" in tensors,
                   attention_bias="blk.0.attn_q.bias" in tensors)
        cfg["first_k_dense_replace"] = min(cfg.get("first_k_dense_replace", 0), MAX_COUNT)
        infer.gguf_rotary(arch, metadata, cfg, "partial_rotary_factor")
    return cfg


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=3, moe_intermediate_size=24, n_routed_experts=4, n_shared_experts=1,
              first_k_dense_replace=1, n_group=1, topk_group=1, pad_token_id=0)

FAMILY = Family(
    name="glm4_moe",
    # tried before them: its q_proj, q_norm and mlp.experts.N (or fused experts) names match theirs
    before=("llama", "mixtral", "qwen3", "qwen_moe"),
    **{**layout.family_fields({"glm4_moe": GLM4_MOE}, "ffn_gate_inp"), "signature": r"(?!)",
       "from_config": from_config, "from_tensors": from_tensors,
       # the router's e_score_correction_bias (a buffer, which the walk does not meet) is llama.cpp's exp_probs_b
       "gguf_tensor_names": layout.gguf_tensor_names(GLM4_MOE) + (
           ("model.layers.{bid}.mlp.gate.e_score_correction_bias", "blk.{bid}.exp_probs_b.bias"),)},
    # the two together: DeepSeek's shared experts beside q/k/v projections (DeepSeek's attention is latent)
    signature_together=(r"(^|[./])layers[./]\d+[./]mlp[./]shared_experts[./]",
                        layout.signature(GLM4_MOE, "attn_k")),
    gguf_architectures=("glm4moe",), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("Glm4MoeConfig", dict(_SIZES, use_qk_norm=True), ("Glm4MoeModel", "Glm4MoeForCausalLM"), device="cpu"),
        Sample("Glm4MoeConfig", dict(_SIZES, n_shared_experts=2, first_k_dense_replace=2, attention_bias=True,
                                     tie_word_embeddings=True), ("Glm4MoeForCausalLM",), device="cpu"),
    ),
)
