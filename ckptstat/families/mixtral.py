"""Mixtral (transformers modeling_mixtral.py): the LLaMA layout (layout.py) whose MLP is a sparse mixture of
experts: a router over num_local_experts gated MLPs (w1, w3, w2), of which each token uses num_experts_per_tok.
Total parameters count every expert; active ones the top-k.

transformers 5 holds the experts fused (MixtralExperts: gate_up_proj [E, 2f, h], down_proj [E, h, f]) under
`mlp` and save_pretrained writes them back as block_sparse_moe.experts.N.w1/w2/w3, the layout modelled here.
FLOPs model its default experts implementation, grouped_mm (integrations/moe.py grouped_mm_experts_forward): each
token's top-k rows through w1 and w3 (one gate_up matmul) and w2, b x s x k rows in all; the eager loop
(experts_implementation="eager") runs the same matmuls expert by expert."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from . import llama
from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

MIXTRAL = DecoderLayout(mlp="routed", mlp_bias=False, paths=Paths(mlp="block_sparse_moe", gate="w1", up="w3", down="w2",
                                                                    tokcls="score"),
                        task_heads=("seqcls", "tokcls", "qa"))
# transformers 5's in-memory names, which a torch.save of its state_dict keeps: the router at mlp.gate, experts fused
_IN_MEMORY = replace(MIXTRAL, paths=replace(MIXTRAL.paths, mlp="mlp"))


def from_config(c: Cfg) -> ArchSpec:
    return replace(layout.spec_from_config(MIXTRAL, c), experts=c.int("num_local_experts"),
                   top_k=c.int("num_experts_per_tok"))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    spec = layout.spec_from_tensors(MIXTRAL if layout.matches(MIXTRAL, T) else _IN_MEMORY, T, common)
    return replace(spec, top_k=2, assumptions=spec.assumptions + (
        "no config: experts per token (top-k) assumed 2, as in Mixtral-8x7B",))


def gguf_accepts(arch: str, metadata: Mapping[str, str]) -> bool:
    """llama.cpp converts Mixtral to a "llama" file with experts (`llama.expert_count`)."""
    return arch == "mixtral" or int(metadata.get(f"{arch}.expert_count", "0") or 0) > 0


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    cfg = llama.gguf_config(arch, metadata, tensors)
    if cfg is not None and arch == "llama":
        cfg["model_type"] = "mixtral"
    return cfg


FAMILY = Family(
    name="mixtral",
    before=("llama",),   # tried before llama: its q_proj names match llama's signature; llama.cpp writes it as `llama`
    **{**layout.family_fields({"mixtral": MIXTRAL}, "ffn_gate_inp"),
       # transformers 5's fused experts (a torch.save of its state_dict): the other families' are told apart first
       "signature": r"(^|[./])block_sparse_moe[./]|" + infer.FUSED_EXPERTS,
       "from_config": from_config, "from_tensors": from_tensors},
    gguf_architectures=("mixtral",) + llama.FAMILY.model_types,
    gguf_accepts=gguf_accepts,
    gguf_config=gguf_config,
    # LlamaModel writes Mixtral (its q/k rows permuted); so did the `mixtral` architecture's older converter
    gguf_transforms=llama.GGUF_ROPE_PERMUTED + layout.row_rewrites("mixtral", MIXTRAL, "rope"),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("MixtralConfig", dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2, max_position_embeddings=64),
               ("MixtralModel", "MixtralForCausalLM"), device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("MixtralConfig", dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2, max_position_embeddings=64, num_labels=3, pad_token_id=0),
               ("MixtralForSequenceClassification", "MixtralForQuestionAnswering"), device="cpu"),
        Sample("MixtralConfig", dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2, max_position_embeddings=64, num_labels=3, pad_token_id=0),
               ("MixtralForTokenClassification",), device="cpu"),
    ),
)
