"""MiniMax-M3's language model (transformers modeling_minimax_m3_vl.py MiniMaxM3VLTextModel, MiniMaxM3VLForCausalLM;
model_type minimax_m3_vl_text): pre-norm layers (Gemma-style RMSNorms, x (1 + w): the same parameters and matmuls)
with per-head q_norm / k_norm, no biases, rotary on head_dim x rope_parameters' partial_rotary_factor (the config's
rotary_dim is not read by the model), and by mlp_layer_types either a dense MLP of dense_intermediate_size (gate and
up fused, gate_up_proj) or a router (mlp.gate, sigmoid scores plus e_score_correction_bias, a buffer) over
num_local_experts experts of intermediate_size held and saved as two 3-D parameters (experts.gate_up_proj [E, 2f, h],
experts.down_proj [E, h, f]: DecoderLayout.linear_experts "parameters"), each token's top num_experts_per_tok, summed
with a shared expert of shared_intermediate_size (shared_experts.gate_up_proj, down_proj). Every MLP's activation is
the clamped SwiGLU of gpt-oss (swiglu_alpha, swiglu_limit: element-wise). The routed experts' FLOPs are Mixtral's
(transformers 5's grouped_mm: each token's top-k rows; layout_moe.routed). Its sparse-attention layers (layer_types
"minimax_m3_sparse": the lightning indexer's block selection and its cached index keys) have no op template: such a
config is NoAnalyticModel, answered by the meta path."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import infer, layout, walk_names
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import FFNWidth

MINIMAX_M3 = DecoderLayout(qk_norm="head", qkv_bias=False, o_bias=False, mlp_bias=False, partial_rotary=1.0,
                           mlp="routed", shared="summed", dense_layers=True, fused_gate_up=True,
                           linear_experts="parameters", activation="clamped_swiglu",
                           ffn_width=FFNWidth(key="dense_intermediate_size"),
                           paths=Paths(shared="shared_experts", stacked_in="gate_up_proj", stacked_out="down_proj"))


def _flags(c: Cfg, key: str, legacy: str, legacy_key: str) -> list[Any] | None:
    """Config `key`, else the legacy per-layer flags its config class reads when `key` is absent (`legacy_key` at the
    top level, or inside the `legacy` object)."""
    v = c.cfg.get(key)
    if v is None:
        old = c.cfg.get(legacy) if legacy else c.cfg
        v = old.get(legacy_key) if isinstance(old, dict) else None
    return v if isinstance(v, list) else None


def from_config(c: Cfg) -> ArchSpec:
    attn = _flags(c, "layer_types", "sparse_attention_config", "sparse_attention_freq")
    if attn and any(t not in ("full_attention", 0, False) for t in attn):
        raise NoAnalyticModel(f"{c.path}: config layer_types names minimax_m3_sparse layers (the lightning indexer's "
                              "sparse attention): the op template describes only full attention")
    spec = layout.spec_from_config(MINIMAX_M3, c)
    L, mlp = spec.layers, _flags(c, "mlp_layer_types", "", "moe_layer_freq")
    if mlp is not None and c.cfg.get("mlp_layer_types") is None:   # moe_layer_freq: 1 sparse, 0 dense
        mlp = ["sparse" if f else "dense" for f in mlp]
    if mlp is not None and (len(mlp) != L or any(k not in ("dense", "sparse") for k in mlp)):
        raise UsageError(f"{c.path}: config mlp_layer_types is not a list of {L} 'dense' / 'sparse'")
    return replace(layout.with_experts(spec, c, "num_local_experts"), moe_intermediate=c.int("intermediate_size"),
                   shared_intermediate=c.int("shared_intermediate_size", default=FROM_CLASS),
                   dense_layers=tuple(i for i, k in enumerate(mlp or ()) if k == "dense"))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths from the shapes: head_dim from the per-head q_norm, the experts' width from experts.down_proj [E, h, f],
    the shared expert's and the dense MLP's from their fused gate_up_proj; the sparse layers are those with a router.
    Top-k is the config class's default, and every layer is assumed full attention (no tensor shows the indexer's
    sparse layers apart: their indexer's weights would)."""
    mt = "minimax_m3_vl_text"
    lay = MINIMAX_M3
    V, h = walk_names.layout_shape(T, lay, "token_embd")
    q, kv = walk_names.layout_shape(T, lay, "attn_q")[0], walk_names.layout_shape(T, lay, "attn_k")[0]
    d = walk_names.layout_shape(T, lay, "attn_q_norm")[0]
    if infer.find(T, r"self_attn\.indexer\.") is not None:
        raise NoAnalyticModel("minimax_m3_vl_text weights with an indexer (sparse-attention layers): the op template "
                              "describes only full attention")
    E, _, f = walk_names.layout_shape(T, lay, "ffn_down_exps", "")
    rx = re.compile(layout.pattern(lay, "ffn_gate_inp", layer=r"(\d+)"))
    sparse = {int(m.group(2)) for n in T if (m := rx.search(n))}
    L = infer.count_layers(T, lay.paths.numbered())
    dense = infer.find(T, layout.pattern(lay, "ffn_up"))
    shared = walk_names.layout_shape(T, lay, "ffn_up_shexp")[0] // 2
    k = int(class_default(mt, "num_experts_per_tok"))
    return ArchSpec(layers=L, hidden=h, heads=q // d, kv_heads=kv // d, head_dim=d, vocab=V,
                    intermediate=dense.shape[0] // 2 if dense is not None else 0, moe_intermediate=f,
                    shared_intermediate=shared, experts=E, top_k=k, dense_layers=tuple(i for i in range(L) if i not in sparse),
                    gated_mlp=True, norm="rmsnorm", activation="clamped_swiglu", qkv_bias=False, o_bias=False,
                    mlp_bias=False, tied_embeddings=not walk_names.layout_has(T, lay, "output"),
                    assumptions=(f"no config: experts per token (top-k) assumed {k}, {mt}'s config class default",
                                 "no config: every layer assumed full attention, all of head_dim rotated"),
                    **dict(common, model_type=mt))


_SIZES = dict(layout.TINY_MOE, num_local_experts=4, head_dim=8, dense_intermediate_size=40, shared_intermediate_size=16,
              pad_token_id=0, bos_token_id=1, eos_token_id=2)

FAMILY = Family(
    name="minimax_m3",
    before=("glm4_moe",),   # tried before it: its shared_experts and q_norm names are GLM-4.5 MoE's
    **{**layout.family_fields({"minimax_m3_vl_text": MINIMAX_M3}, "ffn_gate_inp"),
       # the shared expert's fused gate_up_proj
       "signature": r"(^|[./])layers[./]\d+[./]mlp[./]shared_experts[./]gate_up_proj",
       "from_config": from_config, "from_tensors": from_tensors,
       "gguf_tensor_names": ()},   # llama.cpp has no architecture for it
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("MiniMaxM3VLTextConfig", dict(_SIZES, mlp_layer_types=["dense", "sparse"]),
               ("MiniMaxM3VLTextModel", "MiniMaxM3VLForCausalLM"), device="cpu"),
        Sample("MiniMaxM3VLTextConfig", dict(_SIZES, tie_word_embeddings=True,
                                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                              "partial_rotary_factor": 0.5}),
               ("MiniMaxM3VLForCausalLM",), device="cpu"),
    ),
)
