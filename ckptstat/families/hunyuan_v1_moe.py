"""HunYuan MoE v1 (transformers modeling_hunyuan_v1_moe.py, Hunyuan-A13B): the LLaMA layout (layout.py), pre-norm,
q/k/v/o biased by attention_bias, per-head q/k RMSNorms (query_layernorm, key_layernorm), and in every layer a router
(mlp.gate.wg, an fp32 Linear, softmax then top moe_topk) over num_experts MLPs of intermediate_size, plus a shared MLP
of intermediate_size (mlp.shared_mlp) summed in. The routed experts' FLOPs are Qwen-MoE's (transformers 5's default
grouped_mm: the top-k rows of each token; layout_moe.routed). Active parameters: the router's top-k experts, the
shared MLP and every other part, per token. A config whose num_experts or moe_topk is a list (one per layer) is
answered by the meta path."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import NoAnalyticModel
from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.decoders import count
from .framework.layout import DecoderLayout, Paths

HUNYUAN_MOE = DecoderLayout(task_heads=("seqcls",), qk_norm="head", mlp="routed", shared="summed", mlp_bias=False,
                            paths=Paths(router="gate.wg", shared="shared_mlp", q_norm="query_layernorm",
                                        k_norm="key_layernorm"))


def from_config(c: Cfg) -> ArchSpec:
    for key in ("num_experts", "moe_topk"):
        if isinstance(c.get(key, default=None), list):
            raise NoAnalyticModel(f"{c.path}: config {key} is a list (per layer): the hunyuan_v1_moe op template "
                                  "describes one value for every layer")
    spec = layout.spec_from_config(HUNYUAN_MOE, c)   # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    E = count(c, "num_experts", default=1)
    return replace(spec, experts=E, top_k=c.int("moe_topk", default=1), shared_intermediate=spec.intermediate)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return layout.routed_from_tensors(HUNYUAN_MOE, T, common, "hunyuan_v1_moe", top_k="moe_topk")


# convert_hf_to_gguf.py HunYuanMoEModel: LLaMA's keys, expert_count from num_experts, expert_used_count from moe_topk
_GGUF_KEYS = {**infer.GGUF_KEYS, "expert_count": "num_experts", "expert_used_count": "moe_topk"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    if arch != "hunyuan-moe":
        return None
    cfg = infer.gguf_config(arch, metadata, tensors, "HunYuanMoEV1ForCausalLM", keys=_GGUF_KEYS)
    if cfg is not None:
        cfg.update(model_type="hunyuan_v1_moe", attention_bias="blk.0.attn_q.bias" in tensors)
    return cfg


_SIZES = dict(layout.TINY_MOE, head_dim=8, num_experts=4, moe_topk=2)

FAMILY = Family(
    name="hunyuan_v1_moe",
    # tried before them: its q_proj and experts.N names match theirs (and its q/k norms, HunYuan dense's)
    before=("llama", "mixtral", "qwen_moe", "hunyuan_v1_dense"),
    **{**layout.family_fields({"hunyuan_v1_moe": HUNYUAN_MOE}, "ffn_gate_inp"),
       "from_config": from_config, "from_tensors": from_tensors},
    gguf_architectures=("hunyuan-moe",), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("HunYuanMoEV1Config", _SIZES, ("HunYuanMoEV1Model", "HunYuanMoEV1ForCausalLM"), device="cpu"),
        Sample("HunYuanMoEV1Config", dict(_SIZES, num_experts=3, moe_topk=1, attention_bias=True, tie_word_embeddings=True),
               ("HunYuanMoEV1ForCausalLM",), device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("HunYuanMoEV1Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("HunYuanMoEV1ForSequenceClassification",),
               device="cpu"),
    ),
)
