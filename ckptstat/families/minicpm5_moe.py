"""MiniCPM 5 MoE (transformers 5.25 modeling_minicpm5_moe.py): GLM-4.5 MoE's layers (glm4_moe.py: pre-norm, DeepSeek's
router over n_routed_experts MLPs of moe_intermediate_size, top num_experts_per_tok, scored by sigmoid plus
e_score_correction_bias, a buffer; n_shared_experts fused into one summed MLP of n_shared_experts x
moe_intermediate_size) with LLaMA's attention (q/k/v and o biased by attention_bias, every head rotated whole, no q/k
norms) whose query is gated: one q_proj twice as wide (q_gate_proj in memory, which a torch.save of the state_dict
keeps; save_pretrained writes q_proj, conversion_mapping.py), each head's query then its gate, the attention's output
times sigmoid(gate) before o_proj (Qwen3-Next's gated attention). The layers mlp_layer_types marks "dense" (by default
the first first_k_dense_replace, which the config class pops) run a gated MLP of intermediate_size. The routed experts'
FLOPs are Qwen-MoE's (transformers 5's default grouped_mm: the top-k rows of each token; layout_moe.routed).
A save_pretrained file's names alone are GLM-4.5 MoE's (its config.json names the model_type); a torch.save's
q_gate_proj shows this family. llama.cpp has no architecture for it."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

MINICPM5_MOE = DecoderLayout(gated_attention=True, mlp="routed", shared="summed", dense_layers=True, mlp_bias=False,
                             paths=Paths(shared="shared_experts"))
IN_MEMORY = replace(MINICPM5_MOE, paths=Paths(q="q_gate_proj", shared="shared_experts"))   # a torch.save's names


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(MINICPM5_MOE, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    spec, fe = layout.with_experts(spec, c, "n_routed_experts"), c.int("moe_intermediate_size", default=FROM_CLASS)
    dense = layout.mlp_dense_layers(c, spec.layers, c.int("first_k_dense_replace", default=1))   # the class's default
    return replace(spec, moe_intermediate=fe, shared_intermediate=fe * c.int("n_shared_experts", default=FROM_CLASS),
                   dense_layers=dense if spec.experts else tuple(range(spec.layers)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    lay = IN_MEMORY if any(".q_gate_proj." in name for name in T) else MINICPM5_MOE
    return layout.routed_from_tensors(lay, T, common, "minicpm5_moe")


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=3, moe_intermediate_size=24, n_routed_experts=4, n_shared_experts=1,
              n_group=1, topk_group=1, pad_token_id=0)

FAMILY = Family(
    name="minicpm5_moe",
    # tried before them: its k_proj, shared experts and mlp.experts names match theirs
    before=("glm4_moe", "llama", "mixtral", "qwen3", "qwen_moe"),
    **{**layout.family_fields({"minicpm5_moe": MINICPM5_MOE}, "ffn_gate_inp"),
       # the gated query as the model holds it (a torch.save): no other family's
       "signature": r"(^|[./])layers[./]\d+[./]self_attn[./]q_gate_proj[./]",
       "from_config": from_config, "from_tensors": from_tensors,
       "gguf_tensor_names": ()},   # llama.cpp has no architecture for it
    gguf_architectures=(),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        # save_pretrained's names alone are GLM-4.5 MoE's (config.json, which it writes, names the model_type)
        Sample("MiniCPM5MoeConfig", _SIZES, ("MiniCPM5MoeModel", "MiniCPM5MoeForCausalLM"), device="cpu",
               detected_as="glm4_moe"),
        Sample("MiniCPM5MoeConfig", dict(_SIZES, n_shared_experts=2, attention_bias=True, tie_word_embeddings=True,
                                         mlp_layer_types=["sparse", "dense", "sparse"]),
               ("MiniCPM5MoeForCausalLM",), device="cpu", detected_as="glm4_moe"),
    ),
)
