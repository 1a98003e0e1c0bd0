"""Flint (transformers modeling_flint.py): Qwen3-MoE's layers (per-head q/k norms; a layer routed unless in
mlp_only_layers, by default [0, 1], or off decoder_sparse_step) with a learned sink per head and layer
(self_attn.sinks, gpt-oss's extra softmax logit), a sigmoid top-k router (its linear's matmul as any router's; the
sigmoid element-wise), an ungated shared expert (shared_expert_intermediate_size) added to the routed experts, and
sliding layers by layer_types (by default full on layers 0, 1, i % 4 == 1 and the last). No llama.cpp architecture."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.decoders import count
from .framework.layout import DecoderLayout, Paths

# save_pretrained writes self_attn.sinks as self_attn.softmax_offset (transformers' conversion_mapping for flint)
FLINT = DecoderLayout(qk_norm="head", mlp="routed", shared="summed", dense_layers=True, sinks=True, mlp_bias=False,
                      paths=Paths(sinks="softmax_offset"))


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(FLINT, c)
    L, E = spec.layers, count(c, "num_experts", default=256)
    step = c.int("decoder_sparse_step", default=1)
    only = c.get("mlp_only_layers", default=None)
    only = [0, 1] if only is None else only     # FlintConfig.__post_init__'s default
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise UsageError(f"{c.path}: config mlp_only_layers = {only!r} is not a list of layer indices")
    dense = tuple(i for i in range(L) if i in only or not (E > 0 and step > 0 and (i + 1) % step == 0))
    types = c.get("layer_types", default=None)
    if types is None:   # FlintConfig.__post_init__'s rule
        types = ["full_attention" if i < 2 or i % 4 == 1 or i == L - 1 else "sliding_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L:
        raise UsageError(f"{c.path}: config layer_types = {types!r} is not a list of {L} layer types")
    window = c.get("sliding_window", default=513)
    slide = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    sliding: dict[str, Any] = dict(sliding_window=None, sliding_layers=())
    if isinstance(window, int) and not isinstance(window, bool) and window > 0 and slide:
        sliding = dict(sliding_window=window, sliding_layers=() if len(slide) == L else slide)
    return replace(spec, experts=E, top_k=c.int("num_experts_per_tok", default=6), dense_layers=dense,
                   moe_intermediate=c.int("moe_intermediate_size", default=512),
                   shared_intermediate=c.int("shared_expert_intermediate_size", default=1024), **sliding)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(FLINT, T, common, "flint", note="no sliding layers assumed (KV cache only)")


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=4, num_experts=4, moe_intermediate_size=16,
              shared_expert_intermediate_size=16, mlp_only_layers=[0], sliding_window=4, pad_token_id=0)

FAMILY = Family(
    name="flint",
    # the sinks as saved (or as a torch.save of the model names them), beside Qwen-MoE's router (mlp.gate), not
    # gpt-oss's (mlp.router); llama.cpp has no flint architecture
    **{**layout.family_fields({"flint": FLINT}, "attn_q"), "from_config": from_config, "from_tensors": from_tensors,
       "signature": r"(^|[./])layers[./]\d+[./]self_attn[./](softmax_offset|sinks)", "gguf_tensor_names": ()},
    signature_without=r"(^|[./])mlp[./]router[./]",
    before=("gpt_oss", "qwen_moe", "llama"),   # their sinks, router and q_proj signatures match its files too
    samples=(
        Sample("FlintConfig", _SIZES, ("FlintModel", "FlintForCausalLM"), device="cpu"),
    ),
)
