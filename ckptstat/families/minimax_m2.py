"""MiniMax-M2 (transformers modeling_minimax_m2.py): Mixtral's layout (mixtral.py: block_sparse_moe, experts w1 / w3 /
w2, a router over num_local_experts of which each token visits num_experts_per_tok, no shared expert) with RMSNorms
over the whole q and k projections (q_norm [a d], k_norm [g d]), no biases, and partial rotary: released configs
give rotary_dim (64 of head_dim 128), which the config class reads as partial_rotary_factor. The router picks its
experts by sigmoid scores plus e_score_correction_bias, a buffer beside it (no parameter). The routed experts' FLOPs
are Mixtral's (transformers 5's default grouped_mm: the top-k rows of each token; layout_moe.routed)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

MINIMAX_M2 = DecoderLayout(qk_norm="width", mlp="routed", mlp_bias=False, qkv_bias=False, o_bias=False,
                           partial_rotary=1.0, paths=Paths(mlp="block_sparse_moe", gate="w1", up="w3", down="w2"))
# transformers 5's in-memory names, which a torch.save of its state_dict keeps: the block at mlp, experts fused
_IN_MEMORY = replace(MINIMAX_M2, paths=replace(MINIMAX_M2.paths, mlp="mlp"))


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(MINIMAX_M2, c)
    rot = c.int("rotary_dim", default=0)    # the released configs' legacy key, over partial_rotary_factor
    return replace(layout.with_experts(spec, c, "num_local_experts"), rope_dim=rot or spec.rope_dim)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    lay = MINIMAX_M2 if layout.matches(MINIMAX_M2, T) else _IN_MEMORY
    return layout.routed_from_tensors(lay, T, common, "minimax_m2")


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """convert_hf_to_gguf.py MiniMaxM2Model: LLaMA's keys, expert_count; the rotated fraction from
    rope.dimension_count."""
    cfg = infer.gguf_config(arch, metadata, tensors, "MiniMaxM2ForCausalLM") if arch == "minimax-m2" else None
    if cfg is not None:
        cfg["model_type"] = "minimax_m2"
        infer.gguf_rotary(arch, metadata, cfg, "partial_rotary_factor")
    return cfg


_SIZES = dict(layout.TINY_MOE, num_local_experts=4, head_dim=8)

FAMILY = Family(
    name="minimax_m2",
    before=("mixtral", "qwen_moe", "qwen3", "llama"),   # tried before them: its block_sparse_moe, q_norm and q_proj names
    **{**layout.family_fields({"minimax_m2": MINIMAX_M2}, "ffn_gate_inp"),
       # the router's correction bias, a persistent buffer beside the block's router (GLM-4.5's and DeepSeek's sit in mlp.gate)
       "signature": r"(^|[./])layers[./]\d+[./]block_sparse_moe[./]e_score_correction_bias",
       "from_config": from_config, "from_tensors": from_tensors,
       # that buffer (which the walk does not meet) is llama.cpp's exp_probs_b
       "gguf_tensor_names": layout.gguf_tensor_names(MINIMAX_M2) + (
           ("model.layers.{bid}.block_sparse_moe.e_score_correction_bias", "blk.{bid}.exp_probs_b.bias"),)},
    # without that buffer (a file of the parameters alone): Mixtral's block beside q/k norms; transformers 5's
    # in-memory names: the buffer under mlp beside q/k norms, its experts fused (EXAONE MoE saves that buffer there
    # too, beside experts one per tensor and shared experts)
    signature_together=(r"(^|[./])(block_sparse_moe[./]|mlp[./]e_score_correction_bias)",
                        layout.signature(MINIMAX_M2, "attn_q_norm")),
    signature_without=r"(^|[./])mlp[./](experts[./]\d+|shared_experts)[./]",
    gguf_architectures=("minimax-m2",), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("MiniMaxM2Config", dict(_SIZES, rotary_dim=4), ("MiniMaxM2Model", "MiniMaxM2ForCausalLM"), device="cpu"),
        Sample("MiniMaxM2Config", dict(_SIZES, tie_word_embeddings=True), ("MiniMaxM2ForCausalLM",), device="cpu"),
    ),
)
