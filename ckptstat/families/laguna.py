"""Laguna (transformers modeling_laguna.py): AFMoE's attention (afmoe.py: per-head q/k RMSNorms, sliding layers by
layer_types) with rotary on every layer and an output gate g_proj whose softplus multiplies the attention's output
before o_proj, one gate per head (gating true or "per-head": h -> a) or per element (h -> a x d)
(DecoderLayout.attn_gate); pre-norm; dense gated MLPs on the layers mlp_layer_types marks "dense" (by default the
first), elsewhere a router (mlp.gate, a bare [E, h] weight; sigmoid scores plus gate.e_score_correction_bias, a [E]
parameter saved as experts.e_score_correction_bias, pick the top num_experts_per_tok) over num_experts gated MLPs of
moe_intermediate_size and a summed shared expert of shared_expert_intermediate_size (mlp.shared_expert). The routed
experts' FLOPs are Qwen-MoE's (transformers 5's grouped_mm: each token's top-k rows; layout_moe.routed). Its rotary
tables per layer type (a partial_rotary_factor each) are element-wise, as are the router's soft-capping and scaling.
A config whose num_attention_heads_per_layer differs from num_attention_heads on some layer is answered by the meta
path. llama.cpp has no architecture for it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import NoAnalyticModel
from .framework import infer, layout, walk_names
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Shapes, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.ops import Builder

# as transformers 5 saves it (its conversion mapping moves the score bias from mlp.gate to mlp.experts)
LAGUNA = DecoderLayout(qk_norm="head", attn_gate="head", mlp="routed", shared="summed", dense_layers=True,
                       score_bias=True, mlp_bias=False,
                       paths=Paths(router="gate", attn_gate="g_proj", score_bias="experts.e_score_correction_bias"))
LAGUNA_WIDTH = replace(LAGUNA, attn_gate="width")
# transformers 5's in-memory names (a torch.save of its state_dict keeps them): the shared expert's and the score bias's
_IN_MEMORY = replace(LAGUNA, paths=replace(LAGUNA.paths, shared="shared_experts", score_bias="gate.e_score_correction_bias"))


@dataclass(frozen=True)
class LagunaVariant(Variant):
    gate_per_head: bool       # g_proj: one gate per head (h -> a), else per element (h -> a x d)


def _layout(s: ArchSpec) -> DecoderLayout:
    return LAGUNA if s.variant_as(LagunaVariant).gate_per_head else LAGUNA_WIDTH


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(LAGUNA, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    per_layer = c.get("num_attention_heads_per_layer", default=None)
    if per_layer is not None and (not isinstance(per_layer, list) or set(per_layer) != {spec.heads}):
        raise NoAnalyticModel(f"{c.path}: config num_attention_heads_per_layer is not num_attention_heads on every layer: "
                              "the laguna op template describes one head count")
    gating = c.get("gating", default=FROM_CLASS)
    fe = c.int("moe_intermediate_size", default=FROM_CLASS)
    return replace(layout.with_experts(spec, c, "num_experts"), moe_intermediate=fe,
                   shared_intermediate=c.int("shared_expert_intermediate_size", default=FROM_CLASS),
                   dense_layers=layout.mlp_dense_layers(c, spec.layers, 1),
                   variant=LagunaVariant(gating is True or gating == "per-head"))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's shapes, as saved or as held (head_dim exact from the per-head q_norm); the gate per head when g_proj
    has a rows; which layers slide no tensor shows (none assumed: only the KV cache depends on them)."""
    lay = _IN_MEMORY if infer.has(T, r"(^|\.)mlp\.shared_experts\.") else LAGUNA
    spec = layout.routed_from_tensors(lay, T, common, "laguna")
    gate = walk_names.layout_shape(T, lay, "attn_gate")
    return replace(spec, variant=LagunaVariant(gate[0] == spec.heads))


def build(B: Builder) -> None:
    layout.walk(B, _layout(B.s))


def expected_tensors(s: ArchSpec) -> Shapes:
    return layout.expected_tensors(_layout(s), s)


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=3, head_dim=8, moe_intermediate_size=16, shared_expert_intermediate_size=24,
              num_experts=4)

FAMILY = Family(
    name="laguna",
    # tried before them: its q_norm, shared expert and experts names are theirs (in memory, GLM-4.5's score bias); its
    # g_proj is its own
    before=("llama", "qwen3", "qwen_moe", "mixtral", "glm4_moe"),
    **{**layout.family_fields({"laguna": LAGUNA}, "attn_gate"), "from_config": from_config, "from_tensors": from_tensors,
       "build": build, "expected_tensors": expected_tensors, "gguf_tensor_names": ()},   # no llama.cpp architecture
    gguf_architectures=(),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("LagunaConfig", _SIZES, ("LagunaModel", "LagunaForCausalLM"), device="cpu"),
        Sample("LagunaConfig", dict(_SIZES, gating="per-element", sliding_window=4, attention_bias=True,
                                    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                    mlp_layer_types=["sparse", "dense", "sparse"], tie_word_embeddings=True),
               ("LagunaForCausalLM",), device="cpu"),
    ),
)
