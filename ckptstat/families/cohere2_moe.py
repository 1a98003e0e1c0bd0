"""Cohere2 MoE (transformers modeling_cohere2_moe.py): Cohere2's parallel layers (cohere.py: one bias-free LayerNorm,
input_layernorm, whose output feeds attention and the MLP, both added to the residual; sliding attention on the
layers layer_types marks, rotary only on those) whose MLP is, on the layers mlp_layer_types marks "dense", a gated
MLP of prefix_dense_intermediate_size (rotary forced on them when prefix_dense_sliding_window_pattern is 1), and
elsewhere a router over num_experts gated MLPs of intermediate_size (num_experts_per_tok per token) with
num_shared_experts fused into one MLP of num_shared_experts x intermediate_size, averaged with the experts' output
(shared_expert_combination_strategy "average"). Logits are scaled by logit_scale (element-wise); the LM head is tied
by default. RMSNorm in place of the LayerNorms (rms_norm_eps set) and the "sum" strategy have no op template: the meta
path answers them. The routed experts' FLOPs are Qwen-MoE's (transformers 5's default grouped_mm; layout_moe.routed).
llama.cpp has no architecture for it."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

COHERE2_MOE = DecoderLayout(norm="layernorm_nobias", placement="parallel", mlp="routed", shared="averaged",
                            dense_layers=True, mlp_bias=False, nope="global", tied_default=True,
                            paths=Paths(shared="shared_experts"),
                            requires=(("rms_norm_eps", None), ("shared_expert_combination_strategy", "average")))


def from_config(c: Cfg) -> ArchSpec:
    if c.cfg.get("layer_types") is None:   # Cohere2MoeConfig.__post_init__'s rule: the dense prefix's full layers every
        # prefix_dense_sliding_window_pattern-th, then the rest's every sliding_window_pattern-th, counted afresh
        L, k = c.int("num_hidden_layers"), c.int("first_k_dense_replace", default=0)
        periods = [c.int(key, default=FROM_CLASS) for key in ("prefix_dense_sliding_window_pattern", "sliding_window_pattern")]
        if min(periods) <= 0:
            raise UsageError(f"{c.path}: config sliding window patterns {periods} are not positive periods of layers")
        types = [("sliding_attention" if (i + 1) % p else "full_attention") for n, p in ((min(k, L), periods[0]),
                                                                                       (L - min(k, L), periods[1]))
                 for i in range(n)]
        c = Cfg(dict(c.cfg, layer_types=types), c.path, c.model_type, c.head, c.common)
    spec = layout.spec_from_config(COHERE2_MOE, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    L, f = spec.layers, spec.intermediate
    dense = layout.mlp_dense_layers(c, L, c.int("first_k_dense_replace", default=0))   # a kwarg the class pops
    forced = dense if c.get("prefix_dense_sliding_window_pattern", default=FROM_CLASS) == 1 else ()
    return replace(layout.with_experts(spec, c, "num_experts"), moe_intermediate=f,
                   intermediate=c.int("prefix_dense_intermediate_size") if dense else f,
                   shared_intermediate=f * c.int("num_shared_experts", default=FROM_CLASS), dense_layers=dense,
                   nope_layers=tuple(i for i in spec.nope_layers if i not in forced))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(COHERE2_MOE, T, common, "cohere2_moe", note="no sliding window assumed")


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=4, num_experts=4, pad_token_id=0, sliding_window=4)

FAMILY = Family(
    name="cohere2_moe",
    before=("glm4_moe", "qwen_moe", "mixtral", "llama"),   # tried before them: their experts, shared experts, q_proj names
    **{**layout.family_fields({"cohere2_moe": COHERE2_MOE}, "ffn_gate_inp"), "signature": r"(?!)",
       "from_config": from_config, "from_tensors": from_tensors,
       "gguf_tensor_names": ()},
    # routed experts in parallel layers: experts (one per tensor or fused) beside input_layernorm, with no
    # post_attention_layernorm (every pre-norm family has one)
    signature_together=(r"(^|[./])layers[./]\d+[./]mlp[./]experts[./](\d+[./]gate_proj|gate_up_proj)",
                        layout.signature(COHERE2_MOE, "attn_norm")),
    signature_without=r"(^|[./])post_attention_layernorm[./]",
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("Cohere2MoeConfig", dict(_SIZES, num_shared_experts=1, prefix_dense_intermediate_size=40,
                                        mlp_layer_types=["dense", "sparse", "sparse", "sparse"]),
               ("Cohere2MoeModel", "Cohere2MoeForCausalLM"), device="cpu"),
        Sample("Cohere2MoeConfig", dict(_SIZES, prefix_dense_sliding_window_pattern=2, prefix_dense_intermediate_size=40,
                                        mlp_layer_types=["dense", "dense", "sparse", "sparse"], tie_word_embeddings=False),
               ("Cohere2MoeForCausalLM",), device="cpu"),
    ),
)
