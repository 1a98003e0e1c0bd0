"""PhiMoE (Phi-3.5-MoE; transformers modeling_phimoe.py): Mixtral's layout (mixtral.py: block_sparse_moe, a router
over num_local_experts gated MLPs w1 / w3 / w2 of which each token visits num_experts_per_tok) with LayerNorms
(weight and bias) in place of RMSNorms and q/k/v/o biased by attention_bias. Its sparsemixer router picks the k
experts without a matmul. lm_head_bias (a bias on the LM head; false in the released model) has no op template: the
meta path answers it. transformers 5 holds the router at mlp.router and the experts fused under mlp (a torch.save of
its state_dict keeps those names). The routed experts' FLOPs are Mixtral's (transformers 5's default grouped_mm)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

PHIMOE = DecoderLayout(norm="layernorm", mlp="routed", mlp_bias=False, requires=(("lm_head_bias", False),),
                       paths=Paths(mlp="block_sparse_moe", gate="w1", up="w3", down="w2"), task_heads=("seqcls",))
# transformers 5's in-memory names (conversion_mapping.py's phimoe renames)
_IN_MEMORY = replace(PHIMOE, paths=replace(PHIMOE.paths, mlp="mlp", router="router"))


def from_config(c: Cfg) -> ArchSpec:
    return layout.with_experts(layout.spec_from_config(PHIMOE, c), c, "num_local_experts")


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    lay = PHIMOE if layout.matches(PHIMOE, T) else _IN_MEMORY
    return layout.routed_from_tensors(lay, T, common, "phimoe")


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """convert_hf_to_gguf.py PhiMoeModel: LLaMA's keys, expert_count; attention_bias from the first layer's q."""
    cfg = infer.gguf_config(arch, metadata, tensors, "PhimoeForCausalLM") if arch == "phimoe" else None
    if cfg is not None:
        cfg.update(attention_bias="blk.0.attn_q.bias" in tensors)
    return cfg


_SIZES = dict(layout.TINY_MOE, num_local_experts=4)

FAMILY = Family(
    name="phimoe",
    before=("mixtral",),   # tried before it: its block_sparse_moe names
    **{**layout.family_fields({"phimoe": PHIMOE}, "ffn_gate_inp"),
       "signature": r"(^|[./])layers[./]\d+[./]mlp[./]router[./]weight",   # transformers 5's in-memory router
       "from_config": from_config, "from_tensors": from_tensors},
    # as saved: Mixtral's block beside biased LayerNorms
    signature_together=(r"(^|[./])block_sparse_moe[./]", layout.pattern(PHIMOE, "attn_norm", "bias")),
    gguf_architectures=("phimoe",), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("PhimoeConfig", _SIZES, ("PhimoeModel", "PhimoeForCausalLM"), device="cpu"),
        Sample("PhimoeConfig", dict(_SIZES, attention_bias=True, tie_word_embeddings=True), ("PhimoeForCausalLM",),
               device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("PhimoeConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("PhimoeForSequenceClassification",), device="cpu"),
    ),
)
