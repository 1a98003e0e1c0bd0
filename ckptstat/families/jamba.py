"""Jamba (transformers modeling_jamba.py, JambaModel / JambaForCausalLM): the LLaMA layout (layout.py) whose layers'
token mixer is attention (no rotary) on every attn_layer_period-th layer from attn_layer_offset and the Mamba1 mixer
elsewhere (JambaMambaMixer: layout_ssm.mamba1, its sizes the config's mamba_* keys), each followed, after
`pre_ff_layernorm`, by a routed MLP on every expert_layer_period-th layer from expert_layer_offset (a router over
num_experts gated experts, num_experts_per_tok of them per token; saved one module per expert) and a gated MLP
elsewhere; the final norm `final_layernorm`. The cache: K/V per attention layer, a conv and a float32 recurrent state
per Mamba layer (base.decoder_kv_cache)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import layout
from .framework.archspec import ArchSpec
from .framework.base import FROM_CLASS, Cfg, Family, Sample, Tensors
from .framework.layout import TINY_MOE, DecoderLayout, Paths
from .framework.layout_base import JAMBA_KEYS

JAMBA = DecoderLayout(hybrid="period", ssm_keys=JAMBA_KEYS, nope="all", mlp="routed", dense_layers=True, qkv_bias=False,
                      o_bias=False, mlp_bias=False,
                      paths=Paths(mlp="feed_forward", mlp_in="pre_ff_layernorm", router="router", norm="final_layernorm"),
                      task_heads=("seqcls",))


def from_config(c: Cfg) -> ArchSpec:
    """The layout's spec with the experts (num_experts, num_experts_per_tok) and the dense layers: those off
    JambaConfig.layers_num_experts' period."""
    s = layout.with_experts(layout.spec_from_config(JAMBA, c), c, "num_experts")
    period, offset = c.int("expert_layer_period", default=FROM_CLASS), c.int("expert_layer_offset", default=FROM_CLASS)
    return replace(s, dense_layers=tuple(i for i in range(s.layers) if not (period and i % period == offset and s.experts > 1)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's spec from the shapes; the experts per token, which no tensor shows, JambaConfig's default (said
    in the assumptions, as every routed family's: layout.routed_from_tensors)."""
    return layout.routed_from_tensors(JAMBA, T, common, "jamba")


_SIZES = dict(TINY_MOE, num_hidden_layers=4, num_experts=4, attn_layer_period=2, attn_layer_offset=1,
              expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8, mamba_d_conv=3, mamba_dt_rank=4)

FAMILY = Family(
    name="jamba",
    **{**layout.family_fields({"jamba": JAMBA}, "ssm_x"), "from_config": from_config, "from_tensors": from_tensors},
    gguf_transforms=(("jamba", r"(^|\.)A_log$", "neg_exp"),),   # JambaModel: A = -exp(A_log), replayed by diff
    before=("bamba",),   # Bamba's signature (its mixer's mamba.in_proj) matches Jamba's names too
    # its signature (layers.N.mamba.x_proj) is a prefix of Zamba's per-head mamba.x_proj_weight (families/zamba.py)
    signature_without=r"(^|[./])mamba[./]x_proj_weight$",
    samples=(
        Sample("JambaConfig", _SIZES, ("JambaForCausalLM", "JambaModel"), device="cpu"),
        Sample("JambaConfig", dict(_SIZES, attn_layer_period=4, attn_layer_offset=0, expert_layer_offset=0,
                                   mamba_conv_bias=False, mamba_proj_bias=True, mamba_dt_rank="auto",
                                   tie_word_embeddings=True), ("JambaForCausalLM",), device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("JambaConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("JambaForSequenceClassification",), device="cpu"),
    ),
)
