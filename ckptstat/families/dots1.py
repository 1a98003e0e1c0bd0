"""dots.llm1 (transformers modeling_dots1.py): the LLaMA layout (layout.py), pre-norm, q/k/v/o biased by
attention_bias, per-head q/k RMSNorms, sliding layers by layer_types (by default those from max_window_layers on,
when sliding_window is set); the first first_k_dense_replace layers run a dense gated MLP (intermediate_size), the
others DeepSeek-V3's MLP: a router (mlp.gate, sigmoid scores plus e_score_correction_bias, a buffer) over
n_routed_experts MLPs of moe_intermediate_size (top num_experts_per_tok per token) and n_shared_experts fused into one
summed MLP of n_shared_experts x moe_intermediate_size. The routed experts' FLOPs are Qwen-MoE's (transformers 5's
default grouped_mm: the top-k rows of each token; layout_moe.routed). Active parameters: the router's top-k experts,
the shared experts and every other part, per token.

Its tensor names are GLM-4.5 MoE's with q/k norms: names alone read as glm4_moe (the same parameter count), so
dots.llm1 files are told by config.json or their llama.cpp architecture (dots1)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.decoders import MAX_COUNT
from .framework.layout import DecoderLayout, Paths

DOTS1 = DecoderLayout(qk_norm="head", mlp="routed", shared="summed", dense_layers=True, mlp_bias=False,
                      paths=Paths(shared="shared_experts"))


def from_config(c: Cfg) -> ArchSpec:
    L = c.int("num_hidden_layers")
    filled = dict(c.cfg)
    if filled.get("layer_types") is None:   # Dots1Config's: sliding from max_window_layers on, when a window is set
        window, first = c.get("sliding_window", default=None), c.int("max_window_layers", default=FROM_CLASS)
        filled["layer_types"] = ["sliding_attention" if window is not None and i >= first else "full_attention"
                                 for i in range(min(L, MAX_COUNT))]
    spec = layout.spec_from_config(DOTS1, Cfg(filled, c.path, c.model_type, c.head, c.common))
    spec, fe = layout.with_experts(spec, c, "n_routed_experts"), c.int("moe_intermediate_size", default=FROM_CLASS)
    first = min(c.int("first_k_dense_replace", default=FROM_CLASS), spec.layers)
    return replace(spec, moe_intermediate=fe, shared_intermediate=fe * c.int("n_shared_experts", default=FROM_CLASS),
                   dense_layers=tuple(range(first if spec.experts else spec.layers)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Dots1Config has no top-k default (None): the released dots.llm1's 6 of 128 experts, said in the assumptions."""
    spec = layout.spec_from_tensors(DOTS1, T, dict(common, model_type="dots1"))
    why = "no config: experts per token (top-k) assumed 6, as in dots.llm1 (Dots1Config has no default)"
    return replace(spec, top_k=6, assumptions=spec.assumptions + (why,))


# convert_hf_to_gguf.py Dots1Model: LLaMA's keys and DeepSeek's MoE keys under dots.llm1's config names
_GGUF_KEYS = {**infer.GGUF_KEYS, "expert_count": "n_routed_experts", "expert_feed_forward_length": "moe_intermediate_size",
              "expert_shared_count": "n_shared_experts", "leading_dense_block_count": "first_k_dense_replace"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    cfg = infer.gguf_config(arch, metadata, tensors, "Dots1ForCausalLM", keys=_GGUF_KEYS) if arch == "dots1" else None
    if cfg is not None:
        cfg.update(model_type="dots1", attention_bias="blk.0.attn_q.bias" in tensors)
        cfg["first_k_dense_replace"] = min(cfg.get("first_k_dense_replace", 0), MAX_COUNT)
    return cfg


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=3, head_dim=8, moe_intermediate_size=24, n_routed_experts=4,
              n_shared_experts=1, first_k_dense_replace=1, pad_token_id=0)

FAMILY = Family(
    name="dots1",
    # no tensor name tells it from GLM-4.5 MoE's (see the docstring): config.json or the GGUF architecture does
    **{**layout.family_fields({"dots1": DOTS1}, "ffn_gate_inp"), "signature": r"(?!)",
       "from_config": from_config, "from_tensors": from_tensors,
       # the router's e_score_correction_bias (a buffer, which the walk does not meet) is llama.cpp's exp_probs_b
       "gguf_tensor_names": layout.gguf_tensor_names(DOTS1) + (
           ("model.layers.{bid}.mlp.gate.e_score_correction_bias", "blk.{bid}.exp_probs_b.bias"),)},
    gguf_architectures=("dots1",), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("Dots1Config", dict(_SIZES, sliding_window=4, max_window_layers=1), ("Dots1Model", "Dots1ForCausalLM"),
               device="cpu", detected_as="glm4_moe"),
        Sample("Dots1Config", dict(_SIZES, n_shared_experts=2, first_k_dense_replace=0, attention_bias=True,
                                   tie_word_embeddings=True), ("Dots1ForCausalLM",), device="cpu", detected_as="glm4_moe"),
    ),
)
