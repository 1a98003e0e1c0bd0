"""Aria's language model (transformers modeling_aria.py: AriaTextForCausalLM, the text model of
AriaForConditionalGeneration, whose vision tower families/wrappers.py leaves outside): the LLaMA layout (layout.py),
pre-norm, q/k/v/o biased by attention_bias, and in every layer a router (mlp.router, a [E, h] parameter: top
moe_topk of moe_num_experts by logit, a softmax over those) over gated experts of intermediate_size held stacked
(DecoderLayout.stacked_experts: mlp.experts.fc1.weight [E, h, 2f], fc2.weight [E, f, h] as saved; gate_up_proj,
down_proj in memory), plus one shared gated MLP of moe_num_shared_experts x intermediate_size (mlp.shared_experts,
biased by mlp_bias) summed in. The routed experts' FLOPs are Qwen-MoE's (transformers 5's default grouped_mm: the
top-k rows of each token; layout_moe.routed). Active parameters: the router's top-k experts, the shared MLP and every
other part, per token."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import decoders, infer, layout, walk_names
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.layout import DecoderLayout, Paths

ARIA_TEXT = DecoderLayout(mlp="routed", shared="summed", stacked_experts=True, mlp_bias=None,
                          paths=Paths(router="router", shared="shared_experts"))


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.with_experts(layout.spec_from_config(ARIA_TEXT, c), c, "moe_num_experts", top_k="moe_topk")
    return replace(spec, shared_intermediate=spec.intermediate * c.int("moe_num_shared_experts", default=FROM_CLASS))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths from the shapes (the experts saved or held in memory); head_dim assumed (decoders.attention_dims), top-k
    AriaTextConfig's default."""
    V, h, q, kv, d = decoders.attention_dims(T)
    fused = infer.shape(T, r"mlp\.experts\.(fc1\.weight|gate_up_proj)$", "mlp.experts.fc1")
    shared = walk_names.layout_shape(T, ARIA_TEXT, "ffn_gate_shexp")
    if len(fused) != 3 or fused[1] != h or fused[2] % 2:
        raise UsageError(f"cannot infer the architecture from tensor names: mlp.experts.fc1 {list(fused)} is not Aria's "
                         f"[experts, {h}, 2 x intermediate]; pass --config")
    k = int(class_default("aria_text", "moe_topk"))
    notes = (f"no config: head_dim assumed {d}, experts per token (top-k) {k}, AriaTextConfig's default",)
    lay = ARIA_TEXT
    return ArchSpec(layers=infer.count_layers(T, lay.paths.numbered()), hidden=h, heads=q // d, kv_heads=kv // d,
                    head_dim=d, vocab=V, intermediate=fused[2] // 2, gated_mlp=True, norm="rmsnorm", activation="silu",
                    qkv_bias=walk_names.layout_has(T, lay, "attn_q", "bias"),
                    o_bias=walk_names.layout_has(T, lay, "attn_output", "bias"),
                    mlp_bias=walk_names.layout_has(T, lay, "ffn_gate_shexp", "bias"),
                    tied_embeddings=not walk_names.layout_has(T, lay, "output"), experts=fused[0], top_k=k,
                    shared_intermediate=shared[0], assumptions=notes, **dict(common, model_type="aria_text"))


_SIZES = dict(layout.TINY_MOE, head_dim=8, moe_num_experts=4, moe_topk=2, moe_num_shared_experts=2, pad_token_id=0)

FAMILY = Family(
    name="aria_text",
    before=("llama",),   # tried before it: its q_proj names match LLaMA's
    **{**layout.family_fields({"aria_text": ARIA_TEXT}, "ffn_down_exps"),
       # the stacked experts as saved
       "signature": r"(^|[./])layers[./]\d+[./]mlp[./]experts[./]fc1[./]weight",
       "from_config": from_config, "from_tensors": from_tensors,
       "gguf_tensor_names": ()},   # llama.cpp has no architecture for it
    # in memory: the router's bare parameter beside the shared experts (gpt-oss's router has none beside it)
    signature_together=(r"(^|[./])layers[./]\d+[./]mlp[./]router[./]weight", r"(^|[./])mlp[./]shared_experts[./]"),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("AriaTextConfig", _SIZES, ("AriaTextModel", "AriaTextForCausalLM"), device="cpu"),
        Sample("AriaTextConfig", dict(_SIZES, moe_num_shared_experts=1, attention_bias=True, mlp_bias=True,
                                      tie_word_embeddings=True), ("AriaTextForCausalLM",), device="cpu"),
    ),
)
