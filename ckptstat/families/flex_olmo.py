"""FlexOlmo (transformers modeling_flex_olmo.py): OLMo2's layers (olmo.py: norms after attention and after the MLP,
none before; q/k norms over the whole q and k projections) whose MLP is OLMoE's (olmoe.py): a router (mlp.gate)
over num_experts gated MLPs of intermediate_size, num_experts_per_tok of them per token. llama.cpp has no
architecture for it."""
from __future__ import annotations

from typing import Any

from .framework import layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout

FLEX_OLMO = DecoderLayout(placement="post", qk_norm="width", mlp="routed", mlp_bias=False)


def from_config(c: Cfg) -> ArchSpec:
    return layout.with_experts(layout.spec_from_config(FLEX_OLMO, c), c, "num_experts")


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(FLEX_OLMO, T, common, "flex_olmo")


FAMILY = Family(
    name="flex_olmo",
    # tried before them: OLMo2's post_feedforward_layernorm, Qwen-MoE's mlp.experts.N (or fused experts)
    before=("olmo", "qwen_moe", "mixtral"),
    **{**layout.family_fields({"flex_olmo": FLEX_OLMO}, "ffn_gate_inp"), "signature": r"(?!)",
       "from_config": from_config, "from_tensors": from_tensors, "gguf_tensor_names": ()},
    # the two together: a post-norm (OLMo2) decoder with routed experts
    signature_together=(layout.signature(FLEX_OLMO, "post_ffw_norm"),
                        r"(^|[./])layers[./]\d+[./]mlp[./]experts[./](\d+[./]gate_proj|gate_up_proj)"),
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("FlexOlmoConfig", dict(layout.TINY_MOE, pad_token_id=0, num_experts=4),
               ("FlexOlmoModel", "FlexOlmoForCausalLM"), device="cpu"),
        Sample("FlexOlmoConfig", dict(layout.TINY_MOE, pad_token_id=0, num_experts=4,
                                      attention_bias=True, tie_word_embeddings=True), ("FlexOlmoForCausalLM",),
               device="cpu"),
    ),
)
