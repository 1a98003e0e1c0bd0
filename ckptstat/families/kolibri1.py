"""Kolibri 1 (transformers modeling_kolibri1.py): the LLaMA layout (layout.py) with sandwich norms (input_layernorm
before attention, post_attn_norm after it, post_attention_layernorm before the MLP, post_ffn_norm after it: the
names save_pretrained writes), per-head q/k RMSNorms, no biases, sliding layers by layer_types (by default every
layer but each 5th slides) with rotary on the sliding layers only (on every layer without a window), and in every
layer a router (mlp.gate, a [E, h] parameter; e_score_correction_bias a buffer) over num_experts MLPs of
moe_intermediate_size of which each token visits num_experts_per_tok, plus a shared MLP of
shared_expert_intermediate_size summed in (Kolibri1SparseMoeBlock). The config has no intermediate_size: no layer is
dense. The routed experts' FLOPs are Qwen-MoE's (transformers 5's default grouped_mm: the top-k rows of each token;
layout_moe.routed). Active parameters: the router's top-k experts, the shared MLP and every other part, per token."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

KOLIBRI1 = DecoderLayout(placement="sandwich", qk_norm="head", nope="global", mlp="routed", shared="summed",
                         qkv_bias=False, o_bias=False, mlp_bias=False,
                         paths=Paths(shared="shared_experts", attn_out="post_attn_norm", mlp_out="post_ffn_norm"))


def from_config(c: Cfg) -> ArchSpec:
    fe = c.int("moe_intermediate_size", default=FROM_CLASS)
    L = c.int("num_hidden_layers")
    filled = dict(c.cfg, intermediate_size=fe)   # every layer routed: no layer runs the dense width LLaMA's reader asks for
    if "sliding_window" not in filled:   # null (saved) is no window; absent, the class's 513
        filled["sliding_window"] = c.get("sliding_window", default=FROM_CLASS)
    if filled.get("layer_types") is None:   # Kolibri1Config's: every 5th layer full, the others sliding
        filled["layer_types"] = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(L)]
    spec = layout.spec_from_config(KOLIBRI1, Cfg(filled, c.path, c.model_type, c.head, c.common))
    spec = layout.with_experts(spec, c, "num_experts")
    return replace(spec, moe_intermediate=fe, shared_intermediate=c.int("shared_expert_intermediate_size", default=FROM_CLASS))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(KOLIBRI1, T, common, "kolibri1")


_SIZES = dict({k: v for k, v in layout.TINY_MOE.items() if k != "intermediate_size"}, num_hidden_layers=5, head_dim=8,
              moe_intermediate_size=24, num_experts=4, shared_expert_intermediate_size=16, sliding_window=4, pad_token_id=0)

FAMILY = Family(
    name="kolibri1",
    # tried before them: their q_proj, q_norm, post_self_attn_layernorm and experts names match its
    before=("llama", "glm", "mixtral", "qwen3", "qwen_moe", "glm4_moe"),
    **{**layout.family_fields({"kolibri1": KOLIBRI1}, "post_attention_norm"),
       # the norm after attention as save_pretrained names it
       "signature": r"(^|[./])layers[./]\d+[./]post_attn_norm[./]",
       "from_config": from_config, "from_tensors": from_tensors,
       "gguf_tensor_names": ()},   # llama.cpp has no architecture for it
    # as the model (and a torch.save of it) names it, GLM-4's name, beside fused experts (GLM-4 has none)
    signature_together=(r"(^|[./])layers[./]\d+[./]post_self_attn_layernorm[./]", infer.FUSED_EXPERTS),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("Kolibri1Config", _SIZES, ("Kolibri1Model", "Kolibri1ForCausalLM"), device="cpu"),
        Sample("Kolibri1Config", dict(_SIZES, num_hidden_layers=3, tie_word_embeddings=True,
                                      layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
               ("Kolibri1ForCausalLM",), device="cpu"),
    ),
)
