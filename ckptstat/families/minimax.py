"""MiniMax-Text (transformers modeling_minimax.py, MiniMaxForCausalLM): Mixtral's layout (mixtral.py: block_sparse_moe,
experts w1 / w3 / w2, a softmax top-k router over num_local_experts) whose layers config layer_types marks
"linear_attention" (by default every second) run lightning attention in place of softmax attention
(mixers_lightning.py: qkv_proj, blocked linear attention over block_size tokens, norm, output_gate, out_proj). Each
layer scales its residual and its mixer's / MLP's output by the config's alpha and beta factors (element-wise only).
The cache (MiniMaxCache, a DynamicCache built without the config) keeps keys and values of every token in the softmax
layers and a [b, a, d, d] state per lightning layer (mixers_lightning.kv_cache). A sliding_window, which masks the
softmax layers but leaves their cache whole, is refused (NoAnalyticModel: the meta path answers it)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import layout, mixers_lightning
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import TINY_MOE, DecoderLayout, Paths

MINIMAX = DecoderLayout(task_heads=("seqcls", "tokcls", "qa"), mlp="routed", mlp_bias=False, qkv_bias=False, o_bias=False,
                        lightning=True,
                        paths=Paths(mlp="block_sparse_moe", gate="w1", up="w3", down="w2", tokcls="score"),
                        requires=(("sliding_window", None),))

# transformers 5's in-memory names, which a torch.save of its state_dict keeps: the block at mlp, experts fused
_IN_MEMORY = replace(MINIMAX, paths=replace(MINIMAX.paths, mlp="mlp"))


def from_config(c: Cfg) -> ArchSpec:
    return layout.with_experts(layout.spec_from_config(MINIMAX, c), c, "num_local_experts")


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    spec = layout.routed_from_tensors(MINIMAX if layout.matches(MINIMAX, T) else _IN_MEMORY, T, common, "minimax")
    assert spec.lightning is not None
    return replace(spec, assumptions=spec.assumptions + (
        f"no config: lightning attention's block_size assumed {spec.lightning.block_size}, the config class default",))


_SIZES = dict(TINY_MOE, num_hidden_layers=3, num_local_experts=4, head_dim=8, block_size=4)

FAMILY = Family(
    name="minimax",
    before=("mixtral", "llama"),   # tried before them: its block_sparse_moe and q_proj names
    **{**layout.family_fields({"minimax": MINIMAX}, "attn_q"),
       # the lightning layers' output gate: no other family's
       "signature": r"(^|[./])layers[./]\d+[./]self_attn[./]output_gate[./]",
       "from_config": from_config, "from_tensors": from_tensors, "kv_cache": mixers_lightning.kv_cache,
       "gguf_tensor_names": ()},
    gguf_architectures=(),   # llama.cpp has no MiniMax-Text architecture (minimax-m2 is another model): no GGUF names
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU; 8 and 16 tokens run 2 and 4
        # blocks of 4, and in blocks of 5 a short last one
        Sample("MiniMaxConfig", _SIZES, ("MiniMaxModel", "MiniMaxForCausalLM"), device="cpu"),
        Sample("MiniMaxConfig", dict(_SIZES, block_size=5, layer_types=["linear_attention", "full_attention",
                                                                         "linear_attention"], tie_word_embeddings=True),
               ("MiniMaxForCausalLM",), device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("MiniMaxConfig", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("MiniMaxForSequenceClassification", "MiniMaxForQuestionAnswering"), device="cpu"),
        Sample("MiniMaxConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("MiniMaxForTokenClassification",),
               device="cpu"),
    ),
)
