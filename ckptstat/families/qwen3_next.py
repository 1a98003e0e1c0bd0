"""Qwen3-Next (transformers modeling_qwen3_next.py, Qwen3NextModel / Qwen3NextForCausalLM): a hybrid decoder whose
layers config layer_types marks "linear_attention" (by default three of every four: full_attention_interval) mix
tokens with a gated DeltaNet (layout_linear.py: in_proj_qkvz, in_proj_ba, the short causal conv1d, the chunked gated
delta rule, the gated RMSNorm, out_proj) and whose other layers run gated attention (q_proj twice as wide: each head's
query and its output gate, the attention's output x sigmoid(gate) before o_proj; q/k RMSNorms per head; rotary on
partial_rotary_factor of each head, 0.25 by default). The MLP is Qwen2-MoE's (qwen_moe.py): a router over num_experts
experts of moe_intermediate_size, a shared expert scaled by sigmoid(shared_expert_gate(x)), dense layers by
mlp_only_layers and decoder_sparse_step. Its RMSNorms scale by 1 + weight (no parameter or matmul of their own).

The cache: keys and values of the attention layers, a conv state and a float32 recurrent state per linear layer
(layout_linear.hybrid_kv_cache). llama.cpp (qwen3next) names the MLP's norm post_attention_norm and has no names for a
dense layer's MLP."""
from __future__ import annotations

from typing import Any

from .framework import layout
from .framework.archspec import ArchSpec
from .framework.base import Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_linear import hybrid_kv_cache
from .qwen_moe import moe_spec

QWEN3_NEXT = DecoderLayout(qk_norm="head", gated_attention=True, linear="qkvz", mlp="routed", shared="gated",
                           dense_layers=True, mlp_bias=False, partial_rotary=0.25,
                           gguf_renames=(("ffn_norm", "post_attention_norm"), ("ffn_gate", None), ("ffn_up", None),
                                         ("ffn_down", None)),
                           task_heads=("seqcls", "tokcls", "qa"), paths=Paths(tokcls="score", qa_body="transformer"))
LAYOUTS = {"qwen3_next": QWEN3_NEXT}


def from_config(c: Cfg) -> ArchSpec:
    return moe_spec(LAYOUTS[c.model_type], c)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(QWEN3_NEXT, T, common, "qwen3_next")


_SIZES = dict(vocab_size=99, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
              shared_expert_intermediate_size=16, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              head_dim=8, num_experts=4, num_experts_per_tok=2, linear_num_value_heads=4, linear_num_key_heads=2,
              linear_key_head_dim=8, linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=64)

FAMILY = Family(
    name="qwen3_next",
    # tried before them: Qwen3.5's signature (linear_attn.in_proj_b) matches its in_proj_ba, Qwen2-MoE's its shared_expert_gate
    before=("qwen3_5", "qwen_moe"),
    **{**layout.family_fields(LAYOUTS, "ssm_in"), "from_config": from_config, "from_tensors": from_tensors,
       "kv_cache": hybrid_kv_cache},
    gguf_architectures=("qwen3next",),
    # convert_hf_to_gguf.py Qwen3NextModel.modify_tensors: every `norm.weight` + 1 (Qwen3NextRMSNorm scales by 1 + w) but
    # the gated linear_attn.norm's
    gguf_transforms=(("qwen3next", r"(?<!linear_attn\.)norm\.weight$", "plus_one"),),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("Qwen3NextConfig", dict(_SIZES, mlp_only_layers=[1]), ("Qwen3NextModel", "Qwen3NextForCausalLM"),
               device="cpu"),
        Sample("Qwen3NextConfig", dict(_SIZES, decoder_sparse_step=2, full_attention_interval=2, tie_word_embeddings=True,
                                       partial_rotary_factor=0.5), ("Qwen3NextForCausalLM",), device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("Qwen3NextConfig", dict(_SIZES, mlp_only_layers=[1], num_labels=3, pad_token_id=0),
               ("Qwen3NextForSequenceClassification",), device="cpu"),
        Sample("Qwen3NextConfig", dict(_SIZES, mlp_only_layers=[1], num_labels=3, pad_token_id=0),
               ("Qwen3NextForTokenClassification", "Qwen3NextForQuestionAnswering"), device="cpu"),
    ),
)
