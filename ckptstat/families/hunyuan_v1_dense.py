"""HunYuan dense v1 (transformers modeling_hunyuan_v1_dense.py, Hunyuan-7B and the small dense ones): HunYuan MoE v1's
layer (hunyuan_v1_moe.py: pre-norm, q/k/v/o biased by attention_bias, per-head q/k RMSNorms query_layernorm and
key_layernorm, applied after the rotary) with LLaMA's gated MLP, unbiased, in place of the routed one. llama.cpp names
the architecture hunyuan-dense."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from . import hunyuan_v1_moe
from .framework import layout
from .framework.base import Family, Sample, Tensors

HUNYUAN_DENSE = replace(hunyuan_v1_moe.HUNYUAN_MOE, mlp="gated", shared="none")

_READ = layout.gguf_reader(HUNYUAN_DENSE, "HunYuanDenseV1ForCausalLM")


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    cfg = _READ(arch, metadata, tensors) if arch == "hunyuan-dense" else None
    if cfg is not None:
        cfg.update(model_type="hunyuan_v1_dense")
    return cfg


_SIZES = dict(layout.TINY, head_dim=8)

FAMILY = Family(
    name="hunyuan_v1_dense",
    before=("llama", "qwen3"),   # tried before them: its q_proj names are LLaMA's
    **layout.family_fields({"hunyuan_v1_dense": HUNYUAN_DENSE}, "attn_q_norm"),
    gguf_architectures=("hunyuan-dense",), gguf_config=gguf_config,
    samples=(
        Sample("HunYuanDenseV1Config", _SIZES, ("HunYuanDenseV1Model", "HunYuanDenseV1ForCausalLM")),
        Sample("HunYuanDenseV1Config", dict(_SIZES, attention_bias=True, tie_word_embeddings=True),
               ("HunYuanDenseV1ForCausalLM",)),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("HunYuanDenseV1Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("HunYuanDenseV1ForSequenceClassification",),
               device="cpu"),
    ),
)
