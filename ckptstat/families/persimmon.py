"""Persimmon (Fuyu's language model; transformers modeling_persimmon.py): the LLaMA layout (layout.py) with
LayerNorms (weight and bias), q, k and v fused in one biased query_key_value [3h, h] (no GQA), a biased dense
output, a LayerNorm over each head's d on q and k (qk_layernorm, true by default; without it the meta path
answers), a plain biased MLP dense_4h_to_h(act(dense_h_to_4h(x))) (relu2 by default), rotary on
partial_rotary_factor of each head (0.5 by default), final_layernorm, and an LM head untied by default. llama.cpp
has no architecture for it."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths

PERSIMMON = DecoderLayout(
    norm="layernorm", qk_norm="head", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True,
    partial_rotary=0.5, requires=(("qk_layernorm", True),),
    task_heads=("seqcls", "tokcls"),
    paths=Paths(tokcls="score", qkv="query_key_value", o="dense", q_norm="q_layernorm", k_norm="k_layernorm", up="dense_h_to_4h",
                down="dense_4h_to_h", norm="final_layernorm"))

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64, pad_token_id=0)

FAMILY = Family(
    name="persimmon",
    # self_attn.query_key_value under layers.N (Falcon's is h.N.self_attention's, GPT-NeoX's layers.N.attention's)
    **{**layout.family_fields({"persimmon": PERSIMMON}, "attn_qkv"), "gguf_tensor_names": ()},
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        Sample("PersimmonConfig", _SIZES, ("PersimmonModel", "PersimmonForCausalLM")),
        Sample("PersimmonConfig", dict(_SIZES, partial_rotary_factor=0.25, tie_word_embeddings=True),
               ("PersimmonForCausalLM",)),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("PersimmonConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("PersimmonForSequenceClassification",),
               device="cpu"),
        Sample("PersimmonConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("PersimmonForTokenClassification",), device="cpu"),
    ),
)
