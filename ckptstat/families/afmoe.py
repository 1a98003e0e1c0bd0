"""AFMoE (transformers modeling_afmoe.py, Arcee's Trinity): a LLaMA layer with sandwich norms (input_layernorm and
post_attention_layernorm around the attention, pre_mlp_layernorm and post_mlp_layernorm around the MLP), per-head q/k
RMSNorms, q/k/v/o biased by attention_bias, an output gate on the attention (self_attn.gate_proj, h -> a x d, sigmoid,
times the attention's output before o_proj: DecoderLayout.attn_gate), rotary on the sliding layers only (by default every
global_attn_every_n_layers-th layer is full and has none), and after the first num_dense_layers dense layers a router
(mlp.router.gate, sigmoid scores plus mlp.expert_bias, a [E] parameter, to pick the top num_experts_per_tok) over
num_experts gated MLPs of moe_intermediate_size, with num_shared_experts fused into one summed MLP (mlp.shared_experts).
muP's input scaling is element-wise, not counted. The routed experts' FLOPs are Qwen-MoE's (transformers 5's
grouped_mm: each token's top-k rows; layout_moe.routed)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

AFMOE = DecoderLayout(placement="sandwich", qk_norm="head", attn_gate="width", nope="global", mlp="routed",
                      shared="summed", dense_layers=True, score_bias=True, mlp_bias=False,
                      paths=Paths(router="router.gate", shared="shared_experts", mlp_in="pre_mlp_layernorm",
                                  mlp_out="post_mlp_layernorm"))


def from_config(c: Cfg) -> ArchSpec:
    if c.cfg.get("layer_types") is None:   # AfmoeConfig.__post_init__'s rule: every n-th layer full, the others sliding
        n = c.int("global_attn_every_n_layers", default=FROM_CLASS)
        L = c.int("num_hidden_layers")
        types = ["sliding_attention" if n == 0 or (i + 1) % n else "full_attention" for i in range(L)]
        c = Cfg(dict(c.cfg, layer_types=types), c.path, c.model_type, c.head, c.common)
    spec = layout.spec_from_config(AFMOE, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    fe = c.int("moe_intermediate_size", default=FROM_CLASS)
    return replace(layout.with_experts(spec, c, "num_experts"), moe_intermediate=fe,
                   shared_intermediate=fe * c.int("num_shared_experts", default=FROM_CLASS),
                   dense_layers=tuple(range(min(c.int("num_dense_layers", default=FROM_CLASS), spec.layers))))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's shapes; which layers slide (and so which have rotary) no tensor shows."""
    spec = layout.routed_from_tensors(AFMOE, T, common, "afmoe")
    return replace(spec, assumptions=spec.assumptions + ("no config: no sliding layers assumed (only the KV cache and "
                                                         "the rotary's element-wise work depend on them)",))


_SIZES = dict(layout.TINY_MOE, num_hidden_layers=4, head_dim=8, moe_intermediate_size=16, num_experts=4,
              num_shared_experts=1, num_dense_layers=1, sliding_window=4, global_attn_every_n_layers=2)

FAMILY = Family(
    name="afmoe",
    # tried before them: its q_norm, shared experts and experts names are theirs (its router, mlp.router.gate, HY-V3's);
    # its attention gate is its own
    before=("llama", "qwen3", "qwen_moe", "mixtral", "glm4_moe", "deepseek", "hy_v3"),
    **{**layout.family_fields({"afmoe": AFMOE}, "attn_gate"), "from_config": from_config, "from_tensors": from_tensors},
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("AfmoeConfig", _SIZES, ("AfmoeModel", "AfmoeForCausalLM"), device="cpu"),
        Sample("AfmoeConfig", dict(_SIZES, num_shared_experts=2, num_dense_layers=2, tie_word_embeddings=True,
                                   layer_types=["sliding_attention", "full_attention", "full_attention", "sliding_attention"]),
               ("AfmoeForCausalLM",), device="cpu"),
    ),
)
