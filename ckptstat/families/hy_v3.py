"""HunYuan V3 (transformers modeling_hy_v3.py): the LLaMA layout (layout.py), pre-norm, q/k RMSNorms per head, biases
by attention_bias and mlp_bias; dense on the layers mlp_layer_types marks "dense" (by default the first), elsewhere a
router (mlp.router.gate) over num_experts gated MLPs of moe_intermediate_size (num_experts_per_tok per token, picked by
sigmoid scores plus e_score_correction_bias, a buffer) and num_shared_experts fused into one summed MLP (shared_mlp).
transformers 5 holds the router at mlp.gate and the shared MLP at mlp.shared_experts (a torch.save of its state_dict
keeps those names). The routed experts' FLOPs are Qwen-MoE's (transformers 5's default grouped_mm; layout_moe.routed).
llama.cpp has no architecture for it."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

HY_V3 = DecoderLayout(qk_norm="head", mlp="routed", shared="summed", dense_layers=True,
                      paths=Paths(router="router.gate", shared="shared_mlp"))
# transformers 5's in-memory names (conversion_mapping.py's hy_v3 renames)
_IN_MEMORY = replace(HY_V3, paths=replace(HY_V3.paths, router="gate", shared="shared_experts"))


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(HY_V3, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    fe = c.int("moe_intermediate_size", default=FROM_CLASS)
    return replace(layout.with_experts(spec, c, "num_experts"), moe_intermediate=fe,
                   shared_intermediate=fe * c.int("num_shared_experts", default=FROM_CLASS),
                   dense_layers=layout.mlp_dense_layers(c, spec.layers, 1))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    lay = HY_V3 if layout.matches(HY_V3, T) else _IN_MEMORY
    return layout.routed_from_tensors(lay, T, common, "hy_v3")


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=3, head_dim=8, moe_intermediate_size=24, num_experts=4,
              num_shared_experts=1)

FAMILY = Family(
    name="hy_v3",
    # tried before them: its e_score_correction_bias beside the router (MiniMax-M2's place), shared experts (GLM-4.5's
    # names in memory), experts and q_norm names
    before=("minimax_m2", "glm4_moe", "qwen_moe", "mixtral", "qwen3", "llama"),
    **{**layout.family_fields({"hy_v3": HY_V3}, "ffn_gate_inp"),
       "signature": r"(^|[./])layers[./]\d+[./]mlp[./]router[./]gate[./]",   # the router as saved
       "from_config": from_config, "from_tensors": from_tensors, "gguf_tensor_names": ()},
    # transformers 5's in-memory names: the correction bias beside the router, with shared experts and fused experts
    # (EXAONE MoE saves the same bias there, its experts one tensor each)
    signature_together=(r"(^|[./])layers[./]\d+[./]mlp[./]e_score_correction_bias", r"(^|[./])mlp[./]shared_experts[./]",
                        infer.FUSED_EXPERTS),
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("HYV3Config", _SIZES, ("HYV3Model", "HYV3ForCausalLM"), device="cpu"),
        Sample("HYV3Config", dict(_SIZES, num_shared_experts=2, mlp_layer_types=["sparse", "dense", "sparse"],
                                  attention_bias=True, tie_word_embeddings=True), ("HYV3ForCausalLM",), device="cpu"),
    ),
)
