"""Mamba (transformers modeling_mamba.py, MambaModel / MambaForCausalLM) and FalconMamba (modeling_falcon_mamba.py): the
layout (layout.py) whose every layer is an RMSNorm and the Mamba1 selective state-space mixer (layout_ssm.mamba1: in_proj
h -> 2i, x and the gate; a depthwise causal conv1d over x; x_proj i -> r + 2N, dt, B and C; dt_proj r -> i, biased;
the parameters A_log [i, N] and D [i]; the recurrence; out_proj i -> h), no attention and no MLP; embeddings, norm_f and
the LM head, tied by default, under `backbone.`. FalconMamba's mixer also RMS-normalises dt, B and C without weights
(DecoderLayout.ssm_norms "weightless"); Mamba's has no such norms.

FLOPs follow the eager path that runs off CUDA with a cache (the default use_cache): the conv1d as FlopCounterMode
counts convolution over the padded output length (layout_ssm._conv), the recurrence one [b, i, N] @ [b, N, 1] matmul
per token; the discretisation is element-wise. The cache is the SSM state, not K/V: per layer a conv state [b, i, k]
and a recurrent state [b, i, N], in float32 (base.decoder_kv_cache)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .framework import infer, layout, layout_ssm, walk_names
from .framework.archspec import ArchSpec
from .framework.base import FROM_CLASS, Cfg, Family, HeadRule, Sample, Tensors, TieRule
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import SSMKeys

# MambaConfig's keys: state_size, conv_kernel, expand, use_conv_bias, use_bias (SSMKeys' defaults), time_step_rank and
# intermediate_size (the class's expand x hidden_size unless the config sets it: its __post_init__ runs first)
MAMBA = DecoderLayout(mlp="none", hybrid="all", ssm_keys=SSMKeys(dt_rank="time_step_rank", intermediate="intermediate_size"),
                      ssm_norms="none",
                      tied_default=True,
                      paths=Paths(body="backbone", embed="embeddings", attn_in="norm", norm="norm_f", ssm="mixer"))
FALCON_MAMBA = replace(MAMBA, ssm_norms="weightless")


def from_config(c: Cfg) -> ArchSpec:
    """MambaConfig / FalconMambaConfig: no attention (heads 0) and no MLP; the mixer's sizes from state_size,
    conv_kernel, intermediate_size (else expand x hidden_size, as the class derives it) and time_step_rank ("auto":
    ceil(hidden_size / 16))."""
    L = c.int("num_hidden_layers")
    ssm = layout_ssm.layers_from_config(MAMBA, c, L)
    return ArchSpec(layers=L, hidden=c.int("hidden_size"), heads=0, kv_heads=0, head_dim=0,
                    intermediate=ssm["ssm"].intermediate, vocab=c.int("vocab_size"),
                    activation=str(c.get("hidden_act", default=FROM_CLASS)), norm="rmsnorm", qkv_bias=False, o_bias=False,
                    mlp_bias=False, tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)), **ssm,
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The mixer's widths from its shapes (layout.ssm_from_tensors), the layers from those holding it."""
    V, h = walk_names.layout_shape(T, MAMBA, "token_embd")
    ssm = layout.ssm_from_tensors(MAMBA, T, "mamba")
    return ArchSpec(layers=len(ssm["ssm_layers"]), hidden=h, heads=0, kv_heads=0, head_dim=0,
                    intermediate=ssm["ssm"].intermediate, vocab=V, activation="silu", norm="rmsnorm", qkv_bias=False,
                    o_bias=False, mlp_bias=False, tied_embeddings=not walk_names.layout_has(T, MAMBA, "output"),
                    assumptions=("no config: activation assumed silu",), **ssm, **common)


# convert_hf_to_gguf.py MambaModel's keys (its feed_forward_length and head_count are written as 0, unused).
_GGUF_KEYS = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size", "ssm.inner_size": "intermediate_size",
              "ssm.state_size": "state_size", "ssm.conv_kernel": "conv_kernel", "ssm.time_step_rank": "time_step_rank"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """Mamba's config names from `mamba.ssm.*`; the biases from whether the file stores them."""
    cfg = infer.gguf_config(arch, metadata, tensors, "MambaForCausalLM", keys=_GGUF_KEYS) if arch == "mamba" else None
    if cfg is not None:
        cfg.update(use_bias="blk.0.ssm_in.bias" in tensors, use_conv_bias="blk.0.ssm_conv1d.bias" in tensors)
    return cfg


_SIZES = dict(hidden_size=32, num_hidden_layers=2, state_size=8, conv_kernel=3, expand=2, vocab_size=99,
              time_step_rank=5)

FAMILY = Family(
    name="mamba",
    # llama.cpp's converter stores ssm_a = -exp(A_log) (replayed by diff: gguf_transforms) and squeezes conv1d's
    # [i, 1, k] to [i, k] (names align; diff compares the squeezed shapes)
    **{**layout.family_fields({"mamba": MAMBA, "falcon_mamba": FALCON_MAMBA}, "ssm_x"),
       "from_config": from_config, "from_tensors": from_tensors,
       # MambaForCausalLM nests the model under `backbone.` (MambaModel does not): that shows a tied, dropped lm_head
       "head_rules": (HeadRule(r"(^|\.)lm_head\.weight$", "lm"), HeadRule(r"^backbone\.embeddings\.weight$", "lm")),
       # MambaForCausalLM._tied_weights_keys
       "tie_rules": (TieRule("lm_head.weight", "backbone.embeddings.weight", "config", heads=("lm",)),)},
    gguf_config=gguf_config,
    gguf_transforms=(("mamba", r"(^|\.)A_log$", "neg_exp"),),
    samples=(
        # a tied lm_head is not stored: the `backbone.` prefix tells a tied MambaForCausalLM from MambaModel
        Sample("MambaConfig", _SIZES, ("MambaForCausalLM", "MambaModel")),
        # intermediate_size set: MambaConfig keeps it over expand x hidden_size
        Sample("MambaConfig", dict(_SIZES, tie_word_embeddings=False, use_bias=True, use_conv_bias=False,
                                   time_step_rank="auto", intermediate_size=48), ("MambaForCausalLM",)),
        Sample("FalconMambaConfig", _SIZES, ("FalconMambaForCausalLM", "FalconMambaModel")),
    ),
)
