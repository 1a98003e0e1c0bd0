"""Ernie 4.5 MoE (transformers modeling_ernie4_5_moe.py): Ernie 4.5's layers (ernie4_5.py: rotary on interleaved
pairs, the LM head tied by default) whose MLP is, on every moe_layer_interval-th layer from moe_layer_start_index to
moe_layer_end_index (-1: the last), a router (mlp.gate) over moe_num_experts gated MLPs of moe_intermediate_size
(moe_k per token, picked by their scores plus moe_statics.e_score_correction_bias, a [1, E] parameter) and
moe_num_shared_experts fused into one summed MLP; the other layers run a dense MLP of intermediate_size. use_bias
(biases on q, k, v, o, the MLPs and the LM head; false in the released models) has no op template: the meta path
answers it. The routed experts' FLOPs are Qwen-MoE's (transformers 5's default grouped_mm; layout_moe.routed)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import infer, layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

ERNIE4_5_MOE = DecoderLayout(mlp="routed", shared="summed", dense_layers=True, router_statics=True, qkv_bias=False,
                             o_bias=False, mlp_bias=False, tied_default=True, paths=Paths(shared="shared_experts"),
                             requires=(("use_bias", False),))


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(ERNIE4_5_MOE, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    L, fe = spec.layers, c.int("moe_intermediate_size", default=FROM_CLASS)
    start, every = c.int("moe_layer_start_index", default=FROM_CLASS), c.int("moe_layer_interval", default=FROM_CLASS)
    end = c.get("moe_layer_end_index", default=-1)   # -1: the last layer (the class derives it)
    if isinstance(end, bool) or not isinstance(end, int):
        raise UsageError(f"{c.path}: config moe_layer_end_index = {end!r} is not a layer index")
    end = L - 1 if end == -1 else end
    sparse = [i for i in range(L) if every > 0 and (i + 1) % every == 0 and start <= i <= end]
    return replace(layout.with_experts(spec, c, "moe_num_experts", "moe_k"), moe_intermediate=fe,
                   shared_intermediate=fe * c.int("moe_num_shared_experts", default=FROM_CLASS),
                   dense_layers=tuple(i for i in range(L) if i not in sparse))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(ERNIE4_5_MOE, T, common, "ernie4_5_moe", top_k="moe_k")


# convert_hf_to_gguf.py Ernie4_5MoeModel: LLaMA's keys under Ernie's config names
_GGUF_KEYS = {**infer.GGUF_KEYS, "expert_count": "moe_num_experts", "expert_used_count": "moe_k",
              "expert_feed_forward_length": "moe_intermediate_size", "expert_shared_count": "moe_num_shared_experts"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """The MoE layers: from the first layer with a router, every one after (interval 1)."""
    if arch != "ernie4_5-moe":
        return None
    cfg = infer.gguf_config(arch, metadata, tensors, "Ernie4_5_MoeForCausalLM", keys=_GGUF_KEYS)
    if cfg is not None:
        L = cfg.get("num_hidden_layers", 0)
        first = next((i for i in range(L) if f"blk.{i}.ffn_gate_inp.weight" in tensors), L)
        cfg.update(model_type="ernie4_5_moe", moe_layer_start_index=first, moe_layer_end_index=-1, moe_layer_interval=1)
    return cfg


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=3, head_dim=8, moe_intermediate_size=24, moe_num_experts=4, moe_k=2,
              moe_num_shared_experts=1, pad_token_id=0)

FAMILY = Family(
    name="ernie4_5_moe",
    before=("glm4_moe", "qwen_moe", "mixtral", "llama"),   # tried before them: its shared experts, experts, q_proj names
    **{**layout.family_fields({"ernie4_5_moe": ERNIE4_5_MOE}, "ffn_gate_inp"),
       "signature": r"(^|[./])mlp[./](gate[./])?moe_statics[./]",   # as saved, and in transformers 5's memory
       "from_config": from_config, "from_tensors": from_tensors,
       # the converter renames moe_statics.e_score_correction_bias to llama.cpp's exp_probs_b.bias
       "gguf_tensor_names": layout.gguf_tensor_names(ERNIE4_5_MOE) + (
           ("model.layers.{bid}.mlp.moe_statics.e_score_correction_bias", "blk.{bid}.exp_probs_b.bias"),)},
    gguf_architectures=("ernie4_5-moe",), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("Ernie4_5_MoeConfig", _SIZES, ("Ernie4_5_MoeModel", "Ernie4_5_MoeForCausalLM"), device="cpu"),
        Sample("Ernie4_5_MoeConfig", dict(_SIZES, num_hidden_layers=4, moe_layer_start_index=0, moe_layer_interval=2,
                                          moe_num_shared_experts=0, tie_word_embeddings=False),
               ("Ernie4_5_MoeForCausalLM",), device="cpu"),
    ),
)
