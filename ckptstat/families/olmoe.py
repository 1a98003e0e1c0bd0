"""OLMoE (transformers modeling_olmoe.py): the LLaMA layout (layout.py) with OLMo2's q/k norms over the whole
q and k projections (q_norm [a d], k_norm [g d]), pre-norm, and in every layer a router (mlp.gate) over
num_experts gated MLPs of intermediate_size of which each token visits num_experts_per_tok (norm_topk_prob only
rescales the k weights). clip_qkv clamps q, k and v (no matmul, no parameter). The routed experts' FLOPs are
Qwen-MoE's (transformers 5's default grouped_mm: the top-k rows of each token; layout_moe.routed).

Its tensor names are Qwen3-MoE's, letter for letter (q_norm differs only in its shape): names alone read as
qwen_moe, so OLMoE files are told by config.json or by their llama.cpp architecture (olmoe)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout

OLMOE = DecoderLayout(qk_norm="width", mlp="routed", mlp_bias=False)


def from_config(c: Cfg) -> ArchSpec:
    return layout.with_experts(layout.spec_from_config(OLMOE, c), c, "num_experts")


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(OLMOE, T, common, "olmoe")


# convert_hf_to_gguf.py OlmoeModel: LLaMA's keys, expert_count and expert_used_count
_GGUF_KEYS = {**infer.GGUF_KEYS, "expert_count": "num_experts"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    cfg = infer.gguf_config(arch, metadata, tensors, "OlmoeForCausalLM", keys=_GGUF_KEYS) if arch == "olmoe" else None
    if cfg is not None:
        cfg["attention_bias"] = "blk.0.attn_q.bias" in tensors
    return cfg


FAMILY = Family(
    name="olmoe",
    # no tensor name shows it (they are Qwen3-MoE's): config.json or the GGUF architecture does
    **{**layout.family_fields({"olmoe": OLMOE}, "ffn_gate_inp"), "signature": r"(?!)",
       "from_config": from_config, "from_tensors": from_tensors},
    gguf_architectures=("olmoe",), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU; names alone read as
        # Qwen3-MoE's (see the docstring)
        Sample("OlmoeConfig", dict(layout.TINY_MOE, pad_token_id=0, num_experts=4),
               ("OlmoeModel", "OlmoeForCausalLM"), device="cpu", detected_as="qwen_moe"),
        Sample("OlmoeConfig", dict(layout.TINY_MOE, pad_token_id=0, num_experts=4, clip_qkv=8.0,
                                   attention_bias=True, tie_word_embeddings=True), ("OlmoeForCausalLM",), device="cpu",
               detected_as="qwen_moe"),
    ),
)
