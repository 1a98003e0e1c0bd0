"""Qwen3.5 and Qwen3.5-MoE's language models (transformers modeling_qwen3_5.py Qwen3_5TextModel / Qwen3_5ForCausalLM,
modeling_qwen3_5_moe.py Qwen3_5MoeTextModel / Qwen3_5MoeForCausalLM): Qwen3-Next's hybrid (qwen3_next.py: gated
DeltaNet on the layer_types "linear_attention" layers, gated attention with q/k norms and partial rotary on the others)
whose DeltaNet reads its inputs from four projections, in_proj_qkv, in_proj_z, in_proj_b and in_proj_a
(layout_linear.py, DecoderLayout.linear "split"). Qwen3.5's MLP is a dense gated MLP on every layer; Qwen3.5-MoE's a
router over num_experts experts of moe_intermediate_size with the gated shared expert on every layer. Their rotary
table is M-RoPE's (mrope_section: 3 position rows, one for text), element-wise only. The composite Qwen3.5 configs
(model_type qwen3_5, qwen3_5_moe: text_config beside a vision_config) are read through their text config
(wrappers.py). llama.cpp: qwen35, qwen35moe."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.archspec import ArchSpec
from .framework.base import Cfg, Family, Sample, Tensors
from .framework.layout_linear import hybrid_kv_cache
from .qwen3_next import QWEN3_NEXT
from .qwen_moe import moe_spec

# transformers 5 has Qwen3_5ForTokenClassification and sequence classifiers, no QA class, and no Qwen3.5-MoE head class
QWEN3_5_MOE = replace(QWEN3_NEXT, linear="split", dense_layers=False, task_heads=())
QWEN3_5 = replace(QWEN3_5_MOE, mlp="gated", shared="none", gguf_renames=(("ffn_norm", "post_attention_norm"),),
                  task_heads=("seqcls", "tokcls"))
LAYOUTS = {"qwen3_5_text": QWEN3_5, "qwen3_5_moe_text": QWEN3_5_MOE}


def from_config(c: Cfg) -> ArchSpec:
    lay = LAYOUTS[c.model_type]
    return moe_spec(lay, c) if lay.mlp == "routed" else layout.spec_from_config(lay, c)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Qwen3.5-MoE where a router is there (its top-k the config class's), else Qwen3.5."""
    if infer.has(T, layout.pattern(QWEN3_5_MOE, "ffn_gate_inp")):
        return layout.routed_from_tensors(QWEN3_5_MOE, T, common, "qwen3_5_moe_text")
    return layout.spec_from_tensors(QWEN3_5, T, dict(common, model_type="qwen3_5_text"))


_SIZES = dict(vocab_size=99, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              head_dim=8, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
              linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=64)

FAMILY = Family(
    name="qwen3_5",
    before=("qwen_moe",),   # tried before it: Qwen3.5-MoE's shared_expert_gate is Qwen2-MoE's signature
    **{**layout.family_fields(LAYOUTS, "ssm_beta"), "from_config": from_config, "from_tensors": from_tensors,
       "kv_cache": hybrid_kv_cache},
    gguf_architectures=("qwen35", "qwen35moe"),
    # convert_hf_to_gguf.py Qwen3_5TextModel / Qwen3_5MoeTextModel (_LinearAttentionVReorderBase.modify_tensors): the
    # linear attention's V heads reordered from grouped to tiled (in_proj_qkv's V rows, conv1d's V channels, in_proj_z,
    # in_proj_a / _b and dt_bias (one row a head), out_proj's columns; A_log's too, not replayed: -exp(A_log)); then
    # Qwen3NextModel.modify_tensors: dt_bias renamed dt_proj.bias (ssm_dt.bias), every `norm.weight` + 1 but
    # linear_attn.norm's
    gguf_transforms=tuple((arch, rx, kind) for arch in ("qwen35", "qwen35moe") for rx, kind in (
        (r"(?<!linear_attn\.)norm\.weight$", "plus_one"),
        (r"linear_attn\.(in_proj_qkv|conv1d)\.weight$", "v_heads_qkv"),
        (r"linear_attn\.in_proj_z\.weight$", "v_heads"),
        (r"linear_attn\.(in_proj_[ab]\.weight|dt_bias)$", "v_heads_1"),
        (r"linear_attn\.out_proj\.weight$", "v_heads_cols"))),
    samples=(
        Sample("Qwen3_5TextConfig", dict(_SIZES, intermediate_size=37), ("Qwen3_5TextModel", "Qwen3_5ForCausalLM")),
        Sample("Qwen3_5TextConfig", dict(_SIZES, intermediate_size=37, layer_types=["full_attention", "linear_attention"] * 2,
                                         tie_word_embeddings=True), ("Qwen3_5ForCausalLM",)),
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("Qwen3_5MoeTextConfig", dict(_SIZES, moe_intermediate_size=16, shared_expert_intermediate_size=16,
                                            num_experts=4, num_experts_per_tok=2),
               ("Qwen3_5MoeTextModel", "Qwen3_5MoeForCausalLM"), device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values (the head: QWEN3_NEXT's layout's)
        Sample("Qwen3_5TextConfig", dict(_SIZES, intermediate_size=37, num_labels=3, pad_token_id=0),
               ("Qwen3_5TextForSequenceClassification", "Qwen3_5ForTokenClassification"), device="cpu"),
    ),
)
