"""Solar Open (transformers modeling_solar_open.py): the LLaMA layout (layout.py), pre-norm, q/k/v biased by
attention_bias (o_proj never), rotary over partial_rotary_factor of each head (rope_parameters, 1.0 by default), and in
every layer DeepSeek-V3's MLP: a router (mlp.gate, sigmoid scores plus e_score_correction_bias, a buffer) over
n_routed_experts MLPs of moe_intermediate_size of which each token visits num_experts_per_tok, and n_shared_experts
fused into one summed MLP of n_shared_experts x moe_intermediate_size (SolarOpenMoE). The config has no
intermediate_size: no layer is dense. The routed experts' FLOPs are Qwen-MoE's (transformers 5's default grouped_mm:
the top-k rows of each token; layout_moe.routed). Active parameters: the router's top-k experts, the shared experts
and every other part, per token.

Its tensor names are GLM-4.5 MoE's without q/k norms or dense layers: names alone read as glm4_moe (the same
parameter count), so Solar Open files are told by config.json."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

SOLAR_OPEN = DecoderLayout(o_bias=False, partial_rotary=1.0, mlp="routed", shared="summed", mlp_bias=False,
                           paths=Paths(shared="shared_experts"))


def from_config(c: Cfg) -> ArchSpec:
    fe = c.int("moe_intermediate_size", default=FROM_CLASS)
    # every layer routed: the dense width LLaMA's reader asks for is the experts' (no layer runs it)
    filled = Cfg(dict(c.cfg, intermediate_size=fe), c.path, c.model_type, c.head, c.common)
    spec = layout.with_experts(layout.spec_from_config(SOLAR_OPEN, filled), c, "n_routed_experts")
    return replace(spec, moe_intermediate=fe, shared_intermediate=fe * c.int("n_shared_experts", default=FROM_CLASS))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(SOLAR_OPEN, T, common, "solar_open")


_SIZES = {k: v for k, v in layout.TINY_MOE.items() if k != "intermediate_size"}

FAMILY = Family(
    name="solar_open",
    # no tensor name tells it from GLM-4.5 MoE's (see the docstring): config.json does
    **{**layout.family_fields({"solar_open": SOLAR_OPEN}, "ffn_gate_inp"), "signature": r"(?!)", "from_config": from_config,
       "from_tensors": from_tensors,
       "gguf_tensor_names": ()},   # llama.cpp has no architecture for it
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("SolarOpenConfig", dict(_SIZES, moe_intermediate_size=24, n_routed_experts=4, n_shared_experts=1,
                                       pad_token_id=0), ("SolarOpenModel", "SolarOpenForCausalLM"), device="cpu",
               detected_as="glm4_moe"),
        Sample("SolarOpenConfig", dict(_SIZES, moe_intermediate_size=16, n_routed_experts=4, n_shared_experts=2,
                                       attention_bias=True, tie_word_embeddings=True, pad_token_id=0),
               ("SolarOpenForCausalLM",), device="cpu", detected_as="glm4_moe"),
    ),
)
