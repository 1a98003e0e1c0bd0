"""Beam (transformers modeling_beam.py): a LLaMA layer with sandwich norms (post_attention_layernorm after the attention,
pre_feedforward_layernorm and post_feedforward_layernorm around the MLP), per-head q/k RMSNorms, an output gate on the
attention (self_attn.gate_proj, h -> a x d, plus gate_bias, one per head; sigmoid, times the attention's output before
o_proj: DecoderLayout.attn_gate "biased"), rotary on the sliding layers only (the full ones run without positions, their
queries scaled by position, element-wise; by default every sixth layer and the last are full), the logits soft-capped
by final_logit_softcapping; dense gated MLPs on the layers mlp_layer_types marks "dense" (by default the first three),
elsewhere a router (mlp.gate, a bare [E, h] weight; sigmoid scores plus e_score_correction_bias, a buffer, grouped
top-k) over num_experts gated MLPs of moe_intermediate_size, no shared expert. Its depth-scaled residual adds and
routed scaling are element-wise. The routed experts' FLOPs are Qwen-MoE's (transformers 5's grouped_mm: each token's
top-k rows; layout_moe.routed). llama.cpp has no architecture for it."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

BEAM = DecoderLayout(placement="sandwich", qk_norm="head", attn_gate="biased", nope="global", softcap=True, mlp="routed",
                     dense_layers=True, mlp_bias=False, task_heads=("tokcls",),
                     paths=Paths(mlp_in="pre_feedforward_layernorm", tokcls="score"))


def from_config(c: Cfg) -> ArchSpec:
    if c.cfg.get("layer_types") is None:   # BeamConfig.__post_init__'s rule: every sixth layer and the last full
        L = c.int("num_hidden_layers")
        types = ["sliding_attention" if (i + 1) % 6 and i < L - 1 else "full_attention" for i in range(L)]
        c = Cfg(dict(c.cfg, layer_types=types), c.path, c.model_type, c.head, c.common)
    spec = layout.spec_from_config(BEAM, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    return replace(layout.with_experts(spec, c, "num_experts"), dense_layers=layout.mlp_dense_layers(c, spec.layers, 3),
                   moe_intermediate=c.int("moe_intermediate_size", default=FROM_CLASS))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's shapes; which layers slide (and so which have rotary) no tensor shows."""
    spec = layout.routed_from_tensors(BEAM, T, common, "beam")
    return replace(spec, assumptions=spec.assumptions + ("no config: no sliding layers assumed (only the KV cache and "
                                                         "the rotary's element-wise work depend on them)",))


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=4, head_dim=8, moe_intermediate_size=16, num_experts=4, n_group=2,
              topk_group=1, sliding_window=4)

FAMILY = Family(
    name="beam",
    # tried before them: its q_norm and experts names are theirs; its attention gate's bias is its own
    before=("llama", "qwen3", "qwen_moe", "mixtral", "afmoe"),
    **{**layout.family_fields({"beam": BEAM}, "attn_q"), "from_config": from_config, "from_tensors": from_tensors,
       "signature": r"(^|[./])layers[./]\d+[./]self_attn[./]gate_bias$",
       "gguf_tensor_names": ()},   # llama.cpp has no beam architecture
    gguf_architectures=(),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("BeamConfig", _SIZES, ("BeamModel", "BeamForCausalLM"), device="cpu"),
        Sample("BeamConfig", dict(_SIZES, final_logit_softcapping=None, tie_word_embeddings=True, attention_bias=True,
                                  layer_types=["full_attention", "sliding_attention", "full_attention", "sliding_attention"],
                                  mlp_layer_types=["dense", "sparse", "sparse", "sparse"]), ("BeamForCausalLM",), device="cpu"),
        Sample("BeamConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("BeamForTokenClassification",), device="cpu"),
    ),
)
