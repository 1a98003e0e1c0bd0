"""Mixtral (transformers modeling_mixtral.py): the LLaMA-style decoder (llama.py) whose MLP is a sparse
mixture of experts: a router over num_local_experts gated MLPs (w1, w3, w2), of which each token uses
num_experts_per_tok. Total parameters count every expert; active ones the top-k.

transformers 5 holds the experts fused (MixtralExperts: gate_up_proj [E, 2f, h], down_proj [E, h, f]) and
save_pretrained writes them back as block_sparse_moe.experts.N.w1/w2/w3, the layout modelled here. FLOPs model
its default experts implementation, grouped_mm (integrations/moe.py grouped_mm_experts_forward): each token's
top-k rows through w1 and w3 (one gate_up matmul) and w2, b x s x k rows in all; the eager loop
(experts_implementation="eager") runs the same matmuls expert by expert."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from . import infer, llama
from .base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, add_linear
from .ops import Builder


def from_config(c: Cfg) -> ArchSpec:
    return replace(llama.from_config(c), experts=c.int("num_local_experts"), top_k=c.int("num_experts_per_tok"))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    dims = llama.attention_dims(T)
    E = infer.shape(T, r"(block_sparse_moe|mlp)\.gate\.weight$", "router")[0]   # mlp: transformers 5's module name
    f = infer.expert_width(T, r"experts\.0\.w1\.weight$", "experts.0.w1")
    return llama.spec_from_tensors(T, common, dims, f, experts=E, top_k=2,
                                   notes=("no config: experts per token (top-k) assumed 2, as in Mixtral-8x7B",))


def moe_mlp(B: Builder, lay: str) -> None:
    s, b, n = B.s, B.b, B.seq
    h, L, f, E, k = s.hidden, s.layers, s.intermediate, s.experts, s.top_k
    moe = f"{lay}.block_sparse_moe"
    B.linear(f"{moe}.gate (router)", "encoder", (b, n), h, E, False, L)
    routed = (b * n * k,)   # each token visits its top-k experts: k rows through w1, w3, w2
    B.linear(f"{moe}.experts[{E}].w1 (top-{k})", "encoder", routed, h, f, s.mlp_bias, L, copies=L * E, active_copies=L * k)
    B.linear(f"{moe}.experts[{E}].w3 (top-{k})", "encoder", routed, h, f, s.mlp_bias, L, copies=L * E, active_copies=L * k)
    B.activation(f"{moe}.experts act*w3", "encoder", routed, f, s.activation, L, gated=True)
    B.linear(f"{moe}.experts[{E}].w2 (top-{k})", "encoder", routed, f, h, s.mlp_bias, L, copies=L * E, active_copies=L * k)
    B.add(f"{moe}.combine (x routing weight)", "activation", "encoder", L, routed + (h,), (b, n, h), ew=b * n * k * h * 2)


def build(B: Builder) -> None:
    llama.decoder(B, moe_mlp)


def moe_tensors(out: Shapes, q: str, s: ArchSpec) -> None:
    h, f = s.hidden, s.intermediate
    add_linear(out, q + "block_sparse_moe.gate", s.experts, h, bias=False)
    for e in range(s.experts):
        for m, fo, fi in (("w1", f, h), ("w2", h, f), ("w3", f, h)):
            add_linear(out, f"{q}block_sparse_moe.experts.{e}.{m}", fo, fi, bias=False)


def expected_tensors(s: ArchSpec) -> Shapes:
    return llama.decoder_tensors(s, moe_tensors)


def gguf_accepts(arch: str, metadata: Mapping[str, str]) -> bool:
    """llama.cpp converts Mixtral to a "llama" file with experts (`llama.expert_count`)."""
    return arch == "mixtral" or int(metadata.get(f"{arch}.expert_count", "0") or 0) > 0


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    cfg = llama.gguf_config(arch, metadata, tensors)
    if cfg is not None and arch == "llama":
        cfg["model_type"] = "mixtral"
    return cfg


# HF module -> llama.cpp GGUF tensor name, as convert_hf_to_gguf.py maps them (gguf-py tensor_mapping.py
# TensorNameMap, the oracle in tests/test_gguf_names.py); `ckptstat diff` aligns a GGUF file with HF through it.
GGUF_TENSOR_NAMES = tuple(p for p in llama.GGUF_TENSOR_NAMES if ".mlp." not in p[0]) + (
    ("model.layers.{bid}.block_sparse_moe.gate", "blk.{bid}.ffn_gate_inp"),   # the router
    # the experts, stacked into one 3-D blk.N.ffn_{gate,up,down}_exps [experts, out, in] each: expert {xid} is its slice
    ("model.layers.{bid}.block_sparse_moe.experts.{xid}.w1", "blk.{bid}.ffn_gate_exps"),
    ("model.layers.{bid}.block_sparse_moe.experts.{xid}.w2", "blk.{bid}.ffn_down_exps"),
    ("model.layers.{bid}.block_sparse_moe.experts.{xid}.w3", "blk.{bid}.ffn_up_exps"),
)

FAMILY = Family(
    name="mixtral",
    model_types=("mixtral",),
    # transformers 5's fused experts (a torch.save of its state_dict): the other families' are told apart first
    signature=r"(^|[./])block_sparse_moe[./]|" + infer.FUSED_EXPERTS,
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **llama.DECODER_LM,
    gguf_architectures=("mixtral",) + llama.FAMILY.model_types,
    gguf_accepts=gguf_accepts,
    gguf_config=gguf_config,
    gguf_tensor_names=GGUF_TENSOR_NAMES,
    # LlamaModel writes Mixtral (its q/k rows permuted); so did the `mixtral` architecture's older converter
    gguf_transforms=llama.GGUF_ROPE_PERMUTED + tuple(("mixtral", rx, kind) for _, rx, kind in llama.GGUF_ROPE_PERMUTED),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("MixtralConfig", dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2, max_position_embeddings=64),
               ("MixtralModel", "MixtralForCausalLM"), device="cpu"),
    ),
)
