"""LFM2 and LFM2-MoE (transformers modeling_lfm2.py, modeling_lfm2_moe.py): LLaMA layouts (layout.py) whose layers
config layer_types marks "conv" run a gated short convolution in place of attention (mixers_conv.py: in_proj, B x x,
a depthwise conv1d of conv_L_cache, C x conv, out_proj), the others attention with q/k RMSNorms per head
(q_layernorm, k_layernorm) and out_proj; operator_norm before the mixer, ffn_norm before the feed_forward (w1, w3, w2),
the final norm named embedding_norm; the LM head tied by default. LFM2's feed_forward width is intermediate_size
adjusted when block_auto_adjust_ff_dim (2/3 of it, times block_ffn_dim_multiplier, rounded up to block_multiple_of);
LFM2-MoE's first num_dense_layers layers run a dense feed_forward of intermediate_size, the others a sigmoid top-k
router (feed_forward.gate, a bare weight [E, h]) over num_experts gated experts of moe_intermediate_size (transformers
5's grouped_mm; saved as feed_forward.experts.N.{w1, w3, w2}). The cache: keys and values of the attention layers, a
conv state [b, h, conv_L_cache] of each conv layer (mixers_conv.kv_cache)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .framework import infer, layout, mixers_conv
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import TINY, TINY_MOE, DecoderLayout, Paths

_PATHS = Paths(o="out_proj", q_norm="q_layernorm", k_norm="k_layernorm", mlp="feed_forward", gate="w1", up="w3", down="w2",
               attn_in="operator_norm", mlp_in="ffn_norm", norm="embedding_norm")
# llama.cpp (gguf-py MODEL_ARCH.LFM2) names the final embedding_norm token_embd_norm
LFM2 = DecoderLayout(qk_norm="head", short_conv=True, tied_default=True, paths=_PATHS,
                     gguf_renames=(("output_norm", "token_embd_norm"),))
# the router is Lfm2MoeTopKRouter's bare weight; its expert_bias is a buffer (no parameter); llama.cpp's lfm2moe ties
# its output (gguf-py MODEL_TENSORS has no OUTPUT for it)
LFM2_MOE = replace(LFM2, mlp="routed", dense_layers=True, gguf_renames=LFM2.gguf_renames + (("output", None),))
LAYOUTS = {"lfm2": LFM2, "lfm2_moe": LFM2_MOE}


def _ff_width(c: Cfg) -> int:
    """Lfm2MLP's width: intermediate_size, or with block_auto_adjust_ff_dim int(2f / 3), then (with a
    block_ffn_dim_multiplier) int(multiplier x that) rounded up to block_multiple_of."""
    f = c.int("intermediate_size")
    if not c.get("block_auto_adjust_ff_dim", default=FROM_CLASS):
        return f
    f = int(2 * f / 3)
    mult = c.get("block_ffn_dim_multiplier", default=FROM_CLASS)
    if mult is None:
        return f
    step = c.int("block_multiple_of", default=FROM_CLASS)
    f = int(mult * f)
    return step * ((f + step - 1) // step)


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(LAYOUTS[c.model_type], c)
    if c.model_type == "lfm2":
        return replace(spec, intermediate=_ff_width(c))
    spec = layout.with_experts(spec, c, "num_experts")
    return replace(spec, moe_intermediate=c.int("moe_intermediate_size", default=FROM_CLASS),
                   dense_layers=layout.mlp_dense_layers(c, spec.layers, c.int("num_dense_layers", default=FROM_CLASS)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    routed = infer.has(T, layout.pattern(LFM2_MOE, "ffn_gate_inp"))
    if not routed:
        return layout.spec_from_tensors(LFM2, T, dict(common, model_type="lfm2"))
    return layout.routed_from_tensors(LFM2_MOE, T, common, "lfm2_moe")


_FIELDS: Mapping[str, Any] = layout.family_fields(LAYOUTS, "shortconv.conv")
_SIZES = dict(TINY, num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"], pad_token_id=0)
_MOE = dict(TINY_MOE, num_hidden_layers=3, layer_types=["conv", "full_attention", "full_attention"], num_dense_layers=1,
            num_experts=4, moe_intermediate_size=16, pad_token_id=0)

FAMILY = Family(
    name="lfm2",
    **{**_FIELDS, "from_config": from_config, "from_tensors": from_tensors, "kv_cache": mixers_conv.kv_cache,
       # the MoE blocks' expert_bias (a buffer, which the walk does not meet) is llama.cpp's exp_probs_b
       "gguf_tensor_names": _FIELDS["gguf_tensor_names"] + (
           ("model.layers.{bid}.feed_forward.expert_bias", "blk.{bid}.exp_probs_b"),)},
    gguf_architectures=("lfm2", "lfm2moe"),
    samples=(
        Sample("Lfm2Config", _SIZES, ("Lfm2Model", "Lfm2ForCausalLM")),
        Sample("Lfm2Config", dict(_SIZES, conv_bias=True, conv_L_cache=4, block_auto_adjust_ff_dim=False,
                                  tie_word_embeddings=False), ("Lfm2ForCausalLM",)),
        Sample("Lfm2Config", dict(_SIZES, block_ffn_dim_multiplier=1.5, block_multiple_of=8, layer_types=None,
                                  full_attn_idxs=[2]), ("Lfm2ForCausalLM",)),
        Sample("Lfm2MoeConfig", _MOE, ("Lfm2MoeModel", "Lfm2MoeForCausalLM"), device="cpu"),
    ),
)
