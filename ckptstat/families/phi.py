"""Phi-1/1.5/2 (transformers modeling_phi.py): a layout (layout.py) with one LayerNorm per layer feeding attention and
the MLP in parallel (x + attn(ln(x)) + mlp(ln(x))), q, k, v and dense projections with biases, grouped-query heads,
rotary on the first partial_rotary_factor of each head (0.5 by default), optional LayerNorms over each head's d on q
and k (qk_layernorm), a plain fc1/gelu_new/fc2 MLP with biases, a final LayerNorm and an LM head with a bias (its own
even when the weight is tied), its weight untied by default (PhiForCausalLM's _tied_weights_keys: lm_head.weight)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .framework import infer, layout
from .framework.base import Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

# llama.cpp's phi2 has no q/k norms
PHI = DecoderLayout(
    task_heads=("seqcls", "tokcls"), norm="layernorm", placement="parallel", mlp="plain", qk_norm="head",
                    qk_norm_key="qk_layernorm", qkv_bias=True, o_bias=True, mlp_bias=True, lm_head_bias="always",
                    partial_rotary=0.5,
                    gguf_renames=(("attn_q_norm", None), ("attn_k_norm", None)),
                    paths=Paths(tokcls="score", o="dense", up="fc1", down="fc2", q_norm="q_layernorm",
                                k_norm="k_layernorm", norm="final_layernorm"))

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64)


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """llama.cpp's `phi2` files: LLaMA's keys, but the MLP width from `ffn_up` (the converter writes
    feed_forward_length = 4 h whatever intermediate_size is) and the K/V heads from `attn_k` (it writes
    head_count_kv = head_count); partial_rotary_factor from `rope.dimension_count`."""
    cfg = infer.gguf_config(arch, metadata, tensors, "PhiForCausalLM")
    up, k = tensors.get("blk.0.ffn_up.weight"), tensors.get("blk.0.attn_k.weight")
    h, a = (cfg or {}).get("hidden_size"), (cfg or {}).get("num_attention_heads")
    if cfg is None or up is None or k is None or not h or not a or h % a:
        return cfg
    d = h // a
    cfg.update(model_type="phi", intermediate_size=up.shape[0], num_key_value_heads=k.shape[0] // d)
    infer.gguf_rotary(arch, metadata, cfg, "partial_rotary_factor")
    return cfg


FAMILY = Family(
    name="phi",
    before=("llama",),   # tried before them: its q_proj names match llama's signature
    **layout.family_fields({"phi": PHI}, "attn_output"),
    gguf_architectures=("phi2",), gguf_config=gguf_config,
    samples=(
        Sample("PhiConfig", _SIZES, ("PhiModel", "PhiForCausalLM")),
        Sample("PhiConfig", dict(_SIZES, num_key_value_heads=2, qk_layernorm=True, partial_rotary_factor=0.75,
                                 tie_word_embeddings=True), ("PhiForCausalLM",), infer=False),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("PhiConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("PhiForSequenceClassification",),
               device="cpu"),
        Sample("PhiConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("PhiForTokenClassification",), device="cpu"),
    ),
)
