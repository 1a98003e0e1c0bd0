"""LaraMini (transformers modeling_lara_mini.py, LaraMiniModel / LaraMiniForCausalLM): Qwen3.5's gated DeltaNet
(layout_linear.py) on the layer_types "linear_attention" layers and Qwen3's attention (per-head q/k RMSNorms, no output
gate) on the others, rotary only on the "sliding_attention" ones (the "full_attention" layers get no positions:
DecoderLayout.nope "global"), every layer's MLP Flint's: a router over num_experts experts of moe_intermediate_size, held
stacked as nn.Linear-oriented parameters (experts.gate_up_proj [E, 2f, h], experts.down_proj [E, h, f]), plus a shared
expert added in full. Its RMSNorms scale by the weight (not 1 + weight). Saved as its checkpoints are: the DeltaNet's
four input projections as one linear_attn.in_proj and its gated norm as linear_attn.out_norm (transformers'
conversion_mapping for lara_mini), DecoderLayout.linear "fused".

The cache (layout_linear.hybrid_kv_cache): keys and values of each full layer, of each sliding layer the last
sliding_window - 1 tokens, a conv state and a float32 recurrent state per linear layer. llama.cpp has no lara
architecture (no GGUF names)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.archspec import ArchSpec
from .framework.base import Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_linear import hybrid_kv_cache
from .qwen_moe import moe_spec

LARA_MINI = DecoderLayout(qk_norm="head", linear="fused", mlp="routed", shared="summed", linear_experts="parameters",
                          nope="global", mlp_bias=False, tied_default=True,
                          paths=Paths(experts="experts", stacked_in="gate_up_proj", stacked_out="down_proj",
                                      gated_norm="out_norm"))
# LaraMiniConfig.__post_init__'s layer_types when the config gives none: this pattern, repeated
_PATTERN = ("linear_attention", "sliding_attention", "linear_attention", "full_attention", "sliding_attention")


def from_config(c: Cfg) -> ArchSpec:
    if c.get("layer_types", default=None) is None:
        L = c.int("num_hidden_layers")
        c = Cfg(dict(c.cfg, layer_types=[_PATTERN[i % len(_PATTERN)] for i in range(L)]), c.path, c.model_type, c.head,
                c.common)
    return moe_spec(LARA_MINI, c)


# as transformers holds it (a torch.save of the model): the DeltaNet's projections apart, its gated norm `norm`
_HELD = replace(LARA_MINI, linear="split", paths=replace(LARA_MINI.paths, gated_norm="norm"))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    lay = _HELD if infer.has(T, layout.pattern(_HELD, "ssm_norm")) else LARA_MINI
    return layout.routed_from_tensors(lay, T, common, "lara_mini", note="no sliding layers assumed (KV cache only)")


_SIZES = dict(vocab_size=99, hidden_size=32, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2,
              head_dim=8, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
              linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=64, num_experts=4,
              num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16, sliding_window=4)

FAMILY = Family(
    name="lara_mini",
    **{**layout.family_fields({"lara_mini": LARA_MINI}, "ssm_norm"), "from_config": from_config,
       "from_tensors": from_tensors, "kv_cache": hybrid_kv_cache, "gguf_tensor_names": ()},
    # as held (a torch.save of the model): Qwen3.5's DeltaNet names beside stacked experts, without Qwen3.5-MoE's
    # shared_expert_gate
    signature_together=(r"(^|[./])linear_attn[./]in_proj_qkv[./]", r"(^|[./])mlp[./]experts[./]gate_up_proj$"),
    signature_without=r"(^|[./])shared_expert_gate[./]",
    before=("qwen3_5",),   # tried before it: its held names are Qwen3.5's
    gguf_architectures=(),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("LaraMiniConfig", _SIZES, ("LaraMiniModel", "LaraMiniForCausalLM"), device="cpu"),
        Sample("LaraMiniConfig", dict(_SIZES, num_hidden_layers=4, tie_word_embeddings=False,
                                      layer_types=["sliding_attention", "linear_attention", "full_attention",
                                                   "linear_attention"]), ("LaraMiniForCausalLM",), device="cpu"),
    ),
)
