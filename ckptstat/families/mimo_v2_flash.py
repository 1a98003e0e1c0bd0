"""MiMo-V2-Flash (transformers modeling_mimo_v2_flash.py): pre-norm LLaMA layers (layout.py) whose attention differs by
layer_types: the sliding layers have twice num_key_value_heads (ArchSpec.sliding_kv_heads) and a learned sink per head
(attention_sink_bias as saved, sinks as held: DecoderLayout.sliding_sinks), the full layers neither; keys and queries
are head_dim wide, the values v_head_dim (ArchSpec.v_head_dim, o_proj reads heads x v_head_dim; the values scaled by
attention_value_scale, element-wise), q/k/v biased by attention_bias, o_proj never, partial rotary (the config class's
0.334 of head_dim per layer type). The MLP is dense (intermediate_size) on the layers mlp_layer_types marks "dense"
(by default the first), elsewhere DeepSeek-V3's router (mlp.gate, sigmoid scores plus e_score_correction_bias, a
buffer; grouped top-k) over n_routed_experts experts of moe_intermediate_size, no shared expert, saved one tensor per
expert (transformers 5's qwen2_moe conversion). The routed experts' FLOPs are Qwen-MoE's (transformers 5's default
grouped_mm: the top-k rows of each token; layout_moe.routed). The cache: 2 x g x (head_dim + v_head_dim) per token
on a full layer, twice the heads over the last sliding_window - 1 tokens on a sliding one. A config without
layer_types or sliding_window (the class derives them) is NoAnalyticModel: the meta path answers it."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ..errors import NoAnalyticModel
from .framework import layout, walk_names
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.layout import DecoderLayout, Paths

MIMO_V2_FLASH = DecoderLayout(o_bias=False, mlp_bias=False, mlp="routed", dense_layers=True, sinks=True, sliding_sinks=True,
                              partial_rotary=0.334, paths=Paths(sinks="attention_sink_bias"))
# its modules with a sink on every layer: what a file's names and shapes are read by (a tiny spec without sliding layers
# meets no sink of MIMO_V2_FLASH's), and llama.cpp's names of them
_SUNK = replace(MIMO_V2_FLASH, sliding_sinks=False)


def from_config(c: Cfg) -> ArchSpec:
    for key in ("layer_types", "sliding_window"):
        if c.cfg.get(key) is None:
            raise NoAnalyticModel(f"{c.path}: config has no {key}, which the {c.model_type} config class derives: the op "
                                  "template reads them from the file")
    spec = layout.spec_from_config(MIMO_V2_FLASH, c)
    return replace(layout.with_experts(spec, c, "n_routed_experts"), moe_intermediate=c.int("moe_intermediate_size",
                   default=FROM_CLASS), dense_layers=layout.mlp_dense_layers(c, spec.layers, 1),
                   v_head_dim=c.int("v_head_dim", default=FROM_CLASS), sliding_kv_heads=2 * spec.kv_heads)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """spec_from_tensors, then per layer: the sliding layers are those with a sink (saved attention_sink_bias, held
    sinks: one per query head, so head_dim is q_proj's width over them), their key/value heads from their k_proj, the
    full layers' from theirs; v_head_dim from o_proj's input over the heads. The sliding window no tensor shows: the
    config class's default."""
    spec = layout.routed_from_tensors(_SUNK, T, common, "mimo_v2_flash")
    rx = re.compile(r"(^|\.)layers\.(\d+)\.self_attn\.(attention_sink_bias|sinks|k_proj\.weight)$")
    sunk: dict[int, int] = {}
    width: dict[int, int] = {}
    for n, t in T.items():
        if m := rx.search(n):
            (width if m.group(3) == "k_proj.weight" else sunk)[int(m.group(2))] = t.shape[0]
    a = next(iter(sunk.values()), spec.heads)
    d = walk_names.layout_shape(T, _SUNK, "attn_q")[0] // a
    full = next((w for i, w in sorted(width.items()) if i not in sunk), None)
    g = full // d if full else next(iter(width.values()), 2 * d) // (2 * d)
    window = int(class_default("mimo_v2_flash", "sliding_window")) if sunk else None   # no sink: no sliding layer
    rot = int(d * (MIMO_V2_FLASH.partial_rotary or 1))
    return replace(spec, heads=a, head_dim=d, kv_heads=g, sliding_kv_heads=2 * g, rope_dim=rot,
                   sliding_layers=tuple(sorted(sunk)), sliding_window=window,
                   v_head_dim=walk_names.layout_shape(T, _SUNK, "attn_output")[1] // a,
                   assumptions=spec.assumptions + (f"no config: sliding window assumed {window}, the config class default",))


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=3, num_key_value_heads=1, head_dim=12, v_head_dim=8, n_routed_experts=4,
              moe_intermediate_size=16, sliding_window=5)

FAMILY = Family(
    name="mimo_v2_flash",
    # tried before them: its q_proj, experts, router and (as held) sinks names are theirs
    before=("llama", "qwen_moe", "glm4_moe", "flint", "gpt_oss"),
    **{**layout.family_fields({"mimo_v2_flash": MIMO_V2_FLASH}, "ffn_gate_inp"),
       "signature": r"(^|[./])layers[./]\d+[./]self_attn[./]attention_sink_bias",
       "from_config": from_config, "from_tensors": from_tensors,
       # the router's e_score_correction_bias (a buffer, which the walk does not meet) is llama.cpp's exp_probs_b
       "gguf_tensor_names": layout.gguf_tensor_names(_SUNK) + (
           ("model.layers.{bid}.mlp.gate.e_score_correction_bias", "blk.{bid}.exp_probs_b.bias"),)},
    # as held (a torch.save of the state_dict): the sinks under their in-memory name beside DeepSeek's router buffer,
    # no q/k norms (Flint's) or shared expert
    signature_together=(r"(^|[./])self_attn[./]sinks$", r"(^|[./])mlp[./]gate[./]e_score_correction_bias"),
    signature_without=r"(^|[./])(self_attn[./][qk]_norm|mlp[./]shared_experts?)[./]",
    gguf_architectures=("mimo2",),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("MiMoV2FlashConfig", dict(_SIZES, layer_types=["full_attention", "sliding_attention", "sliding_attention"],
                                         mlp_layer_types=["dense", "sparse", "sparse"]),
               ("MiMoV2FlashModel", "MiMoV2FlashForCausalLM"), device="cpu"),
        Sample("MiMoV2FlashConfig", dict(_SIZES, attention_bias=True, tie_word_embeddings=True, layer_types=[
            "sliding_attention", "full_attention", "sliding_attention"], mlp_layer_types=["sparse", "dense", "sparse"]),
               ("MiMoV2FlashForCausalLM",), device="cpu"),
    ),
)
